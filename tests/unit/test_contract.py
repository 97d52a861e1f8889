"""The success contract and the observations the shell hands to plan.decide: the trainer's
report, ownership, refusals, squatters, unschedulable pods, a spec that stops validating."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from disttrain_operator import conditions as c
from disttrain_operator.api.names import CONTAINER_NAME
from disttrain_operator.plan import Refusal, decide, iso
from disttrain_operator.pods import summarize_pod
from disttrain_operator.render import render_pod
from disttrain_operator.api import load_job
from disttrain_operator.report import FINISHED, INTERRUPTED, TrainerReport, newest, parse_report
from disttrain_operator.settings import Settings

from .helpers import job as job_doc
from .helpers import written
from .test_plan import NOW, POLICY, cond, pod, state


def report_json(outcome=None, step=60, total=60, ckpt=60) -> str:
    return json.dumps({"step": step, "totalSteps": total, "loss": 2.5, "samplesPerSecond": 40.0,
                       "stepSeconds": 0.2, "worldSize": 2, "lastUpdateTime": iso(NOW), "outcome": outcome,
                       "checkpoint": {"step": ckpt, "time": iso(NOW), "path": f"/ck/step-{ckpt:08d}"}})


def ended(index, code, message=None, terminating=False, nodes=2, reason=None):
    """A worker pod that ended with `code` and the termination message `message`."""
    j, r, _ = load_job(job_doc(nodes=nodes))
    body = render_pod(j, r, index)
    terminated = {"exitCode": code, "reason": reason or ("Completed" if code == 0 else "Error")}
    if message is not None:
        terminated["message"] = message
    body["status"] = {"phase": "Succeeded" if code == 0 else "Failed",
                      "containerStatuses": [{"name": CONTAINER_NAME, "state": {"terminated": terminated}}]}
    if terminating:
        body["metadata"]["deletionTimestamp"] = iso(NOW)
    return summarize_pod(body)


# ---- the report -----------------------------------------------------------------------


def test_report_parses_status_and_termination_message_alike():
    final = parse_report(report_json(FINISHED))
    assert final.finished and final.step == 60 and final.step_seconds == 0.2
    assert written(final.checkpoint) == {"step": 60, "time": iso(NOW), "path": "/ck/step-00000060"}
    assert written(final.progress()) == {"step": 60, "totalSteps": 60, "percentComplete": "100%", "loss": 2.5,
                                "samplesPerSecond": 40.0}
    assert parse_report(json.loads(report_json())).outcome is None


@pytest.mark.parametrize("junk", ["Traceback (most recent call last): ...", "", "[1, 2]", b"\xff",
                                  '{"loss": 1}', '{"step": "x", "outcome": "Maybe"}'])
def test_anything_else_is_not_a_report_or_has_no_false_fields(junk):
    parsed = parse_report(junk)
    assert parsed is None or (parsed.step is None and parsed.outcome is None)


def test_non_finite_numbers_are_dropped():
    parsed = parse_report({"step": 3, "loss": float("nan"), "samplesPerSecond": float("inf")})
    assert parsed.loss is None and parsed.samples_per_second is None


def test_newest_report_is_the_furthest_step_and_a_final_one_wins_a_tie():
    running = TrainerReport(step=59)
    final = TrainerReport(step=60, outcome=FINISHED)
    assert newest(running, None, final) is final
    assert newest(TrainerReport(step=60), final) is final
    assert newest(None, None) is None


# ---- pods -----------------------------------------------------------------------------


def test_finished_needs_exit_0_no_deletion_and_a_finished_report():
    assert ended(0, 0, report_json(FINISHED)).finished
    assert ended(0, 0).finished  # a user's script: exit 0 without a signal
    interrupted = ended(0, 0, report_json(INTERRUPTED, step=11, total=100000))
    assert not interrupted.finished and interrupted.disrupted and interrupted.ended_early
    deleted = ended(0, 0, terminating=True)
    assert not deleted.finished and deleted.disrupted
    crashed = ended(0, 1, "Traceback ...")
    assert crashed.ended_early and not crashed.disrupted and crashed.report is None


def test_interrupted_failure_is_a_disruption_not_a_crash():
    p = ended(1, 1, report_json(INTERRUPTED, step=11, total=100))
    assert p.failed and p.disrupted


def test_owner_and_unschedulable_are_read_from_the_pod():
    j, r, _ = load_job(job_doc(nodes=1))
    body = render_pod(j, r, 0)
    body["metadata"]["uid"] = "pod-uid"
    body["metadata"]["ownerReferences"] = [{"kind": "DistributedTraining", "name": "demo", "uid": "job-uid",
                                           "controller": True}]
    body["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": '0/6 nodes are available: persistentvolumeclaim "ck" not found.'}]}
    info = summarize_pod(body)
    assert (info.uid, info.owner_uid) == ("pod-uid", "job-uid")
    assert "persistentvolumeclaim" in info.unschedulable


# ---- decide: the success contract -----------------------------------------------------


def test_a_graceful_deletion_never_makes_the_job_succeed():
    """Deleting worker-1 made every rank checkpoint and stop; worker-0 exits 0 with an
    Interrupted report (the old trainer's shape). The job recreates, it does not succeed."""
    st = state({"phase": "Running", "restarts": 0}, nodes=2)
    survivor = ended(0, 0, report_json(INTERRUPTED, step=11, total=100000, ckpt=11))
    plan = decide(st, [survivor], NOW, POLICY)
    assert written(plan)["phase"] != "Succeeded"
    assert (survivor.name, c.WORKER_DISRUPTED) in plan.delete
    assert plan.create == [1]  # the deleted worker comes back; worker-0 once it is gone
    assert written(plan).get("restarts", 0) == 0  # a disruption does not spend backoffLimit
    assert written(plan)["progress"]["step"] == 11 and written(plan)["checkpoint"]["step"] == 11


def test_success_takes_the_final_step_and_checkpoint_from_the_termination_message():
    st = state({"phase": "Running", "progress": {"step": 59}, "checkpoint": {"step": 40}}, nodes=2)
    stale_status = TrainerReport(step=59)
    pods = [ended(0, 0, report_json(FINISHED)), ended(1, 0, report_json(FINISHED))]
    plan = decide(st, pods, NOW, POLICY, report=stale_status)
    assert written(plan)["phase"] == "Succeeded"
    assert written(plan)["progress"]["step"] == 60 and written(plan)["progress"]["percentComplete"] == "100%"
    assert written(plan)["checkpoint"] == {"step": 60, "time": iso(NOW), "path": "/ck/step-00000060"}


def test_a_users_script_exiting_0_is_success():
    st = state({"phase": "Running"}, nodes=1)
    plan = decide(st, [ended(0, 0, nodes=1)], NOW, POLICY)
    assert written(plan)["phase"] == "Succeeded"


# ---- decide: trouble the operator cannot fix alone -------------------------------------


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


def test_a_running_job_whose_spec_stops_validating_keeps_its_pods():
    first = decide(state(nodes=2), [pod(0, nodes=2), pod(1, nodes=2)], NOW, POLICY)
    assert written(first)["phase"] == "Running"
    broken = state(first.status, nodes=2, env=[{"name": "RANK", "value": "0"}])
    plan = decide(broken, [pod(0, nodes=2), pod(1, nodes=2)], NOW, POLICY)
    assert plan.delete == [] and plan.create == []
    assert written(plan)["phase"] == "Running"
    invalid = cond(plan, c.SPEC_INVALID)
    assert invalid["status"] == "True" and "spec.env" in invalid["message"]
    assert written(plan)["resolved"]["worldSize"] == 2
    fixed = decide(state(plan.status, nodes=2), [pod(0, nodes=2), pod(1, nodes=2)], NOW, POLICY)
    assert cond(fixed, c.SPEC_INVALID)["status"] == "False" and written(fixed)["phase"] == "Running"


def test_wake_at_is_the_end_of_the_back_off():
    st = state({"phase": "Running"}, nodes=2)
    plan = decide(st, [pod(0, nodes=2), ended(1, 1, "Traceback")], NOW, POLICY)
    assert written(plan)["nextRestartTime"] == iso(NOW + timedelta(seconds=10))
    assert plan.wake_at == NOW + timedelta(seconds=10)


def test_wake_at_is_the_ttl_of_a_finished_job():
    done = {"phase": "Succeeded", "completionTime": iso(NOW)}
    plan = decide(state(done, ttlSecondsAfterFinished=30), [], NOW + timedelta(seconds=5), POLICY)
    assert plan.wake_at == NOW + timedelta(seconds=30.5) and not plan.delete_job


def test_finishing_schedules_the_ttl_deletion():
    st = state({"phase": "Running"}, nodes=1, ttlSecondsAfterFinished=5)
    plan = decide(st, [ended(0, 0, nodes=1)], NOW, POLICY)
    assert written(plan)["phase"] == "Succeeded" and plan.wake_at == NOW + timedelta(seconds=5.5)


def test_checkpoint_stale_uses_the_trainers_measured_step_time():
    st = state({"phase": "Running", "startTime": iso(NOW - timedelta(hours=2))}, nodes=1,
               checkpoint={"intervalSteps": 10})
    old = TrainerReport(step=500, step_seconds=0.5, checkpoint=parse_report(
        {"step": 10, "checkpoint": {"step": 10, "time": iso(NOW - timedelta(hours=1))}}).checkpoint)
    plan = decide(st, [pod(0, nodes=1, checkpoint={"intervalSteps": 10})], NOW, POLICY, report=old)
    stale = cond(plan, c.CHECKPOINT_STALE)
    assert stale["status"] == "True" and "every ~5s" in stale["message"]


# ---- settings -------------------------------------------------------------------------


def test_settings_read_once_from_the_environment():
    s = Settings.from_env({"DISTTRAIN_RESYNC_SECONDS": "2", "DISTTRAIN_API_BURST": "7",
                           "DISTTRAIN_OPERATOR_METRICS_PORT": "0"})
    assert (s.resync_seconds, s.api_burst, s.metrics_port) == (2.0, 7, 0)
    assert Settings.from_env({}) == Settings()


@pytest.mark.parametrize("env, says", [({"DISTTRAIN_API_QPS": "fast"}, "DISTTRAIN_API_QPS='fast'"),
                                       ({"DISTTRAIN_API_BURST": "0"}, "DISTTRAIN_API_BURST >= 1")])
def test_bad_settings_stop_with_the_variable_named(env, says):
    with pytest.raises(SystemExit, match=says):
        Settings.from_env(env)


def test_a_crash_beside_a_script_that_exited_0_is_recovered_not_a_success():
    st = state({"phase": "Running", "restarts": 0}, nodes=2)
    plan = decide(st, [ended(0, 0), ended(1, 1, "RuntimeError: boom")], NOW, POLICY)
    assert written(plan)["phase"] == "Restarting" and written(plan)["nextRestartTime"]
    assert "RuntimeError: boom" in " ".join(e.message for e in plan.events)


def test_a_crash_after_the_trainer_reported_finished_is_still_a_success():
    st = state({"phase": "Running"}, nodes=2)
    plan = decide(st, [ended(0, 0, report_json(FINISHED)), ended(1, 1, "Traceback ...")], NOW, POLICY)
    assert written(plan)["phase"] == "Succeeded"
