"""The operator's write pacer (kube.TokenBucket): a status patch queued behind other
jobs' pod creates is served first, waiters of one priority keep their order, and a caller
cancelled while waiting takes no token."""

from __future__ import annotations

import asyncio

from disttrain_operator.kube import BULK, URGENT, TokenBucket


def test_urgent_writes_overtake_queued_creates_and_order_holds_within_a_priority():
    async def scenario() -> list[str]:
        bucket = TokenBucket(rate=200, burst=1)
        served: list[str] = []

        async def write(name: str, priority: int) -> None:
            await bucket.acquire(priority)
            served.append(name)

        tasks = [asyncio.create_task(write(f"create-{i}", BULK)) for i in range(6)]
        await asyncio.sleep(0)  # the creates queue (the first takes the one token)
        tasks.append(asyncio.create_task(write("status", URGENT)))
        await asyncio.gather(*tasks)
        return served

    served = asyncio.run(scenario())
    assert served[:2] == ["create-0", "status"], served
    assert served[2:] == [f"create-{i}" for i in range(1, 6)]


class CountingBucket(TokenBucket):
    taken = 0

    def _take(self) -> bool:
        took = super()._take()
        self.taken += took
        return took


def test_a_cancelled_waiter_takes_no_token():
    async def scenario() -> tuple[list[str], int]:
        bucket = CountingBucket(rate=50, burst=1)
        served: list[str] = []

        async def write(name: str) -> None:
            await bucket.acquire(BULK)
            served.append(name)

        await bucket.acquire()  # the burst is spent
        doomed = asyncio.create_task(write("cancelled"))
        kept = asyncio.create_task(write("kept"))
        await asyncio.sleep(0)
        doomed.cancel()
        await kept
        return served, bucket.taken

    served, taken = asyncio.run(scenario())
    assert served == ["kept"]
    assert taken == 2  # the burst, then "kept": none for the cancelled caller
