"""A job that failed twice on one node creates its next workers away from it (a required
node affinity the scheduler obeys), and when that node is the only one left a worker
fits on, it says so, stops avoiding, and runs there: on the real API server and scheduler,
two KWOK nodes put in and out of the job's node pool by a label."""

from __future__ import annotations

import json

import pytest

from .conftest import annotate_exit, condition, dump, events_of, job_manifest, pods_of, running_operator, \
    wait_job

pytestmark = pytest.mark.cluster

POOL = "disttrain.dev/test-pool"


def worker(cluster, namespace, not_uid=None) -> dict:
    """picky-worker-0 once it runs (a new one, if not_uid names the old)."""
    def current():
        pods = [p for p in pods_of(cluster, namespace, "picky") if p["metadata"]["uid"] != not_uid
                and not p["metadata"].get("deletionTimestamp")]
        return pods[0] if pods and pods[0].get("status", {}).get("phase") == "Running" else None

    return cluster.wait_for(current, timeout=90, what="picky-worker-0 running")


def test_a_node_that_failed_the_job_twice_is_avoided_until_no_other_node_fits(cluster, namespace,
                                                                               operator_kubeconfig):
    nodes = json.loads(cluster.kubectl("get", "nodes", "-l", "type=kwok", "-o", "json").stdout)["items"]
    first, second = sorted(n["metadata"]["name"] for n in nodes if "cpu" in n["metadata"]["name"])[:2]
    cluster.kubectl("label", "node", first, f"{POOL}={namespace}", "--overwrite")
    try:
        with running_operator(cluster, namespace, operator_kubeconfig):
            cluster.apply(job_manifest("picky", nodes=1, backoffLimit=10,
                                       scheduling={"nodeSelector": {POOL: namespace}}), namespace=namespace)
            pod = worker(cluster, namespace)
            assert pod["spec"]["nodeName"] == first
            annotate_exit(cluster, namespace, "picky-worker-0", 1)  # the first failure there
            pod = worker(cluster, namespace, not_uid=pod["metadata"]["uid"])
            assert pod["spec"]["nodeName"] == first and "affinity" not in pod["spec"]

            cluster.kubectl("label", "node", second, f"{POOL}={namespace}", "--overwrite")
            annotate_exit(cluster, namespace, "picky-worker-0", 1)  # the second: avoid it
            pod = worker(cluster, namespace, not_uid=pod["metadata"]["uid"])
            assert pod["spec"]["nodeName"] == second
            terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            assert terms["nodeSelectorTerms"] == [{"matchFields": [
                {"key": "metadata.name", "operator": "NotIn", "values": [first]}]}]
            job = wait_job(cluster, namespace, "picky", lambda j: j["status"].get("avoidedNodes"),
                           what="the avoided node in status")
            avoided = job["status"]["avoidedNodes"]
            assert [(a["node"], a["failures"], "liftedTime" in a) for a in avoided] == [(first, 2, False)]
            assert any(e["reason"] == "NodeAvoided" and first in e["message"]
                       for e in events_of(cluster, namespace, "picky"))

            # Only the avoided node is left in the pool: the next worker fits nowhere else.
            cluster.kubectl("label", "node", second, f"{POOL}-")
            annotate_exit(cluster, namespace, "picky-worker-0", 1)
            pod = worker(cluster, namespace, not_uid=pod["metadata"]["uid"])
            assert pod["spec"]["nodeName"] == first and "affinity" not in pod["spec"], dump(pod["spec"])
            job = wait_job(cluster, namespace, "picky", lambda j: j["status"].get("phase") == "Running"
                           and (j["status"].get("avoidedNodes") or [{}])[0].get("liftedTime"),
                           what="running again, the avoidance lifted")
            lifted = job["status"]["avoidedNodes"][0]
            assert lifted["node"] == first
            assert lifted["message"].startswith(f"picky-worker-0 cannot be scheduled while avoiding {first}: ")
            assert any(e["reason"] == "NodeAvoidanceLifted" for e in events_of(cluster, namespace, "picky"))
            assert job["status"]["restarts"] == 3 and condition(job, "Running")["status"] == "True"
            # The worker that fit nowhere is in the history too, with no node.
            assert [(f["cause"], f.get("node")) for f in job["status"]["failures"]] == [
                ("ExitCode", first), ("ExitCode", first), ("ExitCode", second), ("Unschedulable", None)]
    finally:
        cluster.kubectl("label", "node", first, f"{POOL}-", check=False)
        cluster.kubectl("label", "node", second, f"{POOL}-", check=False)
