"""The work queue and its rate limiter (workqueue.py), on a fake clock: what client-go's
workqueue promises, in milliseconds."""

from __future__ import annotations

import asyncio

import pytest

from disttrain.operator.core.backoff import exponential
from disttrain.operator.workqueue import TIMER, QueueShutDown, RateLimiter, WorkQueue

from .fake_clock import FakeClock, settle


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=30))


def test_the_back_off_schedule_doubles_from_its_base_up_to_its_cap():
    assert [exponential(0.5, 8, n) for n in range(7)] == [0, 0.5, 1, 2, 4, 8, 8]
    assert exponential(1, 60, 10_000) == 60  # no overflow however long it fails


def test_a_failing_key_backs_off_exponentially_up_to_its_cap_and_resets_after_a_success():
    clock = FakeClock()
    limiter = RateLimiter(clock, base=0.5, cap=4, qps=1000, burst=1000)
    assert [limiter.when("a") for _ in range(6)] == [0.5, 1, 2, 4, 4, 4]
    assert limiter.when("b") == 0.5  # per key
    limiter.forget("a")
    assert limiter.retries("a") == 0 and limiter.when("a") == 0.5


def test_all_keys_together_are_held_to_the_overall_bucket():
    clock = FakeClock()
    limiter = RateLimiter(clock, base=0.001, cap=0.001, qps=10, burst=3)
    delays = [limiter.when(f"k{i}") for i in range(6)]
    assert delays[:3] == [0.001] * 3  # the burst
    assert delays[3:] == pytest.approx([0.1, 0.2, 0.3])  # then 10 a second
    run(clock.advance(10))
    assert limiter.when("k9") == 0.001  # refilled


def test_adds_of_a_waiting_key_coalesce_and_keys_come_out_in_order():
    async def scenario():
        queue = WorkQueue(FakeClock())
        for key in ("a", "b", "a", "c", "b"):
            queue.add(key)
        assert len(queue) == 3
        return [await queue.get() for _ in range(3)]

    assert run(scenario()) == ["a", "b", "c"]


def test_a_key_is_never_handed_to_two_workers_and_adds_during_a_pass_give_exactly_one_more():
    async def scenario():
        clock = FakeClock()
        queue = WorkQueue(clock)
        passes, running, overlaps = [], set(), []

        async def worker(name):
            while True:
                try:
                    key = await queue.get()
                except QueueShutDown:
                    return
                if key in running:
                    overlaps.append(key)
                running.add(key)
                passes.append(key)
                if len(passes) == 1:
                    for _ in range(1000):  # 1,000 events while the first pass runs
                        queue.add("job")
                await clock.sleep(1)  # the pass takes a while
                running.discard(key)
                queue.done(key)

        workers = [asyncio.create_task(worker(i)) for i in range(4)]
        queue.add("job")
        for _ in range(5):
            await clock.advance(1)
        queue.shutdown()
        await asyncio.gather(*workers)
        return passes, overlaps

    passes, overlaps = run(scenario())
    assert passes == ["job", "job"] and overlaps == []


def test_add_after_waits_on_the_clock_and_the_earliest_time_wins():
    async def scenario():
        clock = FakeClock()
        queue = WorkQueue(clock)
        queue.add_after("a", 10)
        queue.add_after("a", 3)   # sooner: wins
        queue.add_after("a", 20)  # later: ignored
        queue.add_after("b", 5)
        await clock.advance(2.9)
        early = len(queue)
        await clock.advance(0.2)
        first = [await queue.get()]
        await clock.advance(2)
        first.append(await queue.get())
        queue.done("a")
        queue.done("b")
        await clock.advance(100)
        return early, first, len(queue), queue.pending("a")

    assert run(scenario()) == (0, ["a", "b"], 0, False)


def test_a_key_says_how_long_it_was_ready_before_a_worker_took_it():
    async def scenario():
        clock = FakeClock()
        queue = WorkQueue(clock)
        queue.add("a")
        await clock.advance(2.5)  # every worker busy
        key = await queue.get()
        waited = queue.waited(key)
        queue.add("a")  # again while processed: ready only once it is done
        await clock.advance(4)
        queue.done(key)
        await clock.advance(1)
        again = await queue.get()
        return waited, queue.waited(again), queue.waited("b")

    assert run(scenario()) == (2.5, 1, 0.0)


def test_keys_an_event_queued_go_before_keys_a_timer_queued():
    """A thousand timers due at once (deferred counter writes) must not hold back the job
    whose pods just started."""
    async def scenario():
        clock = FakeClock()
        queue = WorkQueue(clock)
        for i in range(1000):
            queue.add_after(f"t{i}", 5, TIMER)
        await clock.advance(5)
        queue.add("event")
        queue.add("t500")  # an event for a key waiting as a timer moves it up
        first = [await queue.get() for _ in range(3)]
        rest = [await queue.get() for _ in range(len(queue))]
        return first, len(rest), len(set(rest)), "t500" in rest

    first, rest, distinct, again = run(scenario())
    assert first == ["event", "t500", "t0"]
    assert (rest, distinct, again) == (998, 998, False)  # each key handed out once


def test_a_timer_for_a_key_already_queued_by_an_event_does_not_move_it_down():
    async def scenario():
        clock = FakeClock()
        queue = WorkQueue(clock)
        queue.add("b", TIMER)
        queue.add("a")
        queue.add("a", TIMER)
        key = await queue.get()
        queue.add(key, TIMER)  # while processed: once more after done, as a timer
        queue.add("c")
        queue.done(key)
        return [key] + [await queue.get() for _ in range(3)], len(queue)

    assert run(scenario()) == (["a", "c", "b", "a"], 0)


def test_a_failed_key_comes_back_after_its_back_off():
    async def scenario():
        clock = FakeClock()
        queue = WorkQueue(clock, RateLimiter(clock, base=0.5, cap=2, qps=1000, burst=1000))
        seen = []
        for expected in (0.5, 1, 2, 2):
            assert queue.add_rate_limited("a") == expected
            await clock.advance(expected - 0.01)
            seen.append(len(queue))
            await clock.advance(0.01)
            key = await queue.get()
            queue.done(key)
        queue.forget("a")
        return seen, queue.add_rate_limited("a")

    seen, after_success = run(scenario())
    assert seen == [0, 0, 0, 0] and after_success == 0.5


def test_a_discarded_key_is_neither_handed_out_nor_retried():
    async def scenario():
        clock = FakeClock()
        queue = WorkQueue(clock)
        queue.add("gone")
        queue.add_after("later", 5)
        queue.add("kept")
        queue.discard("gone")
        queue.discard("later")
        await clock.advance(10)
        key = await queue.get()
        return key, len(queue), queue.pending("later")

    assert run(scenario()) == ("kept", 0, False)


def test_get_on_a_shut_down_queue_ends_the_workers():
    async def scenario():
        queue = WorkQueue(FakeClock())
        waiter = asyncio.create_task(queue.get())
        await settle()
        queue.shutdown()
        with pytest.raises(QueueShutDown):
            await waiter
        queue.add("late")  # ignored once shut down
        return len(queue)

    assert run(scenario()) == 0
