"""A worker's node is cordoned (`kubectl drain` begins): the job moves checkpoint first.
The job's PodDisruptionBudget (maxUnavailable 0) holds the drain's evictions back while
the operator asks the trainer for a checkpoint of the current step; then every worker is
deleted and recreated elsewhere, as a disruption (backoffLimit not spent), and
status.eviction says what was lost (stopping.drain, render/disruption_budget.py)."""

from __future__ import annotations

from disttrain.api import conditions as c
from disttrain.api import load_job
from disttrain.api.status_types import CheckpointStatus
from disttrain.operator.core.nodes import summarize_node
from disttrain.operator.core.stopping import DRAIN_SETTLE_SECONDS, draining_workers
from disttrain.operator.core.plan import decide
from disttrain.operator.core.pods import summarize_pod
from disttrain.integrations.registry import render_children
from disttrain.render import render_disruption_budget, render_pod
from disttrain.api.report import TrainerReport

from .helpers import job as job_doc
from .plan_builders import NOW, POLICY, QUIET, RUNNING, at, iso, state

SPEC = {"nodes": 2, "checkpoint": {"intervalSteps": 100, "evictGraceSeconds": 60}, **QUIET}


def node(name, cordoned=False, ready="True"):
    return summarize_node({"metadata": {"name": name}, "spec": {"unschedulable": True} if cordoned else {},
                           "status": {"conditions": [{"type": "Ready", "status": ready,
                                                      "lastTransitionTime": iso(at(-3600))}]}})


def worker(index, node_name, terminating=False):
    j, r, _ = load_job(job_doc(**SPEC))
    body = render_pod(j, r, index)
    body["metadata"]["uid"] = f"uid-{index}"
    body["spec"]["nodeName"] = node_name
    if terminating:
        body["metadata"]["deletionTimestamp"] = iso(NOW)
    body["status"] = {"phase": "Running", "podIP": f"10.0.0.{index}",
                      "conditions": [{"type": "Ready", "status": "True"}]}
    return summarize_pod(body)


PODS = [worker(0, "a"), worker(1, "b")]
DRAINING = {"a": node("a", cordoned=True), "b": node("b")}
TRAINING = TrainerReport(step=250, checkpoint=CheckpointStatus(step=200, time=iso(at(-30))))


def test_the_job_gets_a_budget_that_refuses_every_eviction_unless_it_takes_no_handshake():
    job, resolved, _ = load_job(job_doc(**SPEC))
    budget = render_disruption_budget(job)
    assert budget["kind"] == "PodDisruptionBudget" and budget["metadata"]["name"] == "demo"
    assert budget["spec"] == {"maxUnavailable": 0,
                              "selector": {"matchLabels": {"disttrain.dev/job": "demo", "disttrain.dev/role": "worker"}},
                              "unhealthyPodEvictionPolicy": "AlwaysAllow"}
    assert budget in render_children(job, resolved)
    off, _, _ = load_job(job_doc(**{**SPEC, "checkpoint": {"evictGraceSeconds": 0}}))
    assert render_disruption_budget(off) is None


def test_only_workers_on_a_cordoned_working_node_are_draining():
    assert [p.name for p in draining_workers(PODS, DRAINING)] == ["demo-worker-0"]
    lost = {"a": node("a", cordoned=True, ready="Unknown")}  # lost: the node-loss rules apply instead
    assert draining_workers(PODS, lost) == []
    assert draining_workers([worker(0, "a", terminating=True)], DRAINING) == []


def test_a_cordoned_node_asks_for_a_checkpoint_then_moves_every_worker():
    asking = decide(state(RUNNING, **SPEC), PODS, NOW, POLICY, report=TRAINING, nodes=DRAINING)
    assert asking.ask_checkpoint == (120, 60.0) and asking.delete == []
    assert (asking.status.eviction.reason, asking.status.eviction.handshake) == ("NodeDrain", "Requested")
    assert asking.status.phase == "Running" and asking.wake_at == at(60)

    held = TrainerReport(step=250, held_at_step=250, checkpoint=CheckpointStatus(step=250, time=iso(at(1))))
    moving = decide(state(asking.status, **SPEC), PODS, at(2), POLICY, report=held, nodes=DRAINING)
    assert sorted(moving.delete) == [("demo-worker-0", c.NODE_DRAINED), ("demo-worker-1", c.NODE_DRAINED)]
    assert moving.status.eviction.handshake == "Checkpointed" and moving.status.eviction.steps_lost == 0
    assert moving.status.phase == "Restarting" and moving.status.restarts == 0
    assert any(e.reason == c.NODE_DRAINED and e.message.startswith("node a is cordoned") for e in moving.events)
    (stop,) = moving.status.failures  # a stop it did not ask for, in its history: the whole job, priced
    assert (stop.cause, stop.pod, stop.time, stop.steps_lost) == ("NodeDrain", None, iso(at(2)), 0)

    # Recreated once kubectl drain, retrying every 5 s by name, has seen them gone.
    gone = decide(state(moving.status, **SPEC), [], at(4), POLICY, nodes=DRAINING)
    assert gone.create == [] and gone.wake_at == at(2 + DRAIN_SETTLE_SECONDS)
    later = decide(state(gone.status, **SPEC), [], at(2 + DRAIN_SETTLE_SECONDS), POLICY, nodes=DRAINING)
    assert later.create == [0, 1] and later.status.restarts == 0


def test_without_a_trainer_answer_the_workers_move_when_the_grace_runs_out():
    asking = decide(state(RUNNING, **SPEC), PODS, NOW, POLICY, report=TRAINING, nodes=DRAINING)
    late = decide(state(asking.status, **SPEC), PODS, at(61), POLICY, report=TRAINING, nodes=DRAINING)
    assert len(late.delete) == 2 and late.status.eviction.handshake == "TimedOut"


def test_uncordoned_before_the_checkpoint_the_move_is_called_off():
    asking = decide(state(RUNNING, **SPEC), PODS, NOW, POLICY, report=TRAINING, nodes=DRAINING)
    back = decide(state(asking.status, **SPEC), PODS, at(5), POLICY, report=TRAINING,
                  nodes={"a": node("a"), "b": node("b")})
    assert back.delete == [] and back.status.eviction.handshake == "Cancelled"


def test_no_handshake_no_move_the_drain_evicts_as_it_would():
    spec = {**SPEC, "checkpoint": {"evictGraceSeconds": 0}}
    plan = decide(state(RUNNING, **spec), PODS, NOW, POLICY, report=TRAINING, nodes=DRAINING)
    assert plan.delete == [] and plan.ask_checkpoint is None
