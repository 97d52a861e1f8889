"""Sharded checkpoints with torch.distributed.checkpoint (DCP).

Layout under a checkpoint dir on a filesystem (an object-store URL: storage.py):

    step-00000100/          complete checkpoints (DCP files + .metadata + disttrain.json)
    .tmp-step-00000120-<id>  a save in progress; never read, removed on the next start
    .trash-step-00000090-<id>  an old checkpoint being deleted (renamed first); likewise

Every rank writes its shards into the temporary directory. DCP's coordinator (rank 0)
writes `.metadata` only after gathering every rank's write results, so when rank 0's save
returns the directory is complete; rank 0 then renames it to `step-N` (atomic on one
filesystem). A crash at any point before the rename leaves only a `.tmp-*` directory,
which `load()` ignores. Async saves (`dcp.async_save`) stage to CPU memory synchronously,
write in a background thread on a dedicated gloo group, and are committed (renamed) by
rank 0 when its future completes, polled once per step without any collective.

Storage goes through `storage.CheckpointStorage` (list / staging / commit / delete), and
old checkpoints beyond `keep` are deleted by rank 0's `storage.Purger` on a background
thread: the training loop never waits on a delete.
"""

from __future__ import annotations

import logging
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from disttrain_trainer.config import CheckpointConfig
from disttrain_trainer.context import RunContext
from disttrain_trainer.storage import CheckpointStorage, Purger, complete_checkpoints, open_storage, step_dir_name

log = logging.getLogger("disttrain_trainer")

__all__ = ["CheckpointInfo", "CheckpointManager", "complete_checkpoints", "step_dir_name"]


@dataclass(kw_only=True, slots=True)
class CheckpointInfo:
    step: int
    path: str
    time: float  # unix seconds
    save_seconds: float = 0.0
    """Start of the save to its commit (for an async save, the background write included)."""
    blocked_seconds: float = 0.0
    """How long the save held the training loop (an async save: the copy to CPU memory)."""

    def as_status(self) -> dict[str, Any]:
        iso = datetime.fromtimestamp(self.time, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"step": self.step, "time": iso, "path": self.path}


class ModelOptimState:
    """Model + optimizer as one Stateful, through DCP's sharding-aware state-dict API."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model = model
        self.optimizer = optimizer

    def state_dict(self) -> dict[str, Any]:
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optim": optim_sd}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_state_dict(
            self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )


class SchedulerState:
    """An LR scheduler without its (unpicklable) lambdas."""

    def __init__(self, scheduler: torch.optim.lr_scheduler.LRScheduler) -> None:
        self.scheduler = scheduler

    def state_dict(self) -> dict[str, Any]:
        sd = self.scheduler.state_dict()
        return {"last_epoch": sd["last_epoch"], "step_count": sd["_step_count"]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        sd = self.scheduler.state_dict()
        sd.update(last_epoch=int(state["last_epoch"]), _step_count=int(state["step_count"]))
        self.scheduler.load_state_dict(sd)
        # The optimizer's param_groups (restored with it) carry the current LRs.
        self.scheduler._last_lr = [g["lr"] for g in self.scheduler.optimizer.param_groups]  # type: ignore[attr-defined]


class TrainState:
    """Step counter and RNG state; `Stateful`."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "rng": torch.get_rng_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        torch.set_rng_state(state["rng"])


