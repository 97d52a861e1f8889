"""A worker's node stays Ready but says it should not train (issue 53 item 2): a watched
condition, a watched taint, or fewer GPUs allocatable than its workers were given. The
job moves off it checkpoint first (stopping.move_off_unhealthy), records the stop per
node, and its new workers avoid the node (nodes.NodeRules, failures.nodes_to_avoid)."""

from __future__ import annotations

import dataclasses

import pytest

from disttrain.api import conditions as c
from disttrain.api.report import TrainerReport
from disttrain.api.status_types import CheckpointStatus
from disttrain.operator.core.nodes import DEFAULT_UNHEALTHY_CONDITIONS, NodeRules, summarize_node
from disttrain.operator.core.plan import decide
from disttrain.operator.settings import Settings

from .plan_builders import NOW, POLICY, QUIET, RUNNING, at, iso, ready_node, state, worker_on

SPEC = {"nodes": 2, "gpusPerNode": 2, "checkpoint": {"intervalSteps": 100, "evictGraceSeconds": 60}, **QUIET}
RULES = NodeRules.parse(DEFAULT_UNHEALTHY_CONDITIONS, "nvidia.com/gpu.unhealthy")
POLICY_WITH_TAINT = dataclasses.replace(POLICY, node_rules=RULES)
TRAINING = TrainerReport(step=250, checkpoint=CheckpointStatus(step=200, time=iso(at(-30))))
XID = {"type": "XidCriticalError", "status": "True", "reason": "Xid79", "message": "GPU has fallen off the bus",
       "lastHeartbeatTime": iso(NOW)}


def node(name, conditions=(), taints=(), gpus="2"):
    return ready_node(name, conditions, taints, gpus)


def worker(index, node_name, spec=SPEC):
    return worker_on(index, node_name, spec)


PODS = [worker(0, "a"), worker(1, "b")]


def test_the_rules_parse_and_a_malformed_entry_stops_the_operator_with_the_fix():
    assert RULES.conditions == {("KernelDeadlock", "True"), ("ReadonlyFilesystem", "True"), ("XidCriticalError", "True")}
    assert NodeRules.parse("none", "none") == NodeRules()
    assert Settings.from_env({}).node_rules() == POLICY.node_rules  # the operator's default is the core's
    for env, says in [({"DISTTRAIN_UNHEALTHY_NODE_CONDITIONS": "KernelDeadlock"}, "'KernelDeadlock' is not TYPE=STATUS"),
                      ({"DISTTRAIN_UNHEALTHY_NODE_CONDITIONS": "GpuOk=maybe"}, "STATUS True, False or Unknown"),
                      ({"DISTTRAIN_UNHEALTHY_NODE_CONDITIONS": "Ready=False"}, "nodeLostSeconds"),
                      ({"DISTTRAIN_UNHEALTHY_NODE_TAINTS": "gpu=bad:NoSchedule"}, "give the key alone")]:
        with pytest.raises(SystemExit, match=says):
            Settings.from_env(env)


def test_each_signal_in_the_clusters_words_and_what_is_not_one():
    assert node("a").unhealthy(RULES, "nvidia.com/gpu", 2) is None
    assert node("a", [XID]).unhealthy(RULES, "nvidia.com/gpu", 2) == \
        "condition XidCriticalError=True (Xid79: GPU has fallen off the bus)"
    assert node("a", [{**XID, "status": "False"}]).unhealthy(RULES, "nvidia.com/gpu", 2) is None
    tainted = node("a", taints=[{"key": "nvidia.com/gpu.unhealthy", "effect": "NoSchedule"}])
    assert tainted.unhealthy(RULES, "nvidia.com/gpu", 2) == "taint nvidia.com/gpu.unhealthy:NoSchedule"
    assert tainted.unhealthy(NodeRules.parse(DEFAULT_UNHEALTHY_CONDITIONS, ""), "nvidia.com/gpu", 2) is None
    prefer = node("a", taints=[{"key": "nvidia.com/gpu.unhealthy", "effect": "PreferNoSchedule"}])
    assert prefer.unhealthy(RULES, "nvidia.com/gpu", 2) is None
    assert node("a", gpus="1").unhealthy(RULES, "nvidia.com/gpu", 2) == \
        "1 nvidia.com/gpu allocatable where its workers were given 2"
    assert node("a", gpus="0").unhealthy(RULES, "nvidia.com/gpu", 0) is None  # a CPU job is not judged
    # Heartbeats are not part of what the operator compares.
    beat = node("a", [{**XID, "lastHeartbeatTime": iso(at(10))}])
    assert beat == node("a", [XID])


