"""The shell's memory between passes (controller.py), without a cluster: expectations,
ownership by uid, what wakes a job. The loop itself runs in tests/cluster."""

from __future__ import annotations

import asyncio
import time

import kopf

from disttrain_operator.controller import JobMemory, Shared, _own_pods
from disttrain_operator.metrics import OperatorMetrics
from disttrain_operator.plan import Policy
from disttrain_operator.pods import PodInfo
from disttrain_operator.settings import Settings


def info(name: str, owner: str | None = "job-uid", uid: str | None = None, terminating: bool = False) -> PodInfo:
    return PodInfo(name=name, index=int(name.rsplit("-", 1)[1]), phase="Running", ready=True,
                   terminating=terminating, disrupted=False, exit_code=None, reason="", template_hash=None,
                   ip=None, uid=uid or f"uid-{name}", owner_uid=owner)


def test_a_pod_asked_for_counts_as_present_until_the_watch_shows_it():
    mem = JobMemory(expected_creates={"demo-worker-1": time.monotonic() + 30})
    pods, _ = _own_pods([info("demo-worker-0")], "job-uid", mem)
    assert [(p.name, p.phase) for p in pods] == [("demo-worker-0", "Running"), ("demo-worker-1", "Pending")]
    # The watch caught up: the placeholder gives way to the real pod, the expectation ends.
    pods, _ = _own_pods([info("demo-worker-0"), info("demo-worker-1")], "job-uid", mem)
    assert [p.uid for p in pods] == ["uid-demo-worker-0", "uid-demo-worker-1"]
    assert mem.expected_creates == {}


def test_an_expectation_the_watch_never_confirms_expires():
    mem = JobMemory(expected_creates={"demo-worker-1": time.monotonic() - 1})
    pods, _ = _own_pods([], "job-uid", mem)
    assert pods == [] and mem.expected_creates == {}


def test_a_pod_we_deleted_counts_as_terminating_until_the_watch_shows_it():
    mem = JobMemory(expected_deletes={"uid-demo-worker-0": time.monotonic() + 30})
    pods, _ = _own_pods([info("demo-worker-0")], "job-uid", mem)
    assert pods[0].terminating and not pods[0].active
    pods, _ = _own_pods([info("demo-worker-0", terminating=True)], "job-uid", mem)
    assert mem.expected_deletes == {}


def test_only_pods_owned_by_the_jobs_uid_are_its_own():
    old = info("demo-worker-0", owner="earlier-job-uid")
    stray = info("demo-worker-1", owner=None)
    pods, foreign = _own_pods([old, stray, info("demo-worker-2")], "job-uid", JobMemory())
    assert [p.name for p in pods] == ["demo-worker-2"]
    assert [p.name for p in foreign] == ["demo-worker-0", "demo-worker-1"]


def body(uid: str = "u1", generation: int = 1, deleting: bool = False) -> kopf.Body:
    meta = {"name": "demo", "namespace": "ns", "uid": uid, "generation": generation}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-23T00:00:00Z"
    return kopf.Body({"metadata": meta, "spec": {}, "status": {"phase": "Running"}})


def test_a_job_wakes_on_spec_changes_and_deletion_not_on_its_own_status_writes():
    async def scenario() -> list[bool]:
        shared = Shared(settings=Settings(), kube=None, metrics=OperatorMetrics(), policy=Policy())  # type: ignore[arg-type]
        waker = shared.wakers[("ns", "demo")] = asyncio.Event()
        seen = []
        for b in (body(), body(), body(generation=2), body(generation=2, deleting=True), body(uid="u2")):
            waker.clear()
            shared.job_event(("ns", "demo"), b, "MODIFIED")
            seen.append(waker.is_set())
        return seen

    assert asyncio.run(scenario()) == [True, False, True, True, True]


def test_deleting_a_job_forgets_everything_about_it():
    shared = Shared(settings=Settings(), kube=None, metrics=OperatorMetrics(), policy=Policy())  # type: ignore[arg-type]
    shared.memories["u1"] = JobMemory()
    shared.metrics.observe_phase(("ns", "demo"), "Running")
    shared.job_event(("ns", "demo"), body(), "DELETED")
    assert shared.memories == {} and shared.seen == {}
    assert shared.metrics.jobs.labels(phase="Running")._value.get() == 0


def test_the_phase_gauge_moves_one_job_at_a_time():
    metrics = OperatorMetrics()
    for i in range(3):
        metrics.observe_phase(("ns", f"j{i}"), "Pending")
    metrics.observe_phase(("ns", "j0"), "Running")
    metrics.observe_phase(("ns", "j0"), "Running")
    metrics.observe_phase(("ns", "j1"), None)
    values = {p: metrics.jobs.labels(phase=p)._value.get() for p in ("Pending", "Running")}
    assert values == {"Pending": 1, "Running": 1}
