"""The one clock of the operator's shell: monotonic seconds for waits and back-offs, wall
time (UTC) for what goes into status, and an awaitable sleep.

Everything in the shell that waits or measures (the work queue, its rate limiter, the
reconcile's expectations and deferred writes, leader election) takes a `Clock`, so the
unit tests drive time with `FakeClock` (tests/unit/fake_clock.py) and run in
milliseconds, the way client-go's controllers take a `clock.WithTicker`.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone


class Clock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


async def sleep_until_woken(clock: Clock, seconds: float, woken: asyncio.Event) -> None:
    """Sleep `seconds` on `clock`, or less if `woken` is set meanwhile: a pump whose next
    due time moves earlier (a sooner key, a more urgent waiter) must not oversleep it."""
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    waker = asyncio.ensure_future(woken.wait())
    try:
        await asyncio.wait((sleeper, waker), return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleeper.cancel()
        waker.cancel()
