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
