"""A worker's node is lost (its kubelet stops reporting: Ready=Unknown, as the node
lifecycle controller writes it): after failurePolicy.nodeLostSeconds the operator
force-deletes the worker and it is recreated on another node, recorded as NodeLost,
without spending backoffLimit, in both install modes (their RBAC must let it watch nodes).

The lost node is one the test plays the kubelet of (KWOK manages only its own annotated
nodes, and its node stage would turn a KWOK node patched NotReady Ready again at once): it
posts the node's Ready status and its pod's Running status, then says Unknown, as the node
lifecycle controller does when a kubelet stops reporting.

This test stands for issue 22's real-node case (e), stopping a kubelet while the CPU
example runs: this machine has one real node, so a replacement could only go back to the
node whose kubelet was stopped, and the shared control plane's node-monitor grace period
(5 minutes, hack/cluster.sh) is what would have to pass before Kubernetes marks it Unknown."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from .conftest import condition, dump, get_job, job_manifest, pods_of, wait_job, wait_phase

pytestmark = pytest.mark.cluster

POOL = "disttrain.dev/test-pool"


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_status(ready: str, reason: str, since: str) -> dict:
    return {"status": {
        "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
        "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": ready, "reason": reason, "message": reason,
                        "lastHeartbeatTime": since, "lastTransitionTime": since}]}}


def test_a_worker_on_a_lost_node_is_replaced_on_another_node(cluster, namespace, operator, install_mode):
    lost_node = f"lost-{namespace}"[:63]
    spare = json.loads(cluster.kubectl("get", "nodes", "-l", "type=kwok", "-o", "json").stdout)["items"]
    spare = next(n["metadata"]["name"] for n in spare if "cpu" in n["metadata"]["name"])
    cluster.apply({"apiVersion": "v1", "kind": "Node",
                   "metadata": {"name": lost_node, "labels": {POOL: namespace, "kubernetes.io/hostname": lost_node}}})
    try:
        cluster.kubectl("patch", "node", lost_node, "--subresource=status", "--type=merge",
                        "-p", json.dumps(node_status("True", "KubeletReady", now())))
        cluster.apply(job_manifest("lost", nodes=1, failurePolicy={"nodeLostSeconds": 3},
                                   scheduling={"nodeSelector": {POOL: namespace}}), namespace=namespace)

        def placed():
            pods = pods_of(cluster, namespace, "lost")
            return pods[0] if pods and pods[0]["spec"].get("nodeName") == lost_node else None

        pod = cluster.wait_for(placed, timeout=60, what="the worker bound to the test's node")
        # Play its kubelet: the worker runs.
        cluster.kubectl("patch", "pod", pod["metadata"]["name"], "-n", namespace, "--subresource=status",
                        "--type=merge", "-p", json.dumps({"status": {
                            "phase": "Running", "podIP": "10.254.0.9",
                            "conditions": [{"type": "Ready", "status": "True"}],
                            "containerStatuses": [{"name": "trainer", "image": pod["spec"]["containers"][0]["image"],
                                                   "imageID": "", "ready": True, "restartCount": 0, "started": True,
                                                   "state": {"running": {"startedAt": now()}}}]}}))
        wait_phase(cluster, namespace, "lost", "Running")

        # Another node may take it now; then the kubelet goes silent.
        cluster.kubectl("label", "node", spare, f"{POOL}={namespace}", "--overwrite")
        cluster.kubectl("taint", "node", lost_node, "node.kubernetes.io/unreachable:NoSchedule")
        since = now()
        cluster.kubectl("patch", "node", lost_node, "--subresource=status", "--type=merge",
                        "-p", json.dumps(node_status("Unknown", "NodeStatusUnknown", since)))

        def replaced():
            pods = pods_of(cluster, namespace, "lost")
            fresh = [p for p in pods if p["metadata"]["uid"] != pod["metadata"]["uid"]]
            return fresh[0] if fresh and fresh[0]["spec"].get("nodeName") == spare \
                and fresh[0].get("status", {}).get("phase") == "Running" else None

        new = cluster.wait_for(replaced, timeout=90, what="the worker recreated on another node")
        assert new["metadata"]["name"] == "lost-worker-0"
        # Never before nodeLostSeconds: a node that flaps back within it keeps its workers.
        created = datetime.strptime(new["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=timezone.utc)
        lost_at = datetime.strptime(since, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        assert (created - lost_at).total_seconds() >= 3
        job = wait_job(cluster, namespace, "lost", lambda j: j["status"].get("phase") == "Running"
                       and (j["status"].get("failures") or []), what="running again, the loss recorded")
        entry = job["status"]["failures"][-1]
        assert {k: entry.get(k) for k in ("cause", "node", "pod", "podUID", "rank", "time")} == {
            "cause": "NodeLost", "node": lost_node, "pod": "lost-worker-0", "podUID": pod["metadata"]["uid"],
            "rank": 0, "time": since}, dump(job["status"])
        assert entry["message"].startswith(f"node {lost_node} Ready=Unknown (NodeStatusUnknown) since {since}")
        assert job["status"]["restarts"] == 0  # a lost node spends no backoffLimit
        assert condition(job, "Running")["status"] == "True"
        events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "--field-selector",
                                            "involvedObject.name=lost", "-o", "json").stdout)["items"]
        assert any(e["reason"] == "NodeLost" and "force-deleting lost-worker-0" in e["message"] for e in events)
        # (the counters move just after the status write seen above)
        cluster.wait_for(lambda: operator.sample("disttrain_job_failures_total", namespace=namespace, job="lost",
                                                 cause="NodeLost") >= 1, timeout=10, what="the loss counted")
        assert operator.sample("disttrain_job_failures_total", namespace=namespace, job="lost", cause="NodeLost") == 1
        assert get_job(cluster, namespace, "lost")["status"]["failures"] == job["status"]["failures"]
    finally:
        cluster.kubectl("label", "node", spare, f"{POOL}-", check=False)
        cluster.kubectl("delete", "node", lost_node, "--ignore-not-found", "--wait=false", check=False)
