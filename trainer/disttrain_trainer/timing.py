"""Each worker's compute time per step, for the operator's straggler rule
(operator/core/stragglers.py; docs/operations.md, "Stragglers").

A slow GPU holds every rank at every collective, so step times are equal everywhere and
say nothing of who is slow. What differs is the time a rank spends in the parts of a step
no collective runs in: the built-in trainer times its forward passes and its optimizer
step (under DDP neither waits for a peer), your own loop times what it wraps in
`Session.compute()`. At each report window the ranks exchange that time per step along
with the loss they already average, so every pod's `/status` carries every worker's
(workerTimes, docs/pod-contract.md). The exchange rides on the next window's all-reduce:
the table lags one window, and costs no collective of its own.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator, Mapping, Sequence

import torch

from disttrain.api.pod_contract import POD_NAME

_INDEX = re.compile(r"-(\d+)$")
FIELDS = 3  # per rank: worker index + 1 (0: no entry), compute seconds per step, step seconds


class ComputeTimer:
    """Sums the time spent in `section()`s until `take()`. On a CUDA device it times the
    device's work (events on the current stream), elsewhere the wall clock.

    `stretch` > 1 is the slow-rank test hook (faults.py): each section takes that many
    times as long, as on a slower device."""

    def __init__(self, device: torch.device | None = None, *, stretch: float = 1.0) -> None:
        self.cuda = device is not None and device.type == "cuda"
        self.stretch = stretch
        self._seconds = 0.0
        self._events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self._open: tuple[float, torch.cuda.Event | None] | None = None

    @contextlib.contextmanager
    def section(self) -> Iterator[None]:
        self.begin()
        try:
            yield
        finally:
            self.end()

    def begin(self) -> None:
        """Open a section (a framework's hooks: the batch begins)."""
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            self._open = (0.0, start)
        else:
            self._open = (time.perf_counter(), None)

    def end(self) -> None:
        """Close the open section (none open: nothing happens)."""
        opened, self._open = self._open, None
        if opened is None:
            return
        began, start = opened
        if start is not None:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._events.append((start, end))
            if self.stretch > 1:
                end.synchronize()
                time.sleep((self.stretch - 1) * start.elapsed_time(end) / 1000)
            return
        if self.stretch > 1:
            time.sleep((self.stretch - 1) * (time.perf_counter() - began))
        self._seconds += time.perf_counter() - began

    def take(self) -> float:
        """Seconds timed since the last take (waits for the device's timed work)."""
        total = self._seconds
        for start, end in self._events:
            end.synchronize()
            total += start.elapsed_time(end) * self.stretch / 1000
        self._seconds, self._events = 0.0, []
        return total


def worker_index(env: Mapping[str, str]) -> int:
    """This pod's worker index: the <i> of <job>-worker-<i> (DISTTRAIN_POD_NAME), else
    torchrun's GROUP_RANK (a run outside the operator's pods), else 0."""
    found = _INDEX.search(env.get(POD_NAME.env, ""))
    if found:
        return int(found.group(1))
    try:
        return int(env.get("GROUP_RANK", "0"))
    except ValueError:
        return 0


def row(world_size: int, rank: int, worker: int, window: tuple[int, float, float] | None) -> list[float]:
    """This rank's part of the table the ranks sum: its own slot filled, the others 0."""
    values = [0.0] * (FIELDS * world_size)
    if window is not None:
        _, compute, step = window
        values[FIELDS * rank: FIELDS * rank + FIELDS] = [worker + 1.0, compute, step]
    return values


def per_worker(values: Sequence[float]) -> list[list[float]]:
    """The summed table -> [[worker, compute, step], ...]: a worker's slowest rank stands
    for it (its pod waits for that one too)."""
    out: dict[int, list[float]] = {}
    for i in range(0, len(values) - FIELDS + 1, FIELDS):
        worker, compute, step = values[i: i + FIELDS]
        if worker < 0.5:
            continue
        index = int(round(worker)) - 1
        old = out.get(index)
        out[index] = [index, round(max(compute, old[1] if old else 0.0), 6), round(max(step, old[2] if old else 0.0), 6)]
    return [out[k] for k in sorted(out)]
