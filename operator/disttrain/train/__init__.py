"""disttrain.train: the public training API for your own code (docs/training-api.md).

The import path is a promise: the names below keep their meaning across releases. They
need torch (the `trainer` extra, or any image with torch); the rest of `disttrain` does not.

- `Session`: the built-in trainer's report (progress, ETA, evaluations, checkpoints) and
  its checkpoint-then-evict handshake, for a training loop you write yourself.
- `Action`: what `Session.step()` tells every rank to do after a step.
- `disttrain.train.hf.DisttrainCallback`: the same for a Hugging Face Transformers `Trainer`.
- `disttrain.train.lightning.DisttrainCallback`: the same for a PyTorch Lightning `Trainer`.
"""

from disttrain_trainer.session import Action, Session

__all__ = ["Action", "Session"]
