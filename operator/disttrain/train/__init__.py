"""disttrain.train: the public training API for your own code (docs/training-api.md).

The import path is a promise: the names below keep their meaning across releases. They
need torch (the `trainer` extra, or any image with torch); the rest of `disttrain` does not.

- `run_training(model, data, cfg, context, loss_fn=...)`: the built-in trainer's loop for
  your model and data (strategy, precision, checkpoints, resume at any world size, evaluation,
  the report and the handshake); `Data` says what to train on, `Config` is the job's
  settings, `Result` what it returns.
- `Session`: the built-in trainer's report (progress, ETA, evaluations, checkpoints) and
  its checkpoint-then-evict handshake, for a training loop you write yourself.
- `Action`: what `Session.step()` tells every rank to do after a step.
- `disttrain.train.hf.DisttrainCallback`: the same for a Hugging Face Transformers `Trainer`.
- `disttrain.train.lightning.DisttrainCallback`: the same for a PyTorch Lightning `Trainer`.
"""

from disttrain_trainer.config import Config
from disttrain_trainer.context import RunContext
from disttrain_trainer.loop import Result
from disttrain_trainer.session import Action, Session
from disttrain_trainer.training import Data, run_training

__all__ = ["Action", "Config", "Data", "Result", "RunContext", "Session", "run_training"]
