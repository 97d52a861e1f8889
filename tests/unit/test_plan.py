"""The reconcile decision (plan.decide) as table tests: no cluster, no clock."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from disttrain_operator import conditions as c
from disttrain_operator.api import load_job, validate_document
from disttrain_operator.api.names import CONTAINER_NAME
from disttrain_operator.plan import JobState, Policy, decide, iso, status_patch
from disttrain_operator.pods import summarize_pod
from disttrain_operator.render import render_pod

from .helpers import job as job_doc
from .helpers import typed, written

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=timezone.utc)
POLICY = Policy(backoff_base_seconds=10, backoff_max_seconds=300)


def state(status=None, **spec):
    doc = job_doc(**spec)
    return JobState(name="demo", namespace="team-a", generation=3, status=typed(status),
                    validation=validate_document(doc))


def pod(index, phase="Running", ready=True, exit_code=None, reason=None, terminating=False,
        disrupted=False, **spec):
    """A pod as the API server would report it, rendered from the same spec."""
    j, r, _ = load_job(job_doc(**spec))
    body = render_pod(j, r, index)
    status = {"phase": phase, "podIP": f"10.0.0.{index}",
              "conditions": [{"type": "Ready", "status": "True" if ready and phase == "Running" else "False"}]}
    if exit_code is not None:
        status["containerStatuses"] = [{"name": CONTAINER_NAME, "state": {"terminated": {
            "exitCode": exit_code, "reason": reason or ("Completed" if exit_code == 0 else "Error")}}}]
    if disrupted:
        status["reason"] = "Evicted"
    if terminating:
        body["metadata"]["deletionTimestamp"] = iso(NOW)
    body["status"] = status
    return summarize_pod(body)


def run(st, pods, now=NOW):
    return decide(st, pods, now, POLICY)


def cond(plan, type_):
    """A condition of the plan's status as written (JSON), or None."""
    found = c.get_condition(plan.status.conditions, type_)
    return written(found) if found is not None else None


def test_new_job_creates_service_and_every_worker():
    plan = run(state(nodes=3), [])
    assert plan.create == [0, 1, 2] and plan.create_service
    assert plan.delete == []
    assert written(plan)["phase"] == "Pending"
    assert written(plan)["startTime"] == iso(NOW)
    assert written(plan)["resolved"]["worldSize"] == 3
    assert written(plan)["observedGeneration"] == 3
    assert cond(plan, c.VALIDATED)["status"] == "True"


def test_rerun_with_all_pods_present_creates_nothing():
    plan = run(state(nodes=2), [pod(0, nodes=2), pod(1, nodes=2)])
    assert plan.create == [] and plan.delete == []
    assert written(plan)["phase"] == "Running"
    assert plan.became_running
    assert written(plan)["workers"] == {"desired": 2, "active": 2, "ready": 2, "succeeded": 0, "failed": 0}


def test_partially_created_job_creates_only_the_missing_pods():
    plan = run(state(nodes=3), [pod(1, nodes=3, phase="Pending")])
    assert plan.create == [0, 2]


def test_invalid_spec_fails_creates_nothing_and_warns():
    st = state(nodes=2, env=[{"name": "RANK", "value": "0"}])
    plan = run(st, [])
    assert plan.create == [] and written(plan)["phase"] == "Failed"
    assert cond(plan, c.VALIDATED)["reason"] == c.INVALID_SPEC
    assert "spec.env[0].name: is reserved" in cond(plan, c.FAILED)["message"]
    assert [e.reason for e in plan.events] == [c.INVALID_SPEC]
    assert plan.failed_reason == c.INVALID_SPEC
    again = run(JobState(name=st.name, namespace=st.namespace, generation=3, status=plan.status,
                         validation=st.validation), [])
    assert again.events == [] and again.failed_reason is None  # no repeated events


def test_fixing_an_invalid_spec_starts_the_job():
    bad = run(state(nodes=2, env=[{"name": "RANK", "value": "0"}]), [])
    plan = run(state(bad.status, nodes=2), [])
    assert plan.create == [0, 1] and written(plan)["phase"] == "Pending"
    assert cond(plan, c.FAILED)["status"] == "False"


def test_guardrail_warnings_become_events_once():
    plan = run(state(strategy="ddp"), [])
    reasons = [e.reason for e in plan.events]
    assert "DDPSingleDevice" in reasons
    assert cond(plan, c.VALIDATED)["reason"] == c.VALID_WITH_WARNINGS
    assert "DDP requires multiple devices" in cond(plan, c.VALIDATED)["message"]
    assert [w.reason for w in plan.new_warnings] == reasons
    again = run(state(plan.status, strategy="ddp"), [])
    assert again.events == [] and again.new_warnings == []


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


