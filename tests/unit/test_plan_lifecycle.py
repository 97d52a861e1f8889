"""A job's life through plan.decide: it starts, runs, succeeds, is suspended and resumed,
runs out of its deadline or TTL; what is written, and when the next pass comes."""

from __future__ import annotations

import dataclasses

from datetime import timedelta

from disttrain.api import conditions as c
from disttrain.api.times import iso
from disttrain.operator.core.plan import decide
from disttrain.operator.core.writes import status_patch, status_write
from disttrain.api.report import FINISHED, INTERRUPTED, TrainerReport

from .helpers import written
from .plan_builders import NOW, POLICY, QUIET, RUNNING, at, cond, ended, pod, report_json, run, state


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
    assert written(plan)["workers"] == {"desired": 2, "active": 2, "running": 2, "ready": 2, "succeeded": 0,
                                        "failed": 0}


def test_partially_created_job_creates_only_the_missing_pods():
    plan = run(state(nodes=3), [pod(1, nodes=3, phase="Pending")])
    assert plan.create == [0, 2]


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
    assert not run(state(finished), []).delete_job  # unset: kept


def test_a_ttl_of_0_deletes_a_job_as_soon_as_it_has_said_it_finished():
    """The pass that finishes the job writes Succeeded (users see how it ended) and wakes
    half a second after its completionTime; that pass deletes it. Unset: never."""
    done = [pod(0, nodes=2, phase="Succeeded", exit_code=0), pod(1, nodes=2, phase="Succeeded", exit_code=0)]
    finishing = run(state({"phase": "Running"}, nodes=2, ttlSecondsAfterFinished=0), done)
    assert written(finishing)["phase"] == "Succeeded" and not finishing.delete_job
    assert finishing.wake_at == NOW + timedelta(milliseconds=500)
    later = NOW + timedelta(milliseconds=500)
    assert run(state(finishing.status, nodes=2, ttlSecondsAfterFinished=0), [], now=later).delete_job
    assert not run(state(finishing.status, nodes=2), [], now=later + timedelta(days=1)).delete_job


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


def test_running_with_at_least_min_nodes_in_elastic_jobs():
    spec = dict(minNodes=1, maxNodes=3)
    plan = run(state({}, nodes=3, **spec), [pod(0, nodes=3, **spec), pod(1, nodes=3, phase="Pending", **spec),
                                             pod(2, nodes=3, phase="Pending", **spec)])
    assert written(plan)["phase"] == "Running"


def test_the_worker_counts_say_what_the_running_condition_says():
    """One worker of three unschedulable (issue 70): status.workers counts the running pods
    the Running condition names, beside the active (pending or running) ones."""
    spec = dict(minNodes=2, maxNodes=3)
    plan = run(state({}, nodes=3, **spec), [pod(0, nodes=3, **spec), pod(1, nodes=3, **spec),
                                             pod(2, nodes=3, phase="Pending", **spec)])
    assert cond(plan, c.RUNNING)["message"] == "2 of 3 workers running (minNodes 2)"
    assert {k: written(plan)["workers"][k] for k in ("desired", "active", "running")} == {
        "desired": 3, "active": 3, "running": 2}


def test_condition_transition_time_moves_only_on_flips():
    first = run(state(nodes=1), [pod(0)])
    t0 = cond(first, c.RUNNING)["lastTransitionTime"]
    later = run(state(first.status, nodes=1), [pod(0)], NOW + timedelta(minutes=5))
    assert cond(later, c.RUNNING)["lastTransitionTime"] == t0
    # Nothing changed but the goodput's clock, which never makes a write of its own.
    assert set(status_patch(written(first), written(later))) == {"goodput"}
    assert status_write(first.status, later.status, since_last_write=300) == ({}, None)


def test_status_patch_writes_only_changed_fields():
    assert status_patch({"phase": "Running", "restarts": 1}, {"phase": "Running", "restarts": 2}) == {"restarts": 2}
    assert status_patch({"nextRestartTime": "x"}, {}) == {"nextRestartTime": None}


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


def test_clean_pod_policy_all_deletes_every_pod_left_once_not_already_going():
    spec = {"nodes": 2, "cleanPodPolicy": "All", **QUIET}
    st = {"phase": "Succeeded", "startTime": iso(at(-60)), "completionTime": iso(NOW), "restarts": 0}
    pods = [pod(0, phase="Succeeded", exit_code=0, **spec), pod(1, phase="Failed", exit_code=1, terminating=True, **spec)]
    plan = run(state(st, **spec), pods, at(5))
    assert plan.delete == [("demo-worker-0", "CleanPodPolicy")]
    assert written(plan)["phase"] == "Succeeded"


