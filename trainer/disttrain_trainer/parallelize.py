"""Apply a strategy to a model, materialising it when it was built on the meta device.

none | DDP | FSDP2 (`fully_shard` per block, then the root) | FSDP x TP (tensor parallel
with `parallelize_module` inside each block on the "tp" mesh dimension, FSDP2 on "dp").
After wrapping, `to_empty()` allocates the (possibly sharded) storage and every parameter
is filled from a generator seeded by (seed, parameter index), computed in full on every
rank and then cut to the local shard: every strategy starts from the same weights. A
model of yours with real weights (training.py builds one under the same seed on every
rank) keeps them: rank 0's are broadcast before FSDP shards them, and DDP does the same.
FSDP's units are the model's `blocks` if it has them, else the members of its
outermost `nn.ModuleList`s (a transformer's layers), then the root.

Mixed precision follows one rule per strategy (the split torchtitan makes): FSDP2 owns it
through `MixedPrecisionPolicy` (parameters all-gathered and computed in the compute dtype,
gradients reduce-scattered in fp32, the fp32 shards stepped by the optimizer), so no
autocast runs around an FSDP model; single-device and DDP training use `torch.autocast`
(weights stay fp32, DDP all-reduces fp32 gradients). `autocast()` below says which.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.distributed.tensor.parallel import parallelize_module
from torch.nn.parallel import DistributedDataParallel as DDP

from disttrain_trainer.context import RunContext


def parallelize(model: nn.Module, ctx: RunContext, *, seed: int) -> nn.Module:
    """Returns the wrapped model on its device: one on `meta` is materialised and
    initialised (init_weights), one with weights keeps rank 0's."""
    strategy = ctx.resolved.strategy
    on_meta = any(t.is_meta for t in (*model.parameters(), *model.buffers()))
    if not on_meta:
        model.to(ctx.device)
        if strategy in ("fsdp", "fsdp_tp") and ctx.world_size > 1:
            _broadcast_from_rank0(model)
    if strategy == "fsdp_tp":
        apply_tp(model, ctx)
        apply_fsdp(model, ctx)
    elif strategy == "fsdp":
        apply_fsdp(model, ctx)
    if on_meta:
        model.to_empty(device=ctx.device)
        init_weights(model, seed=seed)
    if strategy == "ddp":
        return apply_ddp(model, ctx)
    return model


def unwrap(model: nn.Module) -> nn.Module:
    """The user-visible module (DDP keeps it under `.module`)."""
    return model.module if isinstance(model, DDP) else model


def apply_ddp(model: nn.Module, ctx: RunContext) -> nn.Module:
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    assert ctx.mesh is not None
    return DDP(model, device_ids=device_ids, process_group=ctx.mesh.get_group())


# Precision -> the dtype matmuls run in (None: fp32, no mixed precision).
COMPUTE_DTYPES: dict[str, torch.dtype | None] = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16, "32": None}


def compute_dtype(precision: str) -> torch.dtype | None:
    return COMPUTE_DTYPES[precision]


def fsdp_policy(precision: str) -> MixedPrecisionPolicy:
    """Parameters (hence all-gathers and compute) in the compute dtype, gradient reductions
    and their accumulation across micro-batches in fp32: halves the all-gather traffic and
    the unsharded parameter memory, keeps the sum over ranks exact to fp32."""
    dtype = compute_dtype(precision)
    if dtype is None:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)


def autocast(ctx: RunContext) -> contextlib.AbstractContextManager:
    """The context the forward pass runs in: autocast for none/DDP in mixed precision,
    nothing for FSDP (its policy casts) or fp32."""
    dtype = compute_dtype(ctx.resolved.precision)
    if dtype is None or ctx.resolved.strategy in ("fsdp", "fsdp_tp"):
        return contextlib.nullcontext()
    return torch.autocast(ctx.device.type, dtype=dtype)


def apply_fsdp(model: nn.Module, ctx: RunContext) -> None:
    assert ctx.mesh is not None
    dp_mesh = ctx.mesh["dp"] if ctx.mesh.ndim > 1 else ctx.mesh
    policy = fsdp_policy(ctx.resolved.precision)
    blocks = fsdp_units(model)
    for i, block in enumerate(blocks):
        # The last block's params are needed right away in backward: keep them gathered.
        fully_shard(block, mesh=dp_mesh, reshard_after_forward=i < len(blocks) - 1, mp_policy=policy)
    fully_shard(model, mesh=dp_mesh, mp_policy=policy)


def fsdp_units(model: nn.Module) -> list[nn.Module]:
    """The modules FSDP shards one by one (each all-gathered for its own forward)."""
    blocks = getattr(model, "blocks", None)
    if isinstance(blocks, nn.ModuleList):
        return list(blocks)
    units: list[nn.Module] = []
    lists: list[str] = []  # the outermost ModuleLists: one inside a unit is sharded with it
    for name, module in model.named_modules():  # parents before their children
        if isinstance(module, nn.ModuleList) and not any(name.startswith(f"{outer}.") for outer in lists):
            lists.append(name)
            units.extend(module)
    return units


def _broadcast_from_rank0(model: nn.Module) -> None:
    """Every rank starts from rank 0's weights, as DDP's constructor ensures for DDP."""
    with torch.no_grad():
        for tensor in (*model.parameters(), *model.buffers()):
            dist.broadcast(tensor.data, src=0)


def apply_tp(model: nn.Module, ctx: RunContext) -> None:
    assert ctx.mesh is not None
    if not all(callable(getattr(model, name, None)) for name in ("tp_plan", "tp_check")) or \
            not isinstance(getattr(model, "blocks", None), nn.ModuleList):
        raise ValueError(
            f"parallel.mesh (FSDP x tensor parallel): the model {type(model).__name__} has no tensor-parallel "
            "plan; give it `blocks` (an nn.ModuleList), `tp_plan()` (parallelize_module's plan for one block) "
            "and `tp_check(tp_degree)` as the built-in GPT does (docs/training-api.md), or train it with "
            "strategy ddp or fsdp")
    tp_mesh = ctx.mesh["tp"]
    model.tp_check(tp_mesh.size())  # type: ignore[operator]
    plan = model.tp_plan()  # type: ignore[operator]
    for block in model.blocks:  # type: ignore[union-attr]
        parallelize_module(block, tp_mesh, plan)


@torch.no_grad()
def init_weights(model: nn.Module, *, seed: int) -> None:
    """Deterministic, layout-independent init: full tensor per parameter, then local cut."""
    for index, (name, param) in enumerate(model.named_parameters()):
        gen = torch.Generator().manual_seed(seed * 1_000_003 + index)
        full = model.init_tensor(name, param.shape, gen)  # type: ignore[operator]
        if isinstance(param, DTensor):
            # src_data_rank=None: every rank holds the same full tensor, no communication.
            local = distribute_tensor(
                full.to(param.device_mesh.device_type), param.device_mesh, param.placements, src_data_rank=None
            )
            param.copy_(local)
        else:
            param.copy_(full)
    for buf in model.buffers():  # none of the built-in models has buffers today
        buf.zero_()
