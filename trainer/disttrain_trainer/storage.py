"""Where checkpoints live, and how old ones leave without stalling training.

`CheckpointStorage` is the small interface the checkpoint manager needs from a backend:
list the committed steps, name a staging location for a save in progress, commit a
staged save atomically, delete a committed step, and hand DCP the reader and writer for
a location. Two backends implement it:

- `LocalStorage`: step directories on a local or shared filesystem (a ReadWriteMany
  volume); a save is staged in a `.tmp-` directory and committed by a rename.
- `ObjectStorage`: step folders under an object-store URL (`s3://bucket/prefix`), through
  fsspec. An object store has no rename, so a save is written in place into a folder of
  its own (`step-N-<token>/`) and committed by writing one small marker object last
  (`step-N.commit`, naming that folder): a single PUT is atomic, so a reader sees a step
  whole or not at all. A delete removes the marker first, then the folder.

`open_storage` picks the backend from the configured folder: a URL with a scheme is an
object store, anything else a path.

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

from torch.distributed.checkpoint import (FileSystemReader, FileSystemWriter, FsspecReader, FsspecWriter, StorageReader,
                                          StorageWriter)

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

    def committed_as(self, step: int, staging: str) -> str:
        """Where the staged save of `step` is read from once rank 0 has committed it, without
        any I/O (what the other ranks report)."""
        ...

    def delete(self, step: int) -> None:
        """Remove a committed step: unlisted atomically first, then its data."""
        ...

    def discard_leftovers(self) -> None:
        """Remove what crashed saves and deletes left behind (at start, rank 0 only)."""
        ...

    def committed_time(self, step: int) -> float:
        """When the committed `step` was committed (unix seconds)."""
        ...

    def writer(self, location: str) -> StorageWriter:
        """DCP's writer for a staging location."""
        ...

    def reader(self, location: str) -> StorageReader:
        """DCP's reader for a committed location."""
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

    def committed_as(self, step: int, staging: str) -> str:
        return self.location(step)

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

    def committed_time(self, step: int) -> float:
        return (self.root / step_dir_name(step)).stat().st_mtime

    def writer(self, location: str) -> StorageWriter:
        return FileSystemWriter(location)

    def reader(self, location: str) -> StorageReader:
        return FileSystemReader(location)


MARKER = re.compile(r"^step-(\d{8})\.commit$")
DATA_FOLDER = re.compile(r"^step-(\d{8})-[0-9a-f]+$")


def object_store_options(url: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """fsspec options for `url`. Credentials and region come from the environment as every
    AWS SDK reads them (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
    AWS_DEFAULT_REGION, ~/.aws); an S3-compatible store's address from AWS_ENDPOINT_URL_S3
    or AWS_ENDPOINT_URL, reached with path-style requests (bucket in the path), which
    every S3-compatible server accepts and virtual-host style does not always."""
    env = os.environ if env is None else env
    # Listings are never cached: a step committed by another incarnation must be seen.
    options: dict[str, Any] = {"use_listings_cache": False}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if url.startswith("s3://") and endpoint:
        options["endpoint_url"] = endpoint
        options["config_kwargs"] = {"s3": {"addressing_style": "path"}}
    return options


def is_url(folder: str) -> bool:
    return "://" in folder


class ObjectStorage:
    """Step folders under an object-store URL, committed by a marker written last (module
    docstring). Every rank may construct one; only rank 0 commits, deletes and discards."""

    def __init__(self, url: str, options: dict[str, Any] | None = None) -> None:
        from fsspec.core import url_to_fs  # only a job with a URL needs fsspec's backends

        self.url = url.rstrip("/")
        self.options = object_store_options(self.url) if options is None else options
        try:
            self.fs, self.root = url_to_fs(self.url, **self.options)
        except (ImportError, ValueError) as exc:  # no fsspec backend for the scheme
            raise ValueError(f"checkpoint URL {url!r}: {exc}") from exc
        self.root = self.root.rstrip("/")
        self._protocol = self.url.split("://", 1)[0]

    def _names(self) -> list[str]:
        try:
            return [entry.rstrip("/").rsplit("/", 1)[-1] for entry in self.fs.ls(self.root, detail=False)]
        except FileNotFoundError:  # nothing saved under the prefix yet
            return []

    def _marker(self, step: int) -> str:
        return f"{self.root}/{step_dir_name(step)}.commit"

    def _read_marker(self, step: int) -> dict[str, Any]:
        with self.fs.open(self._marker(step), "rb") as f:
            return json.loads(f.read())

    def _full(self, key: str) -> str:
        return f"{self._protocol}://{key}"

    def list(self) -> list[int]:
        return sorted(int(m.group(1)) for m in map(MARKER.match, self._names()) if m)

    def staging(self, step: int, token: str) -> str:
        return self._full(f"{self.root}/{step_dir_name(step)}-{token}")

    def location(self, step: int) -> str:
        return self._full(f"{self.root}/{self._read_marker(step)['folder']}")

    def committed_as(self, step: int, staging: str) -> str:
        return staging  # written in place: the marker only makes it visible

    def commit(self, step: int, staging: str, meta: dict[str, Any]) -> str:
        folder = staging.rstrip("/").rsplit("/", 1)[-1]
        try:  # the same step saved by an earlier incarnation: its folder is replaced
            replaced = self._read_marker(step)["folder"]
        except FileNotFoundError:
            replaced = None
        with self.fs.open(self._marker(step), "wb") as f:  # one PUT: the commit
            f.write(json.dumps({**meta, "folder": folder}).encode())
        if replaced and replaced != folder:
            self._remove_folder(replaced)
        return self._full(f"{self.root}/{folder}")

    def delete(self, step: int) -> None:
        try:
            folder = self._read_marker(step)["folder"]
        except FileNotFoundError:
            return
        self.fs.rm(self._marker(step))  # unlisted first: a delete cut short leaves no torn step
        self._remove_folder(folder)

    def _remove_folder(self, folder: str) -> None:
        try:
            self.fs.rm(f"{self.root}/{folder}", recursive=True)
        except FileNotFoundError:
            pass

    def discard_leftovers(self) -> None:
        names = self._names()
        committed = set()
        for step in (int(m.group(1)) for m in map(MARKER.match, names) if m):
            try:
                committed.add(self._read_marker(step)["folder"])
            except FileNotFoundError:  # deleted meanwhile
                pass
        for name in names:
            if DATA_FOLDER.match(name) and name not in committed:
                log.warning("removing incomplete checkpoint %s", self._full(f"{self.root}/{name}"))
                self._remove_folder(name)

    def committed_time(self, step: int) -> float:
        return float(self._read_marker(step)["time"])

    def writer(self, location: str) -> StorageWriter:
        # An object exists once its upload completes on close: there is nothing to fsync
        # (DCP would warn once per file that it cannot).
        return FsspecWriter(location, sync_files=False, **self.options)

    def reader(self, location: str) -> StorageReader:
        return FsspecReader(location, **self.options)


def open_storage(folder: str, *, create: bool) -> CheckpointStorage:
    """The backend for a configured checkpoint folder: a URL is an object store."""
    if is_url(folder):
        return ObjectStorage(folder)
    return LocalStorage(folder, create=create)


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
