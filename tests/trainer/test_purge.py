"""Old checkpoints are deleted off the training path (storage.Purger), on a slow-filesystem
stand-in: the real LocalStorage on a real directory, whose tree removal does not end until
the test lets it (as deleting thousands of shard files on a network volume takes long).
Assertions are on what had happened when, never on durations: a delete held until the
training loop's last step cannot have been waited for by any earlier step."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from dt_helpers import run_customized, tiny_config
from disttrain_trainer.checkpoint import CheckpointManager
from disttrain_trainer.storage import LocalStorage, Purger, complete_checkpoints

DELETE_SECONDS = 1.5


# How long a held delete waits for its release before it gives up and says so: only a
# caller that waited for the delete (the bug under test) makes it run out.
HOLD_LIMIT_SECONDS = 60.0


class SlowStorage(LocalStorage):
    """LocalStorage whose deletes take long: DELETE_SECONDS, or, with `hold`, until the
    test sets it. Records when commits and deletes ran."""

    def __init__(self, root: Path, delete_seconds: float = DELETE_SECONDS, hold: threading.Event | None = None) -> None:
        super().__init__(root)
        self.delete_seconds, self.hold = delete_seconds, hold
        self.events: list[tuple[str, int, float, float]] = []  # (kind, step, start, end)
        self.violations: list[str] = []  # checked by the tests: the purge thread cannot raise into them
        self.lock = threading.Lock()

    def commit(self, step: int, staging: str, meta: dict[str, Any]) -> str:
        t0 = time.perf_counter()
        try:
            return super().commit(step, staging, meta)
        finally:
            self._record("commit", step, t0)

    def delete(self, step: int) -> None:
        t0 = time.perf_counter()
        newest = self.list()[-1]
        if step >= newest:
            self.violations.append(f"asked to delete step {step}, the newest committed is {newest}")
        super().delete(step)
        if self.hold is None:
            time.sleep(self.delete_seconds)
        elif not self.hold.wait(HOLD_LIMIT_SECONDS):
            self.violations.append(f"the delete of step {step} was never released: its caller waited for it")
        self._record("delete", step, t0)

    def _record(self, kind: str, step: int, t0: float) -> None:
        with self.lock:
            self.events.append((kind, step, t0, time.perf_counter()))

    def intervals(self, kind: str) -> dict[int, tuple[float, float]]:
        return {step: (a, b) for k, step, a, b in self.events if k == kind}


def staged(storage: LocalStorage, step: int) -> str:
    """A finished save of `step`, as DCP leaves it before the commit."""
    path = Path(storage.staging(step, "t"))
    path.mkdir()
    (path / ".metadata").write_text("x")
    return str(path)


def test_commit_does_not_wait_for_a_slow_delete(tmp_path: Path) -> None:
    hold = threading.Event()
    storage = SlowStorage(tmp_path, hold=hold)
    purger = Purger(storage, keep=1)
    purger.commit(1, staged(storage, 1), {})
    purger.commit(2, staged(storage, 2), {})  # starts deleting step 1 in the background
    purger.commit(3, staged(storage, 3), {})  # returns while that delete is held
    assert storage.intervals("delete") == {}, "a delete ended before the test released it"
    assert not purger.drain(timeout=0), "the delete of step 1 is still running: handed off, not waited for"
    hold.set()
    assert purger.drain(timeout=30)
    assert storage.list() == [3] and not storage.violations
    deletes, commits = storage.intervals("delete"), storage.intervals("commit")
    assert commits[3][1] < deletes[1][1], "step 3 was committed while step 1 was being deleted"
    assert not list(tmp_path.glob(".trash-*")) and not list(tmp_path.glob(".tmp-*"))


def test_a_step_being_deleted_is_committed_only_after_the_delete(tmp_path: Path) -> None:
    """A resumed job saving a step number again (an older copy of it on disk, beyond keep):
    the commit waits for that delete, and the newest committed step is never deleted."""
    storage = SlowStorage(tmp_path)
    for step in (5, 6):
        LocalStorage(tmp_path).commit(step, staged(storage, step), {})
    purger = Purger(storage, keep=1)
    purger.purge()  # deletes step 5 (slowly)
    deadline = time.monotonic() + 10
    while storage.list() != [6]:  # the delete has unlisted step 5 and is still sleeping
        assert time.monotonic() < deadline
        time.sleep(0.01)
    purger.commit(5, staged(storage, 5), {})
    assert purger.drain(timeout=30)
    (d0, d1), (c0, c1) = storage.intervals("delete")[5], storage.intervals("commit")[5]
    assert c0 >= d1, "the commit of step 5 overlapped its delete"
    # After the commit, 5 is the latest: the purge it asked for keeps it, though 6 > 5.
    assert storage.list() == [5, 6] and not storage.violations


def test_training_loop_does_not_wait_for_slow_deletes(tmp_path: Path) -> None:
    """Every delete is held until the loop has done its last step: had any step, save or
    commit waited for one, the loop could not have got there (the hold runs out instead,
    and says so)."""
    steps = 4
    cfg = tiny_config(steps=steps, batch=2, ckpt_dir=str(tmp_path), interval=1, keep=2)
    last_step = threading.Event()
    storage = SlowStorage(tmp_path, hold=last_step)
    stamps: dict[int, float] = {}

    def recorded(step: int) -> None:
        stamps[step] = time.perf_counter()
        if step == steps:
            last_step.set()

    def customize(c: Any, ctx: Any) -> None:
        c.checkpoint = CheckpointManager(cfg.checkpoint, ctx, c.checkpoint.states, storage=storage)
        record = c.metrics.record_step
        c.metrics.record_step = lambda step, *a, **kw: (recorded(step), record(step, *a, **kw))[1]

    result = run_customized(cfg, customize)
    end = time.perf_counter()
    assert result.step == steps and [s for s, _ in complete_checkpoints(tmp_path)] == [3, 4]
    deletes = storage.intervals("delete")
    assert sorted(deletes) == [1, 2] and not storage.violations
    # Training went on while step 1 was being deleted (queued at the commit of step 3)...
    assert deletes[1][0] < stamps[steps] < deletes[1][1]
    # ...and a clean finish waits for the deletes it asked for.
    assert end >= deletes[2][1]
