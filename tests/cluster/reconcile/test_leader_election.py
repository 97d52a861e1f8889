"""HA: replicas elect one active operator on a coordination.k8s.io Lease (with exactly the
Role manifests/rbac/leader-election.yaml grants); the others keep their caches warm and
take over when it goes. Also the entry point's liveness endpoint."""

from __future__ import annotations

import signal
import urllib.request

import pytest

from .conftest import (OPERATOR_NS, free_port, job_manifest, kill, pods_of, start_operator_process,
                       wait_phase)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

LEASE_SECONDS = 4  # the test's; renewals every 0.53 s, a standby takes over 4 s after the last one


def replica(namespace: str, kubeconfig: str, log, **kwargs):
    """`disttrain-operator --leader-elect` on a Lease of this test's own (in the operator's
    namespace, where the Role grants it)."""
    env = {"DISTTRAIN_LEASE_NAMESPACE": OPERATOR_NS, "DISTTRAIN_LEASE_NAME": lease_name(namespace),
           "DISTTRAIN_LEASE_SECONDS": str(LEASE_SECONDS)}
    return start_operator_process(namespace, kubeconfig, log, "--leader-elect", env=env, **kwargs)


def lease_name(namespace: str) -> str:
    return f"dt-{namespace}"[:63]


def holder(cluster, namespace: str) -> str:
    lease = cluster.try_get("lease", lease_name(namespace), OPERATOR_NS) or {}
    return (lease.get("spec") or {}).get("holderIdentity") or ""


def text(log) -> str:
    return log.read_text(errors="replace")


def test_standby_replica_waits_then_takes_over_when_the_leader_stops(cluster, namespace, operator_kubeconfig,
                                                                     tmp_path):
    active_log, standby_log = tmp_path / "active.log", tmp_path / "standby.log"
    port = free_port()
    active = replica(namespace, operator_kubeconfig, active_log, liveness=f"http://127.0.0.1:{port}/healthz")
    standby = None
    try:
        cluster.wait_for(lambda: _healthy(port), timeout=60, what="liveness endpoint")
        cluster.wait_for(lambda: "leading: holding Lease" in text(active_log), timeout=60,
                         what="the first replica to take the Lease")
        standby = replica(namespace, operator_kubeconfig, standby_log)
        cluster.wait_for(lambda: "waiting to lead" in text(standby_log), timeout=60, what="the standby to start")
        cluster.apply(job_manifest("ha", nodes=2), namespace=namespace)
        wait_phase(cluster, namespace, "ha", "Running")
        assert "created pod ha-worker-1" in text(active_log)
        assert "created pod" not in text(standby_log) and "leading" not in text(standby_log)
        first = holder(cluster, namespace)
        assert first and first in text(active_log)

        kill(active, signal.SIGTERM)  # a clean stop releases the Lease: the standby need not wait it out
        assert active.returncode == 0
        assert "released the Lease" in text(active_log)
        cluster.wait_for(lambda: "leading: holding Lease" in text(standby_log), timeout=30,
                         what="the standby to take over")
        assert holder(cluster, namespace) not in ("", first)
        cluster.apply(job_manifest("after", nodes=1), namespace=namespace)
        wait_phase(cluster, namespace, "after", "Running")
        assert "created pod after-worker-0" in text(standby_log)
        assert [p["metadata"]["name"] for p in pods_of(cluster, namespace, "ha")] == ["ha-worker-0", "ha-worker-1"]
    finally:
        kill(active)
        if standby is not None:
            kill(standby)
    for log in (active_log, standby_log):
        assert "forbidden" not in text(log).lower()


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def test_three_replicas_the_lease_holder_killed_one_takes_over(cluster, namespace, operator_kubeconfig, tmp_path):
    """Three replicas. SIGKILL the Lease holder: its Lease stays until it expires, then
    exactly one of the others takes it, and every job converges, the ones created while
    nobody led too."""
    logs = [tmp_path / f"replica-{i}.log" for i in range(3)]
    procs = {}
    try:
        procs[0] = replica(namespace, operator_kubeconfig, logs[0])
        cluster.wait_for(lambda: "leading: holding Lease" in text(logs[0]), timeout=60,
                         what="the first replica to take the Lease")
        for i in (1, 2):
            procs[i] = replica(namespace, operator_kubeconfig, logs[i])
        for i in (1, 2):
            cluster.wait_for(lambda i=i: "waiting to lead" in text(logs[i]), timeout=60, what=f"replica {i} to start")
        cluster.apply([job_manifest(f"before-{i}", nodes=2) for i in range(3)], namespace=namespace)
        for i in range(3):
            wait_phase(cluster, namespace, f"before-{i}", "Running")
        kill(procs.pop(0))  # SIGKILL: the Lease is not released, it has to expire
        cluster.apply([job_manifest(f"during-{i}", nodes=1) for i in range(3)], namespace=namespace)
        cluster.kubectl("delete", "pod", "before-0-worker-1", "-n", namespace, "--wait=false")
        cluster.wait_for(lambda: any("leading: holding Lease" in text(logs[i]) for i in (1, 2)), timeout=60,
                         what="a standby to take over")
        for i in range(3):
            wait_phase(cluster, namespace, f"during-{i}", "Running", stall=60)
        cluster.wait_for(lambda: len([p for p in pods_of(cluster, namespace, "before-0")
                                      if p["status"].get("phase") == "Running"]) == 2,
                         timeout=60, what="before-0-worker-1 recreated")
    finally:
        for proc in procs.values():
            kill(proc)
    leaders = [i for i in (1, 2) if "leading: holding Lease" in text(logs[i])]
    assert len(leaders) == 1, leaders  # never two at once
    (other,) = {1, 2} - set(leaders)
    assert "created pod during-0-worker-0" in text(logs[leaders[0]])
    assert "created pod" not in text(logs[other])  # it stood by throughout
    for log in logs:
        assert "forbidden" not in text(log).lower()
