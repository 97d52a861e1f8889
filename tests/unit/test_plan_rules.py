"""Rules of plan.decide that the stories pass by: each test pins one rule whole (status,
conditions, Events, deletes, wake time) in the case that tells it apart from its near
misses. They come from the mutants of plan.py that survived every other test (issue 14):
a rule no test exercised, or exercised only where a wrong version gives the same answer.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from disttrain_operator import conditions as c
from disttrain_operator.api import load_job
from disttrain_operator.plan import decide, iso
from disttrain_operator.pods import summarize_pod
from disttrain_operator.render import render_pod
from disttrain_operator.api.types import CheckpointStatus
from disttrain_operator.report import TrainerReport

from .helpers import job as job_doc
from .helpers import written
from .test_contract import ended, report_json
from .test_plan import NOW, POLICY, cond, pod, run, state

# Without guardrail warnings (with more than one node; one node also needs a claim), so that
# the Events of a pass are only the rule's own.
QUIET = {"trainer": {"builtin": {}}}
# Two independent semantic errors: the validator reports both, joined by "; ".
TWO_ERRORS = {"nodes": 3, "maxNodes": 2, "env": [{"name": "MASTER_ADDR", "value": "x"}]}


def at(seconds: float):
    return NOW + timedelta(seconds=seconds)


def events(plan):
    return [(e.type, e.reason, e.message) for e in plan.events]


def unschedulable(index: int, message: str, **spec):
    j, r, _ = load_job(job_doc(**spec))
    body = render_pod(j, r, index)
    body["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]}
    return summarize_pod(body)


def two_error_messages() -> str:
    errors = state(**TWO_ERRORS).validation.errors
    assert len(errors) == 2
    return "; ".join(str(e) for e in errors)


# ---- workers deleted by hand, scaling, reshaping -------------------------------------


def test_workers_deleted_by_hand_while_running_are_recreated_with_one_warning_naming_them():
    spec = {"nodes": 3, **QUIET}
    st = {"phase": "Running", "startTime": iso(NOW), "restarts": 0, "workers": {"desired": 3}}
    plan = run(state(st, **spec), [pod(0, **spec)])
    assert plan.create == [1, 2]
    assert events(plan) == [("Warning", c.WORKER_DELETED,
                             "recreating demo-worker-1, demo-worker-2 (deleted outside the operator)")]


def test_scale_down_skips_pods_already_going_and_names_every_removed_worker():
    spec = {"nodes": 1, "minNodes": 1, "maxNodes": 4, **QUIET}
    pods = [pod(1, terminating=True, **spec), pod(0, **spec), pod(2, **spec), pod(3, **spec)]
    plan = run(state({"phase": "Running", "startTime": iso(NOW)}, **spec), pods)
    assert plan.delete == [("demo-worker-2", c.SCALED), ("demo-worker-3", c.SCALED)]
    assert events(plan) == [("Normal", c.SCALED, "scaled to 1 nodes: removing demo-worker-2, demo-worker-3")]


# ---- the deadline ---------------------------------------------------------------------


def test_deadline_fails_only_once_passed_and_the_operator_wakes_half_a_second_after_it():
    spec = {"nodes": 1, "activeDeadlineSeconds": 100, **QUIET}
    st = {"phase": "Running", "startTime": iso(NOW), "restarts": 0}
    on_it = run(state(st, **spec), [pod(0, **spec)], at(100))
    assert written(on_it)["phase"] == "Running" and on_it.failed_reason is None
    assert on_it.wake_at == at(100.5)
    after = run(state(st, **spec), [pod(0, **spec)], at(100.5))
    assert written(after)["phase"] == "Failed" and after.failed_reason == c.DEADLINE_EXCEEDED


def test_deadline_during_a_back_off_of_a_job_that_never_ran_ends_the_back_off_and_the_restart():
    spec = {"nodes": 2, "activeDeadlineSeconds": 150, "ttlSecondsAfterFinished": 30, **QUIET}
    first = run(state({}, **spec), [], at(-200))
    crashed = [pod(0, phase="Pending", ready=False, **spec), pod(1, phase="Failed", exit_code=1, **spec)]
    waiting = run(state(first.status, **spec), crashed, at(-100))
    assert written(waiting)["phase"] == "Restarting" and written(waiting)["nextRestartTime"] == iso(at(-90))
    assert cond(waiting, c.RUNNING) is None  # it never ran
    failed = run(state(waiting.status, **spec), crashed, NOW)
    assert written(failed)["phase"] == "Failed" and failed.failed_reason == c.DEADLINE_EXCEEDED
    assert "nextRestartTime" not in written(failed)
    assert cond(failed, c.RUNNING) is None
    restarting = cond(failed, c.RESTARTING)
    assert restarting["status"] == "False" and restarting["reason"] == c.DEADLINE_EXCEEDED
    assert restarting["lastTransitionTime"] == iso(NOW)
    assert failed.wake_at == at(30.5)  # the TTL


# ---- finished jobs --------------------------------------------------------------------


def test_clean_pod_policy_all_deletes_every_pod_left_once_not_already_going():
    spec = {"nodes": 2, "cleanPodPolicy": "All", **QUIET}
    st = {"phase": "Succeeded", "startTime": iso(at(-60)), "completionTime": iso(NOW), "restarts": 0}
    pods = [pod(0, phase="Succeeded", exit_code=0, **spec), pod(1, phase="Failed", exit_code=1, terminating=True, **spec)]
    plan = run(state(st, **spec), pods, at(5))
    assert plan.delete == [("demo-worker-0", "CleanPodPolicy")]
    assert written(plan)["phase"] == "Succeeded"


def test_success_beside_a_crash_ends_its_back_off_and_adds_no_running_condition_it_never_had():
    spec = {"nodes": 2}
    st = {"phase": "Restarting", "startTime": iso(at(-60)), "restarts": 0, "nextRestartTime": iso(at(5))}
    pods = [ended(0, 0, report_json("Finished")), pod(1, phase="Failed", exit_code=1, **spec)]
    plan = run(state(st, **spec), pods)
    assert written(plan)["phase"] == "Succeeded"
    assert "nextRestartTime" not in written(plan)
    assert cond(plan, c.RUNNING) is None and cond(plan, c.RESTARTING) is None


def test_success_of_a_user_script_takes_progress_from_the_last_status_report():
    spec = {"nodes": 1, **QUIET}
    st = {"phase": "Running", "startTime": iso(at(-60)), "restarts": 0}
    report = TrainerReport(step=90, total_steps=100, loss=1.5, step_seconds=0.5)
    plan = decide(state(st, **spec), [pod(0, phase="Succeeded", exit_code=0, **spec)], NOW, POLICY, report=report)
    assert written(plan)["phase"] == "Succeeded"
    assert plan.status.progress == report.progress()


def test_while_other_workers_exit_the_running_condition_says_training_finished():
    spec = {"nodes": 3}
    st = {"phase": "Running", "startTime": iso(at(-60)), "restarts": 0}
    plan = run(state(st, **spec), [ended(0, 0, report_json("Finished"), nodes=3), pod(1, **spec), pod(2, **spec)])
    assert written(plan)["phase"] == "Running" and plan.delete == []
    running = cond(plan, c.RUNNING)
    assert running["status"] == "True" and running["reason"] == c.PODS_RUNNING
    assert running["message"] == ("training finished (demo-worker-0 exited 0); waiting for "
                                  "demo-worker-1, demo-worker-2 to exit")
    assert running["lastTransitionTime"] == iso(NOW)  # it had not been Running before


# ---- invalid specs ----------------------------------------------------------------------


def test_a_spec_that_breaks_after_the_job_failed_warns_but_is_not_counted_as_a_new_failure():
    st = {"phase": "Failed", "startTime": iso(at(-60)), "completionTime": iso(at(-30)), "restarts": 6,
          "conditions": [{"type": c.FAILED, "status": "True", "reason": c.BACKOFF_LIMIT_EXCEEDED,
                          "message": "backoffLimit 6 reached", "lastTransitionTime": iso(at(-30))}]}
    plan = run(state(st, **TWO_ERRORS), [])
    assert plan.failed_reason is None
    assert events(plan) == [("Warning", c.INVALID_SPEC, two_error_messages())]
    assert written(plan)["completionTime"] == iso(at(-30))
    fresh = run(state({}, **TWO_ERRORS), [])
    assert fresh.failed_reason == c.INVALID_SPEC


def test_a_spec_that_breaks_outside_a_running_job_fails_it_and_removes_what_is_left():
    finished = {"phase": "Succeeded", "startTime": iso(at(-60)), "completionTime": iso(at(-30))}
    plan = run(state(finished, **TWO_ERRORS), [pod(0, nodes=3, maxNodes=3)])
    assert written(plan)["phase"] == "Failed"
    assert plan.delete == [("demo-worker-0", c.INVALID_SPEC)]
    running_without_pods = run(state({"phase": "Running", "startTime": iso(at(-60))}, **TWO_ERRORS), [])
    assert written(running_without_pods)["phase"] == "Failed"
    assert cond(running_without_pods, c.SPEC_INVALID) is None


def test_fixing_a_spec_that_failed_the_job_restarts_its_clock():
    broken = run(state({"phase": "Running", "startTime": iso(at(-3600)), "restarts": 0}, **TWO_ERRORS), [], at(-60))
    assert written(broken)["phase"] == "Failed" and written(broken)["startTime"] == iso(at(-3600))
    fixed = run(state(broken.status, nodes=2, **QUIET), [])
    assert written(fixed)["phase"] == "Pending" and fixed.create == [0, 1]
    assert written(fixed)["startTime"] == iso(NOW) and "completionTime" not in written(fixed)


def test_a_running_job_whose_spec_breaks_keeps_reporting_progress_and_its_size():
    spec = {"nodes": 3, "maxNodes": 3}
    checkpoint = CheckpointStatus(step=40, time=iso(at(-5)), path="/ck/step-40")
    report = TrainerReport(step=50, total_steps=100, loss=2.0, checkpoint=checkpoint)
    st = {"phase": "Running", "startTime": iso(at(-60)), "restarts": 0, "progress": {"step": 10},
          "workers": {"desired": 3, "active": 2}}
    pods = [pod(0, **spec), pod(1, **spec)]
    plan = decide(state(st, **TWO_ERRORS), pods, NOW, POLICY, report=report)
    assert written(plan)["phase"] == "Running" and plan.delete == [] and plan.create == []
    assert plan.status.progress == report.progress()
    assert plan.status.checkpoint == checkpoint
    assert written(plan)["workers"]["desired"] == 3
    assert cond(plan, c.SPEC_INVALID)["message"] == (
        "the running workers are kept, nothing new is created until the spec is fixed: " + two_error_messages())
    quiet = decide(state(st, **TWO_ERRORS), pods, NOW, POLICY, report=TrainerReport())
    assert written(quiet)["progress"] == {"step": 10}  # an empty report keeps what was known
    unknown_size = run(state({k: v for k, v in st.items() if k != "workers"}, **TWO_ERRORS), pods)
    assert written(unknown_size)["workers"]["desired"] == 2  # the pods it has


# ---- failures and disruptions -----------------------------------------------------------


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


# ---- phase and conditions ---------------------------------------------------------------


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


def test_suspending_during_a_back_off_of_a_job_that_never_ran():
    spec = {"nodes": 2, "suspend": True, **QUIET}
    st = {"phase": "Restarting", "startTime": iso(NOW), "restarts": 0, "nextRestartTime": iso(at(10))}
    pods = [pod(0, phase="Pending", ready=False, **spec), pod(1, phase="Failed", exit_code=1, **spec)]
    plan = run(state(st, **spec), pods, at(2))
    assert written(plan)["phase"] == "Suspended"
    assert "nextRestartTime" not in written(plan) and "startTime" not in written(plan)
    assert cond(plan, c.RUNNING) is None
    assert cond(plan, c.SUSPENDED)["status"] == "True"


def test_a_spec_without_warnings_is_valid_and_changed_warnings_are_announced_again():
    clean = run(state({}, nodes=2, **QUIET), [])
    validated = cond(clean, c.VALIDATED)
    assert (validated["reason"], validated["message"]) == (c.VALID, "spec is valid")
    warned = run(state({}, nodes=2), [])
    assert [w.reason for w in warned.new_warnings] == ["DefaultTrainer"]
    again = run(state(warned.status, nodes=2), [], at(5))
    assert again.new_warnings == [] and again.events == []
    more = run(state(warned.status, nodes=2, gpusPerNode=2, nprocPerNode=3), [], at(5))
    assert sorted(w.reason for w in more.new_warnings) == ["DefaultTrainer", "NprocClamped"]
    assert sorted(e.reason for e in more.events) == ["DefaultTrainer", "NprocClamped"]


# ---- the trainer's report and CheckpointStale ----------------------------------------------


CKPT = {"nodes": 1, "checkpoint": {"intervalSteps": 10}, **QUIET}


def test_a_pending_job_with_an_old_report_is_not_called_stale():
    st = {"phase": "Pending", "startTime": iso(at(-7200)), "restarts": 0}
    old = TrainerReport(step=500, step_seconds=0.5, checkpoint=CheckpointStatus(step=10, time=iso(at(-7200))))
    plan = decide(state(st, **CKPT), [pod(0, phase="Pending", ready=False, **CKPT)], NOW, POLICY, report=old)
    assert cond(plan, c.CHECKPOINT_STALE) is None


def test_step_time_from_samples_per_second_and_the_global_batch():
    # builtin batchSize 8 x 1 worker: 16 samples/s is 0.5 s a step, a checkpoint every ~5 s.
    st = {"phase": "Running", "startTime": iso(at(-7200)), "restarts": 0}
    report = TrainerReport(step=500, samples_per_second=16.0,
                           checkpoint=CheckpointStatus(step=10, time=iso(at(-3600))))
    plan = decide(state(st, **CKPT), [pod(0, **CKPT)], NOW, POLICY, report=report)
    stale = cond(plan, c.CHECKPOINT_STALE)
    assert (stale["status"], stale["reason"]) == ("True", c.CHECKPOINT_TOO_OLD)
    assert stale["message"].startswith("checkpoint of step 10, 3600s old; expected one every ~5s (intervalSteps 10)")


def test_no_checkpoint_since_the_start_is_stale_and_a_fresh_one_clears_it():
    st = {"phase": "Running", "startTime": iso(at(-3600)), "restarts": 0}
    none_yet = TrainerReport(step=500, step_seconds=0.5)
    stale = decide(state(st, **CKPT), [pod(0, **CKPT)], NOW, POLICY, report=none_yet)
    assert cond(stale, c.CHECKPOINT_STALE)["message"].startswith("no checkpoint yet, 3600s old; expected one every ~5s")
    fresh = TrainerReport(step=510, step_seconds=0.5, checkpoint=CheckpointStatus(step=510, time=iso(at(1))))
    cleared = decide(state(stale.status, **CKPT), [pod(0, **CKPT)], at(2), POLICY, report=fresh)
    after = cond(cleared, c.CHECKPOINT_STALE)
    assert (after["status"], after["reason"]) == ("False", c.CHECKPOINT_FRESH)
    assert after["message"].startswith("checkpoint of step 510, 1s old")


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
