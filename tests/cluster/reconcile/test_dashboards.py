"""The shipped dashboards and alerts, run against live data.

A real trainer (`python -m disttrain_trainer` under torchrun, exactly the command and env
its pod would get, made local by `disttrain run --local`'s `localize`) trains on CPU; the
operator runs a job whose fake pod points at that trainer (so it reads the trainer's
/status) and a second job that warns, restarts and fails; a real Prometheus scrapes both.
Then every panel query of charts/disttrain/dashboards/*.json (template variables filled
in) and every alert expression of the chart's rendered PrometheusRule runs through
Prometheus' HTTP API and must return series with at least one number.

Alert rule: an expression that is empty while things are healthy (`... == 0`, `... > N`)
is evaluated without its final threshold comparison: its selector/ratio must return
series, so the alert can fire when the threshold is crossed. An expression that holds on
this data (a job did fail) is evaluated whole.

With DISTTRAIN_DASHBOARD_DATA=FILE the test also writes every panel's range-query
results there; `make dashboard-previews` renders them to docs/img/ (hack/dashboard_previews.py).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from .conftest import (CHECKPOINT_CLAIM, REPO, annotate_exit, free_port, job_manifest, kill, operator_scrape_config,
                       running_operator, wait_phase)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

PREVIEW_DATA = os.environ.get("DISTTRAIN_DASHBOARD_DATA", "")
DASHBOARDS = sorted((REPO / "charts" / "disttrain" / "dashboards").glob("*.json"))
# Panels whose every value must be positive: the trainer's gauges read 0 until its first
# logged step, which is neither a loss nor a world size.
POSITIVE = {"Loss", "World size"}
# A comparison with a constant at the end of an alert expression: `== 0`, `> 3`, `> 3600`.
_THRESHOLD = re.compile(r"\s*(==|!=|>=|<=|>|<)\s*[0-9.e+]+\s*$")


def strip_threshold(expr: str) -> str:
    """`inner > 3` -> `inner`; an expression without a final threshold is returned as is."""
    return _THRESHOLD.sub("", expr.strip())


def fill_variables(expr: str, values: dict[str, str]) -> str:
    """Grafana template variables ($name, ${name}) -> the values chosen for this run."""
    for name, value in values.items():
        expr = expr.replace("${" + name + "}", value).replace("$" + name, value)
    assert "$" not in expr.replace("$labels", ""), f"unfilled template variable in {expr}"
    return expr


def panel_targets(dashboard: dict) -> list[dict]:
    """[{title, unit, targets: [{expr, legend}]}] for every panel with queries."""
    panels = []
    for panel in dashboard["panels"]:
        targets = [{"expr": t["expr"], "legend": t.get("legendFormat", "")} for t in panel.get("targets", [])
                   if t.get("expr")]
        if targets:
            unit = ((panel.get("fieldConfig") or {}).get("defaults") or {}).get("unit", "")
            panels.append({"title": panel["title"], "unit": unit, "targets": targets})
    return panels


def rendered_rule_groups() -> dict:
    """The chart's PrometheusRule spec ({groups: ...}) as `helm template` renders it by default."""
    out = subprocess.run(["helm", "template", "disttrain", str(REPO / "charts" / "disttrain"),
                          "--set", "prometheusRule.enabled=true"], capture_output=True, text=True, check=True).stdout
    return next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "PrometheusRule")["spec"]


class Prometheus:
    def __init__(self, port: int):
        self.port = port

    def _get(self, path: str, params: dict) -> dict:
        url = f"http://127.0.0.1:{self.port}{path}?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str, at: float | None = None) -> list[dict]:
        return self._get("/api/v1/query", {"query": promql, **({"time": at} if at else {})})["result"]

    def firing(self) -> set[str]:
        return {a["labels"]["alertname"] for a in self._get("/api/v1/alerts", {})["alerts"] if a["state"] == "firing"}

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[dict]:
        return self._get("/api/v1/query_range", {"query": promql, "start": start, "end": end, "step": step})["result"]


def has_number(result: list[dict]) -> bool:
    return any(math.isfinite(float(s["value"][1])) for s in result)


@pytest.fixture
def prometheus(cluster, tmp_path):
    binary = shutil.which("prometheus")
    assert binary, "prometheus missing: hack/ensure-promtool.sh installs Debian's prometheus package"
    port = free_port()
    targets = tmp_path / "targets"
    (targets / "operator").mkdir(parents=True)
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": [
        # honor_labels as the chart's ServiceMonitor/PodMonitor: the metrics' own `job`
        # label (the DistributedTraining's name) must win over the scrape job's.
        {"job_name": "disttrain", "honor_labels": True,
         "file_sd_configs": [{"files": [str(targets / "*.yaml")], "refresh_interval": "1s"}]},
        # The operator as the chart's ServiceMonitor scrapes it (HTTPS, a reader's token).
        operator_scrape_config(cluster, tmp_path, "disttrain-operator", file_sd_configs=[
            {"files": [str(targets / "operator" / "*.yaml")], "refresh_interval": "1s"}])]}
    # The chart's alert rules, loaded as they ship.
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rendered_rule_groups()))
    config["rule_files"] = [str(tmp_path / "rules.yaml")]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    server = subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                               f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                              stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"),
                              start_new_session=True)

    def scrape(name: str, port_: int) -> None:
        folder = targets / "operator" if name == "operator" else targets
        (folder / f"{name}.yaml").write_text(yaml.safe_dump([{"targets": [f"127.0.0.1:{port_}"]}]))

    handle = Prometheus(port)
    handle.scrape = scrape  # type: ignore[attr-defined]
    try:
        yield handle
    finally:
        kill(server)


