"""Kill -9 the operator while it creates 50 jobs; a restarted one converges every job
with no duplicate and no orphan."""

from __future__ import annotations

import json
import threading
import time

import pytest
import yaml

from .conftest import job_manifest, kill, start_operator_process

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

JOBS = 50
NODES = 2


def all_pods(cluster, namespace):
    return json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]


def pod_count(cluster, namespace) -> int:
    return len(cluster.kubectl("get", "pods", "-n", namespace, "-o", "name").stdout.split())


def all_jobs(cluster, namespace):
    return json.loads(cluster.kubectl("get", "dt", "-n", namespace, "-o", "json").stdout)["items"]


def test_operator_killed_mid_creation_converges_without_duplicates_or_orphans(
        cluster, namespace, operator_kubeconfig, tmp_path):
    log = tmp_path / "operator.log"
    manifests = [job_manifest(f"job-{i:02d}", nodes=NODES) for i in range(JOBS)]
    first = start_operator_process(namespace, operator_kubeconfig, log)
    applier = None
    try:
        cluster.wait_for(lambda: "Initial authentication has finished" in log.read_text(errors="replace"),
                         timeout=60, what="the operator to start")
        # Apply in the background and kill the operator at its first pods, while it is
        # still part-way: polling only after the apply returned could be too late.
        applier = threading.Thread(target=cluster.kubectl, args=("apply", "-n", namespace, "-f", "-"),
                                   kwargs={"input": yaml.safe_dump_all(manifests)}, daemon=True)
        applier.start()
        cluster.wait_for(lambda: pod_count(cluster, namespace) >= 1, timeout=120, interval=0.02,
                         what="first pods")
    finally:
        kill(first)
        if applier is not None:
            applier.join(timeout=120)
    partial = len(all_pods(cluster, namespace))
    assert partial < JOBS * NODES, "the operator finished before it was killed; kill it sooner"

    second = start_operator_process(namespace, operator_kubeconfig, log)
    try:
        def converged():
            jobs = all_jobs(cluster, namespace)
            return len(jobs) == JOBS and all((j.get("status") or {}).get("phase") == "Running" for j in jobs)

        cluster.wait_for(converged, timeout=240, interval=1, what="all jobs Running")
        time.sleep(2)  # one more resync: nothing may be created twice
        pods = all_pods(cluster, namespace)
        jobs = {j["metadata"]["uid"]: j["metadata"]["name"] for j in all_jobs(cluster, namespace)}
        names = [p["metadata"]["name"] for p in pods]
        assert len(names) == len(set(names)) == JOBS * NODES
        for pod in pods:
            (owner,) = pod["metadata"]["ownerReferences"]
            assert jobs[owner["uid"]] == pod["metadata"]["labels"]["disttrain.dev/job"]
        services = json.loads(cluster.kubectl("get", "services", "-n", namespace, "-o", "json").stdout)["items"]
        assert sorted(s["metadata"]["name"] for s in services) == sorted(jobs.values())
    finally:
        kill(second)
    text = log.read_text(errors="replace")
    assert "forbidden" not in text.lower(), text[-3000:]
