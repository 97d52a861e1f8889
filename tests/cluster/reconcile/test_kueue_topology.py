"""Topology-aware placement through the real Kueue's TAS (v0.19.2) and the real scheduler:
the test's own KWOK nodes, labelled as 2 blocks x 4 racks x 4 hosts of 8 fake GPUs, a
Kueue Topology of block, rack and host, and a TAS ResourceFlavor on those nodes only (they
carry a taint of the test's pool, which the flavor tolerates, so no other test's pod lands
there). A worker takes 4 GPUs: a host holds 2 workers, a rack 8, a block 32.

The operator runs as shipped (its entry point, DISTTRAIN_KUEUE, the RBAC of manifests/rbac +
manifests/kueue); Kueue's TopologyUngater lifts each worker's gate and pins it to its host."""

from __future__ import annotations

import json

import pytest

from .conftest import TEST_POOL, condition, dump, get_job, kwok_node, pods_of, wait_job
from .kueue_helpers import queued_job, queued_operator, queues, running

pytestmark = pytest.mark.cluster

__all__ = ["queued_operator"]

POOL = TEST_POOL
BLOCK, RACK, HOST = "disttrain.dev/test-block", "disttrain.dev/test-rack", "kubernetes.io/hostname"
GPUS = "nvidia.com/gpu"


def host_name(namespace: str, block: int, rack: int, host: int) -> str:
    return f"tas-{namespace[-5:]}-b{block}r{rack}h{host}"


def topology_name(namespace: str) -> str:
    return f"topo-{namespace}"[:63]


def topology_nodes(namespace: str) -> list[dict]:
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", GPUS: "8"}
    nodes = []
    for block in range(2):
        for rack in range(4):
            for host in range(4):
                name = host_name(namespace, block, rack, host)
                nodes.append(kwok_node(name, {POOL: namespace, BLOCK: f"b{block}", RACK: f"b{block}-r{rack}",
                                              "type": "kwok-tas"}, capacity,
                                       [{"key": POOL, "value": namespace, "effect": "NoSchedule"}]))
    return nodes