def start_trainer(namespace: str, name: str, workdir: Path) -> tuple[subprocess.Popen, int]:
    """The job's one pod as a local torchrun agent (its own command and env; see localize)."""
    from disttrain.api.validate import validate_document
    from disttrain.local.plan import localize
    from disttrain.integrations.registry import render_children

    doc = job_manifest(name, nodes=1, gpusPerNode=0, precision="32",
                       trainer={"builtin": {"model": "gpt-nano", "dataset": "text", "steps": 100000,
                                            "batchSize": 4}},
                       checkpoint={"intervalSteps": 5, "keep": 2})
    doc["metadata"]["namespace"] = namespace
    result = validate_document(doc)
    assert result.ok, result
    port = free_port()
    plan = localize(render_children(result.job, result.resolved), workdir=workdir, rdzv_port=free_port(),
                    metrics_ports=[port], rdzv_id=name, torchrun="torchrun",
                    cpus=1)
    node = plan.nodes[0]
    node.log.parent.mkdir(parents=True)
    node.report.parent.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "DISTTRAIN_"))}
    env.update(node.env, PYTHONPATH=os.pathsep.join([str(REPO / "operator"), str(REPO / "trainer")]),
               PYTHONWARNINGS="ignore", TORCH_CPP_LOG_LEVEL="ERROR")
    argv = [sys.executable, "-m", "torch.distributed.run", *node.argv[1:]]  # this Python's torchrun
    proc = subprocess.Popen(argv, env=env, stdout=open(node.log, "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    return proc, port


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL torchrun and its worker: the worker runs in a session of its own, so killing
    torchrun's process group left it training (100,000 steps) on a core of CI's machine."""
    from disttrain.local.run import descendants

    for pid in descendants(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)


def kubelet_readiness(cluster, namespace: str, pod: str) -> bool:
    """KWOK plays the kubelet. On a loaded machine a fake node's heartbeat can lapse; the
    node controller then marks its pods NotReady, and nothing marks them Ready again (a
    kubelet would, its probes passing), so the operator would stop reading /status. Do the
    kubelet's part for a pod whose containers are ready. Always True (a wait_for term)."""
    conditions = {c["type"]: c["status"] for c in
                  ((cluster.try_get("pod", pod, namespace) or {}).get("status") or {}).get("conditions", [])}
    if conditions.get("Ready") == "False" and conditions.get("ContainersReady") == "True":
        cluster.kubectl("patch", "pod", pod, "-n", namespace, "--subresource=status",
                        "-p", '{"status":{"conditions":[{"type":"Ready","status":"True"}]}}')
    return True


def trainer_log(tmp_path: Path) -> str:
    log = tmp_path / "work" / "live" / "logs" / "live-worker-0.log"
    return log.read_text(errors="replace")[-3000:] if log.exists() else "(none)"


def test_every_panel_and_alert_returns_series_from_live_data(cluster, namespace, operator_kubeconfig, prometheus,
                                                             tmp_path):
    started = time.time()
    trainer, trainer_port = start_trainer(namespace, "live", tmp_path / "work")
    try:
        with running_operator(cluster, namespace, operator_kubeconfig) as operator:
            prometheus.scrape("operator", operator.metrics_port)
            prometheus.scrape("trainer", trainer_port)

            def scraped(metric: str):
                try:
                    return prometheus.query(metric)
                except OSError:
                    return None

            # Operator's histograms at zero first, so jobs reaching Running show as a rate.
            cluster.wait_for(lambda: scraped("disttrain_operator_job_time_to_running_seconds_count"), timeout=60,
                             interval=0.5, what="Prometheus to scrape the operator")
            cluster.apply(job_manifest("live", nodes=1, gpusPerNode=0, metrics={"port": trainer_port},
                                       trainer={"builtin": {"steps": 100000, "batchSize": 4}},
                                       checkpoint={"intervalSteps": 5, "claimName": CHECKPOINT_CLAIM},
                                       podTemplate={"metadata": {"annotations": {
                                           cluster.POD_IP_ANNOTATION: "127.0.0.1"}}}), namespace=namespace)
            # A job that warns (ddp on one device), restarts once and then fails.
            cluster.apply(job_manifest("flaky", nodes=1, gpusPerNode=0, strategy="ddp", backoffLimit=1),
                          namespace=namespace)
            wait_phase(cluster, namespace, "live", "Running")
            wait_phase(cluster, namespace, "flaky", "Running")
            annotate_exit(cluster, namespace, "flaky-worker-0", 1)
            cluster.wait_for(lambda: (cluster.get("dt", "flaky", namespace)["status"].get("restarts") or 0) >= 1,
                             timeout=60, what="flaky restarted")
            wait_phase(cluster, namespace, "flaky", "Running")
            annotate_exit(cluster, namespace, "flaky-worker-0", 1)
            wait_phase(cluster, namespace, "flaky", "Failed")
            # The first loss comes at the first log step (10), after the first checkpoint (5):
            # wait for both, a loaded machine may be between them.
            needed = ["disttrain_checkpoint_last_step > 0", "disttrain_train_loss > 0",
                      "disttrain_operator_checkpoint_age_seconds", "disttrain_operator_job_failures_total"]
            try:
                cluster.wait_for(lambda: kubelet_readiness(cluster, namespace, "live-worker-0")
                                 and all(scraped(q) for q in needed), timeout=180, interval=1,
                                 what="a trainer checkpoint, its age and the failure scraped")
            except BaseException:
                missing = [q for q in needed if not scraped(q)]
                status = (cluster.try_get("dt", "live", namespace) or {}).get("status")
                pod = (cluster.try_get("pod", "live-worker-0", namespace) or {}).get("status", {})
                status = {"dt": status, "pod": {k: pod.get(k) for k in ("phase", "podIP", "conditions")}}
                pytest.fail(f"not scraped: {missing}; live's status: {status}\ntrainer log:\n{trainer_log(tmp_path)}",
                            pytrace=False)
            # Several scrapes after the failure, so every rate() window holds samples from
            # both sides of it.
            cluster.wait_for(lambda: scraped("count_over_time(disttrain_operator_job_failures_total[5m]) >= 5"),
                             timeout=60, interval=1, what="five scrapes since the failure")
            if PREVIEW_DATA:  # previews watch longer, for curves worth looking at
                time.sleep(float(os.environ.get("DISTTRAIN_DASHBOARD_SECONDS", "40")))
            assert trainer.poll() is None, trainer_log(tmp_path)
            now = time.time()
            variables = {"datasource": "prometheus", "namespace": namespace, "job": "live"}
            empty, previews = [], []
            for path in DASHBOARDS:
                dashboard = json.loads(path.read_text())
                panels = panel_targets(dashboard)
                assert panels, f"{path.name} has no panel queries"
                for panel in panels:
                    for target in panel["targets"]:
                        expr = fill_variables(target["expr"], variables)
                        result = prometheus.query(expr, at=now)
                        if not has_number(result):
                            empty.append(f"{path.name}: {panel['title']!r}: {expr} -> {result}")
                        target["series"] = prometheus.query_range(expr, started, now, 1)
                        if panel["title"] in POSITIVE:  # no 0 placeholder before the first step
                            values = [float(v) for s in target["series"] for _, v in s["values"]]
                            if not all(v > 0 for v in values):
                                empty.append(f"{path.name}: {panel['title']!r}: {expr}: {min(values)}")
                        if panel["unit"] == "s":  # durations of this run, not "since 1970"
                            seconds = [float(v) for s in target["series"] for _, v in s["values"]]
                            if not all(0 <= v < 3600 for v in seconds if math.isfinite(v)):
                                empty.append(f"{path.name}: {panel['title']!r}: {expr}: {max(seconds)} s")
                previews.append({"file": path.name, "title": dashboard["title"], "panels": panels})
            alerts = [r for g in rendered_rule_groups()["groups"] for r in g["rules"] if "alert" in r]
            assert {a["alert"] for a in alerts} >= {"DistTrainJobFailed", "DistTrainJobStalled",
                                                   "DistTrainCheckpointTooOld", "DistTrainJobRestartingOften"}
            for alert in alerts:
                expr = alert["expr"] if alert["alert"] == "DistTrainJobFailed" else strip_threshold(alert["expr"])
                if not has_number(prometheus.query(expr, at=now)):
                    empty.append(f"alert {alert['alert']}: {expr}")
            assert not empty, "queries that returned no series (or nonsense):\n" + "\n".join(empty)
            # The first failure of a reason counts: on the panel, and as a firing alert.
            failures = prometheus.query(fill_variables(next(
                t["expr"] for d in previews for p in d["panels"] for t in p["targets"] if "job_failures" in t["expr"]),
                variables), at=now)
            assert [(s["metric"]["reason"], float(s["value"][1])) for s in failures] == [("BackoffLimitExceeded", 1.0)]
            cluster.wait_for(lambda: "DistTrainJobFailed" in prometheus.firing(), timeout=30, interval=1,
                             what="DistTrainJobFailed firing in Prometheus")
    finally:
        kill_tree(trainer)
    if PREVIEW_DATA:
        Path(PREVIEW_DATA).write_text(json.dumps({"start": started, "end": now, "dashboards": previews}, indent=1) + "\n")


def test_strip_threshold_keeps_the_inner_expression():
    assert strip_threshold("max by (job) (changes(x[15m])) == 0") == "max by (job) (changes(x[15m]))"
    assert strip_threshold("increase(x[30m]) > 3") == "increase(x[30m])"
    assert strip_threshold("x > 3600\n") == "x"
    assert strip_threshold("rate(x[5m])") == "rate(x[5m])"
