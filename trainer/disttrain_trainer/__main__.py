"""`python -m disttrain_trainer` (under torchrun): the built-in models and datasets through
the public training API (training.run_training), configured by the job (Config.from_env)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record

from disttrain_trainer import loop, training
from disttrain_trainer.config import Config
from disttrain_trainer.context import RunContext
from disttrain_trainer.data import CLASSES, IN_FEATURES, VOCAB_SIZE, build_dataset
from disttrain_trainer.models import LossFn, model_spec


def builtin(cfg: Config) -> tuple[Callable[[], nn.Module], training.Data, LossFn]:
    """The job's built-in model (built on the meta device), dataset and loss."""
    spec = model_spec(cfg.model.name, dataset=cfg.data.dataset, vocab_size=VOCAB_SIZE,
                      in_features=IN_FEATURES, classes=CLASSES)
    dataset = build_dataset(cfg.data.dataset, seq_len=cfg.data.seq_len or spec.context, seed=cfg.data.seed)

    def on_meta() -> nn.Module:
        with torch.device("meta"):
            return spec.build()

    return on_meta, training.Data(train=dataset, tokens_per_sample=dataset.tokens_per_sample), spec.loss_fn


def build(cfg: Config, ctx: RunContext) -> loop.Components:
    """The built-in run's parts (the tests and benches swap some before loop.run)."""
    model, data, loss_fn = builtin(cfg)
    return training.build(model, data, cfg, ctx, loss_fn=loss_fn, params=described(cfg))


@record
def main() -> int:
    cfg = Config.from_env()
    model, data, loss_fn = builtin(cfg)
    return training.run_training(model, data, cfg, loss_fn=loss_fn, params=described(cfg)).exit_code


def described(cfg: Config) -> dict[str, str]:
    """The built-in choices a tracker records beside the run's settings."""
    return {"model": cfg.model.name, "dataset": cfg.data.dataset}


if __name__ == "__main__":
    raise SystemExit(main())
