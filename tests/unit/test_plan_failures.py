"""Failures through plan.decide: crashes wait out a back-off within backoffLimit, disruptions
are recreated at once, a lost worker 0 restarts the round, a crash beside a success."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from disttrain.api import conditions as c
from disttrain.api import load_job
from disttrain.api.names import CONTAINER_NAME
from disttrain.api.times import iso
from disttrain.operator.core.plan import decide
from disttrain.operator.core.pods import summarize_pod
from disttrain.render import render_pod
from disttrain.api.report import INTERRUPTED

from .helpers import job as job_doc
from .helpers import written
from .plan_builders import (
    DISRUPTIONS,
    NOW,
    POLICY,
    QUIET,
    RUNNING,
    at,
    cond,
    ended,
    events,
    pod,
    report_json,
    run,
    state,
)


def test_failed_worker_waits_for_backoff_then_is_recreated_and_counted():
    running = {"phase": "Running", "startTime": iso(NOW), "restarts": 0}
    pods = [pod(0, nodes=2), pod(1, nodes=2, phase="Failed", exit_code=1)]
    first = run(state(running, nodes=2), pods)
    assert written(first)["phase"] == "Restarting" and first.delete == []
    assert written(first)["nextRestartTime"] == iso(NOW + timedelta(seconds=10))
    (failed,) = [e for e in first.events if e.reason == c.WORKER_FAILED]
    assert "demo-worker-1 failed: Error (exit code 1); recreating in 10s (restart 1 of backoffLimit 6)" == failed.message
    assert cond(first, c.RESTARTING)["status"] == "True"
    later = run(state(first.status, nodes=2), pods, NOW + timedelta(seconds=11))
    assert later.delete == [("demo-worker-1", c.WORKER_FAILED)]
    assert written(later)["restarts"] == 1 and later.restarted == 1
    assert "nextRestartTime" not in written(later)
    gone = run(state(later.status, nodes=2), pods[:1], NOW + timedelta(seconds=12))
    assert gone.create == [1] and written(gone)["phase"] == "Restarting"
    back = run(state(gone.status, nodes=2), [pod(0, nodes=2), pod(1, nodes=2)], NOW + timedelta(seconds=20))
    assert written(back)["phase"] == "Running"
    assert cond(back, c.RESTARTING)["status"] == "False"
    assert cond(back, c.RUNNING)["status"] == "True"


def test_backoff_grows_exponentially_and_is_capped():
    for restarts, delay in ((0, 10), (1, 20), (3, 80), (10, 300)):
        plan = run(state({"phase": "Running", "restarts": restarts}, backoffLimit=100),
                   [pod(0, phase="Failed", exit_code=1, backoffLimit=100)])
        assert written(plan)["nextRestartTime"] == iso(NOW + timedelta(seconds=delay))


def test_backoff_limit_exceeded_fails_the_job_and_cleans_running_pods():
    pods = [pod(0, nodes=2, backoffLimit=2), pod(1, nodes=2, phase="Failed", exit_code=137, reason="OOMKilled",
                                                  backoffLimit=2)]
    plan = run(state({"phase": "Running", "restarts": 2}, nodes=2, backoffLimit=2), pods)
    assert written(plan)["phase"] == "Failed" and plan.failed_reason == c.BACKOFF_LIMIT_EXCEEDED
    assert "OOMKilled (exit code 137)" in cond(plan, c.FAILED)["message"]
    assert written(plan)["completionTime"] == iso(NOW)
    assert plan.delete == [("demo-worker-0", "CleanPodPolicy")]  # Running policy: only active pods


def test_backoff_limit_zero_fails_on_first_failure():
    plan = run(state({"phase": "Running"}, backoffLimit=0), [pod(0, phase="Failed", exit_code=1, backoffLimit=0)])
    assert written(plan)["phase"] == "Failed"


def test_evicted_pod_is_recreated_at_once_without_spending_backoff():
    pods = [pod(0, nodes=2), pod(1, nodes=2, phase="Failed", disrupted=True)]
    plan = run(state({"phase": "Running", "restarts": 0}, nodes=2), pods)
    assert plan.delete == [("demo-worker-1", c.WORKER_DISRUPTED)]
    assert written(plan)["restarts"] == 0 and "nextRestartTime" not in written(plan)
    assert written(plan)["phase"] == "Restarting"


def test_rendezvous_host_loss_is_one_restart_round():
    # worker-0 (the c10d store) dies; the others fail moments later: one round, one count.
    st = {"phase": "Running", "restarts": 0}
    first = run(state(st, nodes=3), [pod(0, nodes=3, phase="Failed", exit_code=1), pod(1, nodes=3), pod(2, nodes=3)])
    pods = [pod(i, nodes=3, phase="Failed", exit_code=1) for i in range(3)]
    second = run(state(first.status, nodes=3), pods, NOW + timedelta(seconds=4))
    assert second.delete == []
    third = run(state(second.status, nodes=3), pods, NOW + timedelta(seconds=11))
    assert sorted(n for n, _ in third.delete) == ["demo-worker-0", "demo-worker-1", "demo-worker-2"]
    assert written(third)["restarts"] == 1


def test_deleted_worker_is_recreated_with_the_same_name():
    plan = run(state({"phase": "Running"}, nodes=2), [pod(0, nodes=2)])
    assert plan.create == [1]
    assert c.WORKER_DELETED in [e.reason for e in plan.events]


def test_losing_worker_0_restarts_every_worker_in_the_same_round():
    # The others would lose the c10d store and fail one by one; restart them together.
    pods = [pod(0, nodes=3, phase="Failed", exit_code=1), pod(1, nodes=3), pod(2, nodes=3)]
    first = run(state({"phase": "Running"}, nodes=3), pods)
    due = run(state(first.status, nodes=3), pods, NOW + timedelta(seconds=11))
    assert sorted(n for n, _ in due.delete) == ["demo-worker-0", "demo-worker-1", "demo-worker-2"]
    assert written(due)["restarts"] == 1


def test_losing_another_worker_restarts_only_that_worker():
    pods = [pod(0, nodes=3), pod(1, nodes=3, phase="Failed", exit_code=1), pod(2, nodes=3)]
    first = run(state({"phase": "Running"}, nodes=3), pods)
    due = run(state(first.status, nodes=3), pods, NOW + timedelta(seconds=11))
    assert due.delete == [("demo-worker-1", c.WORKER_FAILED)]


def test_workers_deleted_by_hand_while_running_are_recreated_with_one_warning_naming_them():
    spec = {"nodes": 3, **QUIET}
    st = {"phase": "Running", "startTime": iso(NOW), "restarts": 0, "workers": {"desired": 3}}
    plan = run(state(st, **spec), [pod(0, **spec)])
    assert plan.create == [1, 2]
    assert events(plan) == [("Warning", c.WORKER_DELETED,
                             "recreating demo-worker-1, demo-worker-2 (deleted outside the operator)")]


def test_success_beside_a_crash_ends_its_back_off_and_adds_no_running_condition_it_never_had():
    spec = {"nodes": 2}
    st = {"phase": "Restarting", "startTime": iso(at(-60)), "restarts": 0, "nextRestartTime": iso(at(5))}
    pods = [ended(0, 0, report_json("Finished")), pod(1, phase="Failed", exit_code=1, **spec)]
    plan = run(state(st, **spec), pods)
    assert written(plan)["phase"] == "Succeeded"
    assert "nextRestartTime" not in written(plan)
    assert cond(plan, c.RUNNING) is None and cond(plan, c.RESTARTING) is None


def test_crashes_in_one_window_are_named_together_in_one_warning():
    spec = {"nodes": 3, **QUIET}
    pods = [pod(0, **spec), pod(1, phase="Failed", exit_code=1, **spec), pod(2, phase="Failed", exit_code=137,
                                                                              reason="OOMKilled", **spec)]
    plan = run(state({"phase": "Running", "startTime": iso(NOW), "restarts": 0}, **spec), pods)
    assert events(plan) == [("Warning", c.WORKER_FAILED,
                             "demo-worker-1 failed: Error (exit code 1); demo-worker-2 failed: OOMKilled "
                             "(exit code 137); recreating in 10s (restart 1 of backoffLimit 6)")]


def test_losing_worker_0_restarts_the_others_but_not_a_pod_already_going():
    spec = {"nodes": 3, **QUIET}
    st = {"phase": "Restarting", "startTime": iso(NOW), "restarts": 0, "nextRestartTime": iso(NOW)}
    pods = [pod(0, phase="Failed", exit_code=1, **spec), pod(1, **spec), pod(2, terminating=True, **spec)]
    plan = run(state(st, **spec), pods)
    assert plan.delete == [("demo-worker-0", c.WORKER_FAILED), ("demo-worker-1", c.WORKER_FAILED)]
    assert ("Normal", c.WORKERS_RECREATED, "recreating demo-worker-0, demo-worker-1 (restart 1 of 6)") in events(plan)


def test_a_disrupted_pod_without_a_reason_is_said_to_be_disrupted_by_the_cluster():
    spec = {"nodes": 2, **QUIET}
    gone = dataclasses.replace(pod(1, phase="Failed", disrupted=True, **spec), reason="")
    plan = run(state({"phase": "Running", "startTime": iso(NOW), "restarts": 0}, **spec), [pod(0, **spec), gone])
    assert events(plan) == [("Warning", c.WORKER_DISRUPTED, "demo-worker-1 was disrupted by the cluster; "
                             "recreating it (does not count against backoffLimit)")]
    assert cond(plan, c.RESTARTING)["reason"] == c.WORKER_DISRUPTED


def test_a_crashed_pod_that_disappears_during_its_back_off_is_recreated_and_the_back_off_ends():
    spec = {"nodes": 2, **QUIET}
    st = {"phase": "Restarting", "startTime": iso(NOW), "restarts": 0, "nextRestartTime": iso(at(10))}
    plan = run(state(st, **spec), [pod(0, **spec)], at(2))
    assert "nextRestartTime" not in written(plan)
    assert plan.create == [1] and written(plan)["restarts"] == 0


def test_workers_coming_back_keep_the_reason_their_round_started_with():
    spec = {"nodes": 2, **QUIET}
    st = {"phase": "Running", "startTime": iso(NOW), "restarts": 0}
    evicted = run(state(st, **spec), [pod(0, **spec), pod(1, phase="Failed", disrupted=True, **spec)])
    assert cond(evicted, c.RESTARTING)["reason"] == c.WORKER_DISRUPTED
    coming_back = [pod(0, **spec), pod(1, phase="Pending", ready=False, **spec)]
    back = run(state(evicted.status, **spec), coming_back, at(1))
    assert written(back)["phase"] == "Restarting" and cond(back, c.RESTARTING)["reason"] == c.WORKER_DISRUPTED
    # a crash while they come back is a failure, whatever the round started with
    crashed = run(state(evicted.status, **spec), [pod(0, phase="Failed", exit_code=1, **spec), coming_back[1]], at(1))
    assert cond(crashed, c.RESTARTING)["reason"] == c.WORKER_FAILED
    # and a crash round's workers come back as WorkerFailed
    first = run(state(st, **spec), [pod(0, **spec), pod(1, phase="Failed", exit_code=1, **spec)])
    recreated = run(state(first.status, **spec), [pod(0, **spec), pod(1, phase="Failed", exit_code=1, **spec)], at(10))
    again = run(state(recreated.status, **spec), coming_back, at(11))
    assert written(again)["phase"] == "Restarting" and cond(again, c.RESTARTING)["reason"] == c.WORKER_FAILED


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


def test_a_worker_that_failed_after_another_exited_0_is_not_a_success():
    pods = [pod(0, nodes=2, phase="Succeeded", exit_code=0), pod(1, nodes=2, phase="Failed", exit_code=1)]
    plan = run(state(RUNNING, nodes=2), pods)
    assert written(plan)["phase"] != "Succeeded"
    assert cond(plan, c.SUCCEEDED) is None


def test_interrupted_failure_is_a_disruption_not_a_crash():
    p = ended(1, 1, report_json(INTERRUPTED, step=11, total=100))
    assert p.failed and p.disrupted


def test_a_crash_beside_a_script_that_exited_0_is_recovered_not_a_success():
    st = state({"phase": "Running", "restarts": 0}, nodes=2)
    plan = decide(st, [ended(0, 0), ended(1, 1, "RuntimeError: boom")], NOW, POLICY)
    assert written(plan)["phase"] == "Restarting" and written(plan)["nextRestartTime"]
    assert "RuntimeError: boom" in " ".join(e.message for e in plan.events)
