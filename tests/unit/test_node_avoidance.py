"""A node where a job failed failurePolicy.avoidNodeAfterFailures times is avoided by the
job's new workers (a required node affinity, status.avoidedNodes, an Event), and the job
stops avoiding when a worker then fits nowhere else (failures.py, plan, render)."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
from disttrain.api import conditions as c
from disttrain.api import load_job
from disttrain.api.status_types import AvoidedNode, FailureRecord
from disttrain.operator.core.failures import AVOIDED_LIMIT, avoiding, lift_avoidance, nodes_to_avoid
from disttrain.operator.core.pods import summarize_pod
from disttrain.render import render_pod, template_hash

from .helpers import job as job_doc
from .helpers import written
from .plan_builders import NOW, QUIET, RUNNING, at, events, iso, run, state

STAMP = iso(NOW)


def failure(node, cause="ExitCode", uid=None):
    return FailureRecord(time=STAMP, cause=cause, node=node, pod="demo-worker-1", pod_uid=uid or f"{node}-{cause}")


def test_a_node_is_avoided_once_the_job_failed_there_often_enough():
    history = [failure("a", uid="1"), failure("b", uid="2"), failure("a", "OOMKilled", uid="3")]
    avoided, new = nodes_to_avoid(history, [], 2, STAMP)
    assert avoided == new == [AvoidedNode(node="a", time=STAMP, failures=2)]
    assert nodes_to_avoid(history, [], 3, STAMP) == ([], [])
    assert nodes_to_avoid(history, [], 0, STAMP) == ([], [])  # 0: never
    assert nodes_to_avoid(history, [], 1, STAMP)[0] == [AvoidedNode(node="a", time=STAMP, failures=2),
                                                         AvoidedNode(node="b", time=STAMP, failures=1)]


@pytest.mark.parametrize("cause, counts", [
    ("ExitCode", True), ("OOMKilled", True), ("NodeLost", True), ("Hung", True),
    ("Evicted", False), ("Preempted", False),  # the cluster's decisions, not the node's faults
])
def test_which_failures_count_against_a_node(cause, counts):
    history = [failure("a", cause, uid="1"), failure("a", cause, uid="2")]
    assert bool(nodes_to_avoid(history, [], 2, STAMP)[1]) == counts


def test_a_node_once_avoided_is_never_added_again_lifted_or_not():
    history = [failure("a", uid="1"), failure("a", uid="2")]
    avoided, _ = nodes_to_avoid(history, [], 2, STAMP)
    lifted = lift_avoidance(avoided, iso(at(60)), "no room")
    assert avoiding(lifted) == ()
    assert nodes_to_avoid(history + [failure("a", uid="3")], lifted, 2, iso(at(90))) == (lifted, [])
    assert written(lifted[0]) == {"node": "a", "time": STAMP, "failures": 2, "liftedTime": iso(at(60)),
                                  "message": "no room"}


def test_the_list_is_bounded_dropping_lifted_entries_first():
    lifted = lift_avoidance([AvoidedNode(node="old", time=STAMP, failures=2)], STAMP, "no room")
    active = [AvoidedNode(node=f"n{i:02d}", time=STAMP, failures=2) for i in range(AVOIDED_LIMIT - 1)]
    history = [failure("new", uid="1"), failure("new", uid="2")]
    avoided, new = nodes_to_avoid(history, lifted + active, 2, STAMP)
    assert len(avoided) == AVOIDED_LIMIT and [a.node for a in new] == ["new"]
    assert "old" not in {a.node for a in avoided}


# ---- render ---------------------------------------------------------------------------


def test_new_workers_carry_the_avoidance_in_every_node_selector_term_and_the_template_is_unchanged():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}}
    j, r, _ = load_job(job_doc(nodes=2, scheduling={"affinity": copy.deepcopy(affinity)}))
    plain = render_pod(j, r, 1)
    pod = render_pod(j, r, 1, ("n2", "n1"))
    away = {"key": "metadata.name", "operator": "NotIn", "values": ["n1", "n2"]}
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert terms == [{**t, "matchFields": [away]} for t in
                     affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]]
    assert j.spec.scheduling.affinity == affinity  # the spec itself is untouched
    assert plain["spec"]["affinity"] == affinity
    assert pod["metadata"]["annotations"] == plain["metadata"]["annotations"]  # the same template hash
    # Without an affinity of the user's, one term with the avoidance alone.
    j2, r2, _ = load_job(job_doc(nodes=2))
    assert render_pod(j2, r2, 0, ("n1",))["spec"]["affinity"] == {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}]}}}
    assert template_hash(j2, r2) == render_pod(j2, r2, 0, ("n1",))["metadata"]["annotations"][
        "disttrain.dev/template-hash"]


# ---- plan.decide ----------------------------------------------------------------------


def pod_on(index, node, *, phase="Running", uid=None, unschedulable=None, exit_code=None):
    j, r, _ = load_job(job_doc(nodes=2, **QUIET))
    body = render_pod(j, r, index)
    body["metadata"]["uid"] = uid or f"uid-{index}-{node}"
    if node:
        body["spec"]["nodeName"] = node
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if phase == "Running" else "False"}]}
    if unschedulable:
        status["conditions"].append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                     "message": unschedulable})
    if exit_code is not None:
        status["containerStatuses"] = [{"name": "trainer", "state": {"terminated": {"exitCode": exit_code,
                                                                                    "reason": "Error"}}}]
    body["status"] = status
    return summarize_pod(body)


def test_the_second_failure_on_a_node_makes_the_job_avoid_it():
    st = state({**RUNNING, "failures": [written(failure("bad", uid="old"))]}, nodes=2, **QUIET)
    plan = run(st, [pod_on(0, "good"), pod_on(1, "bad", phase="Failed", exit_code=1)])
    assert [written(a) for a in plan.status.avoided_nodes] == [{"node": "bad", "time": STAMP, "failures": 2}]
    assert ("Warning", c.NODE_AVOIDED, "node bad was the place of 2 failures of this job: its new workers avoid "
            "it (failurePolicy.avoidNodeAfterFailures 2)") in events(plan)
    # Not with avoidNodeAfterFailures 0.
    never = state({**RUNNING, "failures": [written(failure("bad", uid="old"))]}, nodes=2,
                  failurePolicy={"avoidNodeAfterFailures": 0}, **QUIET)
    assert run(never, [pod_on(0, "good"), pod_on(1, "bad", phase="Failed", exit_code=1)]).status.avoided_nodes is None


def test_a_worker_that_fits_nowhere_else_lifts_the_avoidance_and_is_recreated_without_it():
    avoided = [{"node": "bad", "time": STAMP, "failures": 2}]
    st = state({**RUNNING, "phase": "Restarting", "avoidedNodes": avoided}, nodes=2, **QUIET)
    stuck = pod_on(1, "", phase="Pending", unschedulable="0/1 nodes are available: 1 node(s) didn't match "
                   "Pod's node affinity/selector.")
    plan = run(st, [pod_on(0, "good"), stuck], now=at(30))
    entry = written(plan.status.avoided_nodes[0])
    why = ("demo-worker-1 cannot be scheduled while avoiding bad: 0/1 nodes are available: 1 node(s) didn't match "
           "Pod's node affinity/selector.")
    assert entry == {**avoided[0], "liftedTime": iso(at(30)), "message": why}
    assert ("demo-worker-1", c.NODE_AVOIDANCE_LIFTED) in plan.delete
    assert ("Warning", c.NODE_AVOIDANCE_LIFTED, f"{why}; avoiding no node any more: recreating demo-worker-1") \
        in events(plan)
    assert avoiding(plan.status.avoided_nodes) == ()
    # The next pass (the pod gone) recreates it; nothing is lifted twice.
    again = run(replace(st, status=plan.status), [pod_on(0, "good")], now=at(31))
    assert again.create == [1] and again.status.avoided_nodes == plan.status.avoided_nodes
