"""Sharded checkpoints with torch.distributed.checkpoint (DCP).

Layout under the checkpoint dir:

    step-00000100/          complete checkpoints (DCP files + .metadata + disttrain.json)
    .tmp-step-00000120-<id>  a save in progress; never read, removed on the next start

Every rank writes its shards into the temporary directory. DCP's coordinator (rank 0)
writes `.metadata` only after gathering every rank's write results, so when rank 0's save
returns the directory is complete; rank 0 then renames it to `step-N` (atomic on one
filesystem). A crash at any point before the rename leaves only a `.tmp-*` directory,
which `load()` ignores. Async saves (`dcp.async_save`) stage to CPU memory synchronously,
write in a background thread on a dedicated gloo group, and are committed (renamed) by
rank 0 when its future completes, polled once per step without any collective.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from disttrain_trainer.config import CheckpointConfig
from disttrain_trainer.context import RunContext

log = logging.getLogger("disttrain_trainer")

STEP_DIR = re.compile(r"^step-(\d{8})$")


@dataclass(kw_only=True, slots=True)
class CheckpointInfo:
    step: int
    path: str
    time: float  # unix seconds
    save_seconds: float = 0.0

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


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def complete_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """Committed step directories, oldest first."""
    if not root.is_dir():
        return []
    found = []
    for entry in root.iterdir():
        m = STEP_DIR.match(entry.name)
        if m and (entry / ".metadata").is_file():
            found.append((int(m.group(1)), entry))
    return sorted(found)


class CheckpointManager:
    def __init__(self, cfg: CheckpointConfig, ctx: RunContext, states: dict[str, Stateful]) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.states = states
        self.root = Path(cfg.dir) if cfg.dir else None
        self.latest: CheckpointInfo | None = None
        self._pending: tuple[Future[Any], int, Path, float, float] | None = None
        self._pending_staged_s = 0.0
        if self.root is not None and ctx.is_rank0:
            self.root.mkdir(parents=True, exist_ok=True)
            for stale in self.root.glob(".tmp-step-*"):  # a crash mid-save: never complete
                log.warning("removing incomplete checkpoint %s", stale)
                shutil.rmtree(stale, ignore_errors=True)
        ctx.barrier()
        if self.root is not None:
            done = complete_checkpoints(self.root)
            if done:
                step, path = done[-1]
                self.latest = CheckpointInfo(step=step, path=str(path), time=path.stat().st_mtime)

    @property
    def enabled(self) -> bool:
        return self.root is not None

    def load(self) -> bool:
        """Restore the newest complete checkpoint; False when there is none."""
        if self.root is None:
            return False
        done = complete_checkpoints(self.root)
        newest = [done[-1][0] if done else -1]
        if self.ctx.world_size > 1:  # every rank must load the same step
            dist.broadcast_object_list(newest, src=0, group=self.ctx.checkpoint_group)
        if newest[0] < 0:
            return False
        path = self.root / step_dir_name(newest[0])
        t0 = time.perf_counter()
        dcp.load(self.states, checkpoint_id=str(path), process_group=self.ctx.checkpoint_group)
        log.info("resumed from %s in %.2fs", path, time.perf_counter() - t0)
        self.latest = CheckpointInfo(step=newest[0], path=str(path), time=path.stat().st_mtime)
        return True

    def should_save(self, step: int) -> bool:
        return self.enabled and self.cfg.interval_steps > 0 and step % self.cfg.interval_steps == 0

    def save(self, step: int, *, force_sync: bool = False) -> float:
        """Write a checkpoint of `step`. Returns the seconds training was blocked."""
        if self.root is None or (self.latest is not None and self.latest.step == step):
            return 0.0
        t0 = time.perf_counter()
        self.wait()  # at most one save in flight
        run_id = [uuid.uuid4().hex[:8]]
        if self.ctx.world_size > 1:
            dist.broadcast_object_list(run_id, src=0, group=self.ctx.checkpoint_group)
        tmp = self.root / f".tmp-{step_dir_name(step)}-{run_id[0]}"
        if self.cfg.async_save and not force_sync:
            fut = dcp.async_save(self.states, checkpoint_id=str(tmp), process_group=self.ctx.checkpoint_group)
            if not isinstance(fut, Future):  # AsyncSaveResponse (newer torch)
                fut = fut.upload_completion  # type: ignore[union-attr]
            blocked = time.perf_counter() - t0
            self._pending = (fut, step, tmp, t0, blocked)
            return blocked
        dcp.save(self.states, checkpoint_id=str(tmp), process_group=self.ctx.checkpoint_group)
        self._commit(step, tmp, time.perf_counter() - t0)
        self.ctx.barrier()  # visible to every rank when save() returns
        return time.perf_counter() - t0

    def poll(self) -> None:
        """Commit a finished async save. Non-blocking, no collectives."""
        if self._pending is not None and self._pending[0].done():
            fut, step, tmp, t0, _ = self._pending
            self._pending = None
            fut.result()
            self._commit(step, tmp, time.perf_counter() - t0)

    def wait(self) -> None:
        """Block until an in-flight async save is committed."""
        if self._pending is not None:
            fut, step, tmp, t0, _ = self._pending
            self._pending = None
            fut.result()
            self._commit(step, tmp, time.perf_counter() - t0)

    def _commit(self, step: int, tmp: Path, seconds: float) -> None:
        assert self.root is not None
        final = self.root / step_dir_name(step)
        if self.ctx.is_rank0:
            # rank 0's save returning means .metadata is written, hence every shard too.
            (tmp / "disttrain.json").write_text(
                json.dumps({"step": step, "worldSize": self.ctx.world_size, "time": time.time()})
            )
            if final.exists():  # same step saved by an earlier incarnation
                shutil.rmtree(final)
            os.replace(tmp, final)
            self._purge()
        self.latest = CheckpointInfo(step=step, path=str(final), time=time.time(), save_seconds=seconds)
        log.info("checkpoint step %d committed in %.2fs: %s", step, seconds, final)

    def _purge(self) -> None:
        assert self.root is not None
        done = complete_checkpoints(self.root)
        for _, path in done[: max(0, len(done) - self.cfg.keep)]:
            shutil.rmtree(path, ignore_errors=True)
