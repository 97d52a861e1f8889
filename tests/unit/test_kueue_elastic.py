"""Elastic jobs follow Kueue's quota (integrations/kueue: Workload slices): admitted below
their size they ask for the rest through a growth slice and grow into it once Kueue admits
it; scaled down on a slice they give the freed quota back in place; the job's status says
the size it was admitted at, what it asks for and why."""

from __future__ import annotations

from disttrain.api import conditions as c
from disttrain.integrations.kueue import workload as kueue
from disttrain.operator.core.plan import decide

from .kueue_builders import ELASTIC, PENDING, UID, admitted, asked, queued, workload
from .plan_builders import NOW, POLICY, at, cond, iso, pod

FIRST = kueue.workload_name("demo", UID)
RUNNING = {"phase": "Running", "startTime": iso(at(-600)), "restarts": 0,
           "conditions": [{"type": "Running", "status": "True", "reason": "PodsRunning", "message": "",
                           "lastTransitionTime": iso(at(-600))}]}


def slice_of(spec: dict, number: int = 1, replaces: str = FIRST, status: dict | None = None) -> dict:
    return workload(spec, status=status, growth=kueue.Slice(number=number, replaces=replaces))


def replaced(status: dict) -> dict:
    """A Workload Kueue finished because a slice replaced it."""
    return {**status, "conditions": [*status["conditions"], {
        "type": "Finished", "status": "True", "reason": kueue.SLICE_REPLACED, "message": "replaced",
        "lastTransitionTime": iso(NOW)}]}


def test_a_growth_slice_is_elastic_replaces_the_workload_and_asks_for_every_worker():
    body = slice_of(ELASTIC, number=2)
    meta, (pod_set,) = body["metadata"], body["spec"]["podSets"]
    assert meta["name"] == f"{FIRST}-2" and len(meta["name"]) <= 63
    assert meta["annotations"][kueue.ELASTIC_ANNOTATION] == "true"
    assert meta["annotations"][kueue.REPLACEMENT_ANNOTATION] == f"team-a/{FIRST}"
    assert pod_set["count"] == 4 and "minCount" not in pod_set  # Kueue refuses partial admission on a slice
    view = kueue.view_of(body)
    assert view.elastic and view.replaces == FIRST and view.requested == 4
    assert len(kueue.workload_name("x" * 63, UID, 12)) <= 63


def test_of_a_jobs_workloads_the_admitted_one_is_current_and_a_waiting_slice_is_its_growth():
    first = kueue.view_of(workload(ELASTIC, status=admitted(count=2)))
    growth = kueue.view_of(slice_of(ELASTIC, status=PENDING))
    assert kueue.current_and_growth([first, growth]) == (first, growth)
    grown = kueue.view_of(slice_of(ELASTIC, status=admitted(count=4)))
    done = kueue.view_of(workload(ELASTIC, status=replaced(admitted(count=2))))
    assert kueue.current_and_growth([done, grown]) == (grown, None)
    assert kueue.current_and_growth([first, grown]) == (grown, None)  # before Kueue finishes the old one
    assert kueue.slices_made([done, grown]) == 1 and kueue.slices_made([first]) == 0


def test_an_elastic_job_admitted_below_its_size_asks_for_the_rest_through_a_slice():
    plan = decide(queued(ELASTIC, RUNNING, wl=workload(ELASTIC, status=admitted(count=2))),
                  [pod(i, **ELASTIC) for i in range(2)], NOW, POLICY)
    assert asked(plan).slice.number == 1 and asked(plan).slice.replaces == FIRST
    assert plan.create == [] and plan.status.workers.desired == 2  # it runs at its admitted size meanwhile
    admission = plan.status.admission
    assert (admission.nodes, admission.requested_nodes, admission.workload) == (2, 4, FIRST)
    assert "asking Kueue for 4 workers through a Workload slice" in cond(plan, c.ADMITTED)["message"]


