"""SIGKILL the operator at random moments while 50 jobs are created, five times; the last
one standing converges every job with no duplicate request, no extra pod and no orphan."""

from __future__ import annotations

import json
import random
import threading

import pytest
import yaml

from .conftest import job_manifest, kill, start_operator_process

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

JOBS = 50
NODES = 2
KILLS = 5


def all_pods(cluster, namespace):
    return json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]


def pod_count(cluster, namespace) -> int:
    return len(cluster.kubectl("get", "pods", "-n", namespace, "-o", "name").stdout.split())


def all_jobs(cluster, namespace):
    return json.loads(cluster.kubectl("get", "dt", "-n", namespace, "-o", "json").stdout)["items"]


def create_conflicts(cluster) -> dict[str, int]:
    """409 answers to creates of pods and services so far (apiserver_request_total)."""
    totals = {"pods": 0, "services": 0}
    for line in cluster.kubectl("get", "--raw", "/metrics").stdout.splitlines():
        if line.startswith("apiserver_request_total{") and 'verb="POST"' in line and 'code="409"' in line:
            for resource in totals:
                if f'resource="{resource}"' in line:
                    totals[resource] += int(float(line.rsplit(" ", 1)[1]))
    return totals


def test_operator_killed_repeatedly_mid_creation_converges_without_duplicates_or_orphans(
        cluster, namespace, operator_kubeconfig, tmp_path):
    log = tmp_path / "operator.log"
    manifests = [job_manifest(f"job-{i:02d}", nodes=NODES) for i in range(JOBS)]
    rng = random.Random(20261123)
    applier = threading.Thread(target=cluster.kubectl, args=("apply", "-n", namespace, "-f", "-"),
                               kwargs={"input": yaml.safe_dump_all(manifests)}, daemon=True)
    partial = []
    for round_ in range(KILLS):
        proc = start_operator_process(namespace, operator_kubeconfig, log)
        try:
            cluster.wait_for(lambda: log.read_text(errors="replace").count("Initial authentication has finished")
                             > round_, timeout=60, what="the operator to start")
            if round_ == 0:
                applier.start()  # the burst starts while the first operator runs
                cluster.wait_for(lambda: pod_count(cluster, namespace) >= 1, timeout=120, interval=0.02,
                                 what="first pods")
            else:
                threading.Event().wait(rng.uniform(0.2, 3.0))  # a random moment in its work
        finally:
            kill(proc)  # SIGKILL: no cleanup, no goodbye to the API server
        partial.append(pod_count(cluster, namespace))
    applier.join(timeout=120)
    assert partial[0] < JOBS * NODES, f"the first operator finished before it was killed: {partial}"

    before = create_conflicts(cluster)
    last = start_operator_process(namespace, operator_kubeconfig, log)
    try:
        def converged():
            jobs = all_jobs(cluster, namespace)
            return len(jobs) == JOBS and all(
                (j.get("status") or {}).get("phase") == "Running"
                and (j["status"].get("workers") or {}).get("active") == NODES for j in jobs)

        cluster.wait_for(converged, timeout=300, interval=1, what="all jobs Running with every worker")
        pods = all_pods(cluster, namespace)
        after = create_conflicts(cluster)
        conflicts = {k: after[k] - before[k] for k in after}
    finally:
        kill(last)
    jobs = {j["metadata"]["uid"]: j["metadata"]["name"] for j in all_jobs(cluster, namespace)}
    # No extra pod, and every pod belongs to an existing job under its own name (no orphan).
    assert len(pods) == JOBS * NODES, sorted(p["metadata"]["name"] for p in pods)
    for pod in pods:
        (owner,) = pod["metadata"]["ownerReferences"]
        assert jobs[owner["uid"]] == pod["metadata"]["labels"]["disttrain.dev/job"]
    services = json.loads(cluster.kubectl("get", "services", "-n", namespace, "-o", "json").stdout)["items"]
    assert sorted(s["metadata"]["name"] for s in services) == sorted(jobs.values())
    # The restarted operator saw every earlier pod in its index before acting: it sent no
    # create for a child that already existed.
    assert conflicts == {"pods": 0, "services": 0}, f"creates answered 409 AlreadyExists after the restart: {conflicts}"
    text = log.read_text(errors="replace")
    assert "forbidden" not in text.lower(), text[-3000:]
