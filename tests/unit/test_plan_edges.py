"""Edges of plan.decide that planted bugs slipped through (issue 14).

Written against today's decide(JobState, [PodInfo], now, Policy) through the helpers of
test_plan.py; each test states its rule in its name so it ports to a rewritten core.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from disttrain_operator import conditions as c
from disttrain_operator.api import load_job
from disttrain_operator.api.names import CONTAINER_NAME
from disttrain_operator.pods import summarize_pod
from disttrain_operator.render import render_pod

from .helpers import job as job_doc
from .helpers import written
from .test_plan import NOW, cond, iso, pod, run, state

RUNNING = {"phase": "Running", "startTime": iso(NOW), "restarts": 0}


def failed_pod(index: int, *, exit_code: int = 137, reason: str | None = None,
               disruption: str | None = None, **spec):
    """A Failed worker as the kubelet reports it; `disruption` adds a DisruptionTarget
    condition with that reason (what the scheduler, taint manager, eviction API or a
    node shutdown set since Kubernetes 1.26)."""
    j, r, _ = load_job(job_doc(**spec))
    body = render_pod(j, r, index)
    conditions = [{"type": "Ready", "status": "False"}]
    if disruption:
        conditions.append({"type": "DisruptionTarget", "status": "True", "reason": disruption})
    status = {"phase": "Failed", "conditions": conditions,
              "containerStatuses": [{"name": CONTAINER_NAME, "state": {"terminated": {
                  "exitCode": exit_code, "reason": "Error"}}}]}
    if reason:
        status["reason"] = reason
    body["status"] = status
    return summarize_pod(body)


# ---- back-off: recreated when the due time is reached, not one tick later -----------


def test_failed_worker_is_recreated_exactly_at_its_due_time():
    pods = [pod(0, nodes=2), pod(1, nodes=2, phase="Failed", exit_code=1)]
    first = run(state(RUNNING, nodes=2), pods)
    due = NOW + timedelta(seconds=10)
    assert written(first)["nextRestartTime"] == iso(due)
    early = run(state(first.status, nodes=2), pods, due - timedelta(seconds=1))
    assert early.delete == [] and written(early)["nextRestartTime"] == iso(due)
    on_time = run(state(first.status, nodes=2), pods, due)
    assert on_time.delete == [("demo-worker-1", c.WORKER_FAILED)]
    assert written(on_time)["restarts"] == 1 and "nextRestartTime" not in written(on_time)


# ---- disruptions never spend backoffLimit -----------------------------------------

DISRUPTIONS = [
    pytest.param({"disruption": "PreemptionByScheduler"}, id="DisruptionTarget-preempted-by-scheduler"),
    pytest.param({"disruption": "DeletionByTaintManager"}, id="DisruptionTarget-taint-manager"),
    pytest.param({"disruption": "EvictionByEvictionAPI"}, id="DisruptionTarget-eviction-api"),
    pytest.param({"disruption": "TerminationByKubelet", "reason": "Terminated"}, id="node-shutdown"),
    pytest.param({"reason": "Shutdown"}, id="graceful-node-shutdown"),
    pytest.param({"reason": "Preempting"}, id="preempted-by-kubelet"),
    pytest.param({"reason": "Evicted"}, id="evicted"),
]


@pytest.mark.parametrize("how", DISRUPTIONS)
def test_disrupted_worker_is_recreated_at_once_without_spending_backoff(how):
    pods = [pod(0, nodes=2), failed_pod(1, nodes=2, **how)]
    assert pods[1].disrupted
    plan = run(state(RUNNING, nodes=2, backoffLimit=0), pods)
    assert written(plan)["phase"] == "Restarting"
    assert plan.delete == [("demo-worker-1", c.WORKER_DISRUPTED)]
    assert written(plan)["restarts"] == 0 and "nextRestartTime" not in written(plan)
    assert plan.failed_reason is None
    reasons = [e.reason for e in plan.events]
    assert c.WORKER_DISRUPTED in reasons and c.WORKER_FAILED not in reasons


def test_a_crash_with_a_disruption_condition_that_is_not_true_is_a_failure():
    crashed = failed_pod(1, nodes=2, exit_code=1)
    assert not crashed.disrupted
    plan = run(state(RUNNING, nodes=2, backoffLimit=0), [pod(0, nodes=2), crashed])
    assert written(plan)["phase"] == "Failed" and plan.failed_reason == c.BACKOFF_LIMIT_EXCEEDED


# ---- success needs every worker to finish ---------------------------------------


def test_a_worker_that_failed_after_another_exited_0_is_not_a_success():
    pods = [pod(0, nodes=2, phase="Succeeded", exit_code=0), pod(1, nodes=2, phase="Failed", exit_code=1)]
    plan = run(state(RUNNING, nodes=2), pods)
    assert written(plan)["phase"] != "Succeeded"
    assert cond(plan, c.SUCCEEDED) is None


def test_success_is_declared_only_when_no_worker_is_active():
    pods = [pod(0, nodes=3, phase="Succeeded", exit_code=0), pod(1, nodes=3), pod(2, nodes=3, phase="Pending")]
    plan = run(state(RUNNING, nodes=3), pods)
    assert written(plan)["phase"] == "Running" and cond(plan, c.SUCCEEDED) is None
    done = run(state(RUNNING, nodes=3), [pod(i, nodes=3, phase="Succeeded", exit_code=0) for i in range(3)])
    assert written(done)["phase"] == "Succeeded" and cond(done, c.SUCCEEDED)["status"] == "True"


def test_the_next_pass_comes_at_the_soonest_reason_to_look_and_never_in_the_past():
    from disttrain_operator.plan import SQUATTER_RECHECK_SECONDS, look_again_in

    assert look_again_in(resync=60) == 60
    assert look_again_in(resync=60, deferred_write=12.5) == 12.5
    assert look_again_in(resync=60, deferred_write=30, wake=7) == 7
    assert look_again_in(resync=60, wake=40, refusal_retry=4) == 4
    assert look_again_in(resync=60, squatters=True) == SQUATTER_RECHECK_SECONDS == 5
    assert look_again_in(resync=3, squatters=True) == 3
    assert look_again_in(resync=60, wake=-2) == 0  # a deadline already past: at once
