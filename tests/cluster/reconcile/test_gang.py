"""Gang scheduling with the real coscheduling scheduler (scheduler-plugins v0.33.5, built
by hack/build-tools.sh) against the real API server: a job of 8 workers with
scheduling.gang gets its PodGroup (minMember 8) before any pod; on nodes with room for 7
no worker is bound at all (7 of 8 would hold GPUs doing nothing), and the PodGroup goes
with the job; with room for 8 all 8 are bound, one a node. In both install modes (their
RBAC must let the operator create PodGroups).

A gang turned away is tried again by the coscheduling plugin on PodGroup events and
after kube-scheduler's unschedulable flush (5 minutes), not when a node joins: that is
the scheduler's pace, not the operator's, so the test places a second gang where 8 fit
instead of waiting for the first.

The nodes are the test's own KWOK nodes of one GPU each, in a pool only this job selects,
so other tests' pods never take the room the test counts."""

from __future__ import annotations

import json

import pytest

from .conftest import TEST_POOL, dump, gpu_node, job_manifest, pods_of, wait_job

pytestmark = pytest.mark.cluster

POOL = TEST_POOL


def gang_state(cluster, namespace: str, name: str) -> str:
    """What the job and its pods look like, for a failure message."""
    pods = [(p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase"),
             [(c["type"], c["status"], c.get("message", "")[:120]) for c in p["status"].get("conditions") or []])
            for p in pods_of(cluster, namespace, name)]
    job = cluster.try_get("dt", name, namespace) or {}
    return dump({"pods": pods, "job": job.get("status")})


def gang_job(name: str, namespace: str, scheduler: str) -> dict:
    return job_manifest(name, nodes=8, gpusPerNode=1, scheduling={
        "schedulerName": scheduler, "nodeSelector": {POOL: namespace}, "gang": {"scheduleTimeoutSeconds": 5}})


def test_a_gang_of_8_binds_no_worker_where_7_fit_and_all_where_8_fit(cluster, namespace, operator, install_mode,
                                                                      coscheduler):
    names = [f"{namespace}-g{i}"[-63:] for i in range(8)]
    for name in names[:7]:
        cluster.apply(gpu_node(name, namespace))
    try:
        cluster.kubectl("wait", "--for=condition=Ready", "node", *names[:7], "--timeout=60s", timeout=90)
        cluster.apply(gang_job("short", namespace, coscheduler), namespace=namespace)
        group = cluster.wait_for(lambda: cluster.try_get("podgroups.scheduling.x-k8s.io", "short", namespace),
                                 timeout=30, what="the job's PodGroup")
        assert group["spec"] == {"minMember": 8, "scheduleTimeoutSeconds": 5}
        assert group["metadata"]["ownerReferences"][0]["name"] == "short"

        def all_turned_away():
            pods = pods_of(cluster, namespace, "short")
            turned = [p for p in pods if any(c["type"] == "PodScheduled" and c["status"] == "False"
                                             for c in p.get("status", {}).get("conditions") or [])]
            return pods if len(pods) == 8 and len(turned) == 8 else None

        # Every worker was tried and turned away as a gang: none holds a node.
        pods = cluster.wait_for(all_turned_away, timeout=120, what="all 8 workers tried and turned away")
        assert [p["spec"].get("nodeName") for p in pods] == [None] * 8
        assert {p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] for p in pods} == {"short"}
        assert all(p["spec"]["schedulerName"] == coscheduler for p in pods)
        # The PodGroup goes with the job.
        cluster.kubectl("delete", "dt", "short", "-n", namespace, "--timeout=120s", timeout=150)
        cluster.wait_for(lambda: cluster.try_get("podgroups.scheduling.x-k8s.io", "short", namespace) is None,
                         timeout=120, what="the PodGroup gone with the job")

        # Room for 8: the whole gang is bound, one worker a node.
        cluster.apply(gpu_node(names[7], namespace))
        cluster.kubectl("wait", "--for=condition=Ready", "node", names[7], "--timeout=60s", timeout=90)
        cluster.apply(gang_job("fits", namespace, coscheduler), namespace=namespace)

        def all_bound():
            pods = pods_of(cluster, namespace, "fits")
            nodes = [p["spec"].get("nodeName") for p in pods]
            return pods if len(pods) == 8 and all(nodes) else None

        pods = cluster.wait_for(all_bound, timeout=180, interval=1, what="all 8 workers bound",
                                describe=lambda: gang_state(cluster, namespace, "fits"))
        assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(names)
        wait_job(cluster, namespace, "fits", lambda j: j["status"].get("phase") == "Running",
                 what="the gang Running", stall=120)
    finally:
        cluster.kubectl("delete", "dt", "--all", "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "node", *names, "--ignore-not-found", "--wait=false", check=False)
        pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
        for pod in pods:  # pods bound to the deleted nodes would wait for a kubelet that never comes
            cluster.kubectl("delete", "pod", "-n", namespace, pod["metadata"]["name"], "--grace-period=0",
                            "--force", check=False)
