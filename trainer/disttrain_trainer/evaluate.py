"""Evaluation loss on the held-out split (data.holdout), reduced over every rank, with
the named metrics of run_training's `eval_metrics` reduced the same way.

Every rank walks the same number of batches, so the collectives inside an FSDP forward
line up; a rank whose share of the last batch is empty runs one sample with weight 0.
The result is the mean per-sample loss over the whole split, independent of the world
size (the split is seed-free, see data.holdout), so runs and sweep trials compare.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from disttrain.api.pod_contract import MAX_METRICS, METRIC_NAME, METRIC_NAME_RULE
from disttrain_trainer.config import EvalConfig
from disttrain_trainer.data import Dataset, to_device
from disttrain_trainer.models import LossFn, forward

MetricsFn = Callable[[Any, Any], Mapping[str, Any]]
"""(output, targets) -> {name: the batch's mean}, e.g. {"accuracy": (output.argmax(1) == targets).float().mean()}."""


@dataclass(kw_only=True)
class Evaluator:
    cfg: EvalConfig
    dataset: Dataset  # the held-out split
    loss_fn: LossFn
    batch_size: int
    dp_rank: int
    dp_size: int
    world_size: int
    device: torch.device
    metrics_fn: MetricsFn | None = None

    def due(self, step: int) -> bool:
        """An interval evaluation falls on this step (the final one is the loop's call)."""
        return self.cfg.interval_steps > 0 and step % self.cfg.interval_steps == 0

    @torch.no_grad()
    def evaluate(self, model: nn.Module, autocast: contextlib.AbstractContextManager) -> tuple[float, dict[str, float]]:
        """Mean loss per held-out sample, and each named metric's mean per sample; every
        rank must call it at the same step."""
        n, b, dp = len(self.dataset), self.batch_size, self.dp_size
        totals = torch.zeros(2, dtype=torch.float64, device=self.device)  # [sum of losses, samples]
        sums: dict[str, torch.Tensor] = {}  # per named metric, its sum over samples
        was_training = model.training
        model.eval()
        try:
            for start in range(0, n, b * dp):
                lo = min(n, start + self.dp_rank * b)
                hi = min(n, lo + b)
                real = hi - lo
                idx = torch.arange(lo, hi) if real else torch.zeros(1, dtype=torch.long)
                x, y = self.dataset.get(idx)
                y = to_device(y, self.device)
                with autocast:
                    output = forward(model, to_device(x, self.device))
                    loss = self.loss_fn(output, y)
                    named = self.metrics_fn(output, y) if self.metrics_fn is not None else {}
                totals[0] += loss.double() * real
                totals[1] += real
                for name, value in _checked(named, sums if start else None, self.device).items():
                    sums[name] = sums.get(name, 0) + value * real
        finally:
            model.train(was_training)
        names = sorted(sums)
        reduced = torch.cat([totals, torch.stack([sums[k] for k in names])]) if names else totals
        if self.world_size > 1:
            # Tensor-parallel peers score the same samples: every sum grows alike, the ratios hold.
            dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
        samples = float(reduced[1])
        if samples <= 0:
            return math.nan, {}
        return float(reduced[0]) / samples, {k: float(reduced[2 + i]) / samples for i, k in enumerate(names)}


def _checked(named: Any, first: Mapping[str, torch.Tensor] | None, device: torch.device) -> dict[str, torch.Tensor]:
    """eval_metrics' answer -> {name: scalar float64 tensor}; the same names every batch."""
    where = "run_training(eval_metrics=...)"
    if not isinstance(named, Mapping):
        raise TypeError(f"{where} returned {type(named).__name__}; allowed: a mapping of metric name to the batch's "
                        "mean, e.g. {'accuracy': (output.argmax(1) == targets).float().mean()}")
    out = {}
    for name, value in named.items():
        if not isinstance(name, str) or not METRIC_NAME.match(name):
            raise ValueError(f"{where}: metric name {name!r} is not allowed; allowed: {METRIC_NAME_RULE}; rename it")
        tensor = torch.as_tensor(value.detach() if isinstance(value, torch.Tensor) else value, dtype=torch.float64,
                                 device=device)
        if tensor.numel() != 1:
            raise ValueError(f"{where}: metric {name!r} has shape {tuple(tensor.shape)}; allowed: one number, "
                             "the batch's mean (reduce it, e.g. .mean())")
        out[name] = tensor.reshape(())
    if len(out) > MAX_METRICS:
        raise ValueError(f"{where}: {len(out)} metrics; allowed: at most {MAX_METRICS}; drop some")
    if first is not None and set(out) != set(first):
        raise ValueError(f"{where}: returned {sorted(out)} for one batch and {sorted(first)} for the first; "
                         "allowed: the same names for every batch")
    return out
