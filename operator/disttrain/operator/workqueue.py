"""A keyed, delaying, rate-limited work queue in the shape of client-go's workqueue.

- `add(key)`: the key is to be processed. Adds of a key already waiting coalesce; an add
  while a worker processes the key marks it dirty, and it is handed out once more after
  `done(key)`: never to two workers at once, and never lost.
- `add_after(key, seconds)`: the same, later; the earliest of several pending times wins.
- `add_rate_limited(key)`: later by what the `RateLimiter` says for that key (exponential
  per key, plus one token bucket for the whole queue); `forget(key)` after a success
  resets the key's back-off.
- Two levels: `add(key, TIMER)` / `add_after(key, s, TIMER)` hand the key out only when
  no EVENT key is ready; an EVENT add of a key waiting as a TIMER moves it up.
- `get()` waits for the next key; `done(key)` ends its processing; `waited(key)` says how
  long the key, while processed, had been ready before a worker took it (client-go's
  queue_duration: all workers busy shows here, not in the pass's own time).

One asyncio event loop owns a queue: no locks. Time comes from the injected clock.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

from disttrain.operator.core.backoff import exponential
from disttrain.operator.clock import Clock, sleep_until_woken

K = TypeVar("K", bound=Hashable)

# Levels: keys added for something that happened (a watch event, a retry) are handed out
# before keys added by a timer (a pass's own "look again in": the resync, one GET of each
# quiet job a minute; a deferred counter write). At 2,000 jobs paced, those passes came to
# about 30 a second while the API server was slow to answer, the workers fell behind, and
# a job whose pods had all started waited up to 29 s for one (controller-runtime's priority
# queue puts its initial list and resyncs last the same way).
EVENT, TIMER = 0, 1


class RateLimiter(Generic[K]):
    """client-go's MaxOfRateLimiter(ItemExponentialFailureRateLimiter, BucketRateLimiter):
    a key that keeps failing waits base, 2*base, ... up to `cap`; and all keys together
    get at most `qps` retries a second (`burst` at once), so a failing API server is not
    hammered by every job at the same moment."""

    def __init__(self, clock: Clock, *, base: float = 0.5, cap: float = 60.0, qps: float = 10.0,
                 burst: int = 100):
        self.clock, self.base, self.cap, self.qps, self.burst = clock, base, cap, qps, max(1, burst)
        self._failures: dict[K, int] = {}
        self._tokens, self._stamp = float(self.burst), clock.monotonic()

    def when(self, key: K) -> float:
        """Seconds until `key` may be retried; counts one more failure of it."""
        self._failures[key] = self._failures.get(key, 0) + 1
        return max(exponential(self.base, self.cap, self._failures[key]), self._reserve())

    def retries(self, key: K) -> int:
        return self._failures.get(key, 0)

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    def _reserve(self) -> float:
        """Take one token, going into debt like golang's rate.Limiter.Reserve(): the debt
        is the wait."""
        now = self.clock.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now
        self._tokens -= 1.0
        return max(0.0, -self._tokens / self.qps)


class WorkQueue(Generic[K]):
    def __init__(self, clock: Clock, limiter: RateLimiter[K] | None = None, name: str = "queue"):
        self.clock, self.name = clock, name
        self.limiter: RateLimiter[K] = limiter or RateLimiter(clock)
        # One deque per level (EVENT, TIMER). A key sits in the deque of its level; a key
        # moved up leaves a stale entry behind, skipped when it comes out (_take).
        self._ready: tuple[deque[K], deque[K]] = (deque(), deque())
        self._dirty: dict[K, int] = {}  # key to be handed out (again) -> its level
        self._processing: set[K] = set()
        self._ready_since: dict[K, float] = {}  # key -> when it was last made ready
        self._waited: dict[K, float] = {}  # key being processed -> how long it had been ready
        self._waiting: list[tuple[float, int, K, int]] = []  # (due, arrival, key, level): a heap
        self._due: tuple[dict[K, float], dict[K, float]] = ({}, {})  # per level: key -> its earliest due time
        self._arrivals = itertools.count()
        self._readied = asyncio.Event()
        self._rescheduled = asyncio.Event()
        self._shut = False
        self._pump: asyncio.Task[None] | None = None

    # ---- adding ------------------------------------------------------------------------

    def add(self, key: K, level: int = EVENT) -> None:
        if self._shut:
            return
        before = self._dirty.get(key)
        if before is not None and before <= level:
            return
        self._dirty[key] = level
        if key in self._processing:
            return  # handed out again once its worker is done
        self._make_ready(key, level)

    def add_after(self, key: K, seconds: float, level: int = EVENT) -> None:
        if self._shut:
            return
        if seconds <= 0:
            self.add(key, level)
            return
        due = self.clock.monotonic() + seconds
        dues = self._due[level]
        if key in dues and dues[key] <= due:
            return  # already due sooner
        dues[key] = due
        heapq.heappush(self._waiting, (due, next(self._arrivals), key, level))
        self._rescheduled.set()
        self._start_pump()

    def add_rate_limited(self, key: K) -> float:
        """Retry `key` after its back-off; returns the delay chosen."""
        delay = self.limiter.when(key)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """`key` succeeded: its next failure backs off from the start again."""
        self.limiter.forget(key)

    def discard(self, key: K) -> None:
        """Forget a key entirely (its object is gone): nothing pending, no back-off. A worker
        processing it now finishes its pass and is not handed it again."""
        for dues in self._due:
            dues.pop(key, None)
        self.limiter.forget(key)
        self._dirty.pop(key, None)  # its deque entries are skipped from now on
        self._ready_since.pop(key, None)

    # ---- processing --------------------------------------------------------------------

    async def get(self) -> K:
        """The next key to process, events before timers; it is this caller's until `done(key)`."""
        while True:
            key = self._take()
            if key is not None:
                break
            if self._shut:
                raise QueueShutDown(self.name)
            self._readied.clear()
            await self._readied.wait()
        del self._dirty[key]
        self._processing.add(key)
        self._waited[key] = self.clock.monotonic() - self._ready_since.pop(key, self.clock.monotonic())
        return key

    def done(self, key: K) -> None:
        self._processing.discard(key)
        self._waited.pop(key, None)
        if key in self._dirty and not self._shut:
            self._make_ready(key, self._dirty[key])

    def _make_ready(self, key: K, level: int) -> None:
        self._ready[level].append(key)
        self._ready_since.setdefault(key, self.clock.monotonic())
        self._readied.set()

    def _take(self) -> K | None:
        """The first key of the highest level whose entry is current (not discarded, not
        moved up, not being processed)."""
        for level, ready in enumerate(self._ready):
            while ready:
                key = ready.popleft()
                if self._dirty.get(key) == level and key not in self._processing:
                    return key
        return None

    def shutdown(self) -> None:
        self._shut = True
        self._readied.set()
        if self._pump is not None:
            self._pump.cancel()

    # ---- looking ----------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys ready to be handed out now."""
        return sum(1 for key in self._dirty if key not in self._processing)

    def pending(self, key: K) -> bool:
        """Is the key ready, dirty or waiting for a later time?"""
        return key in self._dirty or any(key in dues for dues in self._due)

    def due_in(self, key: K) -> float | None:
        due = min((dues[key] for dues in self._due if key in dues), default=None)
        return None if due is None else max(0.0, due - self.clock.monotonic())

    def processing(self, key: K) -> bool:
        return key in self._processing

    def waited(self, key: K) -> float:
        """Seconds the key being processed had been ready before a worker took it (0.0 when
        it is not being processed)."""
        return self._waited.get(key, 0.0)

    # ---- the delaying part -------------------------------------------------------------

    def _start_pump(self) -> None:
        if self._pump is None or self._pump.done():
            self._pump = asyncio.get_running_loop().create_task(self._move_due_keys(), name=f"{self.name} delays")

    def _release_due(self) -> float | None:
        """Move every key whose time has come to the ready queue; seconds until the next."""
        now = self.clock.monotonic()
        while self._waiting and self._waiting[0][0] <= now:
            due, _arrival, key, level = heapq.heappop(self._waiting)
            if self._due[level].get(key) == due:  # else superseded by an earlier add_after, or discarded
                del self._due[level][key]
                self.add(key, level)
        if len(self._waiting) > 64 and len(self._waiting) > 4 * sum(map(len, self._due)):
            # Superseded entries pile up when keys are moved earlier over and over.
            self._waiting = [(d, a, k, lv) for d, a, k, lv in self._waiting if self._due[lv].get(k) == d]
            heapq.heapify(self._waiting)
        return self._waiting[0][0] - now if self._waiting else None

    async def _move_due_keys(self) -> None:
        while not self._shut:
            self._rescheduled.clear()
            wait = self._release_due()
            if wait is None:
                return  # nothing waits: add_after starts this again
            await sleep_until_woken(self.clock, wait, self._rescheduled)


class QueueShutDown(Exception):
    """get() on a queue that was shut down and has nothing left."""
