"""Operator metrics move with the lifecycle; progress comes from a real trainer status server."""

from __future__ import annotations

import http.server
import json
import threading
from datetime import datetime, timezone

import pytest

from .conftest import annotate_exit, condition, get_job, job_manifest, wait_job, wait_phase

pytestmark = pytest.mark.cluster


def test_metrics_count_pods_restarts_failures_and_phases(cluster, namespace, operator):
    created = operator.sample("disttrain_operator_pods_created_total")
    restarts = operator.sample("disttrain_operator_job_restarts_total")
    cluster.apply(job_manifest("counted", nodes=2, backoffLimit=1), namespace=namespace)
    wait_phase(cluster, namespace, "counted", "Running")
    # The pods are counted when created, before any status says Running; the phase gauge and
    # the counters move just after the status write the test saw, so wait for them (briefly).
    assert operator.sample("disttrain_operator_pods_created_total") == created + 2
    cluster.wait_for(lambda: operator.sample("disttrain_operator_jobs", phase="Running") >= 1, timeout=10,
                     what="jobs{phase=Running}")
    cluster.wait_for(lambda: operator.sample("disttrain_operator_job_time_to_running_seconds_count") >= 1,
                     timeout=10, what="time to running observed")
    assert operator.sample("disttrain_operator_reconcile_seconds_count") > 0
    annotate_exit(cluster, namespace, "counted-worker-1", 1)
    cluster.wait_for(lambda: get_job(cluster, namespace, "counted")["status"].get("restarts") == 1, timeout=60,
                     what="one restart")
    cluster.wait_for(lambda: operator.sample("disttrain_operator_job_restarts_total") >= restarts + 1, timeout=10,
                     what="the restart counted")
    assert operator.sample("disttrain_operator_job_restarts_total") == restarts + 1
    wait_phase(cluster, namespace, "counted", "Running")
    annotate_exit(cluster, namespace, "counted-worker-0", 1)
    wait_phase(cluster, namespace, "counted", "Failed")
    cluster.wait_for(lambda: operator.sample("disttrain_operator_job_failures_total",
                                             reason="BackoffLimitExceeded") >= 1, timeout=10,
                     what="failure counted")
    cluster.wait_for(lambda: operator.sample("disttrain_operator_jobs", phase="Failed") >= 1, timeout=10,
                     what="jobs{phase=Failed}")


def test_progress_and_checkpoint_come_from_the_trainer_status(cluster, namespace, operator, trainer_status_server):
    port, sink = trainer_status_server
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    sink.doc.update(step=40, totalSteps=100, loss=2.5, samplesPerSecond=64.0, worldSize=1, lastUpdateTime=stamp,
                    checkpoint={"step": 40, "time": stamp, "path": "/checkpoints/step-00000040"})
    cluster.apply(job_manifest("watched", nodes=1, metrics={"port": port},
                               trainer={"builtin": {"steps": 100, "batchSize": 8}},
                               checkpoint={"intervalSteps": 20},
                               podTemplate={"metadata": {"annotations": {cluster.POD_IP_ANNOTATION: "127.0.0.1"}}}),
                  namespace=namespace)
    wait_phase(cluster, namespace, "watched", "Running")
    job = wait_job(cluster, namespace, "watched", lambda j: j.get("status", {}).get("progress"),
                   what="status.progress")
    progress = dict(job["status"]["progress"])
    assert progress.pop("lastStepTime") == stamp  # the trainer's own time of step 40 (plan.stepped_at)
    assert progress == {"step": 40, "totalSteps": 100, "percentComplete": "40%", "loss": 2.5, "samplesPerSecond": 64.0}
    assert job["status"]["checkpoint"] == {"step": 40, "time": stamp, "path": "/checkpoints/step-00000040"}
    table = cluster.kubectl("get", "dt", "watched", "-n", namespace).stdout
    header, row = table.splitlines()[:2]
    cells = dict(zip(header.split(), row.split()))
    assert {k: cells.get(k) for k in ("PHASE", "NODES", "WORLD", "STEP", "PROGRESS", "SAMPLES/S", "CHECKPOINT")} == {
        "PHASE": "Running", "NODES": "1", "WORLD": "1", "STEP": "40", "PROGRESS": "40%", "SAMPLES/S": "64",
        "CHECKPOINT": "40"}
    # The series exists (sample() reads 0 for a missing one) and the age is that of the
    # checkpoint the trainer reported a moment ago, not of anything older.
    series = f'disttrain_operator_checkpoint_age_seconds{{job="watched",namespace="{namespace}"}}'
    # (the gauge is set just after the status write the test saw: wait for it, briefly)
    cluster.wait_for(lambda: series in operator.metrics(), timeout=10, what="the checkpoint-age series")
    assert operator.sample("disttrain_operator_checkpoint_age_seconds", namespace=namespace, job="watched") < 600

    # The trainer stops checkpointing: 20 steps at 8 samples/s/64 = 2.5s per interval, so an
    # hour-old checkpoint is far past 3 intervals + grace.
    sink.doc["checkpoint"] = {"step": 40, "time": "2026-01-01T00:00:00Z", "path": "/checkpoints/step-00000040"}
    sink.doc["step"] = 90
    job = wait_job(cluster, namespace, "watched", lambda j: (condition(j, "CheckpointStale") or {}).get("status") == "True",
                   what="CheckpointStale True")
    assert condition(job, "CheckpointStale")["reason"] == "CheckpointTooOld"
    assert "checkpoint of step 40" in condition(job, "CheckpointStale")["message"]
    cluster.wait_for(lambda: operator.sample("disttrain_operator_checkpoint_age_seconds", namespace=namespace,
                                             job="watched") > 3600, timeout=10, what="the stale checkpoint's age")