@pytest.fixture
def topology(cluster, namespace, queued_operator):
    """The nodes, the Topology, the TAS flavor and the test's queues; all gone at the end."""
    nodes = topology_nodes(namespace)
    names = [n["metadata"]["name"] for n in nodes]
    topo = topology_name(namespace)
    cluster.apply({"apiVersion": "v1", "kind": "List", "items": nodes})
    try:
        cluster.kubectl("wait", "--for=condition=Ready", "node", "-l", f"{POOL}={namespace}", "--timeout=90s",
                        timeout=120)
        cluster.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": topo},
                       "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOST}]}})
        queues(cluster, namespace, gpus=256, flavor={
            "nodeLabels": {POOL: namespace}, "topologyName": topo,
            "tolerations": [{"key": POOL, "operator": "Equal", "value": namespace, "effect": "NoSchedule"}]})
        yield {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes}
    finally:
        cluster.kubectl("delete", "dt", "--all", "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "node", *names, "--ignore-not-found", "--wait=false", check=False)
        pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
        for pod in pods:  # bound to deleted nodes, they would wait for a kubelet that never comes
            cluster.kubectl("delete", "pod", "-n", namespace, pod["metadata"]["name"], "--grace-period=0",
                            "--force", check=False)
        cluster.kubectl("delete", "topologies.kueue.x-k8s.io", topo, "--ignore-not-found", "--wait=false",
                        check=False)


def tas_job(name: str, nodes: int, **topology) -> dict:
    return queued_job(name, nodes=nodes, gpusPerNode=4, scheduling={"topology": topology})


def placed(cluster, namespace: str, name: str, nodes: dict, logs, count: int) -> tuple[dict, list[dict]]:
    """The job Running with every worker bound; returns it and its pods."""
    def bound():
        pods = pods_of(cluster, namespace, name)
        return pods if len(pods) == count and all(p["spec"].get("nodeName") for p in pods) else None

    pods = cluster.wait_for(bound, timeout=180, interval=1, what=f"{name}: {count} workers bound",
                            describe=lambda: dump({"pods": [(p["metadata"]["name"], p["spec"].get("nodeName"),
                                                             p["spec"].get("schedulingGates"))
                                                            for p in pods_of(cluster, namespace, name)],
                                                   "job": (cluster.try_get("dt", name, namespace) or {}).get("status")})
                            + logs.tails())
    job = running(cluster, namespace, name, logs)
    for pod in pods:  # Kueue's ungater pinned each to the host of its domain and lifted the gate
        assert not pod["spec"].get("schedulingGates")
        assert pod["spec"]["nodeSelector"][HOST] == pod["spec"]["nodeName"] and pod["spec"]["nodeName"] in nodes
    return job, pods


def levels(pods: list[dict], nodes: dict, label: str) -> set[str]:
    return {nodes[p["spec"]["nodeName"]][label] for p in pods}


def test_required_and_preferred_levels_place_jobs_whole_and_a_job_that_cannot_fit_waits_with_kueues_words(
        cluster, namespace, topology, queued_operator):
    nodes = topology
    # Two jobs that each fit a rack: each lands on exactly one, and they do not share one.
    for name in ("rack-a", "rack-b"):
        cluster.apply(tas_job(name, 8, required=RACK), namespace=namespace)
    racks = {}
    for name in ("rack-a", "rack-b"):
        job, pods = placed(cluster, namespace, name, nodes, queued_operator, 8)
        racks[name] = levels(pods, nodes, RACK)
        assert len(racks[name]) == 1, racks
        placement = job["status"]["admission"]["topology"]
        assert placement == {"level": RACK, "domainCount": 1, "hosts": 4,
                             "domains": [{"name": next(iter(racks[name])), "workers": 8}]}
        assert "placed by Kueue's Topology-Aware Scheduling (required disttrain.dev/test-rack) in 1 domain(s)" in \
            condition(job, "Admitted")["message"]
        # Worker i is the i-th of Kueue's order: neighbours in the ring share a host.
        by_index = sorted(pods, key=lambda p: int(p["metadata"]["labels"]["disttrain.dev/worker-index"]))
        assert [p["spec"]["nodeName"] for p in by_index[::2]] == [p["spec"]["nodeName"] for p in by_index[1::2]]
    assert racks["rack-a"] != racks["rack-b"]

    # A rack holds 8 workers: 10 never fit one, and the job waits with Kueue's reason.
    cluster.apply(tas_job("too-big", 10, required=RACK), namespace=namespace)
    words = f'topology "{topology_name(namespace)}" allows to fit only 8 out of 10 pod(s)'
    waiting = wait_job(cluster, namespace, "too-big", lambda j: words in (
        condition(j, "Queued") or {}).get("message", ""), what="too-big Queued with Kueue's TAS words")
    assert waiting["status"]["phase"] == "Pending" and not pods_of(cluster, namespace, "too-big")
    cluster.kubectl("delete", "dt", "too-big", "rack-a", "rack-b", "-n", namespace, "--timeout=120s", timeout=150)

    # Preferred block: 8 workers fit one block and stay in it; 40 do not, and spread.
    cluster.apply(tas_job("one-block", 8, preferred=BLOCK), namespace=namespace)
    _job, pods = placed(cluster, namespace, "one-block", nodes, queued_operator, 8)
    assert len(levels(pods, nodes, BLOCK)) == 1
    cluster.apply(tas_job("wide", 40, preferred=BLOCK), namespace=namespace)
    job, pods = placed(cluster, namespace, "wide", nodes, queued_operator, 40)
    assert len(levels(pods, nodes, BLOCK)) == 2
    assert job["status"]["admission"]["topology"]["domainCount"] == 2
    assert "did not fit one disttrain.dev/test-block, so Kueue spread it over 2" in \
        condition(job, "Admitted")["message"]


def test_a_worker_whose_host_is_lost_is_replaced_inside_the_same_rack(cluster, namespace, topology, queued_operator):
    nodes = topology
    cluster.apply(tas_job("steady", 6, required=RACK), namespace=namespace)
    _job, pods = placed(cluster, namespace, "steady", nodes, queued_operator, 6)
    (rack,) = levels(pods, nodes, RACK)
    lost = pods[0]["spec"]["nodeName"]
    on_lost = {p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == lost}
    cluster.kubectl("delete", "node", lost, "--wait=false")

    def replaced():
        now = pods_of(cluster, namespace, "steady")
        bound = [p for p in now if p["spec"].get("nodeName") and p["metadata"].get("deletionTimestamp") is None]
        return now if len(bound) == 6 and lost not in {p["spec"]["nodeName"] for p in bound} else None

    now = cluster.wait_for(replaced, timeout=240, interval=2, what="the lost host's workers replaced",
                           describe=lambda: dump({"pods": [(p["metadata"]["name"], p["spec"].get("nodeName"),
                                                            p["spec"].get("schedulingGates"))
                                                           for p in pods_of(cluster, namespace, "steady")],
                                                  "job": get_job(cluster, namespace, "steady").get("status")})
                           + queued_operator.tails())
    moved = [p for p in now if p["metadata"]["name"] in on_lost]
    assert moved and levels(now, nodes, RACK) == {rack}, dump([(p["metadata"]["name"], p["spec"]["nodeName"])
                                                               for p in now])
