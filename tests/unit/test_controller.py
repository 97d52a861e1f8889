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
    mem = JobMemory(expected_creates={"demo-worker-1": (time.monotonic() + 30, "abc")})
    pods, _ = _own_pods([info("demo-worker-0")], "job-uid", mem)
    assert [(p.name, p.phase) for p in pods] == [("demo-worker-0", "Running"), ("demo-worker-1", "Pending")]
    # The watch caught up: the placeholder gives way to the real pod, the expectation ends.
    pods, _ = _own_pods([info("demo-worker-0"), info("demo-worker-1")], "job-uid", mem)
    assert [p.uid for p in pods] == ["uid-demo-worker-0", "uid-demo-worker-1"]
    assert mem.expected_creates == {}


def test_an_expectation_the_watch_never_confirms_expires():
    mem = JobMemory(expected_creates={"demo-worker-1": (time.monotonic() - 1, "abc")})
    pods, _ = _own_pods([], "job-uid", mem)
    assert pods == [] and mem.expected_creates == {}


def test_a_pod_just_created_is_neither_created_again_nor_replaced_as_outdated():
    """The placeholder carries the template it was rendered from: decide must not take it
    for a pod of an older spec (that deleted every fresh pod under load)."""
    from disttrain_operator.api import load_job
    from disttrain_operator.plan import decide
    from disttrain_operator.render import TEMPLATE_HASH_ANNOTATION, render_pod

    from .test_plan import NOW, POLICY, pod, state

    from .helpers import job as job_doc

    j, r, _ = load_job(job_doc(nodes=2))
    fresh = render_pod(j, r, 1)["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION]
    mem = JobMemory(expected_creates={"demo-worker-1": (time.monotonic() + 30, fresh)})
    pods, _ = _own_pods([pod(0, nodes=2)], None, mem)  # type: ignore[arg-type]
    plan = decide(state(nodes=2), pods, NOW, POLICY)
    assert plan.create == [] and plan.delete == []


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


def test_a_silent_trainer_is_polled_less_and_less_often_up_to_a_cap():
    from disttrain_operator.controller import SILENT_TRAINER_MAX_SECONDS, silent_poll_seconds

    assert [silent_poll_seconds(15, n) for n in range(7)] == [15, 15, 30, 60, 120, 120, 120]
    assert SILENT_TRAINER_MAX_SECONDS == 120
    assert silent_poll_seconds(300, 5) == 300  # a longer configured period is never shortened


def test_a_spec_is_validated_once_per_generation_and_forgotten_with_the_job():
    shared = Shared(settings=Settings(), kube=None, metrics=OperatorMetrics(), policy=Policy())  # type: ignore[arg-type]
    first = shared.validate(body())
    assert shared.validate(body()) is first  # status writes and polls between changes reuse it
    assert shared.validate(body(generation=2)) is not first  # a spec change is validated again
    assert shared.validate(body(uid="u2")) is not first  # another job of the same name too
    shared.job_event(("ns", "demo"), body(), "DELETED")
    assert "u1" not in shared.validations and "u1" in shared.gone


def test_a_deleted_job_bids_its_progress_loop_farewell():
    """Jobs carry no finalizer, so kopf never stops the loops of a deleted job: the
    deletion event must wake and end them itself, or they outlive the job."""
    shared = Shared(settings=Settings(), kube=None, metrics=OperatorMetrics(), policy=Policy())  # type: ignore[arg-type]
    farewell = shared.farewells["u1"] = asyncio.Event()
    shared.job_event(("ns", "demo"), body(), "DELETED")
    assert farewell.is_set() and "u1" not in shared.farewells
