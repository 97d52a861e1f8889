"""A real Prometheus server scrapes the operator and a trainer's /metrics; the series
the dashboards and alerts use arrive with the labels they expect."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request

import pytest
import yaml

from .conftest import free_port, job_manifest, kill, operator_scrape_config, wait_phase

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture
def trainer_metrics():
    """The trainer's real Prometheus sink and HTTP server, fed one step and one checkpoint."""
    from prometheus_client import CollectorRegistry

    from disttrain_trainer.checkpoint import CheckpointInfo
    from disttrain_trainer.config import MetricsConfig
    from disttrain_trainer.metrics import PrometheusSink, StatusSink, StepMetrics
    from disttrain_trainer.status_server import StatusServer

    registry = CollectorRegistry()
    port = free_port()
    cfg = MetricsConfig(port=port, namespace="ml", job="scraped", pod="scraped-worker-0")
    sink = PrometheusSink(cfg, restarts=0, registry=registry)
    sink.step(StepMetrics(step=12, total_steps=100, loss=2.5, samples_per_second=64.0, tokens_per_second=8192.0,
                          step_seconds=0.125, world_size=2))
    sink.checkpoint(CheckpointInfo(step=10, time=1.8e9, path="/checkpoints/step-00000010", save_seconds=0.5))
    server = StatusServer(port, registry, StatusSink())
    yield port
    server.close()


def query(port: int, promql: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())["data"]["result"]


def test_prometheus_scrapes_operator_and_trainer_metrics(cluster, namespace, operator, trainer_metrics, tmp_path):
    binary = shutil.which("prometheus")
    assert binary, "prometheus missing: hack/ensure-promtool.sh installs Debian's prometheus package"
    port = free_port()
    config = {"global": {"scrape_interval": "1s"}, "scrape_configs": [
        operator_scrape_config(cluster, tmp_path, "disttrain-operator",
                               static_configs=[{"targets": [f"127.0.0.1:{operator.metrics_port}"]}]),
        {"job_name": "disttrain-trainers", "honor_labels": True,
         "static_configs": [{"targets": [f"127.0.0.1:{trainer_metrics}"]}]}]}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    server = subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                               f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                              stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"),
                              start_new_session=True)
    try:
        cluster.apply(job_manifest("scraped", nodes=2), namespace=namespace)
        wait_phase(cluster, namespace, "scraped", "Running")

        def scraped():
            try:
                created = query(port, "disttrain_operator_pods_created_total")
                trained = query(port, "disttrain_train_step")
            except OSError:
                return None
            return created and trained and float(created[0]["value"][1]) >= 2

        cluster.wait_for(scraped, timeout=60, interval=0.5, what="Prometheus to scrape the operator and the trainer")
        running = query(port, 'disttrain_operator_jobs{phase="Running"}')
        assert float(running[0]["value"][1]) >= 1
        step = query(port, "disttrain_train_step")
        assert step and step[0]["metric"]["job"] == "scraped" and step[0]["metric"]["namespace"] == "ml"
        assert float(step[0]["value"][1]) == 12
        assert float(query(port, "disttrain_checkpoint_last_step")[0]["value"][1]) == 10
        # The stall alert's expression evaluates on real scraped series.
        assert query(port, "max by (namespace, job) (changes(disttrain_train_step[1m]))")[0]["metric"]["job"] == "scraped"
    finally:
        kill(server)