class CheckpointManager:
    def __init__(self, cfg: CheckpointConfig, ctx: RunContext, states: dict[str, Stateful],
                 storage: CheckpointStorage | None = None) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.states = states
        if storage is None and cfg.dir:
            storage = open_storage(cfg.dir, create=ctx.is_rank0)
        self.storage = storage
        self.purger = Purger(storage, cfg.keep) if storage is not None and ctx.is_rank0 else None
        self.latest: CheckpointInfo | None = None
        self._pending: tuple[Future[Any], int, str, float, float] | None = None
        if storage is not None and ctx.is_rank0:
            storage.discard_leftovers()  # a crash mid-save or mid-delete: never complete
        ctx.barrier()
        if storage is not None:
            done = storage.list()
            if done:
                self.latest = CheckpointInfo(step=done[-1], path=storage.location(done[-1]),
                                             time=storage.committed_time(done[-1]))

    @property
    def enabled(self) -> bool:
        return self.storage is not None

    def load(self) -> bool:
        """Restore the newest complete checkpoint; False when there is none."""
        if self.storage is None:
            return False
        done = self.storage.list()
        newest = [done[-1] if done else -1]
        # The collectives below run only across processes: test_checkpoint.py proves them
        # under torchrun, in subprocesses that mutation testing cannot map (no mutate).
        if self.ctx.world_size > 1:  # pragma: no mutate  (every rank must load the same step)
            dist.broadcast_object_list(newest, src=0, group=self.ctx.checkpoint_group)  # pragma: no mutate
        if newest[0] < 0:
            return False
        path = self.storage.location(newest[0])
        t0 = time.perf_counter()
        dcp.load(self.states, storage_reader=self.storage.reader(path),
                 process_group=self.ctx.checkpoint_group)  # pragma: no mutate
        log.info("resumed from %s in %.2fs", path, time.perf_counter() - t0)
        self.latest = CheckpointInfo(step=newest[0], path=path, time=self.storage.committed_time(newest[0]))
        return True

    def should_save(self, step: int) -> bool:
        return self.enabled and self.cfg.interval_steps > 0 and step % self.cfg.interval_steps == 0

    def save(self, step: int, *, force_sync: bool = False) -> float:
        """Write a checkpoint of `step`. Returns the seconds training was blocked."""
        if self.storage is None or (self.latest is not None and self.latest.step == step):
            return 0.0
        t0 = time.perf_counter()
        self.wait()  # at most one save in flight
        run_id = [uuid.uuid4().hex[:8]]
        if self.ctx.world_size > 1:  # pragma: no mutate  (one staging name for every rank)
            dist.broadcast_object_list(run_id, src=0, group=self.ctx.checkpoint_group)  # pragma: no mutate
        staging = self.storage.staging(step, run_id[0])
        if self.cfg.async_save and not force_sync:
            fut = dcp.async_save(self.states, storage_writer=self.storage.writer(staging),
                                 process_group=self.ctx.checkpoint_group)  # pragma: no mutate
            if not isinstance(fut, Future):  # AsyncSaveResponse (newer torch)
                fut = fut.upload_completion  # type: ignore[union-attr]
            blocked = time.perf_counter() - t0
            self._pending = (fut, step, staging, t0, blocked)
            return blocked
        dcp.save(self.states, storage_writer=self.storage.writer(staging),
                 process_group=self.ctx.checkpoint_group)  # pragma: no mutate
        self._commit(step, staging, time.perf_counter() - t0, 0.0)  # blocked: set below
        self.ctx.barrier()  # visible to every rank when save() returns
        blocked = time.perf_counter() - t0
        if self.latest is not None:
            self.latest.blocked_seconds = blocked
        return blocked

    def poll(self) -> None:
        """Commit a finished async save. Non-blocking, no collectives."""
        if self._pending is not None and self._pending[0].done():
            self.wait()

    def wait(self) -> None:
        """Block until an in-flight async save is committed."""
        if self._pending is not None:
            fut, step, staging, t0, blocked = self._pending
            self._pending = None
            fut.result()
            self._commit(step, staging, time.perf_counter() - t0, blocked)

    def finish(self, *, hand_off: bool = False) -> None:
        """The loop is done: commit the in-flight save, then wait for the old checkpoints'
        deletes, or with `hand_off` (stopping on a signal, where the grace period belongs to
        the emergency save) leave them: the next start's first purge redoes them."""
        self.wait()
        if self.purger is not None and not self.purger.drain(timeout=0 if hand_off else None):
            log.info("old checkpoints still being deleted: left to the next start")

    def _commit(self, step: int, staging: str, seconds: float, blocked: float) -> None:
        assert self.storage is not None
        path = self.storage.committed_as(step, staging)  # the other ranks' view: no I/O
        if self.purger is not None:
            # rank 0's save returning means .metadata is written, hence every shard too.
            meta = {"step": step, "worldSize": self.ctx.world_size, "time": time.time()}
            path = self.purger.commit(step, staging, meta)
        self.latest = CheckpointInfo(step=step, path=path, time=time.time(), save_seconds=seconds,
                                     blocked_seconds=blocked)
        log.info("checkpoint step %d committed in %.2fs: %s", step, seconds, path)
