"""Cluster tests: everything under tests/cluster runs against the real control
plane + KWOK from tests/conftest.py (fixtures ``cluster`` and ``namespace``).

Every test collected here gets the ``cluster`` marker, so
``pytest -m "not cluster"`` deselects them even if a test forgets the
decorator; write ``@pytest.mark.cluster`` anyway, for readers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CRDS = HERE.parents[1] / "manifests" / "crd"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture
def trainer_status_server():
    """The trainer's own /status server (disttrain_trainer.metrics), on loopback."""
    import socket

    from prometheus_client import CollectorRegistry

    from disttrain_trainer.metrics import StatusServer, StatusSink

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    sink = StatusSink()
    server = StatusServer(port, CollectorRegistry(), sink)
    yield port, sink
    server.close()


@dataclass(frozen=True)
class LoggedJob:
    """A job whose workers have logs: `lines` are (worker, text, kubelet timestamp) in time
    order; `previous` is worker 0's container before it restarted."""
    name: str
    namespace: str
    lines: list[tuple[int | None, str, str]]
    previous: list[str]

    def ages(self, newer_than: float) -> list[tuple[int | None, str, str]]:
        """The lines written less than `newer_than` seconds before the fixture ran."""
        return [line for line, age in zip(self.lines, LOG_AGES, strict=True) if age < newer_than]


# (worker, text, seconds before now): worker-0, worker-1, and a pod of the job with no
# worker index; their lines interleave in time.
LOG_SCRIPT = [(0, "w0 starts", 300), (1, "w1 starts", 200), (None, "unindexed", 150), (0, "w0 step 1", 100),
              (1, "w1 step 1", 50), (0, "w0 step 2", 10)]
LOG_AGES = [age for _, _, age in LOG_SCRIPT]


@pytest.fixture
def logged_job(cluster, namespace, tmp_path) -> LoggedJob:
    """The job `logged` (2 workers, no operator) with its pods as the operator names and
    labels them, on a fake node, each with a log: KWOK serves a fake pod's log to the API
    server as a kubelet would, from the file its Logs object names, in the CRI format a
    kubelet writes (docs/local-cluster.md)."""
    from disttrain_operator.api.names import CONTAINER_NAME, INDEX_LABEL, JOB_LABEL

    cluster.kubectl("apply", "-f", str(CRDS))
    cluster.wait_established()
    # RFC 3339 with 9 fractional digits, as a kubelet writes and answers them.
    name, now = "logged", datetime.now(timezone.utc)
    stamp = {age: (now - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%S.%f000Z") for age in LOG_AGES}
    pods = {0: f"{name}-worker-0", 1: f"{name}-worker-1", None: f"{name}-launcher"}
    docs: list[dict] = [{"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
                         "metadata": {"name": name}, "spec": {"nodes": 2, "checkpoint": {"storage": "none"}}}]
    for worker, pod in pods.items():
        labels = {JOB_LABEL: name, **({INDEX_LABEL: str(worker)} if worker is not None else {})}
        log = tmp_path / f"{pod}.log"
        log.write_text("".join(f"{stamp[age]} stdout F {text}\n" for w, text, age in LOG_SCRIPT if w == worker))
        spec = {"containers": [CONTAINER_NAME], "logsFile": str(log)}
        if worker == 0:
            (tmp_path / "previous.log").write_text(f"{stamp[300]} stdout F before the restart\n"
                                                   f"{stamp[300]} stderr F exit 1\n")
            spec["previousLogsFile"] = str(tmp_path / "previous.log")
        docs += [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "labels": labels},
                  "spec": {"nodeName": "kwok-cpu-0", "containers": [{"name": CONTAINER_NAME, "image": "trainer"}]}},
                 {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs", "metadata": {"name": pod},
                  "spec": {"logs": [spec]}}]
    cluster.apply(docs, namespace=namespace)
    for pod in pods.values():  # KWOK reads Logs objects through a watch: wait until it serves each
        cluster.wait_for(lambda pod=pod: cluster.kubectl("logs", "-n", namespace, pod, check=False).stdout,
                         timeout=30, what=f"KWOK serving {pod}'s log")
    return LoggedJob(name, namespace, [(w, text, stamp[age]) for w, text, age in LOG_SCRIPT],
                     ["before the restart", "exit 1"])
