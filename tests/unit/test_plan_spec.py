"""The spec through plan.decide: invalid, fixed, with guardrail warnings, broken while
running, scaled (elastic or not), its worker template changed, its training template not
there yet."""

from __future__ import annotations

import dataclasses

from disttrain.api import conditions as c
from disttrain.api.status_types import CheckpointStatus
from disttrain.api.template_resolution import choose
from disttrain.api.validate import Validation
from disttrain.operator.core.state import JobState
from disttrain.api.times import iso
from disttrain.operator.core.plan import decide
from disttrain.api.report import TrainerReport

from .helpers import written
from .plan_builders import NOW, POLICY, QUIET, TWO_ERRORS, at, cond, events, pod, run, state


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


def waiting_for_template(status=None) -> JobState:
    """A job whose templateRef names a ClusterTrainingTemplate `cpu` that does not exist
    (yet): what the controller hands decide (operator/template_watch.py)."""
    _, missing = choose({"name": "cpu"}, "team-a", None, lambda *_: None)
    return JobState(name="demo", namespace="team-a", generation=1, status=status or state().status,
                    validation=Validation(None, None, [missing]))


def test_a_job_whose_template_does_not_exist_yet_waits_pending_never_failed():
    plan = run(waiting_for_template(), [])
    assert written(plan)["phase"] == "Pending" and plan.create == [] and plan.failed_reason is None
    said = cond(plan, c.RUNNING)
    assert (said["status"], said["reason"]) == ("False", c.TEMPLATE_NOT_FOUND)
    assert said["message"].startswith("spec.templateRef.name: names no ClusterTrainingTemplate (got 'cpu')")
    assert said["message"].endswith("the job starts once it exists")
    assert cond(plan, c.FAILED) is None and "completionTime" not in written(plan)
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", c.TEMPLATE_NOT_FOUND)]
    again = run(dataclasses.replace(waiting_for_template(), status=plan.status), [])
    assert again.events == [] and written(again)["phase"] == "Pending"  # said once


def test_a_job_failed_for_a_missing_template_by_an_older_operator_waits_again():
    before = run(state(nodes=2, env=[{"name": "RANK", "value": "0"}]), []).status  # Failed, InvalidSpec
    plan = run(waiting_for_template(before), [])
    assert written(plan)["phase"] == "Pending" and "completionTime" not in written(plan)
    assert (cond(plan, c.FAILED)["status"], cond(plan, c.FAILED)["reason"]) == ("False", c.TEMPLATE_NOT_FOUND)


def test_guardrail_warnings_become_events_once():
    plan = run(state(strategy="ddp"), [])
    reasons = [e.reason for e in plan.events]
    assert "DDPSingleDevice" in reasons
    assert cond(plan, c.VALIDATED)["reason"] == c.VALID_WITH_WARNINGS
    assert "DDP requires multiple devices" in cond(plan, c.VALIDATED)["message"]
    assert [w.reason for w in plan.new_warnings] == reasons
    again = run(state(plan.status, strategy="ddp"), [])
    assert again.events == [] and again.new_warnings == []


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


def two_error_messages() -> str:
    errors = state(**TWO_ERRORS).validation.errors
    assert len(errors) == 2
    return "; ".join(str(e) for e in errors)


def test_scale_down_skips_pods_already_going_and_names_every_removed_worker():
    spec = {"nodes": 1, "minNodes": 1, "maxNodes": 4, **QUIET}
    pods = [pod(1, terminating=True, **spec), pod(0, **spec), pod(2, **spec), pod(3, **spec)]
    plan = run(state({"phase": "Running", "startTime": iso(NOW)}, **spec), pods)
    assert plan.delete == [("demo-worker-2", c.SCALED), ("demo-worker-3", c.SCALED)]
    assert events(plan) == [("Normal", c.SCALED, "scaled to 1 nodes: removing demo-worker-2, demo-worker-3")]


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
    # The step moved (10 -> 50) at this pass.
    assert plan.status.progress == dataclasses.replace(report.progress(), last_step_time=iso(NOW))
    assert plan.status.checkpoint == checkpoint
    assert written(plan)["workers"]["desired"] == 3
    assert cond(plan, c.SPEC_INVALID)["message"] == (
        "the running workers are kept, nothing new is created until the spec is fixed: " + two_error_messages())
    quiet = decide(state(st, **TWO_ERRORS), pods, NOW, POLICY, report=TrainerReport())
    assert written(quiet)["progress"] == {"step": 10}  # an empty report keeps what was known
    unknown_size = run(state({k: v for k, v in st.items() if k != "workers"}, **TWO_ERRORS), pods)
    assert written(unknown_size)["workers"]["desired"] == 2  # the pods it has


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
