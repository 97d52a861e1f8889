"""Cluster tests: everything under tests/cluster runs against the real control
plane + KWOK from tests/conftest.py (fixtures ``cluster`` and ``namespace``).

Every test collected here gets the ``cluster`` marker, so
``pytest -m "not cluster"`` deselects them even if a test forgets the
decorator; write ``@pytest.mark.cluster`` anyway, for readers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import fake_logs

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture
def trainer_status_server():
    """The trainer's own /status server (disttrain_trainer.metrics), on loopback."""
    from prometheus_client import CollectorRegistry

    from disttrain.local.ports import free_port
    from disttrain_trainer.metrics import StatusSink
    from disttrain_trainer.status_server import StatusServer

    port = free_port()
    sink = StatusSink()
    server = StatusServer(port, CollectorRegistry(), sink)
    yield port, sink
    server.close()


@pytest.fixture
def logged_job(cluster, namespace, tmp_path) -> fake_logs.LoggedJob:
    """The job `logged`, its workers' pods and their logs (fake_logs.logged_job)."""
    return fake_logs.logged_job(cluster, namespace, tmp_path)
