"""A residual MLP for the synthetic regression/classification tasks."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel


@dataclass(frozen=True, slots=True)
class MLPConfig:
    in_features: int
    out_features: int
    width: int = 256
    depth: int = 3


class ResidualBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.proj = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.proj(nn.functional.gelu(self.fc(self.norm(x))))


class MLP(nn.Module):
    def __init__(self, cfg: MLPConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.inp = nn.Linear(cfg.in_features, cfg.width)
        self.blocks = nn.ModuleList(ResidualBlock(cfg.width) for _ in range(cfg.depth))
        self.out = nn.Linear(cfg.width, cfg.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.out(x)

    def tp_plan(self) -> dict[str, object]:
        return {"fc": ColwiseParallel(), "proj": RowwiseParallel()}

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per sample (a "token" here): 6 per weight, forward and backward."""
        return 6.0 * sum(p.numel() for p in self.parameters())

    def tp_check(self, tp: int) -> None:
        if (4 * self.cfg.width) % tp:
            raise ValueError(f"tensor parallel degree {tp} must divide {4 * self.cfg.width}")

    def init_tensor(self, name: str, shape: torch.Size, gen: torch.Generator) -> torch.Tensor:
        if name.endswith("bias"):
            return torch.zeros(shape)
        if ".norm" in name:
            return torch.ones(shape)
        fan_in = shape[-1]
        return torch.randn(shape, generator=gen) * fan_in**-0.5
