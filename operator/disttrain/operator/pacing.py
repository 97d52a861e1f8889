"""The operator's write pacer, client-go's QPS and burst with priorities: one token bucket
for the whole operator (kube.py takes a token before every write), so 500 jobs starting
at once queue here instead of drawing 429s, and a job's status goes before other jobs'
creates."""

from __future__ import annotations

import asyncio
import heapq
import itertools

from disttrain.operator.clock import Clock, sleep_until_woken

# Write priorities: what changes a job's phase or conditions, and deletes; a status write
# of the worker counters alone (at 2,000 jobs paced, a thousand jobs Pending for 5 minutes
# write theirs within a minute: a job's Running must not queue behind them); creates.
URGENT, ROUTINE, BULK = 0, 1, 2


class TokenBucket:
    """At most `rate` acquisitions a second on average, `burst` at once; waiters are served
    by priority (lower first), then in arrival order."""

    def __init__(self, rate: float, burst: int, clock: Clock | None = None):
        self.rate, self.burst = rate, max(1, burst)
        self.clock = clock or Clock()
        self.tokens, self.stamp = float(self.burst), self.clock.monotonic()
        self._waiting: list[tuple[int, int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()
        self._pump: asyncio.Task[None] | None = None
        self._head_changed = asyncio.Event()

    async def acquire(self, priority: int = 0, count: int = 1) -> int:
        """Wait for `count` tokens (at most the burst) at once; returns how many were taken."""
        count = max(1, min(count, self.burst))
        if not self._waiting and self._take(count):
            return count
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (priority, next(self._arrivals), count, future))
        if self._pump is None or self._pump.done():
            self._pump = asyncio.create_task(self._serve())
        elif self._waiting[0][3] is future:
            # It goes before the waiter the pump sleeps for (a status patch behind a job's
            # batch of 11 creates): it needs 1 token, not 11, so it must not wait for 11.
            self._head_changed.set()
        await future
        return count

    def give_back(self, count: int) -> None:
        """Tokens taken for a batch and not spent."""
        self.tokens = min(self.burst, self.tokens + count)

    def _take(self, count: int = 1) -> bool:
        now = self.clock.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= count - 1e-9:  # 0.02 s x 50/s is 0.99999...: a token all the same
            self.tokens = max(0.0, self.tokens - count)
            return True
        return False

    async def _serve(self) -> None:
        while self._waiting:
            _priority, _arrival, count, future = self._waiting[0]
            if future.done():  # its caller was cancelled: it takes no token
                heapq.heappop(self._waiting)
            elif self._take(count):
                heapq.heappop(self._waiting)
                future.set_result(None)
            else:
                self._head_changed.clear()
                await sleep_until_woken(self.clock, (count - self.tokens) / self.rate, self._head_changed)
