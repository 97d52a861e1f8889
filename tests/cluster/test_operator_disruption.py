"""The chart's PodDisruptionBudget for the operator, tested for its effect: the API server's
Eviction (what `kubectl drain` calls) may take one of two replicas and must refuse the
second while no replacement is ready; and the budget counts the operator's pods alone,
not a job's workers that share the release's labels.

The chart's Deployment, ServiceAccount and budget are applied as rendered (not its
cluster-wide RBAC: nothing runs here, the pods sit on a KWOK node). A replacement must not
become ready behind the test's back, so the node the replicas were put on loses the label
their nodeSelector asks for before the evictions: the new pod stays Pending, as on a
cluster whose other nodes are being drained too."""

from __future__ import annotations

import json

import pytest

from operator_reading import chart_objects

pytestmark = [pytest.mark.cluster]

NODE = "kwok-cpu-1"


def evict(cluster, namespace: str, pod: str) -> tuple[int, str]:
    """POST the pod's eviction; (0, "") when granted, else (HTTP code, message)."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
    out = cluster.kubectl("create", "--raw", f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", "-f", "-",
                          input=json.dumps(body), check=False)
    if out.returncode == 0:
        return 0, ""
    code = 429 if "TooManyRequests" in out.stderr or "429" in out.stderr else -1
    return code, out.stderr


def test_a_drain_keeps_one_operator_replica_and_the_budget_counts_only_operator_pods(cluster, namespace):
    label = f"disttrain.dev/pdb-{namespace[-5:]}"
    cluster.kubectl("label", "node", NODE, f"{label}=yes")
    try:
        objects = chart_objects(cluster, "dt", namespace, "--set", "replicaCount=2",
                                "--set", "podDisruptionBudget.enabled=true",
                                "--set-json", f'nodeSelector={{"{label}": "yes"}}')
        for obj in objects:
            if obj["kind"] in ("ServiceAccount", "Deployment", "PodDisruptionBudget"):
                cluster.apply(obj, namespace=namespace)
        budget = next(o for o in objects if o["kind"] == "PodDisruptionBudget")["metadata"]["name"]
        # A job's worker with the release's name and instance label: not the operator's.
        cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "dt-worker-0", "labels": {"app.kubernetes.io/name": "disttrain", "app.kubernetes.io/instance": "dt",
                                              "app.kubernetes.io/component": "worker"}},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "example.invalid/x"}]}},
            namespace=namespace)

        def counted():
            status = (cluster.try_get("poddisruptionbudget", budget, namespace) or {}).get("status") or {}
            fields = ("expectedPods", "currentHealthy", "disruptionsAllowed")
            return status if tuple(status.get(f) for f in fields) == (2, 2, 1) else None
        cluster.wait_for(counted, timeout=90, what="the budget to count both operator replicas healthy")

        pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-l", "app.kubernetes.io/component=operator",
                                          "-o", "json").stdout)["items"]
        assert sorted(p["spec"]["nodeName"] for p in pods) == [NODE, NODE]
        cluster.kubectl("label", "node", NODE, f"{label}-")  # the replacement has nowhere to go
        first, second = (p["metadata"]["name"] for p in pods)
        assert evict(cluster, namespace, first) == (0, "")
        code, message = evict(cluster, namespace, second)
        assert code == 429 and "disruption budget" in message, message
        still = cluster.try_get("pod", second, namespace)
        assert still is not None and not still["metadata"].get("deletionTimestamp")
    finally:
        cluster.kubectl("label", "node", NODE, f"{label}-", check=False)
