"""disttrain.train.lightning: the PyTorch Lightning callback (docs/training-api.md).
Needs lightning (or pytorch_lightning); `Trainer(..., callbacks=[DisttrainCallback()])`."""

from disttrain_trainer.lightning_callback import DisttrainCallback

__all__ = ["DisttrainCallback"]
