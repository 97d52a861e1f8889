"""Trouble the operator cannot fix, said on the job (plan.decide): names held by others,
creations the API refused, workers the scheduler cannot place."""

from __future__ import annotations

from datetime import timedelta

from disttrain.api import conditions as c
from disttrain.api import load_job
from disttrain.operator.core.state import Refusal
from disttrain.api.times import iso
from disttrain.operator.core.plan import decide
from disttrain.operator.core.pods import summarize_pod
from disttrain.render import render_pod

from .helpers import job as job_doc
from .helpers import written
from .plan_builders import NOW, POLICY, QUIET, at, cond, events, pod, run, state


def unschedulable(index: int, message: str, **spec):
    j, r, _ = load_job(job_doc(**spec))
    body = render_pod(j, r, index)
    body["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]}
    return summarize_pod(body)


def test_an_elastic_job_running_above_min_nodes_stays_running_beside_an_unschedulable_worker():
    spec = {"nodes": 2, "minNodes": 1, "maxNodes": 2, **QUIET}
    pods = [pod(0, **spec), unschedulable(1, "0/3 nodes are available: 3 Insufficient cpu.", **spec)]
    plan = run(state({"phase": "Running", "startTime": iso(NOW), "restarts": 0}, **spec), pods)
    assert written(plan)["phase"] == "Running"
    running = cond(plan, c.RUNNING)
    assert (running["status"], running["reason"]) == ("True", c.PODS_RUNNING)
    assert events(plan) == []


def test_a_new_scheduler_message_is_a_new_warning_and_the_same_one_is_not():
    spec = {"nodes": 1, "checkpoint": {"claimName": "ckpt"}, **QUIET}
    first = run(state({}, **spec), [unschedulable(0, "0/3 nodes: 3 Insufficient cpu.", **spec)])
    assert [e.reason for e in first.events] == [c.UNSCHEDULABLE]
    same = run(state(first.status, **spec), [unschedulable(0, "0/3 nodes: 3 Insufficient cpu.", **spec)], at(5))
    assert same.events == []
    other = run(state(first.status, **spec), [unschedulable(0, "0/4 nodes: 4 Insufficient memory.", **spec)], at(5))
    assert events(other) == [("Warning", c.UNSCHEDULABLE,
                              "demo-worker-0 cannot be scheduled: 0/4 nodes: 4 Insufficient memory.")]


def test_two_taken_names_are_named_together_and_a_new_holder_is_a_new_warning():
    spec = {"nodes": 2, **QUIET}
    taken = {"demo-worker-1": "Pod team-a/demo-worker-1 (uid b)", "demo-worker-0": "Pod team-a/demo-worker-0 (uid a)"}
    first = decide(state({}, **spec), [], NOW, POLICY, conflicts=taken)
    message = ("demo-worker-0 is taken by Pod team-a/demo-worker-0 (uid a); demo-worker-1 is taken by "
               "Pod team-a/demo-worker-1 (uid b): it is not owned by this job, so it is left alone; "
               "delete it, or rename the job")
    assert events(first) == [("Warning", c.NAME_TAKEN, message)]
    again = decide(state(first.status, **spec), [], at(5), POLICY, conflicts=taken)
    assert again.events == []
    moved = {**taken, "demo-worker-1": "Pod team-a/demo-worker-1 (uid c)"}
    changed = decide(state(first.status, **spec), [], at(5), POLICY, conflicts=moved)
    assert [e.reason for e in changed.events] == [c.NAME_TAKEN]


def test_name_conflict_creates_nothing_under_that_name_and_says_who_holds_it():
    st = state(nodes=2)
    plan = decide(st, [], NOW, POLICY, conflicts={"demo-worker-1": "pod demo-worker-1 (no owner)"})
    assert plan.create == [0]
    conflict = cond(plan, c.NAME_CONFLICT)
    assert conflict["status"] == "True" and "demo-worker-1 is taken by pod demo-worker-1" in conflict["message"]
    assert [e.reason for e in plan.events].count(c.NAME_TAKEN) == 1
    # The next pass with the same conflict posts no second Event.
    again = decide(state(plan.status, nodes=2), [pod(0, nodes=2)], NOW, POLICY,
                   conflicts={"demo-worker-1": "pod demo-worker-1 (no owner)"})
    assert c.NAME_TAKEN not in [e.reason for e in again.events]
    # Once the squatter is gone the condition clears and the worker is created.
    freed = decide(state(again.status, nodes=2), [pod(0, nodes=2)], NOW, POLICY)
    assert freed.create == [1] and cond(freed, c.NAME_CONFLICT)["status"] == "False"


def test_a_squatted_service_blocks_every_pod():
    plan = decide(state(nodes=2), [], NOW, POLICY, conflicts={"demo": "service demo (no owner)"})
    assert plan.create == []
    assert cond(plan, c.NAME_CONFLICT)["status"] == "True"


def test_refused_creation_is_a_condition_with_the_apis_words_and_one_event():
    refusal = Refusal(pod="demo-worker-0", code=403, reason="Forbidden",
                      message='pods "demo-worker-0" is forbidden: violates PodSecurity "restricted:latest"')
    plan = decide(state(nodes=1), [], NOW, POLICY, refusal=refusal)
    forbidden = cond(plan, c.POD_CREATION_FORBIDDEN)
    assert forbidden["status"] == "True" and forbidden["reason"] == "Forbidden"
    assert "violates PodSecurity" in forbidden["message"] and "403" in forbidden["message"]
    assert written(plan)["phase"] == "Pending"
    again = decide(state(plan.status, nodes=1), [], NOW + timedelta(seconds=5), POLICY, refusal=refusal)
    assert "Forbidden" not in [e.reason for e in again.events]
    allowed = decide(state(again.status, nodes=1), [pod(0, nodes=1, phase="Pending")], NOW, POLICY)
    assert cond(allowed, c.POD_CREATION_FORBIDDEN)["status"] == "False"


def test_no_refusal_adds_no_condition():
    assert cond(decide(state(nodes=1), [], NOW, POLICY), c.POD_CREATION_FORBIDDEN) is None


def test_unschedulable_pods_say_why_on_the_job():
    j, r, _ = load_job(job_doc(nodes=1))
    body = render_pod(j, r, 0)
    body["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/6 nodes are available: 6 Insufficient nvidia.com/gpu."}]}
    plan = decide(state(nodes=1), [summarize_pod(body)], NOW, POLICY)
    running = cond(plan, c.RUNNING)
    assert written(plan)["phase"] == "Pending"
    assert running["reason"] == c.UNSCHEDULABLE and "Insufficient nvidia.com/gpu" in running["message"]
    assert [e.reason for e in plan.events].count(c.UNSCHEDULABLE) == 1


