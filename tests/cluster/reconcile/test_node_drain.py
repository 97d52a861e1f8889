"""`kubectl drain` of a node that holds a worker, run as an admin would: the job's
PodDisruptionBudget refuses the drain's evictions while the operator, which sees the node
cordoned, asks the trainer for a checkpoint of its current step, then deletes the workers
and recreates them on other nodes; the drain then completes on its own. Both install
modes (their RBAC must let the operator create the budget and watch nodes).

The trainer is its own /status and /checkpoint server (disttrain_trainer.metrics, the
pod's UID as the token) on loopback, with a stand-in for its training loop that holds at
the current step when asked: the loop's side of the handshake is proven with the real
trainer by the checkpoint-request trainer tests and the real-node suspend e2e."""

from __future__ import annotations

import subprocess

import pytest

from .conftest import job_manifest, now, pods_of, wait_job, wait_phase

pytestmark = pytest.mark.cluster


def test_a_drain_waits_for_the_checkpoint_and_the_workers_move_losing_no_step(cluster, namespace, operator,
                                                                              holding_trainer):
    port, sink, start = holding_trainer
    cluster.apply(job_manifest("drained", nodes=2, gpusPerNode=1, metrics={"port": port},
                               trainer={"builtin": {"steps": 1000, "batchSize": 8}},
                               checkpoint={"claimName": "shared-checkpoints", "intervalSteps": 500,
                                           "evictGraceSeconds": 60},
                               podTemplate={"metadata": {"annotations": {cluster.POD_IP_ANNOTATION: "127.0.0.1"}}}),
                  namespace=namespace)
    wait_phase(cluster, namespace, "drained", "Running")
    before = {p["metadata"]["name"]: p for p in pods_of(cluster, namespace, "drained")}
    node = before["drained-worker-1"]["spec"]["nodeName"]
    with sink.lock:
        sink.doc.update(step=420, totalSteps=1000, worldSize=2, lastUpdateTime=now())
    start(before["drained-worker-0"]["metadata"]["uid"])  # the operator asks the lowest ready worker
    wait_job(cluster, namespace, "drained", lambda j: (j["status"].get("progress") or {}).get("step") == 420,
             what="progress at step 420")
    budget = cluster.get("pdb", "drained", namespace)
    assert budget["spec"]["maxUnavailable"] == 0

    drain = subprocess.Popen([str(cluster.bin_dir / "kubectl"), "--kubeconfig", cluster.kubeconfig, "drain", node,
                              "--pod-selector", "disttrain.dev/job=drained", "--ignore-daemonsets",
                              "--delete-emptydir-data", "--timeout=150s"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = drain.communicate(timeout=180)
        assert drain.returncode == 0, output
        job = wait_job(cluster, namespace, "drained", lambda j: (j["status"].get("eviction") or {}).get(
            "handshake") not in (None, "Requested"), what="the move settled")
        eviction = job["status"]["eviction"]
        assert (eviction["reason"], eviction["handshake"], eviction["step"]) == ("NodeDrain", "Checkpointed", 420)
        assert (eviction["resumeFromStep"], eviction["stepsLost"]) == (420, 0), eviction
        job = wait_job(cluster, namespace, "drained", lambda j: j["status"].get("phase") == "Running" and all(
            p["metadata"]["uid"] not in {b["metadata"]["uid"] for b in before.values()}
            for p in pods_of(cluster, namespace, "drained")) and len(pods_of(cluster, namespace, "drained")) == 2,
            what="both workers recreated and running", stall=90)
        assert job["status"]["restarts"] == 0  # a move, not a failure
        assert all(p["spec"]["nodeName"] != node for p in pods_of(cluster, namespace, "drained"))
        assert "evicting pod" in output.lower() or "drained" in output.lower(), output
    finally:
        if drain.poll() is None:
            drain.kill()
        cluster.kubectl("uncordon", node)
