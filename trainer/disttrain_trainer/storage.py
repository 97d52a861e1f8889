"""Where checkpoints live, and how old ones leave without stalling training.

`CheckpointStorage` is the small interface the checkpoint manager needs from a backend:
list the committed steps, name a staging location for a save in progress, commit a
staged save atomically, delete a committed step. `LocalStorage` implements it on a local
or shared filesystem (a ReadWriteMany volume); an object store would implement the same
five calls (commit = write a marker object last, delete = remove the marker first).

`Purger` deletes the checkpoints beyond the newest `keep` on a background thread, so a
slow delete (thousands of shard files on a network volume) never holds rank 0, and with
it every rank at the next collective. It never races a commit: commits go through it,
it never deletes the newest committed step, and a commit of a step it is deleting waits
for that delete (both under one lock; the lock is never held during the slow part).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
import uuid
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("disttrain_trainer")

STEP_DIR = re.compile(r"^step-(\d{8})$")
# Leftovers of a save (.tmp-) or a delete (.trash-) that did not finish: never read.
LEFTOVER_GLOBS = (".tmp-step-*", ".trash-step-*")


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


class CheckpointStorage(Protocol):
    def list(self) -> list[int]:
        """Committed steps, oldest first."""
        ...

    def staging(self, step: int, token: str) -> str:
        """Where the save `token` of `step` is written (a DCP checkpoint_id); never listed."""
        ...

    def location(self, step: int) -> str:
        """Where the committed `step` is read from (a DCP checkpoint_id)."""
        ...

    def commit(self, step: int, staging: str, meta: dict[str, Any]) -> str:
        """Make a complete staged save the committed `step`, atomically; returns its location."""
        ...

    def delete(self, step: int) -> None:
        """Remove a committed step: unlisted atomically first, then its data."""
        ...

    def discard_leftovers(self) -> None:
        """Remove what crashed saves and deletes left behind (at start, rank 0 only)."""
        ...


class LocalStorage:
    """Step directories on a local or shared filesystem (module docstring of checkpoint.py)."""

    def __init__(self, root: str | Path, *, create: bool = True) -> None:
        self.root = Path(root)
        if create:  # rank 0 only: the others write their shards once it exists
            self.root.mkdir(parents=True, exist_ok=True)

    def list(self) -> list[int]:
        return [step for step, _ in complete_checkpoints(self.root)]

    def staging(self, step: int, token: str) -> str:
        return str(self.root / f".tmp-{step_dir_name(step)}-{token}")

    def location(self, step: int) -> str:
        return str(self.root / step_dir_name(step))

    def commit(self, step: int, staging: str, meta: dict[str, Any]) -> str:
        final = self.root / step_dir_name(step)
        (Path(staging) / "disttrain.json").write_text(json.dumps(meta))
        if final.exists():  # same step saved by an earlier incarnation
            self._remove(final)
        os.replace(staging, final)  # atomic on one filesystem
        return str(final)

    def delete(self, step: int) -> None:
        self._remove(self.root / step_dir_name(step))

    def _remove(self, path: Path) -> None:
        # Renamed first: a delete cut short leaves a .trash- directory, never a torn step.
        trash = self.root / f".trash-{path.name}-{uuid.uuid4().hex[:8]}"
        os.replace(path, trash)
        self.remove_tree(trash)

    def remove_tree(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def discard_leftovers(self) -> None:
        for pattern in LEFTOVER_GLOBS:
            for stale in self.root.glob(pattern):
                log.warning("removing incomplete checkpoint %s", stale)
                self.remove_tree(stale)


class Purger:
    """Commits through `storage` and keeps its newest `keep` steps, deleting older ones on
    a daemon thread. `drain()` waits for the deletes asked so far (or hands them off: a
    delete not done is redone by the next purge, which lists again)."""

    def __init__(self, storage: CheckpointStorage, keep: int) -> None:
        self.storage = storage
        self.keep = keep
        self._cv = threading.Condition()
        self._latest: int | None = None  # newest committed: never deleted
        self._deleting: int | None = None
        self._requested = 0  # purges asked for
        self._done = 0  # purges finished
        self._thread: threading.Thread | None = None

    def commit(self, step: int, staging: str, meta: dict[str, Any]) -> str:
        with self._cv:
            while self._deleting == step:  # only when a step is saved again after a resume
                self._cv.wait()
            location = self.storage.commit(step, staging, meta)
            self._latest = step
            self._requested += 1
            self._start()
            self._cv.notify_all()
        return location

    def purge(self) -> None:
        """Ask for a purge without a commit (the newest on disk stays)."""
        with self._cv:
            self._requested += 1
            self._start()
            self._cv.notify_all()

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every purge asked for has run; False if `timeout` ran out first."""
        with self._cv:
            target = self._requested
            return self._cv.wait_for(lambda: self._done >= target, timeout=timeout)

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="checkpoint-purge", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._requested > self._done)
                target = self._requested
            try:
                self._purge_once()
            except OSError as exc:  # a failed delete must not stop training: the next purge retries
                log.warning("deleting old checkpoints failed (%s); retrying after the next commit", exc)
            finally:  # anything else ends the thread (the next commit starts another): never hang drain()
                with self._cv:
                    self._done = target
                    self._cv.notify_all()

    def _purge_once(self) -> None:
        steps = self.storage.list()
        for step in steps[: max(0, len(steps) - self.keep)]:
            with self._cv:
                if step == self._latest:
                    continue
                self._deleting = step
            try:
                self.storage.delete(step)
                log.info("deleted old checkpoint step %d", step)
            finally:
                with self._cv:
                    self._deleting = None
                    self._cv.notify_all()
