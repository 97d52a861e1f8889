"""Evaluation loss on the held-out split (data.holdout), reduced over every rank.

Every rank walks the same number of batches, so the collectives inside an FSDP forward
line up; a rank whose share of the last batch is empty runs one sample with weight 0.
The result is the mean per-sample loss over the whole split, independent of the world
size (the split is seed-free, see data.holdout), so runs and sweep trials compare.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from disttrain_trainer.config import EvalConfig
from disttrain_trainer.data import Dataset, to_device
from disttrain_trainer.models import LossFn, forward


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

    def due(self, step: int) -> bool:
        """An interval evaluation falls on this step (the final one is the loop's call)."""
        return self.cfg.interval_steps > 0 and step % self.cfg.interval_steps == 0

    @torch.no_grad()
    def evaluate(self, model: nn.Module, autocast: contextlib.AbstractContextManager) -> float:
        """Mean loss per held-out sample; every rank must call it at the same step."""
        n, b, dp = len(self.dataset), self.batch_size, self.dp_size
        totals = torch.zeros(2, dtype=torch.float64, device=self.device)  # [sum of losses, samples]
        was_training = model.training
        model.eval()
        try:
            for start in range(0, n, b * dp):
                lo = min(n, start + self.dp_rank * b)
                hi = min(n, lo + b)
                real = hi - lo
                idx = torch.arange(lo, hi) if real else torch.zeros(1, dtype=torch.long)
                x, y = self.dataset.get(idx)
                with autocast:
                    loss = self.loss_fn(forward(model, to_device(x, self.device)), to_device(y, self.device))
                totals[0] += loss.double() * real
                totals[1] += real
        finally:
            model.train(was_training)
        if self.world_size > 1:
            # Tensor-parallel peers score the same samples: both sums grow alike, the ratio holds.
            dist.all_reduce(totals, op=dist.ReduceOp.SUM)
        return float(totals[0] / totals[1]) if totals[1] > 0 else math.nan
