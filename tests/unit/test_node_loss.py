"""A worker whose node is lost (Ready False or Unknown, or tainted unreachable/not-ready)
for spec.failurePolicy.nodeLostSeconds is force-deleted and recreated elsewhere, recorded
as NodeLost, without spending backoffLimit; before that time the job is woken exactly
when it is up (nodes.py, recovery.lost_workers, the shell's node events)."""

from __future__ import annotations

import pytest
from disttrain.api import conditions as c
from disttrain.api import load_job
from disttrain.operator.core.nodes import EPOCH, summarize_node
from disttrain.operator.core.plan import decide
from disttrain.operator.core.recovery import lost_workers
from disttrain.operator.core.pods import summarize_pod
from disttrain.render import render_pod

from .helpers import job as job_doc
from .plan_builders import NOW, POLICY, QUIET, RUNNING, at, events, iso, state


def node(name="node-a", ready="True", since=None, reason="", taints=()):
    return summarize_node({"metadata": {"name": name}, "spec": {"taints": list(taints)}, "status": {"conditions": [
        {"type": "Ready", "status": ready, "lastTransitionTime": since or iso(at(-3600)), "reason": reason}]}})


def running_on(index, node_name, terminating=False, phase="Running", uid=None):
    j, r, _ = load_job(job_doc(nodes=2, **QUIET))
    body = render_pod(j, r, index)
    body["metadata"]["uid"] = uid or f"uid-{index}"
    body["spec"]["nodeName"] = node_name
    if terminating:
        body["metadata"]["deletionTimestamp"] = iso(NOW)
    body["status"] = {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}
    return summarize_pod(body)


UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": iso(at(-20))}


@pytest.mark.parametrize("health, since", [
    (node(), None),
    (node(ready="Unknown", since=iso(at(-40)), reason="NodeStatusUnknown"), at(-40)),
    (node(ready="False", since=iso(at(-10)), reason="KubeletNotReady"), at(-10)),
    (node(taints=[UNREACHABLE]), at(-20)),  # the taint can come with Ready still True
    (node(ready="Unknown", since=iso(at(-40)), taints=[UNREACHABLE]), at(-40)),  # the earlier one
    (node(taints=[{**UNREACHABLE, "effect": "NoSchedule"}]), None),  # only NoExecute means it is gone
    (node(taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]), EPOCH),  # no time: long ago
    (node(taints=[{"key": "nvidia.com/gpu", "effect": "NoExecute", "timeAdded": iso(NOW)}]), None),
])
def test_a_node_is_lost_from_when_it_stopped_being_ready_or_was_tainted(health, since):
    assert health.lost_since() == since


def test_describe_says_why_in_the_cluster_words():
    health = node(ready="Unknown", since="2026-11-22T11:59:20Z", reason="NodeStatusUnknown", taints=[UNREACHABLE])
    assert health.describe() == ("node node-a Ready=Unknown (NodeStatusUnknown) since 2026-11-22T11:59:20Z and "
                                 "tainted node.kubernetes.io/unreachable:NoExecute since 2026-11-22T11:59:40Z")


def test_workers_are_due_once_their_node_has_been_lost_long_enough():
    lost = node("bad", ready="Unknown", since=iso(at(-20)))
    pods = [running_on(0, "good"), running_on(1, "bad")]
    nodes = {"good": node("good"), "bad": lost}
    assert lost_workers(pods, nodes, NOW, 30) == ({}, at(10))  # 20 s of 30: wake when it is up
    assert lost_workers(pods, nodes, at(10), 30) == ({"demo-worker-1": lost}, None)
    # Pods that ended are the ordinary rules' (a crash, a disruption), whatever their node.
    ended = [running_on(1, "bad", phase="Failed")]
    assert lost_workers(ended, nodes, at(60), 30) == ({}, None)
    # A node the index does not know (or a pod not yet scheduled) is no reason to act.
    assert lost_workers([running_on(1, "")], nodes, at(60), 30) == ({}, None)
    assert lost_workers([running_on(1, "elsewhere")], nodes, at(60), 30) == ({}, None)


def decide_on(nodes, pods, now=NOW, node_lost_seconds=30, status=None):
    st = state(status or RUNNING, nodes=2, failurePolicy={"nodeLostSeconds": node_lost_seconds}, **QUIET)
    return decide(st, pods, now, POLICY, nodes=nodes)


