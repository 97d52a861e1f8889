"""Whole lives of jobs through plan.decide, every pass pinned whole: status (phase,
conditions with their reasons and messages, counters, times), Events, what is created and
deleted, when to look again. Each pass's status feeds the next, as in the operator.

The other plan tests assert the decision that matters in each case; these pin everything a
user sees on the way (`kubectl get/describe dt`, Events), so a changed word, reason or
timestamp shows up as a diff of tests/unit/golden/plan_stories.json. After an intended
change: DISTTRAIN_UPDATE_GOLDEN=1 pytest tests/unit/test_plan_stories.py, then read the diff.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable

import pytest
from disttrain.operator.core.state import JobState, Plan, Refusal
from disttrain.api.times import iso
from disttrain.operator.core.plan import decide
from disttrain.api.report import INTERRUPTED, TrainerReport, parse_report
from disttrain.api.template_resolution import choose
from disttrain.api.validate import Validation

from .golden import Golden
from .helpers import typed, written
from .plan_builders import NOW, POLICY, ended, pod, report_json, state

GOLDEN = Golden("plan_stories")


class Story:
    """Passes of one job: each one sees the status the previous one wrote."""

    def __init__(self, **spec: Any) -> None:
        self.spec, self.status, self.passes = spec, typed(), []

    def step(self, label: str, pods: list, seconds: float = 0, spec: dict | None = None,
             validation: Validation | None = None, **observed: Any) -> Plan:
        job = state(self.status, **(spec if spec is not None else self.spec))
        plan = decide(JobState(job.name, job.namespace, job.generation, self.status, validation or job.validation),
                      pods, NOW + timedelta(seconds=seconds), POLICY, **observed)
        self.status = plan.status
        self.passes.append({"pass": label, "plan": as_json(plan)})
        return plan


def as_json(plan: Plan) -> dict[str, Any]:
    return {"status": written(plan), "create": plan.create, "delete": [list(d) for d in plan.delete],
            "createService": plan.create_service, "events": [[e.type, e.reason, e.message] for e in plan.events],
            "deleteJob": plan.delete_job, "newWarnings": [w.reason for w in plan.new_warnings],
            "restarted": plan.restarted, "failedReason": plan.failed_reason, "becameRunning": plan.became_running,
            "wakeAt": iso(plan.wake_at) if plan.wake_at else None}


def two_workers_succeed() -> Story:
    s = Story(nodes=2, ttlSecondsAfterFinished=60)
    s.step("created", [])
    s.step("pods pending", [pod(i, nodes=2, phase="Pending", ready=False) for i in range(2)], 1)
    s.step("pods running", [pod(i, nodes=2) for i in range(2)], 5)
    s.step("worker-0 finished, worker-1 still running",
           [ended(0, 0, report_json("Finished")), pod(1, nodes=2)], 60)
    s.step("both finished", [ended(0, 0, report_json("Finished")), ended(1, 0, report_json("Finished"))], 61)
    s.step("before the TTL", [], 90)
    s.step("after the TTL", [], 122)
    return s


def a_worker_fails_and_comes_back() -> Story:
    s = Story(nodes=2, backoffLimit=3)
    s.step("running", [pod(i, nodes=2) for i in range(2)])
    failed = [pod(0, nodes=2), ended(1, 1, "Traceback (most recent call last): boom")]
    s.step("worker-1 failed", failed, 10)
    s.step("still backing off", failed, 15)
    s.step("back-off over", failed, 21)
    s.step("worker-1 gone", [pod(0, nodes=2)], 22)
    s.step("worker-1 back", [pod(i, nodes=2) for i in range(2)], 30)
    return s


def the_backoff_limit_runs_out() -> Story:
    s = Story(nodes=2, backoffLimit=1)
    s.step("running", [pod(i, nodes=2, backoffLimit=1) for i in range(2)])
    oom = [pod(0, nodes=2, backoffLimit=1), ended(1, 137, reason="OOMKilled")]
    s.step("first failure", oom, 5)
    s.step("back-off over", oom, 16)
    s.step("recreated", [pod(0, nodes=2, backoffLimit=1)], 17)
    s.step("running again", [pod(i, nodes=2, backoffLimit=1) for i in range(2)], 20)
    s.step("second failure: the limit is spent", oom, 40)
    s.step("the job stays failed", [], 50)
    return s


def suspended_and_resumed() -> Story:
    s = Story(nodes=2)
    s.step("running", [pod(i, nodes=2) for i in range(2)])
    s.step("suspended", [pod(i, nodes=2) for i in range(2)], 10, spec={"nodes": 2, "suspend": True})
    s.step("pods gone", [], 20, spec={"nodes": 2, "suspend": True})
    s.step("resumed", [], 30)
    s.step("running again", [pod(i, nodes=2) for i in range(2)], 40)
    return s


def an_invalid_spec_then_fixed() -> Story:
    s = Story(nodes=2, env=[{"name": "RANK", "value": "0"}])
    s.step("invalid", [])
    s.step("still invalid", [], 5)
    s.spec = {"nodes": 2}
    s.step("fixed", [], 10)
    return s


def a_template_that_comes_later() -> Story:
    """The job names a ClusterTrainingTemplate not created yet: it waits Pending, then starts."""
    s = Story(nodes=2)
    _, missing = choose({"name": "cpu"}, "team-a", None, lambda *_: None)
    s.step("its template not there yet", [], validation=Validation(None, None, [missing]))
    s.step("still waiting", [], 5, validation=Validation(None, None, [missing]))
    s.step("the template created", [], 10)
    s.step("pods running", [pod(i, nodes=2) for i in range(2)], 15)
    return s


def the_spec_breaks_while_running() -> Story:
    s = Story(nodes=2)
    s.step("running", [pod(i, nodes=2) for i in range(2)])
    s.step("spec broken", [pod(i, nodes=2) for i in range(2)], 5,
           spec={"nodes": 2, "env": [{"name": "WORLD_SIZE", "value": "9"}]})
    s.step("spec fixed", [pod(i, nodes=2) for i in range(2)], 10)
    return s


def names_taken_then_freed() -> Story:
    s = Story(nodes=2)
    taken = {"demo-worker-1": "pod demo-worker-1 (no owner)"}
    s.step("worker-1's name taken", [], conflicts=taken)
    s.step("still taken", [pod(0, nodes=2)], 5, conflicts=taken)
    s.step("freed", [pod(0, nodes=2)], 10)
    s.step("the Service name taken", [], 15, conflicts={"demo": "service demo (no owner)"})
    return s


def creation_refused_then_allowed() -> Story:
    s = Story(nodes=1)
    refusal = Refusal(pod="demo-worker-0", code=403, reason="Forbidden",
                      message='pods "demo-worker-0" is forbidden: exceeded quota: gpu, requested: 1, limited: 0')
    s.step("refused", [], refusal=refusal)
    s.step("refused again", [], 5, refusal=refusal)
    s.step("allowed", [pod(0, nodes=1, phase="Pending", ready=False)], 10)
    return s


def disruptions_spend_no_backoff() -> Story:
    s = Story(nodes=2)
    s.step("running", [pod(i, nodes=2) for i in range(2)])
    s.step("worker-1 evicted", [pod(0, nodes=2), pod(1, nodes=2, phase="Failed", disrupted=True)], 5)
    s.step("worker-1 deleted gracefully: worker-0 stops with a checkpoint",
           [ended(0, 0, report_json(INTERRUPTED, step=11, total=100000, ckpt=11))], 6)
    s.step("both back", [pod(i, nodes=2) for i in range(2)], 20)
    return s


def progress_and_a_stale_checkpoint() -> Story:
    s = Story(nodes=1, checkpoint={"intervalSteps": 10}, activeDeadlineSeconds=7200)
    running = [pod(0, nodes=1, checkpoint={"intervalSteps": 10})]
    s.step("created", [])
    s.step("running", running, 5)
    fresh = parse_report({"step": 20, "totalSteps": 1000, "loss": 3.25, "samplesPerSecond": 64.0,
                          "stepSeconds": 0.5, "worldSize": 1, "lastUpdateTime": iso(NOW + timedelta(seconds=10)),
                          "checkpoint": {"step": 20, "time": iso(NOW + timedelta(seconds=10)), "path": "/ck/step-20"}})
    s.step("progress with a fresh checkpoint", running, 10, report=fresh)
    stale = TrainerReport(step=500, step_seconds=0.5, checkpoint=fresh.checkpoint)
    s.step("no checkpoint for an hour", running, 3600, report=stale)
    s.step("past activeDeadlineSeconds", running, 7300, report=stale)
    return s


def elastic_within_its_range() -> Story:
    spec = {"nodes": 3, "minNodes": 2, "maxNodes": 4}
    s = Story(**spec)
    s.step("created", [])
    s.step("two of three running", [pod(i, **spec) for i in range(2)], 5)
    s.step("all running", [pod(i, **spec) for i in range(3)], 10)
    s.step("one failed", [pod(0, **spec), pod(1, **spec), pod(2, phase="Failed", exit_code=1, **spec)], 20)
    return s


def unschedulable_pods() -> Story:
    from disttrain.api import load_job
    from disttrain.operator.core.pods import summarize_pod
    from disttrain.render import render_pod

    from .helpers import job as job_doc

    j, r, _ = load_job(job_doc(nodes=1, gpusPerNode=2))
    body = render_pod(j, r, 0)
    body["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/6 nodes are available: 6 Insufficient nvidia.com/gpu."}]}
    s = Story(nodes=1, gpusPerNode=2)
    s.step("created", [])
    s.step("unschedulable", [summarize_pod(body)], 5)
    s.step("still unschedulable", [summarize_pod(body)], 60)
    s.step("scheduled", [pod(0, nodes=1, gpusPerNode=2)], 90)
    return s


def scaled_down_then_up() -> Story:
    s = Story(nodes=3, minNodes=1, maxNodes=4)
    three = [pod(i, nodes=3, minNodes=1, maxNodes=4) for i in range(3)]
    s.step("three running", three)
    s.spec = {"nodes": 2, "minNodes": 1, "maxNodes": 4}
    s.step("nodes: 2", three, 10)
    s.step("worker-2 gone", three[:2], 12)
    s.spec = {"nodes": 4, "minNodes": 1, "maxNodes": 4}
    s.step("nodes: 4", three[:2], 20)
    return s


def the_worker_template_changes() -> Story:
    old = {"nodes": 2, "env": [{"name": "LR", "value": "0.1"}]}
    s = Story(**old)
    s.step("running", [pod(i, **old) for i in range(2)])
    s.spec = {"nodes": 2, "env": [{"name": "LR", "value": "0.01"}]}
    s.step("env changed", [pod(i, **old) for i in range(2)], 10)
    s.step("old workers going", [pod(i, terminating=True, **old) for i in range(2)], 11)
    s.step("new workers running", [pod(i, **s.spec) for i in range(2)], 30)
    return s


def succeeds_after_a_restart_with_a_stale_checkpoint() -> Story:
    spec = {"nodes": 2, "checkpoint": {"intervalSteps": 10}}
    s = Story(**spec)
    s.step("created", [])
    s.step("running", [pod(i, **spec) for i in range(2)], 5)
    stale = TrainerReport(step=400, step_seconds=0.5, checkpoint=parse_report(
        {"step": 10, "checkpoint": {"step": 10, "time": iso(NOW), "path": "/ck/step-10"}}).checkpoint)
    s.step("checkpoint stale", [pod(i, **spec) for i in range(2)], 3600, report=stale)
    crashed = [pod(0, **spec), pod(1, phase="Failed", exit_code=1, **spec)]
    s.step("worker-1 crashed", crashed, 3601, report=stale)
    s.step("back-off over", crashed, 3612, report=stale)
    s.step("both finished", [ended(0, 0, report_json("Finished", step=1000, total=1000, ckpt=1000)),
                             ended(1, 0, report_json("Finished", step=1000, total=1000, ckpt=1000))], 3700,
           report=stale)
    return s


def trainer_at(step: int, *, ckpt: int | None = None, held: int | None = None) -> TrainerReport:
    report = parse_report({"step": step, "totalSteps": 100, "heldAtStep": held, "checkpoint": None if ckpt is None
                           else {"step": ckpt, "time": iso(NOW), "path": f"/checkpoints/step-{ckpt}"}})
    assert report is not None
    return report


def suspended_after_a_requested_checkpoint() -> Story:
    spec = {"nodes": 2, "checkpoint": {"intervalSteps": 50, "evictGraceSeconds": 30}}
    s = Story(**spec)
    running = [pod(i, **spec) for i in range(2)]
    s.step("running", running, report=trainer_at(42))
    s.spec = {**spec, "suspend": True}
    s.step("suspend: the trainer is asked for a checkpoint", running, 10, report=trainer_at(42))
    s.step("still checkpointing", running, 12, report=trainer_at(43))
    s.step("held at a checkpoint of step 44: the pods go", running, 14, report=trainer_at(44, ckpt=44, held=44))
    s.step("pods gone", [], 20, report=trainer_at(44, ckpt=44, held=44))
    s.spec = spec
    s.step("resumed", [], 30)
    return s


def suspended_when_the_trainer_cannot_checkpoint_on_request() -> Story:
    spec = {"nodes": 1, "checkpoint": {"intervalSteps": 50}}
    s = Story(**spec)
    s.step("running", [pod(0, **spec)], report=trainer_at(42))
    s.spec = {**spec, "suspend": True}
    s.step("suspend: asked", [pod(0, **spec)], 10, report=trainer_at(42))
    s.step("refused: SIGTERM instead", [pod(0, **spec)], 11, report=trainer_at(43),
           checkpoint_refused="HTTP 404 from POST /checkpoint")
    s.step("the final report: an emergency checkpoint of step 45",
           [ended(0, 1, report_json(INTERRUPTED, step=45, total=100, ckpt=45), nodes=1)], 15, report=trainer_at(43))
    return s


def suspended_but_no_checkpoint_within_the_grace() -> Story:
    spec = {"nodes": 1, "checkpoint": {"intervalSteps": 50, "evictGraceSeconds": 20}}
    s = Story(**spec)
    s.step("running", [pod(0, **spec)], report=trainer_at(42))
    s.spec = {**spec, "suspend": True}
    s.step("suspend: asked", [pod(0, **spec)], 10, report=trainer_at(42))
    s.step("the grace ran out", [pod(0, **spec)], 30, report=trainer_at(60))
    return s


def a_suspend_called_off_while_checkpointing() -> Story:
    spec = {"nodes": 1, "checkpoint": {"intervalSteps": 50}}
    s = Story(**spec)
    s.step("running", [pod(0, **spec)], report=trainer_at(42))
    s.step("suspend: asked", [pod(0, **spec)], 10, spec={**spec, "suspend": True}, report=trainer_at(42))
    s.step("suspend: false again", [pod(0, **spec)], 11, report=trainer_at(42, ckpt=42, held=42))
    return s


STORIES: dict[str, Callable[[], Story]] = {f.__name__: f for f in (
    suspended_after_a_requested_checkpoint, suspended_when_the_trainer_cannot_checkpoint_on_request,
    suspended_but_no_checkpoint_within_the_grace, a_suspend_called_off_while_checkpointing,
    two_workers_succeed, a_worker_fails_and_comes_back, the_backoff_limit_runs_out, suspended_and_resumed,
    an_invalid_spec_then_fixed, a_template_that_comes_later, the_spec_breaks_while_running, names_taken_then_freed,
    creation_refused_then_allowed, disruptions_spend_no_backoff, progress_and_a_stale_checkpoint,
    elastic_within_its_range, unschedulable_pods, scaled_down_then_up, the_worker_template_changes,
    succeeds_after_a_restart_with_a_stale_checkpoint)}


def test_update_golden_when_asked():
    GOLDEN.update_or_check_keys(lambda: {name: make().passes for name, make in STORIES.items()}, {"": STORIES})


@pytest.mark.parametrize("name", sorted(STORIES))
def test_story(name):
    got = STORIES[name]().passes
    want = GOLDEN.want(name)
    for mine, theirs in zip(got, want):
        assert mine == theirs, f"{name}, pass {mine['pass']!r}"
    assert [p["pass"] for p in got] == [p["pass"] for p in want]
