"""Leader election on a Lease (leader.py) on a fake clock: one leader at a time, renewal,
take-over only after the Lease went unrenewed for its duration on the standby's own
clock, release on a clean stop, and stepping down when renewals keep failing. The Lease
store is the recording stand-in of fake_kube.py; tests/cluster/reconcile/
test_leader_election.py runs the same elections against the real API server."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace

from disttrain.operator.kube import ApiError
from disttrain.operator.leader import LeaderElector, LeaseSettings

from .fake_clock import FakeClock, settle
from .fake_kube import FakeKube

SETTINGS = LeaseSettings(namespace="ops", lease_seconds=15, renew_deadline_seconds=10, retry_seconds=2)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=30))


class Partitioned:
    """The same Lease store, unreachable: every call fails as a lost connection does."""

    def __getattr__(self, name):
        async def unreachable(*args, **kwargs):
            raise ApiError(0, "", "connection refused", name)
        return unreachable


def elector(kube, clock, identity) -> LeaderElector:
    return LeaderElector(kube, replace(SETTINGS, identity=identity), clock)


def spec(kube) -> dict:
    return kube.objects[("Lease", "ops", "disttrain-operator")]["spec"]


async def stop(*tasks):
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_the_first_replica_leads_and_the_second_stands_by_while_it_renews():
    async def scenario():
        clock, kube = FakeClock(), FakeKube()
        a, b = elector(kube, clock, "a"), elector(kube, clock, "b")
        ta = asyncio.create_task(a.run())
        await settle()
        first = spec(kube)["renewTime"]
        tb = asyncio.create_task(b.run())
        await clock.advance(60)
        seen = (a.leading.is_set(), b.leading.is_set(), spec(kube)["holderIdentity"],
                spec(kube)["renewTime"] > first, spec(kube)["leaseTransitions"])
        await stop(ta, tb)
        return seen

    assert run(scenario()) == (True, False, "a", True, 0)


def test_a_leader_cut_off_steps_down_and_the_standby_waits_out_the_lease_before_taking_over():
    async def scenario():
        clock, kube = FakeClock(), FakeKube()
        a = elector(kube, clock, "a")
        ta = asyncio.create_task(a.run())
        await settle()
        b = elector(kube, clock, "b")
        tb = asyncio.create_task(b.run())
        await clock.advance(5)
        a.kube = Partitioned()  # a can no longer reach the API server
        await clock.advance(12)
        a_after_12 = (a.leading.is_set(), ta.done())
        b_after_12 = b.leading.is_set()
        await clock.advance(8)
        seen = (a_after_12, b_after_12, b.leading.is_set(), spec(kube)["holderIdentity"],
                spec(kube)["leaseTransitions"])
        await stop(ta, tb)
        return seen

    a_after_12, b_after_12, b_leads, holder, transitions = run(scenario())
    assert a_after_12 == (False, True)  # renewals failed past the 10 s deadline: it stopped leading
    assert b_after_12 is False  # the Lease was renewed less than 15 s ago, as b saw it
    assert b_leads and holder == "b" and transitions == 1


def test_a_clean_stop_releases_the_lease_and_the_standby_takes_it_at_its_next_try():
    async def scenario():
        clock, kube = FakeClock(), FakeKube()
        a, b = elector(kube, clock, "a"), elector(kube, clock, "b")
        ta = asyncio.create_task(a.run())
        await settle()
        tb = asyncio.create_task(b.run())
        await clock.advance(10)
        await stop(ta)
        released = spec(kube)["holderIdentity"]
        await clock.advance(2.1)
        seen = (released, b.leading.is_set(), spec(kube)["holderIdentity"])
        await stop(tb)
        return seen

    assert run(scenario()) == ("", True, "b")


def test_two_replicas_racing_for_a_free_lease_never_both_lead():
    async def scenario():
        clock, kube = FakeClock(), FakeKube()
        electors = [elector(kube, clock, name) for name in "abc"]
        tasks = [asyncio.create_task(e.run()) for e in electors]
        await clock.advance(30)
        leaders = [e.identity for e in electors if e.leading.is_set()]
        holder = spec(kube)["holderIdentity"]
        await stop(*tasks)
        return leaders, holder

    leaders, holder = run(scenario())
    assert len(leaders) == 1 and leaders == [holder]
