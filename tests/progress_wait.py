"""Waiting on something that moves: fail when it stops moving, not when a total time has
passed (a test must pass on a machine whose cores are busy). Cluster.wait_job waits on a
DistributedTraining with it; the docs test waits on a doc's commands."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


def wait_moving(
    read: Callable[[], T],
    done: Callable[[T], Any],
    *,
    progress: Callable[[T], Any],
    stall: float,
    what: str,
    interval: float = 1,
    describe: Callable[[], str] | None = None,
    limit: float = 3600,
) -> T:
    """Poll ``read()`` until ``done(value)``; return the value.

    Fails when ``progress(value)`` has not changed for ``stall`` seconds: the thing waited
    on stopped moving. A busy machine makes it slower, never failed. ``limit`` only
    stops a wait whose value changes forever without getting done.
    """
    start = moved = time.monotonic()
    seen: Any = object()
    while True:
        value = read()
        if done(value):
            return value
        now, mark = time.monotonic(), progress(value)
        if mark != seen:
            seen, moved = mark, now
        if now - moved > stall or now - start > limit:
            why = (f"it made no progress for {stall:.0f}s" if now - moved > stall
                   else f"it kept changing for {limit:.0f}s")
            shown = f"\n{describe()}" if describe is not None else ""
            pytest.fail(f"gave up waiting for {what}: {why}; last seen {mark!r}{shown}", pytrace=False)
        time.sleep(interval)
