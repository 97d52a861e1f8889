"""disttrain.train.hf: the Hugging Face Transformers callback (docs/training-api.md).
Needs transformers; `Trainer(..., callbacks=[DisttrainCallback()])`."""

from disttrain_trainer.hf_callback import DisttrainCallback

__all__ = ["DisttrainCallback"]
