"""RunContext: the process group, device and DeviceMesh of one trainer process.

It alone reads torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, ...). Started without
torchrun it runs as a world of one on an in-memory store, so the same code path (and
DCP) works in a plain `python -m disttrain_trainer` or inside a test.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from disttrain_trainer.config import ParallelConfig, Resolved, resolve_parallel
from disttrain_trainer.drain import StopAgreement
from disttrain_trainer.timing import worker_index

log = logging.getLogger("disttrain_trainer")

# Generous: other jobs share the CPUs in CI, and a resumed peer may be slow to load.
PG_TIMEOUT = datetime.timedelta(minutes=10)


@dataclass(frozen=True, slots=True)
class Launch:
    """What torchrun tells this process through its variables, read here alone (the
    built-in trainer's RunContext and every Session start from it)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    restart_count: int = 0
    """TORCHELASTIC_RESTART_COUNT: how often torchrun restarted this pod's workers."""
    worker: int = 0
    """This pod's worker index (timing.worker_index): whose compute time this rank's is."""
    under_torchrun: bool = False
    """MASTER_ADDR is set: a process group to join; otherwise a world of one."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Launch:
        env = os.environ if env is None else env
        return cls(rank=int(env.get("RANK", "0")), local_rank=int(env.get("LOCAL_RANK", "0")),
                   world_size=int(env.get("WORLD_SIZE", "1")),
                   restart_count=int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
                   worker=worker_index(env), under_torchrun="MASTER_ADDR" in env)


@dataclass(kw_only=True)
class RunContext:
    rank: int
    local_rank: int
    world_size: int
    restart_count: int
    device: torch.device
    resolved: Resolved
    mesh: DeviceMesh | None
    """1-D ("dp",) for ddp/fsdp, 2-D ("dp", "tp") for fsdp x tp, None for a single device."""
    control_group: dist.ProcessGroup | None = None
    """A CPU (gloo) group for small control collectives (stop flag), off the hot path."""
    checkpoint_group: dist.ProcessGroup | None = None
    """A CPU (gloo) group owned by checkpointing, so async saves never race training."""
    worker: int = 0
    """This pod's worker index (timing.worker_index): whose compute time this rank's is."""
    stops: StopAgreement = field(default=None)  # type: ignore[assignment]
    """SIGTERM and the operator's checkpoint request, agreed by every rank (drain.py)."""

    def __post_init__(self) -> None:
        if self.stops is None:
            self.stops = StopAgreement(rank=self.rank, world_size=self.world_size, group=self.control_group)

    @property
    def is_rank0(self) -> bool:
        return self.rank == 0

    @property
    def is_local_rank0(self) -> bool:
        return self.local_rank == 0

    @property
    def dp_size(self) -> int:
        if self.mesh is None:
            return 1
        return self.mesh["dp"].size() if self.mesh.ndim > 1 else self.mesh.size()

    @property
    def dp_rank(self) -> int:
        if self.mesh is None:
            return 0
        return self.mesh["dp"].get_local_rank() if self.mesh.ndim > 1 else self.mesh.get_local_rank()

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier(group=self.control_group)

    @property
    def launch(self) -> Launch:
        return Launch(rank=self.rank, local_rank=self.local_rank, world_size=self.world_size,
                      restart_count=self.restart_count, worker=self.worker)

    @classmethod
    @contextlib.contextmanager
    def open(cls, cfg: ParallelConfig, env: Mapping[str, str] | None = None) -> Iterator[RunContext]:
        """Join the process group, yield the context, and always tear it down."""
        launch = Launch.from_env(env)
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        resolved = resolve_parallel(cfg, world_size=launch.world_size, visible_gpus=visible)
        _setup_logging(launch.rank)
        if launch.rank == 0:  # the same guardrails hold on every rank: say it once
            for w in resolved.warnings:
                log.warning(w)
        device, backend = _device(resolved, cfg, launch.local_rank, visible)
        owns_group = not dist.is_initialized()
        if owns_group:
            if launch.under_torchrun:
                dist.init_process_group(backend, timeout=PG_TIMEOUT, device_id=device if backend == "nccl" else None)
            else:  # not under torchrun: a world of one
                dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=PG_TIMEOUT)
        ctx = cls(
            rank=launch.rank, local_rank=launch.local_rank, world_size=launch.world_size,
            restart_count=launch.restart_count, device=device, resolved=resolved,
            mesh=_build_mesh(resolved, cfg, device.type, launch.world_size),
            control_group=dist.new_group(backend="gloo", timeout=PG_TIMEOUT) if launch.world_size > 1 else None,
            checkpoint_group=dist.new_group(backend="gloo", timeout=PG_TIMEOUT),
            worker=launch.worker,
        )
        if launch.local_rank == 0:  # every pod's log says which ranks it holds, not only rank 0's
            log.info("joined: rank %d of %d (local rank 0 of this node), %s on %s", launch.rank, launch.world_size,
                     backend, device, extra={EVERY_NODE: True})
        try:
            with ctx.stops.on_sigterm():
                yield ctx
            ctx.stops.drain()
        finally:
            if owns_group and dist.is_initialized():
                dist.destroy_process_group()


def _device(resolved: Resolved, cfg: ParallelConfig, local_rank: int, visible: int) -> tuple[torch.device, str]:
    """This rank's device and the process group's backend."""
    if resolved.device_type == "cuda":
        device = torch.device("cuda", local_rank % max(1, min(cfg.gpus_per_node, visible)))
        torch.cuda.set_device(device)
        return device, "nccl"
    return torch.device("cpu"), "gloo"


def _build_mesh(resolved: Resolved, cfg: ParallelConfig, device_type: str, world: int) -> DeviceMesh | None:
    if resolved.strategy == "fsdp_tp":
        return init_device_mesh(device_type, (cfg.mesh_fsdp, cfg.mesh_tp), mesh_dim_names=("dp", "tp"))
    if resolved.strategy in ("ddp", "fsdp"):
        return init_device_mesh(device_type, (world,), mesh_dim_names=("dp",))
    return None


# A log record with this attribute set is written by every rank that logs it.
EVERY_NODE = "every_node"


class _RankFilter(logging.Filter):
    def __init__(self, rank: int) -> None:
        super().__init__()
        self.rank = rank

    def filter(self, record: logging.LogRecord) -> bool:
        # Rank 0 logs everything; other ranks only warnings, errors and the lines marked
        # for every node (so each pod's log shows it joined).
        return self.rank == 0 or record.levelno >= logging.WARNING or getattr(record, EVERY_NODE, False)


def _setup_logging(rank: int) -> None:
    if log.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(f"%(asctime)s [rank{rank}] %(levelname)s %(message)s"))
    handler.addFilter(_RankFilter(rank))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