def test_success_of_a_user_script_takes_progress_from_the_last_status_report():
    spec = {"nodes": 1, **QUIET}
    st = {"phase": "Running", "startTime": iso(at(-60)), "restarts": 0}
    report = TrainerReport(step=90, total_steps=100, loss=1.5, step_seconds=0.5)
    plan = decide(state(st, **spec), [pod(0, phase="Succeeded", exit_code=0, **spec)], NOW, POLICY, report=report)
    assert written(plan)["phase"] == "Succeeded"
    # The report's progress, and the moment the operator first saw its step.
    assert plan.status.progress == dataclasses.replace(report.progress(), last_step_time=iso(NOW))


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


def test_suspending_during_a_back_off_of_a_job_that_never_ran():
    spec = {"nodes": 2, "suspend": True, **QUIET}
    st = {"phase": "Restarting", "startTime": iso(NOW), "restarts": 0, "nextRestartTime": iso(at(10))}
    pods = [pod(0, phase="Pending", ready=False, **spec), pod(1, phase="Failed", exit_code=1, **spec)]
    plan = run(state(st, **spec), pods, at(2))
    assert written(plan)["phase"] == "Suspended"
    assert "nextRestartTime" not in written(plan) and "startTime" not in written(plan)
    assert cond(plan, c.RUNNING) is None
    assert cond(plan, c.SUSPENDED)["status"] == "True"


def test_success_is_declared_only_when_no_worker_is_active():
    pods = [pod(0, nodes=3, phase="Succeeded", exit_code=0), pod(1, nodes=3), pod(2, nodes=3, phase="Pending")]
    plan = run(state(RUNNING, nodes=3), pods)
    assert written(plan)["phase"] == "Running" and cond(plan, c.SUCCEEDED) is None
    done = run(state(RUNNING, nodes=3), [pod(i, nodes=3, phase="Succeeded", exit_code=0) for i in range(3)])
    assert written(done)["phase"] == "Succeeded" and cond(done, c.SUCCEEDED)["status"] == "True"


def test_the_next_pass_comes_at_the_soonest_reason_to_look_and_never_in_the_past():
    from disttrain.operator.core.writes import SQUATTER_RECHECK_SECONDS, look_again_in

    assert look_again_in(resync=60) == 60
    assert look_again_in(resync=60, deferred_write=12.5) == 12.5
    assert look_again_in(resync=60, deferred_write=30, wake=7) == 7
    assert look_again_in(resync=60, wake=40, refusal_retry=4) == 4
    assert look_again_in(resync=60, squatters=True) == SQUATTER_RECHECK_SECONDS == 5
    assert look_again_in(resync=3, squatters=True) == 3
    assert look_again_in(resync=60, wake=-2) == 0  # a deadline already past: at once


def test_finished_needs_exit_0_no_deletion_and_a_finished_report():
    assert ended(0, 0, report_json(FINISHED)).finished
    assert ended(0, 0).finished  # a user's script: exit 0 without a signal
    interrupted = ended(0, 0, report_json(INTERRUPTED, step=11, total=100000))
    assert not interrupted.finished and interrupted.disrupted and interrupted.ended_early
    deleted = ended(0, 0, terminating=True)
    assert not deleted.finished and deleted.disrupted
    crashed = ended(0, 1, "Traceback ...")
    assert crashed.ended_early and not crashed.disrupted and crashed.report is None


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


def test_a_crash_after_the_trainer_reported_finished_is_still_a_success():
    st = state({"phase": "Running"}, nodes=2)
    plan = decide(st, [ended(0, 0, report_json(FINISHED)), ended(1, 1, "Traceback ...")], NOW, POLICY)
    assert written(plan)["phase"] == "Succeeded"


def test_a_pass_keeps_every_status_field_but_those_it_works_out_anew():
    """A status field added later lives across passes by itself: only RECOMPUTED_STATUS
    (each a real field) starts a pass empty."""
    from disttrain.api.status_types import DistributedTrainingStatus
    from disttrain.operator.core.plan import RECOMPUTED_STATUS, _carry_over

    names = {f.name for f in dataclasses.fields(DistributedTrainingStatus)}
    assert RECOMPUTED_STATUS < names
    old = DistributedTrainingStatus(**{name: object() for name in names - {"conditions", "restarts"}},
                                    conditions=[], restarts=3)
    carried = _carry_over(old)
    for name in names - RECOMPUTED_STATUS - {"conditions"}:
        assert getattr(carried, name) is getattr(old, name), name
    assert all(getattr(carried, name) is None for name in RECOMPUTED_STATUS)
    assert carried.conditions == [] and carried.conditions is not old.conditions  # steps edit their own list
