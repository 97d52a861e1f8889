"""The operator's write pacer (pacing.TokenBucket): a status patch queued behind other
jobs' pod creates is served first (a phase change before a write of counters alone), as soon as its one token is there, waiters of one
priority keep their order, and a caller cancelled while waiting takes no token."""

from __future__ import annotations

import asyncio

from disttrain.operator.pacing import BULK, ROUTINE, URGENT, TokenBucket

from .fake_clock import FakeClock, settle


def test_urgent_writes_overtake_routine_ones_which_overtake_queued_creates_and_order_holds_within_a_priority():
    async def scenario() -> list[str]:
        bucket = TokenBucket(rate=200, burst=1)
        served: list[str] = []

        async def write(name: str, priority: int) -> None:
            await bucket.acquire(priority)
            served.append(name)

        tasks = [asyncio.create_task(write(f"create-{i}", BULK)) for i in range(6)]
        await asyncio.sleep(0)  # the creates queue (the first takes the one token)
        tasks += [asyncio.create_task(write(f"counters-{i}", ROUTINE)) for i in range(2)]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(write("status", URGENT)))
        await asyncio.gather(*tasks)
        return served

    served = asyncio.run(scenario())
    assert served[:4] == ["create-0", "status", "counters-0", "counters-1"], served
    assert served[4:] == [f"create-{i}" for i in range(1, 6)]


class CountingBucket(TokenBucket):
    taken = 0

    def _take(self, count: int = 1) -> bool:
        took = super()._take(count)
        self.taken += count if took else 0
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


def test_a_batch_takes_its_tokens_at_once_in_arrival_order():
    """One job's creates are paced as one batch: a job that arrived first gets all of its
    tokens before the next job gets any, so its pods are not spread over the whole burst."""
    async def scenario() -> list[str]:
        bucket = TokenBucket(rate=500, burst=8)
        served: list[str] = []

        async def job(name: str) -> None:
            taken = await bucket.acquire(BULK, count=8)
            served.extend(f"{name}-pod-{i}" for i in range(taken))

        await bucket.acquire(count=8)  # the burst is spent
        await asyncio.gather(*(job(f"job-{j}") for j in range(3)))
        return served

    served = asyncio.run(scenario())
    assert served == [f"job-{j}-pod-{i}" for j in range(3) for i in range(8)]


def test_a_batch_is_capped_at_the_burst_and_unspent_tokens_come_back():
    async def scenario() -> tuple[int, float]:
        bucket = TokenBucket(rate=1, burst=4)
        taken = await bucket.acquire(BULK, count=10)  # never more than the bucket holds
        bucket.give_back(3)
        return taken, bucket.tokens

    taken, tokens = asyncio.run(scenario())
    assert taken == 4
    assert 3 <= tokens < 3.1


def test_a_status_patch_behind_a_waiting_batch_waits_for_its_own_token_not_the_batchs():
    """At 50 writes a second a job's batch of 11 creates waits 0.22 s for its tokens; a
    status patch (a job turning Running) that arrives meanwhile needs one token, 0.02 s:
    it goes out then, and the batch still gets its 11 right after."""
    async def scenario() -> list[tuple[str, float]]:
        clock = FakeClock()
        bucket = TokenBucket(rate=50, burst=11, clock=clock)
        start = clock.monotonic()
        served: list[tuple[str, float]] = []

        async def write(name: str, priority: int, count: int) -> None:
            await bucket.acquire(priority, count)
            served.append((name, round(clock.monotonic() - start, 3)))

        await bucket.acquire(BULK, 11)  # one job's batch spends the burst
        batch = asyncio.create_task(write("batch", BULK, 11))
        await settle()  # the pump now sleeps for the batch's 11 tokens
        status = asyncio.create_task(write("status", URGENT, 1))
        for _ in range(30):
            await clock.advance(0.01)
        await asyncio.gather(batch, status)
        return served

    served = asyncio.run(scenario())
    assert [name for name, _ in served] == ["status", "batch"]
    assert served[0][1] <= 0.03, served  # its one token (0.02 s), not the batch's 0.22 s
    assert served[1][1] >= 0.24, served  # the batch's 11 tokens come after the status's one


def test_a_field_gone_from_a_nested_status_object_is_removed_on_the_server_too():
    """The status goes out as a merge patch, which merges objects key by key: a sub-field
    the new status no longer has is sent as null, or the server would keep the old one (a
    grown job's admission kept naming the growth slice it had waited for)."""
    from disttrain.operator.core.writes import status_patch

    old = {"phase": "Running", "admission": {"nodes": 2, "growthWorkload": "w-1", "message": "waits"},
           "progress": {"step": 3, "loss": 1.5}}
    new = {"phase": "Running", "admission": {"nodes": 4, "workload": "w-1"}, "progress": {"step": 3, "loss": 1.5}}
    assert status_patch(old, new) == {"admission": {"nodes": 4, "workload": "w-1", "growthWorkload": None,
                                                    "message": None}}
    assert status_patch(new, {"phase": "Running"}) == {"admission": None, "progress": None}