def test_a_worker_on_a_lost_node_is_force_deleted_recorded_and_costs_no_restart():
    lost = node("bad", ready="Unknown", since=iso(at(-31)), reason="NodeStatusUnknown")
    pods = [running_on(0, "good"), running_on(1, "bad")]
    plan = decide_on({"good": node("good"), "bad": lost}, pods)
    assert plan.delete == [("demo-worker-1", c.NODE_LOST)]
    assert plan.status.phase == "Restarting" and plan.status.restarts == 0
    assert [(f.cause, f.pod, f.node, f.rank, f.time) for f in plan.new_failures] == [
        ("NodeLost", "demo-worker-1", "bad", 1, iso(at(-31)))]
    assert plan.new_failures[0].message == f"node bad Ready=Unknown (NodeStatusUnknown) since {iso(at(-31))}"
    assert [e for e in events(plan) if e[1] == c.NODE_LOST] == [
        ("Warning", "NodeLost", f"node bad Ready=Unknown (NodeStatusUnknown) since {iso(at(-31))}: force-deleting "
         "demo-worker-1 so that it is recreated on another node (does not count against backoffLimit)")]
    # Once gone, the next pass recreates it (the scheduler places it on a Ready node).
    gone = decide_on({"good": node("good"), "bad": lost}, [pods[0]], now=at(1), status=None)
    assert gone.create == [1]


def test_before_its_time_nothing_happens_and_the_job_is_woken_when_it_is_up():
    lost = node("bad", ready="False", since=iso(at(-5)))
    plan = decide_on({"bad": lost}, [running_on(0, "good"), running_on(1, "bad")], node_lost_seconds=60)
    assert plan.delete == [] and plan.new_failures == [] and plan.status.phase == "Running"
    assert plan.wake_at == at(55)


def test_a_node_lost_seconds_of_0_replaces_the_worker_as_soon_as_its_node_is_seen_lost():
    lost = node("bad", ready="Unknown", since=iso(NOW))
    plan = decide_on({"good": node("good"), "bad": lost}, [running_on(0, "good"), running_on(1, "bad")],
                     node_lost_seconds=0)
    assert plan.delete == [("demo-worker-1", c.NODE_LOST)] and plan.wake_at is None


def test_a_node_that_came_back_in_time_changes_nothing():
    plan = decide_on({"bad": node("bad")}, [running_on(0, "good"), running_on(1, "bad")])
    assert plan.delete == [] and plan.new_failures == [] and plan.wake_at is None


def test_a_pod_stuck_terminating_on_a_lost_node_is_force_deleted():
    """A graceful delete (a restart round, a suspend) never ends on a node with no kubelet:
    the pod would stay Terminating and its name would never be free for the new worker."""
    lost = node("bad", ready="Unknown", since=iso(at(-120)))
    plan = decide_on({"bad": lost}, [running_on(0, "good"), running_on(1, "bad", terminating=True)])
    assert plan.delete == [("demo-worker-1", c.NODE_LOST)]
    assert [e for e in events(plan) if e[1] == c.NODE_LOST] == []  # its deletion was already decided


def test_a_restart_round_makes_its_deletion_of_a_lost_worker_forced():
    lost = node("bad", ready="Unknown", since=iso(at(-120)))
    pods = [running_on(0, "good", phase="Failed"), running_on(1, "bad")]
    st = state({**RUNNING, "nextRestartTime": iso(NOW)}, nodes=2, **QUIET)
    plan = decide(st, pods, NOW, POLICY, nodes={"bad": lost})
    # Worker 0 crashed: the round recreates every worker, the lost one by force.
    assert sorted(plan.delete) == [("demo-worker-0", c.WORKER_FAILED), ("demo-worker-1", c.NODE_LOST)]
    assert plan.status.restarts == 1


@pytest.mark.parametrize("seconds", [0, 30, 3600])
def test_node_lost_seconds_at_its_edges(seconds):
    lost = node("bad", ready="Unknown", since=iso(NOW))
    pods = [running_on(0, "good"), running_on(1, "bad")]
    now_plan = decide_on({"bad": lost}, pods, node_lost_seconds=seconds)
    assert (now_plan.delete != []) == (seconds == 0)
    later = decide_on({"bad": lost}, pods, now=at(seconds), node_lost_seconds=seconds)
    assert later.delete == [("demo-worker-1", c.NODE_LOST)]
