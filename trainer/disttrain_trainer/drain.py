"""Checkpoint-then-evict, the trainer's side of the handshake (docs/pod-contract.md).

Before the operator deletes the pods of a job it stops on purpose (`suspend`, a Kueue
eviction), it POSTs `/checkpoint` to local rank 0 of one pod, with that pod's token. Every
rank learns of the request at the same step through the stop check's all-reduce
(RunContext.stop_requested), saves a checkpoint of that step and holds: the pods are about
to go, and steps trained now would be steps the checkpoint does not have. The hold ends
with SIGTERM (the stop the operator asked for), or after the hold time the request
named, when training goes on (the operator changed its mind, or is gone).
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field

# Longest hold a request may ask for: longer than any termination grace period we render.
MAX_HOLD_SECONDS = 3600


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
