"""Fixtures for operator tests: the CRDs and the operator's RBAC installed from
manifests/, and the operator running with a token of exactly that ServiceAccount."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
MANIFESTS = REPO / "manifests"
OPERATOR_NS = "disttrain-system"
OPERATOR_SA = "disttrain-operator"

# Fast clocks for tests; the defaults are documented in settings.py.
TEST_ENV = {
    # Far longer than any wait in the tests: every reaction must come from an event.
    "DISTTRAIN_RESYNC_SECONDS": "300",
    "DISTTRAIN_PROGRESS_SECONDS": "1",
    "DISTTRAIN_RESTART_BACKOFF_SECONDS": "1",
    "DISTTRAIN_RESTART_BACKOFF_MAX_SECONDS": "4",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def operator_kubeconfig(cluster) -> str:
    """Install CRDs + RBAC the way a user does; a kubeconfig for the operator's account."""
    cluster.kubectl("apply", "-f", str(MANIFESTS / "crd"))
    cluster.kubectl("apply", "-f", str(MANIFESTS / "operator" / "namespace.yaml"))
    cluster.kubectl("apply", "-f", str(MANIFESTS / "rbac"))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/distributedtrainings.disttrain.dev")
    return cluster.kubeconfig_for_service_account(OPERATOR_NS, OPERATOR_SA)


class Operator:
    """A running operator; `metrics()` scrapes its Prometheus endpoint."""

    def __init__(self, metrics_port: int):
        self.metrics_port = metrics_port

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            return resp.read().decode()

    def sample(self, name: str, **labels: str) -> float:
        """The value of one sample (0 when absent)."""
        from prometheus_client.parser import text_string_to_metric_families

        for family in text_string_to_metric_families(self.metrics()):
            for s in family.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return s.value
        return 0.0


@contextlib.contextmanager
def env_vars(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def operator(cluster, namespace, operator_kubeconfig, request) -> Iterator[Operator]:
    """kopf's KopfRunner with our handlers, watching the test's namespace, as the
    operator's ServiceAccount (never as admin)."""
    from kopf.testing import KopfRunner

    port = free_port()
    env = {**TEST_ENV, "KUBECONFIG": operator_kubeconfig, "DISTTRAIN_OPERATOR_METRICS_PORT": str(port)}
    with env_vars(env):
        with KopfRunner(["run", "--standalone", "-n", namespace, "-m", "disttrain_operator.handlers"],
                        timeout=60) as runner:
            handle = Operator(port)
            cluster.wait_for(lambda: _answers(handle), timeout=30, what="operator metrics endpoint")
            yield handle
    assert runner.exception is None, runner.exception
    assert runner.exit_code == 0, runner.output[-3000:]
    # Least privilege: the operator must never have been refused by RBAC.
    if request.node.get_closest_marker("rbac_refusals_expected") is None:
        assert "forbidden" not in runner.output.lower(), _forbidden_lines(runner.output)


def _answers(handle: Operator) -> bool:
    try:
        return "disttrain_operator_jobs" in handle.metrics()
    except OSError:
        return False


def _forbidden_lines(output: str) -> str:
    return "\n".join(line for line in output.splitlines() if "forbidden" in line.lower())[:3000]


def start_operator_process(namespace: str, kubeconfig: str, log: Path, *extra: str,
                           liveness: str = "") -> subprocess.Popen:
    """The real entry point (`python -m disttrain_operator`) in a child process."""
    env = {**os.environ, **TEST_ENV, "KUBECONFIG": kubeconfig, "DISTTRAIN_OPERATOR_METRICS_PORT": "0",
           "PYTHONPATH": os.pathsep.join([str(REPO / "operator"), str(REPO / "trainer")])}
    handle = open(log, "ab")
    return subprocess.Popen([sys.executable, "-m", "disttrain_operator", "-n", namespace, "--liveness", liveness,
                             *extra], env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)


def kill(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    proc.wait(timeout=30)


# ---- helpers for tests ----------------------------------------------------------------


def job_manifest(name: str, **spec: Any) -> dict:
    base = {"nodes": 2, "trainer": {"builtin": {"steps": 10}}}
    return {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
            "metadata": {"name": name}, "spec": {**base, **spec}}


def get_job(cluster, namespace: str, name: str) -> dict:
    return cluster.get("dt", name, namespace)


def pods_of(cluster, namespace: str, job: str) -> list[dict]:
    import json

    out = cluster.kubectl("get", "pods", "-n", namespace, "-l", f"disttrain.dev/job={job}", "-o", "json").stdout
    return sorted(json.loads(out)["items"], key=lambda p: p["metadata"]["name"])


def wait_phase(cluster, namespace: str, name: str, phase: str, timeout: float = 60) -> dict:
    def current():
        job = cluster.try_get("dt", name, namespace) or {}
        return job if (job.get("status") or {}).get("phase") == phase else None

    return cluster.wait_for(current, timeout=timeout, interval=0.3, what=f"{name} phase {phase}")


def condition(job: dict, type_: str) -> dict | None:
    return next((c for c in job.get("status", {}).get("conditions", []) if c["type"] == type_), None)


def annotate_exit(cluster, namespace: str, pod: str, code: int) -> None:
    cluster.kubectl("annotate", "pod", pod, "-n", namespace, f"{cluster.EXIT_CODE_ANNOTATION}={code}",
                    "--overwrite")


def events_of(cluster, namespace: str, name: str) -> list[dict]:
    import json

    out = cluster.kubectl("get", "events", "-n", namespace, "--field-selector",
                          f"involvedObject.name={name}", "-o", "json").stdout
    return json.loads(out)["items"]


def dump(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False)[:4000]
