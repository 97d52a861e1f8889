"""Test hooks: faults the end-to-end tests inject into the built-in trainer on purpose.

`DT_TEST_HANG_AT_STEP=K` (with `DT_TEST_HANG_RANK=R`, default 1) makes global rank R stop
inside step K, as a rank stuck in a collective or a deadlocked data loader would: its peers
block in the step's all-reduce and no step completes. It happens once per checkpoint
folder (a marker file there), so the job restarted by the operator trains on. The rank
leaves only on SIGTERM.

`DT_TEST_SLOW_RANK=R` (with `DT_TEST_SLOW_FACTOR=F`, default 2) makes global rank R compute
F times slower, as on a slow GPU: every timed compute section (timing.ComputeTimer: the
built-in trainer's forward passes and optimizer step, `Session.compute()` in your loop)
is stretched with a sleep. Its peers wait for it at each collective, and the operator's
straggler rule finds it (failurePolicy.stragglers).

Not for production: docs/trainer.md lists them under test hooks.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass

log = logging.getLogger("disttrain.trainer")

HANG_MARKER = ".test-hang-done"


class HungByTest(RuntimeError):
    """The hang hook's rank was stopped (SIGTERM) while it hung."""


@dataclass(kw_only=True, slots=True)
class HangHook:
    at_step: int = 0
    """at_step: the step to hang in (0: never)."""
    rank: int = 1
    """rank: the global rank that hangs."""
    marker_dir: str = ""
    """marker_dir: where the once-only marker goes (the checkpoint folder)."""

    def before_step(self, step: int, my_rank: int, stop: threading.Event) -> None:
        """Hang here if this is the rank and the step, once: until SIGTERM, then raise."""
        if not self.at_step or step != self.at_step or my_rank != self.rank:
            return
        marker = os.path.join(self.marker_dir, HANG_MARKER) if self.marker_dir else ""
        if marker and os.path.exists(marker):
            return
        if marker:
            with open(marker, "w", encoding="utf-8") as out:
                out.write(f"rank {my_rank} hung at step {step}\n")
        log.warning("test hook: rank %d hangs in step %d (DT_TEST_HANG_AT_STEP) until SIGTERM", my_rank, step)
        while not stop.wait(1.0):
            pass
        raise HungByTest(f"rank {my_rank} was stopped while hanging in step {step} (test hook)")