def test_a_worker_waiting_for_a_missing_secret_says_which_on_the_job_and_fails_nothing():
    spec = {"nodes": 2, "checkpoint": {"uri": "s3://team-ckpt/run", "secretRef": {"name": "s3-creds"}}, **QUIET}
    j, r, _ = load_job(job_doc(**spec))
    waiting = []
    for index in (0, 1):
        body = render_pod(j, r, index)
        body["status"] = {"phase": "Pending", "containerStatuses": [{"name": "trainer", "state": {"waiting": {
            "reason": "CreateContainerConfigError", "message": 'secret "s3-creds" not found'}}}]}
        waiting.append(summarize_pod(body))
    plan = run(state({}, **spec), waiting)
    running = cond(plan, c.RUNNING)
    assert written(plan)["phase"] == "Pending" and plan.create == [] and plan.delete == []
    assert (running["status"], running["reason"]) == ("False", c.CONTAINER_CONFIG_ERROR)
    assert running["message"].startswith('demo-worker-0 cannot start: CreateContainerConfigError: secret "s3-creds" '
                                         "not found; create it in the job's namespace")
    assert [e.reason for e in plan.events] == [c.CONTAINER_CONFIG_ERROR]
    assert not written(plan).get("failures")  # waiting for a Secret is no failure of the job


def test_a_refused_creation_is_tried_again_later_each_time_up_to_half_a_minute():
    from disttrain.operator.core.plan import refusal_retry_seconds

    assert [refusal_retry_seconds(n) for n in (1, 2, 3, 4, 5, 6, 40)] == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert refusal_retry_seconds(0) == 0.0  # nothing refused yet: no wait
