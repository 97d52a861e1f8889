"""HA: two replicas with kopf peering never both reconcile; the standby takes over.
Also the entry point's liveness endpoint."""

from __future__ import annotations

import signal
import urllib.request

import pytest

from .conftest import free_port, job_manifest, kill, pods_of, start_operator_process, wait_phase

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def test_standby_replica_waits_then_takes_over(cluster, namespace, operator_kubeconfig, tmp_path):
    cluster.apply({"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": "disttrain"}},
                  namespace=namespace)
    active_log, standby_log = tmp_path / "active.log", tmp_path / "standby.log"
    port = free_port()
    active = start_operator_process(namespace, operator_kubeconfig, active_log, "--peering", "disttrain",
                                    "--priority", "100", liveness=f"http://127.0.0.1:{port}/healthz")
    standby = None
    try:
        cluster.wait_for(lambda: _healthy(port), timeout=60, what="liveness endpoint")
        # Alone in the peering, kopf lifts its initial pause; a replica started after that
        # sees the active one in the peering object and stays paused.
        cluster.wait_for(lambda: "Resuming operations" in active_log.read_text(errors="replace"), timeout=60,
                         what="the active replica to start working")
        standby = start_operator_process(namespace, operator_kubeconfig, standby_log, "--peering", "disttrain",
                                         "--priority", "50")
        cluster.wait_for(lambda: "Initial authentication has finished" in standby_log.read_text(errors="replace"),
                         timeout=60, what="the standby to start")
        cluster.apply(job_manifest("ha", nodes=2), namespace=namespace)
        wait_phase(cluster, namespace, "ha", "Running")
        assert "created pod ha-worker-1" in active_log.read_text(errors="replace")
        assert "created pod" not in standby_log.read_text(errors="replace")

        kill(active, signal.SIGTERM)  # a clean exit removes its peering record at once
        cluster.wait_for(lambda: "Resuming operations" in standby_log.read_text(errors="replace"), timeout=90,
                         what="the standby to take over")
        cluster.apply(job_manifest("after", nodes=1), namespace=namespace)
        wait_phase(cluster, namespace, "after", "Running")
        assert "created pod after-worker-0" in standby_log.read_text(errors="replace")
        assert [p["metadata"]["name"] for p in pods_of(cluster, namespace, "ha")] == ["ha-worker-0", "ha-worker-1"]
    finally:
        kill(active)
        if standby is not None:
            kill(standby)
    for log in (active_log, standby_log):
        assert "forbidden" not in log.read_text(errors="replace").lower()


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def test_three_replicas_the_active_one_killed_one_takes_over(cluster, namespace, operator_kubeconfig, tmp_path):
    """Three replicas (priorities 100, 60, 50). SIGKILL the active one: its peering record
    stays until it expires, then the 60 takes over alone and every job converges, the
    ones created while nobody was active too."""
    cluster.apply({"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": "disttrain"}},
                  namespace=namespace)
    logs = {prio: tmp_path / f"replica-{prio}.log" for prio in (100, 60, 50)}
    procs = {}
    try:
        procs[100] = start_operator_process(namespace, operator_kubeconfig, logs[100], "--peering", "disttrain",
                                            "--priority", "100")
        cluster.wait_for(lambda: "Resuming operations" in logs[100].read_text(errors="replace"), timeout=60,
                         what="the first replica to start working")
        for prio in (60, 50):
            procs[prio] = start_operator_process(namespace, operator_kubeconfig, logs[prio], "--peering",
                                                 "disttrain", "--priority", str(prio))
        for prio in (60, 50):
            cluster.wait_for(lambda p=prio: "Initial authentication has finished" in logs[p].read_text(errors="replace"),
                             timeout=60, what=f"replica {prio} to start")
        cluster.apply([job_manifest(f"before-{i}", nodes=2) for i in range(3)], namespace=namespace)
        for i in range(3):
            wait_phase(cluster, namespace, f"before-{i}", "Running")
        kill(procs.pop(100))  # SIGKILL: the record is not removed, it has to expire
        cluster.apply([job_manifest(f"during-{i}", nodes=1) for i in range(3)], namespace=namespace)
        cluster.kubectl("delete", "pod", "before-0-worker-1", "-n", namespace, "--wait=false")
        cluster.wait_for(lambda: "Resuming operations" in logs[60].read_text(errors="replace"), timeout=150,
                         what="replica 60 to take over")
        for i in range(3):
            wait_phase(cluster, namespace, f"during-{i}", "Running", timeout=60)
        cluster.wait_for(lambda: len([p for p in pods_of(cluster, namespace, "before-0")
                                      if p["status"].get("phase") == "Running"]) == 2,
                         timeout=60, what="before-0-worker-1 recreated")
    finally:
        for proc in procs.values():
            kill(proc)
    assert "created pod during-0-worker-0" in logs[60].read_text(errors="replace")
    assert "created pod" not in logs[50].read_text(errors="replace")  # it stayed paused throughout
    for log in logs.values():
        assert "forbidden" not in log.read_text(errors="replace").lower()
