"""kube-scheduler's own gang scheduling (Kubernetes 1.37, the GenericWorkload feature gate,
beta and off by default), against the real control plane: a job with scheduling.gang and no
schedulerName gets a scheduling.k8s.io/v1beta1 PodGroup (minCount = minNodes) and workers
that name it. On a second cluster started with the gate (hack/cluster.sh,
DISTTRAIN_FEATURE_GATES), 3 workers on nodes with room for 2 are none of them bound; a third
node joins and all 3 are. On the ordinary cluster, which does not serve those PodGroups, the
job creates no worker and says which flags to set (GangNotServed).

The gated cluster's nodes are the test's own KWOK nodes of one GPU each; the operator runs
there with the RBAC of manifests/rbac, as on the session cluster."""

from __future__ import annotations

import json
import os

import pytest

from .conftest import TEST_POOL as POOL
from .conftest import condition, dump, events_of, gpu_node, install_operator_rights, job_manifest, pods_of, \
    running_operator, wait_job

pytestmark = pytest.mark.cluster

NATIVE = "podgroups.scheduling.k8s.io"


@pytest.fixture(scope="module")
def gated_cluster(request, cluster):
    """A second control plane with GenericWorkload on in all three components, no fake
    nodes of its own; reaped with this process, down at the module's end. It asks for
    `cluster` first, so the session cluster's KUBECONFIG is the one restored after."""
    from e2e.conftest import start_cluster  # tests/conftest.py's, loaded by path there

    env = {"DISTTRAIN_FEATURE_GATES": "GenericWorkload=true", "DISTTRAIN_FAKE_GPU_NODES": "0",
           "DISTTRAIN_FAKE_CPU_NODES": "0"}
    yield from start_cluster(request, f"gang-{os.getpid()}", env)


def native_job(name: str, pool: str) -> dict:
    return job_manifest(name, nodes=3, gpusPerNode=1, checkpoint={"storage": "none"},
                        scheduling={"nodeSelector": {POOL: pool}, "gang": {}})


def turned_away(cluster, namespace: str, name: str):
    """The PodGroup once the scheduler tried the whole gang and placed none of it."""
    group = cluster.try_get(NATIVE, name, namespace) or {}
    tried = condition(group, "PodGroupInitiallyScheduled")
    return group if tried is not None and tried["status"] == "False" else None


def test_3_workers_where_2_fit_none_bound_and_all_3_once_a_node_joins(gated_cluster):
    cluster, namespace = gated_cluster, "gang-native"
    names = [f"gang-native-{i}" for i in range(3)]
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    cluster.wait_for(lambda: cluster.try_get("serviceaccount", "default", namespace), timeout=60,
                     what="the namespace's default ServiceAccount")
    for name in names[:2]:
        cluster.apply(gpu_node(name, namespace))
    try:
        cluster.kubectl("wait", "--for=condition=Ready", "node", *names[:2], "--timeout=60s", timeout=90)
        with running_operator(cluster, namespace, install_operator_rights(cluster)):
            cluster.apply(native_job("gang", namespace), namespace=namespace)
            group = cluster.wait_for(lambda: turned_away(cluster, namespace, "gang"), timeout=180, interval=1,
                                     what="the gang tried and turned away",
                                     describe=lambda: dump(pods_of(cluster, namespace, "gang")))
            assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
            assert group["metadata"]["ownerReferences"][0]["name"] == "gang"
            pods = pods_of(cluster, namespace, "gang")
            assert len(pods) == 3 and [p["spec"].get("nodeName") for p in pods] == [None] * 3
            assert {json.dumps(p["spec"]["schedulingGroup"]) for p in pods} == {'{"podGroupName": "gang"}'}
            said = [e["message"] for e in events_of(cluster, namespace, "gang") if e["reason"] == "GangScheduling"]
            assert said and "kube-scheduler itself" in said[0], said

            # Room for 3: the scheduler tries the gang again when a node joins.
            cluster.apply(gpu_node(names[2], namespace))

            def all_bound():
                pods = pods_of(cluster, namespace, "gang")
                return pods if len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods) else None

            pods = cluster.wait_for(all_bound, timeout=300, interval=1, what="all 3 workers bound",
                                    describe=lambda: dump(pods_of(cluster, namespace, "gang")))
            assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(names)
            wait_job(cluster, namespace, "gang", lambda j: j["status"].get("phase") == "Running",
                     what="the gang Running", stall=120)
    finally:
        cluster.kubectl("delete", "dt", "--all", "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force", check=False)
        cluster.kubectl("delete", "node", *names, "--ignore-not-found", "--wait=false", check=False)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_where_the_cluster_does_not_serve_them_the_job_creates_no_worker_and_names_the_flags(
        cluster, namespace, operator):
    assert cluster.kubectl("get", NATIVE, "-n", namespace, check=False).returncode != 0  # not served here
    cluster.apply(native_job("gang", namespace), namespace=namespace)
    job = wait_job(cluster, namespace, "gang",
                   lambda j: (condition(j, "Running") or {}).get("reason") == "GangNotServed",
                   what="Running=False GangNotServed")
    assert job["status"]["phase"] == "Pending"
    assert "--feature-gates=GenericWorkload=true" in condition(job, "Running")["message"]
    assert pods_of(cluster, namespace, "gang") == []
    warned = cluster.wait_for(lambda: [e for e in events_of(cluster, namespace, "gang")
                                       if e["reason"] == "GangNotServed"], timeout=60, what="the Warning Event")
    assert warned[0]["type"] == "Warning"


def test_with_a_fallback_the_same_job_is_placed_by_that_gang_scheduler_and_says_which(
        cluster, namespace, install_mode, coscheduler):
    """The ordinary cluster (no GenericWorkload) and an operator told DISTTRAIN_GANG_FALLBACK:
    the job's gang goes to the coscheduling scheduler, all of it bound where it fits."""
    names = [f"{namespace}-f{i}"[-63:] for i in range(3)]
    for name in names:
        cluster.apply(gpu_node(name, namespace))
    try:
        cluster.kubectl("wait", "--for=condition=Ready", "node", *names, "--timeout=60s", timeout=90)
        with running_operator(cluster, namespace, install_mode[1], DISTTRAIN_GANG_FALLBACK=coscheduler):
            cluster.apply(native_job("fallback", namespace), namespace=namespace)
            group = cluster.wait_for(lambda: cluster.try_get("podgroups.scheduling.x-k8s.io", "fallback", namespace),
                                     timeout=60, what="coscheduling's PodGroup")
            assert group["spec"]["minMember"] == 3

            def bound():
                pods = pods_of(cluster, namespace, "fallback")
                return pods if len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods) else None

            pods = cluster.wait_for(bound, timeout=180, interval=1, what="all 3 bound by the fallback")
            assert {p["spec"]["schedulerName"] for p in pods} == {coscheduler}
            said = cluster.wait_for(lambda: [e["message"] for e in events_of(cluster, namespace, "fallback")
                                             if e["reason"] == "GangScheduling"], timeout=60, what="the Event")
            assert f"scheduler {coscheduler}, DISTTRAIN_GANG_FALLBACK" in said[0]
    finally:
        cluster.kubectl("delete", "dt", "--all", "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "node", *names, "--ignore-not-found", "--wait=false", check=False)
        for pod in pods_of(cluster, namespace, "fallback"):
            cluster.kubectl("delete", "pod", "-n", namespace, pod["metadata"]["name"], "--grace-period=0", "--force",
                            check=False)
