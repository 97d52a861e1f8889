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


def runs_on(cluster, namespace: str, job: str, node: str, ip: str) -> dict:
    """The job's one worker, once bound to the test's `node`, Running there: the test plays
    that node's kubelet. Returns the pod as bound."""
    def placed():
        pods = pods_of(cluster, namespace, job)
        return pods[0] if pods and pods[0]["spec"].get("nodeName") == node else None

    pod = cluster.wait_for(placed, timeout=60, what="the worker bound to the test's node")
    cluster.kubectl("patch", "pod", pod["metadata"]["name"], "-n", namespace, "--subresource=status",
                    "--type=merge", "-p", json.dumps({"status": {
                        "phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": "True"}],
                        "containerStatuses": [{"name": "trainer", "image": pod["spec"]["containers"][0]["image"],
                                               "imageID": "", "ready": True, "restartCount": 0, "started": True,
                                               "state": {"running": {"startedAt": now()}}}]}}))
    wait_phase(cluster, namespace, job, "Running")
    return pod


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

        pod = runs_on(cluster, namespace, "lost", lost_node, "10.254.0.9")

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


UNHEALTHY_TAINT = "example.com/gpu-health"
XID = {"type": "XidCriticalError", "status": "True", "reason": "Xid79", "message": "GPU has fallen off the bus"}


@pytest.mark.parametrize("signal", ["condition", "taint", "allocatable"])
def test_a_worker_on_a_ready_but_unhealthy_node_moves_and_the_job_avoids_the_node(
        cluster, namespace, operator_kubeconfig, signal):
    """Issue 53 item 2: the node stays Ready; one of the signals GPU clusters publish says
    it is sick. The operator (cluster-wide; both modes' node rights are proven above) moves
    the worker off it at once (no trainer answers on KWOK: nothing to checkpoint), records a
    NodeUnhealthy stop, and the new worker avoids the node."""
    from .conftest import running_operator

    sick = f"sick-{signal[:5]}-{namespace}"[:63]
    spare = json.loads(cluster.kubectl("get", "nodes", "-l", "type=kwok", "-o", "json").stdout)["items"]
    spare = next(n["metadata"]["name"] for n in spare if "gpu" in n["metadata"]["name"])
    status = node_status("True", "KubeletReady", now())
    for key in ("capacity", "allocatable"):
        status["status"][key]["nvidia.com/gpu"] = "1"
    cluster.apply({"apiVersion": "v1", "kind": "Node",
                   "metadata": {"name": sick, "labels": {POOL: namespace, "kubernetes.io/hostname": sick}}})
    with running_operator(cluster, namespace, operator_kubeconfig, DISTTRAIN_UNHEALTHY_NODE_TAINTS=UNHEALTHY_TAINT):
        try:
            cluster.kubectl("patch", "node", sick, "--subresource=status", "--type=merge", "-p", json.dumps(status))
            cluster.apply(job_manifest("sick", nodes=1, gpusPerNode=1, scheduling={"nodeSelector": {POOL: namespace}}),
                          namespace=namespace)

            pod = runs_on(cluster, namespace, "sick", sick, "10.254.0.10")

            # Another node may take it now; then the node, still Ready, says it is sick.
            cluster.kubectl("label", "node", spare, f"{POOL}={namespace}", "--overwrite")
            if signal == "condition":
                status["status"]["conditions"].append({**XID, "lastHeartbeatTime": now(), "lastTransitionTime": now()})
                why = "condition XidCriticalError=True (Xid79: GPU has fallen off the bus)"
            elif signal == "taint":
                cluster.kubectl("taint", "node", sick, f"{UNHEALTHY_TAINT}=xid:NoSchedule")
                why = f"taint {UNHEALTHY_TAINT}:NoSchedule"
            else:
                status["status"]["allocatable"]["nvidia.com/gpu"] = "0"  # the device plugin lost the GPU
                why = "0 nvidia.com/gpu allocatable where its workers were given 1"
            cluster.kubectl("patch", "node", sick, "--subresource=status", "--type=merge", "-p", json.dumps(status))

            # The operator deletes the worker; play its kubelet, which ends a deleted pod.
            cluster.wait_for(lambda: (pods_of(cluster, namespace, "sick") or [{}])[0].get("metadata", {})
                             .get("deletionTimestamp"), timeout=60, what="the worker on the sick node deleted")
            cluster.kubectl("delete", "pod", pod["metadata"]["name"], "-n", namespace, "--grace-period=0", "--force",
                            check=False)

            def replaced():
                fresh = [p for p in pods_of(cluster, namespace, "sick") if p["metadata"]["uid"] != pod["metadata"]["uid"]]
                return fresh[0] if fresh and fresh[0]["spec"].get("nodeName") == spare else None

            new = cluster.wait_for(replaced, timeout=90, what="the worker recreated on another node")
            terms = new["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                "nodeSelectorTerms"]
            assert {"key": "metadata.name", "operator": "NotIn", "values": [sick]} in terms[0]["matchFields"]
            job = wait_job(cluster, namespace, "sick", lambda j: any(
                f.get("cause") == "NodeUnhealthy" for f in j["status"].get("failures") or []),
                what="the move recorded")
            [entry] = [f for f in job["status"]["failures"] if f["cause"] == "NodeUnhealthy"]
            assert (entry["node"], entry["message"]) == (sick, f"node {sick} was unhealthy: {why}"), dump(job["status"])
            assert job["status"]["restarts"] == 0 and job["status"]["eviction"]["reason"] == "NodeUnhealthy"
            assert [a["node"] for a in job["status"]["avoidedNodes"]] == [sick]
            events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "--field-selector",
                                                "involvedObject.name=sick", "-o", "json").stdout)["items"]
            assert any(e["reason"] == "NodeUnhealthy" and e["type"] == "Warning"
                       and e["message"].startswith(f"node {sick} is unhealthy: {why}") for e in events), events
        finally:
            cluster.kubectl("label", "node", spare, f"{POOL}-", check=False)
            cluster.kubectl("delete", "dt", "sick", "-n", namespace, "--wait=false", check=False)
            cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force", check=False)
            cluster.kubectl("delete", "node", sick, "--ignore-not-found", "--wait=false", check=False)
