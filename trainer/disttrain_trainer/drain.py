"""Checkpoint-then-evict, the trainer's side of the handshake (docs/pod-contract.md).

Before the operator deletes the pods of a job it stops on purpose (`suspend`, a Kueue
eviction), it POSTs `/checkpoint` to local rank 0 of one pod, with that pod's token. Every
rank learns of the request at the same step through the stop check's all-reduce
(StopAgreement.requested), saves a checkpoint of that step and holds: the pods are about
to go, and steps trained now would be steps the checkpoint does not have. The hold ends
with SIGTERM (the stop the operator asked for), or after the hold time the request
named, when training goes on (the operator changed its mind, or is gone).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import signal as signals
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import FrameType

import torch
import torch.distributed as dist

log = logging.getLogger("disttrain_trainer")

# Longest hold a request may ask for: longer than any termination grace period we render.
MAX_HOLD_SECONDS = 3600
# The agreement's cost: one tiny all-reduce about every half second, not every step.
STOP_CHECK_SECONDS = 0.5
STOP_CHECK_MAX_STEPS = 1000
# Exit status of a run stopped on a signal before its last step (EX_TEMPFAIL): never 0,
# so neither torchrun nor the operator can take an interrupted run for a finished one.
EXIT_INTERRUPTED = 75
# How soon a hold sees a SIGTERM whose handler waits for the main thread (hold()).
HOLD_SLICE_SECONDS = 0.2


class Stop(enum.IntEnum):
    """What the ranks agreed at a stop check; the larger wins when ranks differ."""

    NONE = 0
    CHECKPOINT = 1  # the operator asked for a checkpoint, then a hold
    SIGNAL = 2  # SIGTERM: checkpoint and exit


@dataclass
class CheckpointRequest:
    """One pending request from the operator, shared by the HTTP thread and the loop."""

    _hold_seconds: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    held: threading.Event = field(default_factory=threading.Event)
    """Set while every rank holds at a committed checkpoint of the current step."""

    def ask(self, hold_seconds: int) -> None:
        """A request came in (any thread): hold this long once the checkpoint is written."""
        with self._lock:
            self._hold_seconds = max(self._hold_seconds, min(MAX_HOLD_SECONDS, max(1, hold_seconds)))

    def pending(self) -> int:
        """The hold asked for by a request not yet acted on; 0 when there is none."""
        with self._lock:
            return self._hold_seconds

    def taken(self) -> None:
        """The ranks acted on the pending request (the loop, once the checkpoint is written)."""
        with self._lock:
            self._hold_seconds = 0


@dataclass(kw_only=True)
class StopAgreement:
    """What every rank agrees, at the same step, about stopping: the one stop check of the
    built-in loop and of the reporting session (session.py)."""

    rank: int
    world_size: int
    group: dist.ProcessGroup | None = None
    """A CPU (gloo) group for the check, off the training's hot path (world > 1)."""
    signal: threading.Event = field(default_factory=threading.Event)
    """Set by the SIGTERM handler."""
    request: CheckpointRequest = field(default_factory=CheckpointRequest)
    """The operator's checkpoint-then-evict request, set by the /checkpoint handler."""
    agreed_hold_seconds: int = 0
    """At a Stop.CHECKPOINT: the hold the ranks agreed on (the longest any rank was asked for)."""
    _pending: tuple[dist.Work, torch.Tensor] | None = field(default=None, init=False, repr=False)
    _steps_to_check: int = field(default=1, init=False, repr=False)
    _last_call: float | None = field(default=None, init=False, repr=False)
    _step_seconds: float | None = field(default=None, init=False, repr=False)

    @contextlib.contextmanager
    def on_sigterm(self) -> Iterator[None]:
        """While inside, SIGTERM sets `signal` (the next stop check finds it: checkpoint,
        then exit 75) instead of ending the process; the handler before is restored after.
        The one SIGTERM handler of the built-in trainer and of every Session. Python runs
        handlers on the main thread only, so elsewhere this installs nothing."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum: int, frame: FrameType | None) -> None:
            log.warning("SIGTERM received: the next step checkpoints, then the run stops")
            self.signal.set()

        previous = signals.signal(signals.SIGTERM, handler)
        try:
            yield
        finally:
            if previous is not None:  # None: set outside Python, which cannot be restored from here
                signals.signal(signals.SIGTERM, previous)

    def _local(self) -> tuple[Stop, int]:
        if self.signal.is_set():
            return Stop.SIGNAL, 0
        hold = self.request.pending()
        return (Stop.CHECKPOINT, hold) if hold else (Stop.NONE, 0)

    def requested(self) -> Stop:
        """Stop.SIGNAL once any rank received SIGTERM, else Stop.CHECKPOINT once any rank
        was asked for a checkpoint, else Stop.NONE (falsy).

        Called once per step by every rank. On check steps it starts a tiny asynchronous
        MAX all-reduce on the CPU group of [local stop, steps to the next check, hold
        seconds] and reads the one started at the previous check, so no step waits on it.
        Rank 0 spaces the checks about STOP_CHECK_SECONDS apart (every step when steps are
        slow), and since every rank reads the same reduced value, all ranks check, and
        stop, at the same steps. A SIGTERM or a request is acted on within about two check
        periods."""
        if self.world_size == 1:
            stop, self.agreed_hold_seconds = self._local()
            return stop
        now = time.perf_counter()
        if self._last_call is not None:
            dt = now - self._last_call
            self._step_seconds = dt if self._step_seconds is None else 0.8 * self._step_seconds + 0.2 * dt
        self._last_call = now
        self._steps_to_check -= 1
        if self._steps_to_check > 0:
            return Stop.NONE
        every = 1
        if self.rank == 0 and self._step_seconds:
            every = int(min(STOP_CHECK_MAX_STEPS, max(1.0, STOP_CHECK_SECONDS / self._step_seconds)))
        local, hold = self._local()
        flag = torch.tensor([int(local), every, hold], dtype=torch.int64)
        work = dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group, async_op=True)
        previous, self._pending = self._pending, (work, flag)
        if previous is None:
            self._steps_to_check = 1
            return Stop.NONE
        previous[0].wait()
        stop, self._steps_to_check, self.agreed_hold_seconds = (int(v) for v in previous[1].tolist())
        return Stop(stop)

    def acted(self) -> None:
        """Every rank acted on an agreed Stop.CHECKPOINT (at the same step): the request is
        taken, and the check already in flight, which may still carry it, is read and
        dropped (a SIGTERM it carried is still set, and the next check finds it)."""
        self.request.taken()
        self.drain()
        self._steps_to_check = 1

    def hold(self, seconds: float) -> bool:
        """Hold after a requested checkpoint: True when SIGTERM came (stop), False when
        the hold ran out (train on). Every rank holds, so none runs ahead of the others."""
        self.request.held.set()
        deadline = time.monotonic() + seconds
        try:
            # In slices: a SIGTERM the kernel handed to another thread runs its Python handler
            # only when the main thread next runs Python code, not inside one long wait.
            while not self.signal.wait(min(HOLD_SLICE_SECONDS, max(0.0, deadline - time.monotonic()))):
                if time.monotonic() >= deadline:
                    return False
            return True
        finally:
            self.request.held.clear()

    def drain(self) -> None:
        """Wait for the check in flight (before the group goes)."""
        if self._pending is not None:
            self._pending[0].wait()
            self._pending = None