def test_while_the_slice_waits_the_job_says_kueues_words_and_asks_nothing_more():
    plan = decide(queued(ELASTIC, RUNNING, wl=workload(ELASTIC, status=admitted(count=2)),
                         growth=slice_of(ELASTIC, status=PENDING), slices=1),
                  [pod(i, **ELASTIC) for i in range(2)], NOW, POLICY)
    assert asked(plan).slice is None and asked(plan).deleted == []
    assert plan.status.admission.growth_workload == f"{FIRST}-1"
    assert "insufficient unused quota" in plan.status.admission.message


def test_once_kueue_admits_the_slice_the_job_grows_into_it_without_touching_running_workers():
    at_two = {**RUNNING, "workers": {"desired": 2, "active": 2, "ready": 2}}
    plan = decide(queued(ELASTIC, at_two, wl=slice_of(ELASTIC, status=admitted(count=4)), slices=1),
                  [pod(i, **ELASTIC) for i in range(2)], NOW, POLICY)
    assert plan.create == [2, 3] and plan.delete == []
    assert asked(plan).slice is None and plan.status.workers.desired == 4
    assert (plan.status.admission.nodes, plan.status.admission.workload) == (4, f"{FIRST}-1")
    assert any(e.reason == c.SCALED and "adding demo-worker-2, demo-worker-3" in e.message for e in plan.events)


def test_scaled_down_on_a_slice_it_gives_the_quota_back_in_place():
    smaller = {**ELASTIC, "nodes": 2}
    plan = decide(queued(smaller, RUNNING, wl=slice_of(ELASTIC, status=admitted(count=4)), slices=1),
                  [pod(i, **ELASTIC) for i in range(4)], NOW, POLICY)
    assert asked(plan).shrink.count == 2
    assert sorted(name for name, _ in plan.delete) == ["demo-worker-2", "demo-worker-3"]
    assert plan.status.admission.message == ("scaled to 2 of the 4 workers Kueue admitted: the quota of the other 2 "
                                             "given back to Kueue")
    body = slice_of(ELASTIC, status=admitted(count=4))
    patch = kueue.shrunk(body, 2)
    assert patch["spec"]["podSets"][0]["count"] == 2 and kueue.shrunk({**body, **patch}, 2) is None
    shrunk = {**body, "spec": {**body["spec"], **patch["spec"]}}
    again = decide(queued(smaller, RUNNING, wl=shrunk, slices=1), [pod(i, **ELASTIC) for i in range(2)], NOW, POLICY)
    assert asked(again).shrink is None and again.status.admission.nodes == 2  # Kueue's usage follows the spec
    assert again.status.admission.message == plan.status.admission.message  # said as long as it holds


def test_scaled_down_on_its_first_workload_it_keeps_the_quota_and_says_why():
    smaller = {**ELASTIC, "nodes": 2}
    plan = decide(queued(smaller, RUNNING, wl=workload(ELASTIC, status=admitted(count=4))),
                  [pod(i, **ELASTIC) for i in range(4)], NOW, POLICY)
    assert asked(plan).shrink is None
    assert "Kueue cannot shrink a partially admitted Workload in place" in plan.status.admission.message


def test_a_slice_no_longer_wanted_goes():
    smaller = {**ELASTIC, "nodes": 2}  # scaled down to what it holds while its slice waits
    plan = decide(queued(smaller, RUNNING, wl=workload(ELASTIC, status=admitted(count=2)),
                         growth=slice_of(ELASTIC, status=PENDING), slices=1), [pod(i, **ELASTIC) for i in range(2)],
                  NOW, POLICY)
    assert asked(plan).deleted == [f"{FIRST}-1"] and asked(plan).slice is None
    suspended = decide(queued({**ELASTIC, "suspend": True}, {"phase": "Suspended"},
                              wl=workload(ELASTIC, status=admitted(count=2)), growth=slice_of(ELASTIC, status=PENDING),
                              slices=1), [], NOW, POLICY)
    assert f"{FIRST}-1" in asked(suspended).deleted


def test_a_fixed_size_job_never_asks_for_a_slice():
    fixed = {"nodes": 2, "gpusPerNode": 4}
    plan = decide(queued(fixed, RUNNING, wl=workload(fixed, status=admitted())), [pod(i, **fixed) for i in range(2)],
                  NOW, POLICY)
    assert asked(plan).slice is None and asked(plan).shrink is None and plan.status.admission.message is None
