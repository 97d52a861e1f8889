"""A clock the test moves by hand (the shell's `Clock`, disttrain/operator/clock.py):
sleepers wake when `advance` passes their time, so back-offs of minutes run in
milliseconds and no test depends on how busy the machine is."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from datetime import datetime, timedelta, timezone

from disttrain.operator.clock import Clock

START = datetime(2026, 11, 24, 12, 0, 0, tzinfo=timezone.utc)


class FakeClock(Clock):
    def __init__(self, start: datetime = START):
        self._mono = 1000.0
        self._start_mono, self._start_wall = self._mono, start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def monotonic(self) -> float:
        return self._mono

    def now(self) -> datetime:
        return self._start_wall + timedelta(seconds=self._mono - self._start_mono)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._mono + seconds, next(self._order), future))
        await future

    async def advance(self, seconds: float) -> None:
        """Move time on, waking each sleeper at its own time in order, and let everything
        that became runnable run before returning."""
        target = self._mono + seconds
        await settle()
        while self._sleepers and self._sleepers[0][0] <= target:
            due, _order, future = heapq.heappop(self._sleepers)
            self._mono = max(self._mono, due)
            if not future.done():
                future.set_result(None)
            await settle()
        self._mono = target
        await settle()


async def settle(rounds: int = 20) -> None:
    """Let the event loop run every ready callback a few times over."""
    for _ in range(rounds):
        await asyncio.sleep(0)
