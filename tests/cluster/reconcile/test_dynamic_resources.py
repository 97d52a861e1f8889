"""GPUs through Dynamic Resource Allocation on the real control plane: kube-controller-manager
makes each worker's ResourceClaim from the job's template and kube-scheduler allocates the
devices, in both install modes (their RBAC must let the operator create the template); the
real Kueue counts a queued job's devices against its ClusterQueue's quota.

A stand-in, said here: no DRA driver runs on KWOK's fake nodes, so the test publishes what a
driver's kubelet plugin would, one ResourceSlice per node of 8 devices with attributes, and
the DeviceClass that selects them. Everything that reads them (allocation, the claims, the
scheduler's verdict) is Kubernetes' own."""

from __future__ import annotations

import json

import pytest

from kueue_host import DRA_DEVICE_CLASS, DRA_RESOURCE  # tests/kueue_host.py (tests/ is on sys.path)

from .conftest import (TEST_POOL, condition, dump, get_job, job_manifest, kwok_node, pods_of, wait_job,
                       wait_phase)
from .kueue_helpers import KUEUE_LABELS, queued_operator, queues, running

__all__ = ["queued_operator"]

pytestmark = pytest.mark.cluster

POOL = TEST_POOL


def driver(namespace: str) -> str:
    return f"gpu.{namespace[-5:]}.test.disttrain.dev"


def dra_node(name: str, namespace: str) -> dict:
    """A node of the test's pool without extended GPUs: its devices are in its ResourceSlice."""
    return kwok_node(name, {POOL: namespace, "type": "kwok-dra"}, {"cpu": "64", "memory": "512Gi", "pods": "110"},
                     [{"key": POOL, "value": namespace, "effect": "NoSchedule"}])


