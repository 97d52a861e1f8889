"""failurePolicy.stragglers: Replace on the real control plane: the trainer's report says
worker 1 computes 3x slower than worker 0 for the windows the job asks for; the operator
names it in the Straggler condition and an Event, asks for a checkpoint, deletes the
workers once the trainer holds at it, records the move (cause Straggler, no backoffLimit
spent), and recreates both workers away from the slow worker's node. Both install modes.

The trainer is its own status server (holding_trainer in conftest.py); a slow rank made by
the real trainer and found by this same rule is tests/trainer/test_stragglers.py."""

from __future__ import annotations

import pytest

from .conftest import condition, events_of, job_manifest, now, pods_of, wait_job, wait_phase

pytestmark = pytest.mark.cluster


def test_a_straggler_is_reported_then_moved_off_its_node_checkpoint_first(cluster, namespace, operator,
                                                                        holding_trainer):
    port, sink, start = holding_trainer
    cluster.apply(job_manifest("slow", nodes=2, gpusPerNode=1, metrics={"port": port},
                               trainer={"builtin": {"steps": 1000, "batchSize": 8}},
                               checkpoint={"claimName": "shared-checkpoints", "intervalSteps": 500,
                                           "evictGraceSeconds": 60},
                               failurePolicy={"stragglers": "Replace", "stragglerWindows": 2},
                               podTemplate={"metadata": {"annotations": {cluster.POD_IP_ANNOTATION: "127.0.0.1"}}}),
                  namespace=namespace)
    wait_phase(cluster, namespace, "slow", "Running")
    before = {p["metadata"]["name"]: p for p in pods_of(cluster, namespace, "slow")}
    slow_node = before["slow-worker-1"]["spec"]["nodeName"]
    windows = [[step, [[0, 0.05, 0.16], [1, 0.15, 0.16]]] for step in (300, 310, 320)]
    with sink.lock:
        sink.doc.update(step=320, totalSteps=1000, worldSize=2, lastUpdateTime=now(), workerTimes=windows)
    start(before["slow-worker-0"]["metadata"]["uid"])  # the operator asks the lowest ready worker
    series = f'disttrain_job_straggler_ratio{{job="slow",namespace="{namespace}"}} 3.0'
    cluster.wait_for(lambda: series in operator.metrics(), timeout=30, what="the straggler ratio series")

    job = wait_job(cluster, namespace, "slow", lambda j: (j["status"].get("eviction") or {}).get(
        "handshake") not in (None, "Requested"), what="the move off the straggler's node settled")
    eviction = job["status"]["eviction"]
    assert (eviction["reason"], eviction["handshake"], eviction["step"]) == ("Straggler", "Checkpointed", 320)
    assert (eviction["resumeFromStep"], eviction["stepsLost"]) == (320, 0), eviction
    [entry] = [f for f in job["status"]["failures"] if f["cause"] == "Straggler"]
    assert entry["node"] == slow_node and entry["message"].startswith(
        f"slow-worker-1 on node {slow_node} takes 3.00x the other workers' median compute time per step")
    reasons = {e["reason"]: e["message"] for e in events_of(cluster, namespace, "slow")}
    assert reasons["Straggler"].startswith(f"slow-worker-1 on node {slow_node} takes 3.00x")
    assert "away from the straggler's" in reasons["StragglerReplaced"]

    job = wait_job(cluster, namespace, "slow", lambda j: j["status"].get("phase") == "Running" and len(
        pods_of(cluster, namespace, "slow")) == 2 and all(
        p["metadata"]["uid"] not in {b["metadata"]["uid"] for b in before.values()}
        for p in pods_of(cluster, namespace, "slow")), what="both workers recreated and running", stall=90)
    assert job["status"]["restarts"] == 0  # a move, not a failure
    assert all(p["spec"]["nodeName"] != slow_node for p in pods_of(cluster, namespace, "slow"))
    assert [a["node"] for a in job["status"]["avoidedNodes"]] == [slow_node]
    # The report from before the move says nothing of the new workers: no second move.
    assert condition(job, "Straggler")["status"] == "False"
    assert [f["cause"] for f in job["status"]["failures"]] == ["Straggler"]