class HostileTrainer(http.server.BaseHTTPRequestHandler):
    """A tenant's pod answering /status with whatever it likes."""

    answers: list[tuple[int, dict[str, str], bytes]] = []
    hits: dict[str, int] = {}

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.hits[self.path] = self.hits.get(self.path, 0) + 1
        code, headers, body = self.answers[-1] if self.path == "/status" else (200, {}, b'{"step": 999}')
        self.send_response(code)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_hostile_trainer_status_is_neither_followed_nor_able_to_freeze_the_job(cluster, namespace, operator):
    """/status comes from a tenant's pod: a redirect is not followed (it could point the
    operator at any address it reaches), and a step of 2**63 (no int64) cannot make the
    status unwritable: the job still reacts to a crashed worker."""
    HostileTrainer.hits = {}
    HostileTrainer.answers = [(302, {"Location": "/elsewhere"}, b"")]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HostileTrainer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        cluster.apply(job_manifest("hostile", nodes=2, metrics={"port": port},
                                   podTemplate={"metadata": {"annotations": {cluster.POD_IP_ANNOTATION: "127.0.0.1"}}}),
                      namespace=namespace)
        wait_phase(cluster, namespace, "hostile", "Running")
        cluster.wait_for(lambda: HostileTrainer.hits.get("/status", 0) >= 2, timeout=30, what="two /status polls")
        assert HostileTrainer.hits.get("/elsewhere", 0) == 0
        HostileTrainer.answers.append((200, {"Content-Type": "application/json"},
                                       json.dumps({"step": 2**63, "totalSteps": 10, "loss": 1.5}).encode()))
        seen = HostileTrainer.hits["/status"]
        cluster.wait_for(lambda: HostileTrainer.hits["/status"] >= seen + 2, timeout=30, what="the huge report read")
        job = wait_job(cluster, namespace, "hostile", lambda j: j.get("status", {}).get("progress"),
                       what="the report's loss in status")
        assert job["status"]["progress"] == {"totalSteps": 10, "loss": 1.5}  # the step is dropped, not sent
        cluster.kubectl("annotate", "pod", "hostile-worker-1", "-n", namespace, f"{cluster.EXIT_CODE_ANNOTATION}=1")
        cluster.wait_for(lambda: get_job(cluster, namespace, "hostile")["status"].get("restarts") == 1,
                         timeout=60, what="the crashed worker replaced")
    finally:
        server.shutdown()
        server.server_close()