def resource_slice(node: str, namespace: str) -> dict:
    """What a DRA driver publishes for a node: 8 GPUs, each with its model and memory."""
    devices = [{"name": f"gpu-{i}", "attributes": {"model": {"string": "H100"}, "index": {"int": i}},
                "capacity": {"memory": {"value": "80Gi"}}} for i in range(8)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-gpus"},
            "spec": {"driver": driver(namespace), "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}


@pytest.fixture
def devices(cluster, namespace):
    yield from published(cluster, namespace, f"gpu-{namespace}"[:63])


@pytest.fixture
def kueue_devices(cluster, namespace, queued_operator):
    """As `devices`, of the DeviceClass Kueue's configuration maps to a quota resource."""
    yield from published(cluster, namespace, DRA_DEVICE_CLASS)


@pytest.fixture
def three_nodes_of_devices(cluster, namespace):
    yield from published(cluster, namespace, f"gpu-{namespace}"[:63], count=3)


def published(cluster, namespace: str, device_class: str, count: int = 2):
    """`count` fake nodes of 8 devices each, and the DeviceClass of their driver; gone at the end
    (with any DeviceTaintRule the test made)."""
    nodes = [f"dra-{namespace[-5:]}-{i}" for i in range(count)]
    cluster.apply({"apiVersion": "v1", "kind": "List", "items": [
        *(dra_node(n, namespace) for n in nodes), *(resource_slice(n, namespace) for n in nodes),
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": device_class},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver(namespace)}"'}}]}}]})
    try:
        cluster.kubectl("wait", "--for=condition=Ready", "node", *nodes, "--timeout=90s", timeout=120)
        yield nodes, device_class
    finally:
        cluster.kubectl("delete", "dt", "--all", "-n", namespace, "--wait=false", check=False)
        pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
        for pod in pods:
            cluster.kubectl("delete", "pod", "-n", namespace, pod["metadata"]["name"], "--grace-period=0", "--force",
                            check=False)
        cluster.kubectl("delete", "resourceslices", *(f"{n}-gpus" for n in nodes), "--ignore-not-found", check=False)
        cluster.kubectl("delete", "devicetaintrules", taint_rule_name(namespace), "--ignore-not-found", check=False)
        cluster.kubectl("delete", "deviceclass", device_class, "--ignore-not-found", check=False)
        cluster.kubectl("delete", "node", *nodes, "--ignore-not-found", "--wait=false", check=False)


def taint_rule_name(namespace: str) -> str:
    return f"sick-{namespace}"[:63]


def dra_job(name: str, namespace: str, device_class: str, selectors: list[str] | None = None) -> dict:
    devices = {"className": device_class, "count": 4, **({"selectors": selectors} if selectors else {})}
    return job_manifest(name, nodes=2, devices=devices, scheduling={
        "nodeSelector": {POOL: namespace},
        "tolerations": [{"key": POOL, "operator": "Equal", "value": namespace, "effect": "NoSchedule"}]})


def claims(cluster, namespace: str) -> list[dict]:
    return json.loads(cluster.kubectl("get", "resourceclaims", "-n", namespace, "-o", "json").stdout)["items"]


def test_each_worker_gets_an_allocated_claim_of_four_devices_on_its_node_and_an_unmet_selector_waits_with_the_schedulers_reason(  # noqa: E501
        cluster, namespace, operator, install_mode, devices):
    nodes, device_class = devices
    cluster.apply(dra_job("dra", namespace, device_class, ['device.attributes["' + driver(namespace)
                                                           + '"].model == "H100"']), namespace=namespace)

    def allocated():
        pods = pods_of(cluster, namespace, "dra")
        found = {c["metadata"]["ownerReferences"][0]["name"]: c for c in claims(cluster, namespace)
                 if (c.get("status") or {}).get("allocation")}
        return (pods, found) if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods) and len(found) == 2 \
            else None

    pods, found = cluster.wait_for(allocated, timeout=180, interval=1, what="both workers bound with claims allocated",
                                   describe=lambda: dump({"pods": pods_of(cluster, namespace, "dra"),
                                                          "claims": claims(cluster, namespace)}))
    for pod in pods:
        claim = found[pod["metadata"]["name"]]
        results = claim["status"]["allocation"]["devices"]["results"]
        assert len(results) == 4 and {r["driver"] for r in results} == {driver(namespace)}
        assert {r["pool"] for r in results} == {pod["spec"]["nodeName"]}  # the devices of the node it runs on
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(nodes)
    wait_job(cluster, namespace, "dra", lambda j: j["status"].get("phase") == "Running", what="Running")

    # No device meets the selector: the workers wait, and the job says the scheduler's words.
    cluster.apply(dra_job("unmet", namespace, device_class, ['device.attributes["' + driver(namespace)
                                                             + '"].model == "B200"']), namespace=namespace)
    job = wait_job(cluster, namespace, "unmet", lambda j: "cannot allocate all claims" in json.dumps(
        j.get("status", {}).get("conditions") or []), what="the scheduler's reason in the job's status")
    assert job["status"]["phase"] == "Pending"
    assert not any(p["spec"].get("nodeName") for p in pods_of(cluster, namespace, "unmet"))
    assert condition(job, "Running")["status"] == "False"


def test_kueue_counts_a_queued_jobs_devices_against_its_quota(cluster, namespace, queued_operator, kueue_devices):
    """The claim template is there before the Workload: Kueue reads it to size the Workload
    (one missing makes it inadmissible). 8 devices of quota: the first job of 2 x 4 runs, the
    second waits with Kueue's words for the device resource."""
    nodes, device_class = kueue_devices
    queues(cluster, namespace, gpus=8, resource=DRA_RESOURCE)
    for name in ("first", "second"):
        job = dra_job(name, namespace, device_class)
        job["metadata"]["labels"] = dict(KUEUE_LABELS)
        cluster.apply(job, namespace=namespace)
    running(cluster, namespace, "first", queued_operator)
    assert len([c for c in claims(cluster, namespace) if (c.get("status") or {}).get("allocation")]) == 2
    words = f"insufficient unused quota for {DRA_RESOURCE}"
    second = wait_job(cluster, namespace, "second", lambda j: words in (condition(j, "Queued") or {}).get(
        "message", ""), what="second Queued with Kueue's words for the devices")
    assert second["status"]["phase"] == "Pending" and not pods_of(cluster, namespace, "second")


def test_a_taint_on_a_device_a_worker_holds_moves_the_job_off_that_node_and_the_new_workers_avoid_it(
        cluster, namespace, queued_operator, three_nodes_of_devices):
    """An admin's DeviceTaintRule (NoExecute) on one device worker 0 holds: the job moves off that
    node before Kubernetes would evict (the claim tolerates the taint for evictGraceSeconds and a
    margin), its history names the device and the taint's key, and the new workers avoid the node.
    The operator is its real entry point (the watches of claims, slices and rules are registered
    there), as its ServiceAccount with the chart's rights."""
    nodes, device_class = three_nodes_of_devices
    cluster.apply(dra_job("steady", namespace, device_class), namespace=namespace)
    wait_phase(cluster, namespace, "steady", "Running")
    held = next(c for c in claims(cluster, namespace) if (c.get("status") or {}).get("allocation")
                and c["metadata"]["ownerReferences"][0]["name"] == "steady-worker-0")
    device = held["status"]["allocation"]["devices"]["results"][0]
    sick_node = device["pool"]
    cluster.apply({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
                   "metadata": {"name": taint_rule_name(namespace)},
                   "spec": {"deviceSelector": {"driver": device["driver"], "pool": device["pool"],
                                               "device": device["device"]},
                            "taint": {"key": "example.com/xid", "value": "79", "effect": "NoExecute"}}})
    moved = wait_job(cluster, namespace, "steady", lambda j: any(
        f.get("cause") == "NodeUnhealthy" for f in j["status"].get("failures") or []), what="moved off the node")
    (entry,) = [f for f in moved["status"]["failures"] if f.get("cause") == "NodeUnhealthy"]
    assert entry["node"] == sick_node
    assert f"{device['pool']}/{device['device']} tainted example.com/xid=79:NoExecute" in entry["message"]

    def away():
        pods = [p for p in pods_of(cluster, namespace, "steady") if not p["metadata"].get("deletionTimestamp")]
        return pods if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = cluster.wait_for(away, timeout=180, interval=1, what="the new workers bound",
                            describe=lambda: dump({"pods": pods_of(cluster, namespace, "steady"),
                                                   "job": get_job(cluster, namespace, "steady")["status"]}))
    assert sick_node not in {p["spec"]["nodeName"] for p in pods}
    assert sick_node in [a["node"] for a in get_job(cluster, namespace, "steady")["status"]["avoidedNodes"]]


COMPUTE_DOMAIN_CRD = "computedomains.resource.nvidia.com"


def compute_domain_crd() -> dict:
    """A stand-in, said here: the ComputeDomain CRD as NVIDIA's DRA driver installs it (its
    group, version, kind and scope; no schema of its own), since the driver itself cannot run
    without NVIDIA hardware. What the operator does with it is the API server's answer."""
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": COMPUTE_DOMAIN_CRD},
            "spec": {"group": "resource.nvidia.com", "scope": "Namespaced",
                     "names": {"plural": "computedomains", "singular": "computedomain", "kind": "ComputeDomain",
                               "listKind": "ComputeDomainList"},
                     "versions": [{"name": "v1beta1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {"type": "object",
                                                                  "x-kubernetes-preserve-unknown-fields": True}}}]}}


def test_a_compute_domain_job_says_the_fix_where_the_kind_is_not_served_and_owns_one_where_it_is(
        cluster, namespace, operator, install_mode):
    job = job_manifest("nvl", nodes=2, gpusPerNode=4, computeDomain={})
    cluster.apply(job, namespace=namespace)
    refused = wait_job(cluster, namespace, "nvl", lambda j: "install NVIDIA's DRA driver" in (
        condition(j, "PodCreationForbidden") or {}).get("message", ""), what="the ComputeDomain refused, with the fix")
    assert refused["status"]["phase"] == "Pending" and not pods_of(cluster, namespace, "nvl")
    cluster.apply(compute_domain_crd())
    try:
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{COMPUTE_DOMAIN_CRD}", "--timeout=60s",
                        timeout=90)
        domain = cluster.wait_for(lambda: cluster.try_get("computedomains.resource.nvidia.com", "nvl-nvlink",
                                                          namespace), timeout=180, what="the job's ComputeDomain")
        assert domain["metadata"]["ownerReferences"][0]["name"] == "nvl"
        assert domain["spec"]["channel"]["resourceClaimTemplate"]["name"] == "nvl-nvlink-channel"
        pods = cluster.wait_for(lambda: (p := pods_of(cluster, namespace, "nvl")) and len(p) == 2 and p,
                                timeout=120, what="the workers")
        for pod in pods:
            assert {"name": "nvlink", "resourceClaimTemplateName": "nvl-nvlink-channel"} in pod["spec"]["resourceClaims"]
    finally:
        cluster.kubectl("delete", "dt", "nvl", "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "computedomains.resource.nvidia.com", "--all", "-n", namespace, "--wait=false",
                        check=False)
        cluster.kubectl("delete", "crd", COMPUTE_DOMAIN_CRD, "--ignore-not-found", "--wait=false", check=False)