def test_success_waits_for_other_workers_then_cleans_up():
    pods = [pod(0, nodes=2, phase="Succeeded", exit_code=0), pod(1, nodes=2)]
    waiting = run(state({"phase": "Running"}, nodes=2), pods)
    assert written(waiting)["phase"] == "Running" and waiting.create == [] and waiting.delete == []
    done = run(state({"phase": "Running"}, nodes=2, cleanPodPolicy="All"),
               [pod(0, nodes=2, phase="Succeeded", exit_code=0), pod(1, nodes=2, phase="Succeeded", exit_code=0)])
    assert written(done)["phase"] == "Succeeded" and written(done)["completionTime"] == iso(NOW)
    assert cond(done, c.SUCCEEDED)["status"] == "True"
    assert sorted(n for n, _ in done.delete) == ["demo-worker-0", "demo-worker-1"]


def test_finished_jobs_are_left_alone_until_their_ttl():
    finished = {"phase": "Succeeded", "completionTime": iso(NOW - timedelta(seconds=30))}
    plan = run(state(finished, ttlSecondsAfterFinished=60), [])
    assert not plan.delete_job and plan.create == []
    assert run(state(finished, ttlSecondsAfterFinished=30), []).delete_job
    assert not run(state(finished), []).delete_job


def test_suspend_deletes_pods_and_resume_recreates_them():
    pods = [pod(0, nodes=2), pod(1, nodes=2)]
    suspended = run(state({"phase": "Running", "startTime": iso(NOW)}, nodes=2, suspend=True), pods)
    assert sorted(n for n, _ in suspended.delete) == ["demo-worker-0", "demo-worker-1"]
    assert written(suspended)["phase"] == "Suspended" and "startTime" not in written(suspended)
    assert cond(suspended, c.SUSPENDED)["status"] == "True"
    resumed = run(state(suspended.status, nodes=2), [])
    assert resumed.create == [0, 1] and written(resumed)["phase"] == "Pending"
    assert cond(resumed, c.SUSPENDED)["status"] == "False"
    assert c.JOB_RESUMED in [e.reason for e in resumed.events]


def test_active_deadline_fails_the_job():
    st = {"phase": "Running", "startTime": iso(NOW - timedelta(seconds=61))}
    plan = run(state(st, activeDeadlineSeconds=60), [pod(0, activeDeadlineSeconds=60)])
    assert written(plan)["phase"] == "Failed" and plan.failed_reason == c.DEADLINE_EXCEEDED
    assert plan.delete == [("demo-worker-0", "CleanPodPolicy")]


def test_elastic_scale_up_adds_workers_without_touching_running_ones():
    spec = dict(minNodes=2, maxNodes=4)
    plan = run(state({"phase": "Running"}, nodes=3, **spec), [pod(0, nodes=2, **spec), pod(1, nodes=2, **spec)])
    assert plan.create == [2] and plan.delete == []


def test_elastic_scale_down_removes_the_highest_workers():
    spec = dict(minNodes=2, maxNodes=4)
    pods = [pod(i, nodes=4, **spec) for i in range(4)]
    plan = run(state({"phase": "Running"}, nodes=2, **spec), pods)
    assert sorted(plan.delete) == [("demo-worker-2", c.SCALED), ("demo-worker-3", c.SCALED)]
    assert written(plan)["phase"] == "Running"


def test_fixed_size_scale_replaces_workers_with_the_new_world_size():
    plan = run(state({"phase": "Running"}, nodes=3), [pod(0, nodes=2), pod(1, nodes=2)])
    assert sorted(plan.delete) == [("demo-worker-0", c.SPEC_CHANGED), ("demo-worker-1", c.SPEC_CHANGED)]
    assert plan.create == [2]


def test_running_with_at_least_min_nodes_in_elastic_jobs():
    spec = dict(minNodes=1, maxNodes=3)
    plan = run(state({}, nodes=3, **spec), [pod(0, nodes=3, **spec), pod(1, nodes=3, phase="Pending", **spec),
                                             pod(2, nodes=3, phase="Pending", **spec)])
    assert written(plan)["phase"] == "Running"


def test_deleted_worker_is_recreated_with_the_same_name():
    plan = run(state({"phase": "Running"}, nodes=2), [pod(0, nodes=2)])
    assert plan.create == [1]
    assert c.WORKER_DELETED in [e.reason for e in plan.events]


def test_condition_transition_time_moves_only_on_flips():
    first = run(state(nodes=1), [pod(0)])
    t0 = cond(first, c.RUNNING)["lastTransitionTime"]
    later = run(state(first.status, nodes=1), [pod(0)], NOW + timedelta(minutes=5))
    assert cond(later, c.RUNNING)["lastTransitionTime"] == t0
    assert status_patch(written(first), written(later)) == {}  # nothing changed: no write


def test_status_patch_writes_only_changed_fields():
    assert status_patch({"phase": "Running", "restarts": 1}, {"phase": "Running", "restarts": 2}) == {"restarts": 2}
    assert status_patch({"nextRestartTime": "x"}, {}) == {"nextRestartTime": None}


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