def test_an_unhealthy_node_asks_for_a_checkpoint_then_moves_every_worker_records_and_avoids_it():
    nodes = {"a": node("a", [XID]), "b": node("b")}
    asking = decide(state(RUNNING, **SPEC), PODS, NOW, POLICY, report=TRAINING, nodes=nodes)
    assert asking.ask_checkpoint == (120, 60.0) and asking.delete == []
    assert (asking.status.eviction.reason, asking.status.eviction.handshake) == ("NodeUnhealthy", "Requested")
    [warning] = [e for e in asking.events if e.reason == c.NODE_UNHEALTHY]
    assert warning.type == "Warning" and warning.message.startswith(
        "node a is unhealthy: condition XidCriticalError=True (Xid79: GPU has fallen off the bus)")

    held = TrainerReport(step=250, held_at_step=250, checkpoint=CheckpointStatus(step=250, time=iso(at(1))))
    moving = decide(state(asking.status, **SPEC), PODS, at(2), POLICY, report=held, nodes=nodes)
    assert sorted(moving.delete) == [("demo-worker-0", c.NODE_UNHEALTHY), ("demo-worker-1", c.NODE_UNHEALTHY)]
    assert moving.status.eviction.handshake == "Checkpointed" and moving.status.eviction.steps_lost == 0
    assert moving.status.phase == "Restarting" and moving.status.restarts == 0
    assert not [e for e in moving.events if e.type == "Warning"]  # said once, when the move began
    (stop,) = moving.status.failures
    assert (stop.cause, stop.node, stop.pod, stop.steps_lost) == ("NodeUnhealthy", "a", None, 0)
    assert "XidCriticalError=True" in stop.message

    # The workers are gone: recreated at once, and never on node a.
    again = decide(state(moving.status, **SPEC), [], at(4), POLICY, nodes=nodes)
    assert again.create == [0, 1] and [a.node for a in again.status.avoided_nodes] == ["a"]
    [avoided] = [e for e in again.events if e.reason == c.NODE_AVOIDED]
    assert avoided.message.startswith("node a was unhealthy")
    off = dataclasses.replace(again.status, avoided_nodes=None)
    assert decide(state(off, **{**SPEC, "failurePolicy": {"avoidNodeAfterFailures": 0}}), [], at(4), POLICY,
                  nodes=nodes).status.avoided_nodes is None


def test_a_trainer_that_cannot_answer_or_no_grace_moves_at_once():
    nodes = {"a": node("a", gpus="1"), "b": node("b")}
    silent = decide(state(RUNNING, **SPEC), PODS, NOW, POLICY, report=None, nodes=nodes)
    assert len(silent.delete) == 2 and silent.status.eviction.handshake == "NotRunning"
    spec = {**SPEC, "checkpoint": {"evictGraceSeconds": 0}}
    off = decide(state(RUNNING, **spec), PODS, NOW, POLICY, report=TRAINING, nodes=nodes)
    assert len(off.delete) == 2 and off.status.eviction.handshake == "Off"
    assert off.status.failures[0].message == "node a was unhealthy: 1 nvidia.com/gpu allocatable where its workers " \
                                             "were given 2"


def test_healthy_again_before_the_checkpoint_the_move_is_called_off():
    tainted = {"a": node("a", taints=[{"key": "nvidia.com/gpu.unhealthy", "effect": "NoExecute"}]), "b": node("b")}
    asking = decide(state(RUNNING, **SPEC), PODS, NOW, POLICY_WITH_TAINT, report=TRAINING, nodes=tainted)
    assert asking.status.eviction.reason == "NodeUnhealthy"
    back = decide(state(asking.status, **SPEC), PODS, at(5), POLICY_WITH_TAINT, report=TRAINING,
                  nodes={"a": node("a"), "b": node("b")})
    assert back.delete == [] and back.status.eviction.handshake == "Cancelled" and not back.status.failures


def test_a_lost_or_cordoned_node_keeps_its_own_rule():
    lost = summarize_node({"metadata": {"name": "a"}, "status": {
        "conditions": [{"type": "Ready", "status": "Unknown", "lastTransitionTime": iso(at(-5))}, XID]}})
    plan = decide(state(RUNNING, **SPEC), PODS, NOW, POLICY, report=TRAINING, nodes={"a": lost, "b": node("b")})
    assert plan.status.eviction is None  # nodeLostSeconds (30 s) has not passed: nothing moves yet
    cordoned = summarize_node({"metadata": {"name": "a"}, "spec": {"unschedulable": True},
                               "status": {"conditions": [{"type": "Ready", "status": "True"}, XID]}})
    plan = decide(state(RUNNING, **SPEC), PODS, NOW, POLICY, report=TRAINING, nodes={"a": cordoned, "b": node("b")})
    assert plan.status.eviction.reason == "NodeDrain"
