"""A small GPT (pre-norm transformer decoder), written so tensor parallelism can shard
q/k/v and the MLP column-wise and the output projections row-wise."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel


@dataclass(frozen=True, slots=True)
class GPTConfig:
    n_layer: int
    n_head: int
    d_model: int
    context: int


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.head_dim = cfg.d_model // cfg.n_head
        self.q = nn.Linear(cfg.d_model, cfg.d_model)
        self.k = nn.Linear(cfg.d_model, cfg.d_model)
        self.v = nn.Linear(cfg.d_model, cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds n_head / tp of them.
        q, k, v = (m(x).view(b, t, -1, self.head_dim).transpose(1, 2) for m in (self.q, self.k, self.v))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(nn.functional.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = FeedForward(cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig, *, vocab_size: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.context, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, vocab_size, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    def tp_plan(self) -> dict[str, object]:
        """Per-block Megatron-style plan: column-parallel in, row-parallel out."""
        return {
            "attn.q": ColwiseParallel(),
            "attn.k": ColwiseParallel(),
            "attn.v": ColwiseParallel(),
            "attn.proj": RowwiseParallel(),
            "mlp.fc": ColwiseParallel(),
            "mlp.proj": RowwiseParallel(),
        }

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: 6 per matmul weight (forward 2, backward 4; the
        embedding lookups do no matmul) plus causal-agnostic attention, 6 * 2 * layers *
        d_model * seq_len for q.k and attn.v (the estimate of the PaLM paper, appendix B)."""
        embeddings = self.tok.weight.numel() + self.pos.weight.numel()
        weights = sum(p.numel() for p in self.parameters()) - embeddings
        return 6.0 * weights + 12.0 * self.cfg.n_layer * self.cfg.d_model * seq_len

    def tp_check(self, tp: int) -> None:
        if self.cfg.n_head % tp:
            raise ValueError(f"tensor parallel degree {tp} must divide n_head={self.cfg.n_head}")

    def init_tensor(self, name: str, shape: torch.Size, gen: torch.Generator) -> torch.Tensor:
        if name.endswith("bias"):
            return torch.zeros(shape)
        if ".ln" in name or name.startswith("ln"):
            return torch.ones(shape)
        std = 0.02
        if name.endswith("proj.weight"):  # GPT-2: scale residual projections by depth
            std = 0.02 / math.sqrt(2 * self.cfg.n_layer)
        return torch.randn(shape, generator=gen) * std
