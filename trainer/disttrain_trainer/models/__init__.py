"""Built-in models. Each exposes `blocks` (an nn.ModuleList, the FSDP/TP unit), a
`tp_plan()` for tensor parallelism inside a block, `init_tensor()` for the
deterministic, strategy-independent initialisation done after `to_empty()`, and
`flops_per_token(seq_len)` for MFU (works on the `meta` device)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from disttrain_trainer.models.gpt import GPT, GPTConfig
from disttrain_trainer.models.mlp import MLP, MLPConfig

LossFn = Callable[[Any, Any], torch.Tensor]
"""(the model's output, the batch's targets) -> the mean loss over the batch."""


def forward(model: nn.Module, inputs: Any) -> Any:
    """A batch's inputs through the model: a mapping as keyword arguments (a Hugging Face
    model's input_ids, attention_mask, ...), anything else as the one argument."""
    return model(**inputs) if isinstance(inputs, Mapping) else model(inputs)

GPT_PRESETS = {
    # ~0.86M parameters: a few seconds per 100 steps on one CPU core.
    "gpt-nano": GPTConfig(n_layer=4, n_head=4, d_model=128, context=64),
    # ~19.8M parameters.
    "gpt-small": GPTConfig(n_layer=11, n_head=6, d_model=384, context=128),
}


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """How to build a model and score its output."""

    build: Callable[[], nn.Module]
    loss_fn: LossFn
    context: int  # tokens per sample (text) or 0


def _lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def _mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(out.float().squeeze(-1), target)


def _ce(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(out.float(), target)


def model_spec(name: str, *, dataset: str, vocab_size: int, in_features: int, classes: int) -> ModelSpec:
    if name in GPT_PRESETS:
        cfg = GPT_PRESETS[name]
        return ModelSpec(
            build=lambda: GPT(cfg, vocab_size=vocab_size), loss_fn=_lm_loss, context=cfg.context
        )
    if name == "mlp":
        out = 1 if dataset == "synthetic-regression" else classes
        mcfg = MLPConfig(in_features=in_features, out_features=out)
        return ModelSpec(
            build=lambda: MLP(mcfg),
            loss_fn=_mse if dataset == "synthetic-regression" else _ce,
            context=0,
        )
    raise ValueError(f"unknown model {name!r}")


__all__ = ["GPT", "MLP", "GPTConfig", "MLPConfig", "ModelSpec", "model_spec", "LossFn", "forward"]
