"""Throughput averaged over the logging window with checkpoint time taken out (a real run
with real DCP saves), the gradient norm, FLOPs per token and MFU, and how they are
exported (/status, Prometheus)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from dt_helpers import free_port, run_customized, tiny_config
from disttrain_trainer.checkpoint import CheckpointInfo
from disttrain_trainer.config import MetricsConfig
from disttrain_trainer.flops import format_mfu, mfu, peak_flops
from disttrain_trainer.metrics import PrometheusSink, StatusSink, StepMetrics
from disttrain_trainer.status_server import StatusServer
from disttrain_trainer.models import GPT_PRESETS, model_spec


class Recorder:
    """A metrics sink that keeps what it is given, and when."""

    def __init__(self) -> None:
        self.steps: list[tuple[float, StepMetrics]] = []
        self.checkpoints: list[CheckpointInfo] = []

    def step(self, m: StepMetrics) -> None:
        self.steps.append((time.perf_counter(), m))

    def checkpoint(self, info: CheckpointInfo) -> None:
        self.checkpoints.append(info)

    def close(self) -> None:
        pass


class Ticks:
    """A clock the test moves: window rates come out exact, whatever the machine does."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_window_leaves_out_exactly_the_paused_seconds_and_nothing_else() -> None:
    """Windows of 2 steps of 1 s each (batch 8); a 5 s checkpoint save inside the second
    window is left out of it, and only it: the rate after a save is what the steps
    took. (What a save does to the steps that follow it, on real hardware, is measured
    by bench/checkpoint_slowdown.py, not asserted here.)"""
    from disttrain_trainer.metrics import Metrics

    ticks, rec = Ticks(), Recorder()
    metrics = Metrics([rec], total_steps=6, world_size=2, samples_per_step=8, tokens_per_sample=16, clock=ticks)
    for step in range(1, 7):
        ticks.now += 1.0  # the step
        m = metrics.record_step(step, loss=1.0 if step % 2 == 0 else None)
        if step == 2:
            with metrics.paused():
                ticks.now += 5.0  # the save
        if step == 4:
            ticks.now += 0.5  # something slow outside any pause: counted against the window
    rates = {m.step: (m.step_seconds, m.samples_per_second) for _, m in rec.steps if m.loss is not None}
    assert rates == {2: (1.0, 8.0), 4: (1.0, 8.0), 6: (1.25, 6.4)}
    assert [m.tokens_per_second for _, m in rec.steps if m.loss is not None] == [128.0, 128.0, 102.4]


def test_a_real_run_reports_each_save_on_its_own_and_consistent_rates(tmp_path: Path) -> None:
    """Windows of 2 steps, a real synchronous DCP save every 4: each save is reported with
    the seconds it blocked training, and each window's rates agree with each other."""
    log_every, interval, steps = 2, 4, 12
    cfg = tiny_config(steps=steps, batch=2, ckpt_dir=str(tmp_path), interval=interval, keep=10)
    cfg.train.log_every = log_every
    rec = Recorder()
    run_customized(cfg, lambda c, ctx: c.metrics.sinks.append(rec))
    windows = {m.step: m for _, m in rec.steps if m.loss is not None}
    assert sorted(windows) == list(range(log_every, steps + 1, log_every))
    saves = list({info.step: info for info in rec.checkpoints if info.save_seconds}.values())  # sent every step
    assert [info.step for info in saves] == list(range(interval, steps, interval)) + [steps]
    assert all(info.blocked_seconds > 0 for info in saves)
    for m in windows.values():
        assert m.samples_per_second > 0
        assert m.step_seconds == pytest.approx(cfg.data.batch_size / m.samples_per_second)
        assert m.tokens_per_second == pytest.approx(m.samples_per_second * 16)  # seq_len 16


def test_gradient_norm_is_measured_before_clipping_even_without_clipping(tmp_path: Path) -> None:
    norms = {}
    for clip in (1.0, 0.0):
        cfg = tiny_config(steps=3)
        cfg.train.grad_clip = clip
        rec = Recorder()
        run_customized(cfg, lambda c, ctx, rec=rec: c.metrics.sinks.append(rec))
        norms[clip] = [m.grad_norm for _, m in rec.steps]
    # First step: same weights, same batch, so the same norm; it exceeds the clip (1.0).
    assert norms[1.0][0] == pytest.approx(norms[0.0][0]) and norms[1.0][0] > 1.0
    assert all(n is not None and n > 0 for n in norms[1.0] + norms[0.0])


def test_flops_per_token_of_gpt_nano() -> None:
    import torch

    spec = model_spec("gpt-nano", dataset="text", vocab_size=256, in_features=32, classes=8)
    with torch.device("meta"):
        model = spec.build()
    cfg = GPT_PRESETS["gpt-nano"]
    d, layers = cfg.d_model, cfg.n_layer
    per_block = 4 * (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d) + 4 * d  # attn, mlp, 2 norms
    weights = layers * per_block + 2 * d + d * 256  # blocks, final norm, head (no bias)
    assert model.flops_per_token(64) == 6 * weights + 12 * layers * d * 64


@pytest.mark.parametrize("name,precision,tflops", [
    ("NVIDIA H100 80GB HBM3", "bf16-mixed", 989.5),
    ("NVIDIA H100 PCIe", "bf16-mixed", 756.0),
    ("NVIDIA H100 NVL", "16-mixed", 835.0),
    ("NVIDIA H200", "32", 67.0),
    ("NVIDIA A100-SXM4-80GB", "bf16-mixed", 312.0),
    ("NVIDIA A10", "bf16-mixed", 125.0),
    ("NVIDIA L4", "16-mixed", 121.0),
    ("Tesla V100-SXM2-32GB", "16-mixed", 125.0),
    ("Tesla V100-SXM2-32GB", "bf16-mixed", None),  # no bf16 on Volta: unknown, not a guess
    ("NVIDIA A10G", "bf16-mixed", None),  # not in the table (and not an A10)
    ("", "32", None),  # CPU
])
def test_device_peak_table(name: str, precision: str, tflops: float | None) -> None:
    peak = peak_flops(name, precision)
    assert (peak is None) if tflops is None else peak == pytest.approx(tflops * 1e12)


def test_mfu_is_na_without_a_peak() -> None:
    assert mfu(1e6, 6e6, 2, None) is None and format_mfu(None) == "n/a"
    assert mfu(1e6, 6e6, 2, 1e13) == pytest.approx(0.3) and format_mfu(0.3) == "30.0%"


def step_metrics(mfu_value: float | None) -> StepMetrics:
    return StepMetrics(step=10, total_steps=20, step_seconds=0.5, samples_per_second=16.0, tokens_per_second=1024.0,
                       world_size=2, loss=2.0, grad_norm=0.75, flops_per_token=6e6, mfu=mfu_value)


def test_exported_names_and_status_fields() -> None:
    registry = CollectorRegistry()
    sink = PrometheusSink(MetricsConfig(namespace="ns", job="j", pod="p"), restarts=0, registry=registry)
    sink.step(step_metrics(None))
    sink.checkpoint(CheckpointInfo(step=10, path="/c", time=1.0, save_seconds=2.0, blocked_seconds=0.25))
    text = generate_latest(registry).decode()
    for line in ("disttrain_train_tokens_per_second{", "disttrain_train_grad_norm{",
                 "disttrain_train_flops_per_token{", "disttrain_checkpoint_blocked_seconds{"):
        assert line in text, line
    assert "disttrain_train_mfu_ratio{" not in text  # CPU: absent, not 0
    sink.step(step_metrics(0.4))
    assert 'disttrain_train_mfu_ratio{job="j",namespace="ns",pod="p"} 0.4' in generate_latest(registry).decode()

    status = StatusSink()
    status.step(step_metrics(None))
    status.checkpoint(CheckpointInfo(step=10, path="/c", time=1.0, save_seconds=2.0, blocked_seconds=0.25))
    doc = status.doc
    assert (doc["gradNorm"], doc["mfu"], doc["flopsPerToken"]) == (0.75, None, 6e6)
    assert (doc["checkpointSaveSeconds"], doc["checkpointBlockedSeconds"]) == (2.0, 0.25)


def test_status_and_prometheus_report_each_window_by_its_definition() -> None:
    """One run of 4 steps (windows of 2, global batch 8, 16 tokens a sample, 2 ranks) on a
    clock the test moves, into the real Prometheus and `/status` sinks. Window 2's steps
    take 0.25 s each around a 3 s save: the save is left out. Every series and every key of
    `/status` is its definition, computed from the run's own counts."""
    from prometheus_client.parser import text_string_to_metric_families

    from disttrain_trainer.metrics import Metrics

    ticks, registry, status = Ticks(), CollectorRegistry(), StatusSink()
    prom = PrometheusSink(MetricsConfig(namespace="ns", job="j", pod="p"), restarts=1, registry=registry)
    metrics = Metrics([prom, status], total_steps=4, world_size=2, samples_per_step=8, tokens_per_sample=16,
                      clock=ticks)
    saved = CheckpointInfo(step=4, path="/ck/step-00000004", time=1_790_000_000.0, save_seconds=3.0,
                           blocked_seconds=0.5)
    for step, seconds, loss in ((1, 0.5, None), (2, 0.5, 2.0), (3, 0.25, None), (4, 0.25, 1.5)):
        ticks.now += seconds
        if step == 3:
            with metrics.paused():
                ticks.now += 3.0
        metrics.record_step(step, loss=loss, grad_norm=0.5 if loss else None)
        if loss is not None:
            metrics.record_eval(step, loss + 0.5, {"accuracy": 0.5} if step == 4 else None)
    metrics.record_checkpoint(saved)

    series = {s.name: s.value for family in text_string_to_metric_families(generate_latest(registry).decode())
              for s in family.samples if s.labels == {"namespace": "ns", "job": "j", "pod": "p"}}
    busy, steps_in_window = 0.5, 2  # window 2: two steps of 0.25 s, the save left out
    assert series["disttrain_train_step"] == 4 and series["disttrain_train_loss"] == 1.5
    assert series["disttrain_train_step_seconds"] == busy / steps_in_window == 0.25
    assert series["disttrain_train_samples_per_second"] == steps_in_window * 8 / busy == 32.0
    assert series["disttrain_train_tokens_per_second"] == 32.0 * 16
    assert series["disttrain_train_world_size"] == 2 and series["disttrain_train_restarts"] == 1
    assert series["disttrain_train_eval_loss"] == 2.0
    named = [s for family in text_string_to_metric_families(generate_latest(registry).decode())
             for s in family.samples if s.name == "disttrain_train_eval_metric"]
    assert [(s.labels["metric"], s.value) for s in named] == [("accuracy", 0.5)]
    assert series["disttrain_checkpoint_last_step"] == 4
    assert series["disttrain_checkpoint_last_timestamp_seconds"] == saved.time
    assert (series["disttrain_checkpoint_save_seconds"], series["disttrain_checkpoint_blocked_seconds"]) == (3.0, 0.5)

    doc = status.doc
    assert (doc["step"], doc["totalSteps"], doc["loss"], doc["worldSize"]) == (4, 4, 1.5, 2)
    assert (doc["stepSeconds"], doc["samplesPerSecond"], doc["tokensPerSecond"]) == (0.25, 32.0, 512.0)
    assert (doc["evalLoss"], doc["evalStep"], doc["evalHistory"]) == (2.0, 4, [[2, 2.5], [4, 2.0, {"accuracy": 0.5}]])
    assert doc["evalMetrics"] == {"accuracy": 0.5}
    assert doc["checkpoint"] == {"step": 4, "time": "2026-09-21T14:13:20Z", "path": "/ck/step-00000004"}
    assert (doc["checkpointSaveSeconds"], doc["checkpointBlockedSeconds"]) == (3.0, 0.5)


@pytest.mark.dist
def test_two_ranks_with_accumulation_report_optimizer_steps_of_the_global_batch(tmp_path: Path) -> None:
    """`python -m disttrain_trainer` under torchrun, 2 processes (gloo), batch 4 a process,
    accumulation 2: a step is one optimizer step of 4 x 2 ranks x 2 micro-batches = 16
    samples of `context` tokens. The final report's own figures agree with that definition,
    whatever the machine's speed: steps counted in optimizer steps, world size 2, step time
    x samples/s = 16 samples, tokens/s = samples/s x 64 (gpt-nano's context)."""
    from dt_helpers import Agent, pod_env

    report_file = tmp_path / "termination-log"
    env = pod_env(node=0, rdzv_port=free_port(), nnodes="1:1", nproc=2, steps=12, batch=4, max_restarts=0,
                  metrics_port=free_port())
    env.update(DISTTRAIN_ACCUMULATE_GRAD_BATCHES="2", DISTTRAIN_TERMINATION_LOG=str(report_file))
    agent = Agent(env, tmp_path / "agent.log")
    try:
        rc = agent.wait(timeout=300)
    finally:
        if agent.proc.poll() is None:
            agent.kill_node()
    assert rc == 0, agent.output()[-4000:]
    report = json.loads(report_file.read_text())
    context = GPT_PRESETS["gpt-nano"].context
    assert (report["outcome"], report["step"], report["totalSteps"], report["worldSize"]) == ("Finished", 12, 12, 2)
    assert report["stepSeconds"] * report["samplesPerSecond"] == pytest.approx(4 * 2 * 2, rel=1e-3)
    # Both rates are rounded to 3 decimals in the report: samples/s x context carries its rounding x context.
    assert report["tokensPerSecond"] == pytest.approx(report["samplesPerSecond"] * context, abs=5e-4 * (context + 1))
    assert report["loss"] is not None and report["gradNorm"] > 0


def test_the_status_server_answers_each_documented_path_with_its_type_and_length() -> None:
    """pod-contract.md: GET /metrics (Prometheus text), /healthz, /status (JSON) on the
    metrics port, a query string ignored, anything else 404; a restarted trainer binds the
    port its predecessor just closed."""
    registry, sink, port = CollectorRegistry(), StatusSink(), free_port()
    PrometheusSink(MetricsConfig(port=port, namespace="ml", job="served", pod="served-worker-0"), restarts=0,
                   registry=registry).step(StepMetrics(step=3, total_steps=9, loss=1.5, samples_per_second=8.0,
                                                       tokens_per_second=64.0, step_seconds=0.5, world_size=2))
    sink.step(StepMetrics(step=3, total_steps=9, loss=1.5, samples_per_second=8.0, tokens_per_second=64.0,
                          step_seconds=0.5, world_size=2))

    def get(path: str) -> tuple[int, str, bytes, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as answer:
                body = answer.read()
                return answer.status, answer.headers["Content-Type"], body, answer.headers["Content-Length"]
        except urllib.error.HTTPError as exc:
            return exc.code, "", b"", ""

    for _ in range(2):  # the second server takes the port the first one closed
        server = StatusServer(port, registry, sink)
        try:
            code, ctype, body, length = get("/metrics?x=1")
            assert (code, ctype, length) == (200, CONTENT_TYPE_LATEST, str(len(body)))
            assert 'disttrain_train_step{job="served",namespace="ml",pod="served-worker-0"} 3.0' in body.decode()
            assert get("/healthz")[:3] == (200, "text/plain", b"ok")
            code, ctype, body, length = get("/status")
            assert (code, ctype, length) == (200, "application/json", str(len(body)))
            assert json.loads(body)["step"] == 3
            assert [get(path)[0] for path in ("/", "/metricsx", "/Metrics", "/status/")] == [404] * 4
        finally:
            server.close()


def test_the_report_rounds_rates_to_3_decimals_and_every_other_number_to_6() -> None:
    """docs/pod-contract.md: small numbers, exact enough, and a report that fits the 4 KiB
    termination message however long the run."""
    status = StatusSink()
    status.step(StepMetrics(step=3, total_steps=9, step_seconds=0.1234567891, samples_per_second=10.0 / 3,
                            tokens_per_second=20.0 / 3, world_size=2, loss=1.0 / 3, grad_norm=2.0 / 3,
                            flops_per_token=6e6, mfu=0.1234567891))
    status.checkpoint(CheckpointInfo(step=3, path="/c", time=1.0, save_seconds=1.0 / 7, blocked_seconds=2.0 / 7))
    status.eval(3, 5.0 / 7, {"accuracy": 1.0 / 3})
    doc = status.doc
    assert (doc["samplesPerSecond"], doc["tokensPerSecond"]) == (3.333, 6.667)
    assert (doc["stepSeconds"], doc["loss"], doc["gradNorm"], doc["mfu"]) == (0.123457, 0.333333, 0.666667, 0.123457)
    assert (doc["checkpointSaveSeconds"], doc["checkpointBlockedSeconds"]) == (0.142857, 0.285714)
    assert (doc["evalLoss"], doc["evalHistory"]) == (0.714286, [[3, 0.714286, {"accuracy": 0.333333}]])


def test_a_loss_that_is_not_a_number_is_null_and_the_report_stays_json() -> None:
    status = StatusSink()
    status.eval(4, float("nan"), {})
    status.eval(8, float("inf"), {"accuracy": float("nan")})
    doc = json.loads(status.render(), parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
    assert (doc["evalLoss"], doc["evalStep"], doc["evalHistory"]) == (None, 8, [[4, None], [8, None, {"accuracy": None}]])
    assert doc["evalMetrics"] == {"accuracy": None}
    # and the operator keeps nothing of it: status.progress has no null in a number's place
    from disttrain.api.report import parse_report
    assert parse_report(doc).progress().eval_metrics is None


def test_the_named_metrics_the_trainer_writes_are_the_ones_the_operator_keeps() -> None:
    """Both ends name and count metrics by the pod contract (METRIC_NAME, MAX_METRICS): what
    the trainer writes, the operator's parser keeps whole."""
    from disttrain.api.pod_contract import MAX_METRICS
    from disttrain.api.report import parse_report
    from disttrain_trainer.metrics import eval_metrics
    offered = {"a" * 64: 1.0, "a" * 65: 2.0, "1st": 3.0, **{f"m{i}": float(i) for i in range(MAX_METRICS)}}
    written = eval_metrics(offered, strict=False)
    assert len(written) == MAX_METRICS and "a" * 64 in written and not {"a" * 65, "1st"} & set(written)
    status = StatusSink()
    status.eval(1, 0.5, written)
    assert parse_report(json.loads(status.render())).eval_metrics == written


def test_each_report_moves_last_update_time_in_utc(monkeypatch: pytest.MonkeyPatch) -> None:
    """A poller tells a live trainer from a stale report by lastUpdateTime: a step, a hold
    and the end each set it to now, in UTC whatever the container's time zone."""
    from disttrain_trainer.metrics import Metrics

    monkeypatch.setenv("TZ", "Etc/GMT+5")  # five hours behind UTC
    time.tzset()
    try:
        status = StatusSink()
        metrics = Metrics([status], total_steps=4, world_size=1, samples_per_step=8, tokens_per_sample=1)
        for act in (lambda: metrics.record_step(1, loss=None), lambda: metrics.record_held(1),
                    lambda: metrics.record_held(None), lambda: metrics.finish("Finished", 4)):
            status.doc["lastUpdateTime"] = "2000-01-01T00:00:00Z"
            before = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            act()
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", status.doc["lastUpdateTime"])
            assert status.doc["lastUpdateTime"] >= before
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_hold_reports_the_step_every_rank_holds_at_then_null() -> None:
    from disttrain_trainer.metrics import Metrics

    status = StatusSink()
    metrics = Metrics([Recorder(), status], total_steps=4, world_size=1, samples_per_step=8, tokens_per_sample=1)
    metrics.record_held(12)
    assert status.doc["heldAtStep"] == 12
    metrics.record_held(None)
    assert status.doc["heldAtStep"] is None


def test_the_end_writes_the_report_with_its_outcome_to_the_termination_message(tmp_path: Path) -> None:
    """What the operator reads from an ended pod: the final step, the run's length and
    world, and the outcome, in the file the kubelet keeps (docs/pod-contract.md)."""
    from disttrain_trainer.metrics import FINISHED, Metrics

    message = tmp_path / "termination-log"
    status = StatusSink(termination_log=str(message))
    metrics = Metrics([status], total_steps=10, world_size=3, samples_per_step=8, tokens_per_sample=1)
    metrics.finish(FINISHED, 7)  # (no step logged before: a run resumed at its last step)
    report = json.loads(message.read_text(encoding="utf-8"))
    assert {k: report[k] for k in ("outcome", "step", "totalSteps", "worldSize")} == \
        {"outcome": "Finished", "step": 7, "totalSteps": 10, "worldSize": 3}
    assert report == status.doc == json.loads(status.render())


def test_the_query_bounds_of_a_checkpoint_request_include_both_ends() -> None:
    """holdSeconds 1..3600, waitSeconds 0..300 (a wait at its end would keep the server test
    waiting 300 s, so the ends are taken here, on the parse the server uses)."""
    from disttrain_trainer.status_server import checkpoint_query

    assert checkpoint_query("holdSeconds=1&waitSeconds=300") == (1, 300.0)
    assert checkpoint_query("holdSeconds=3600&waitSeconds=0") == (3600, 0.0)
    assert checkpoint_query("holdSeconds=7") == (7, 0.0)
    assert checkpoint_query("holdSeconds=1&holdSeconds=9") == (9, 0.0)  # the last one counts
    for refused in ("holdSeconds=1&waitSeconds=300.5", "holdSeconds=0", "waitSeconds=0", ""):
        with pytest.raises(ValueError):
            checkpoint_query(refused)


def test_a_query_holding_a_question_mark_still_names_its_path() -> None:
    """Only the first "?" ends the path: GET /status?a=b?c is /status, and a POST to
    /checkpoint whose query holds a "?" reaches /checkpoint (and is judged by its query)."""
    from disttrain_trainer.drain import CheckpointRequest
    from disttrain_trainer.status_server import Control

    port, request = free_port(), CheckpointRequest()
    server = StatusServer(port, CollectorRegistry(), StatusSink(), Control("tok", request))
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status?a=b?c", timeout=30) as answer:
            assert answer.status == 200 and json.loads(answer.read())["step"] == 0
        call = urllib.request.Request(f"http://127.0.0.1:{port}/checkpoint?holdSeconds=2&note=a?b", method="POST",
                                      data=b"", headers={"Authorization": "Bearer tok"})
        with urllib.request.urlopen(call, timeout=30) as answer:
            assert (answer.status, answer.headers["Content-Type"]) == (202, "application/json")
        assert request.pending() == 2
        bad = urllib.request.Request(f"http://127.0.0.1:{port}/checkpoint?holdSeconds=0", method="POST", data=b"",
                                     headers={"Authorization": "Bearer tok"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(bad, timeout=30)
        assert (refused.value.code, refused.value.headers["Content-Type"]) == (400, "application/json")
    finally:
        server.close()


def test_the_server_neither_keeps_the_trainer_alive_nor_waits_for_an_idle_client() -> None:
    """The trainer process ends when its loop does, server still open (its threads are
    daemons); and close() returns while a client holds a connection without a request."""
    script = ("import sys; from prometheus_client import CollectorRegistry; "
              "from disttrain_trainer.metrics import StatusSink; from disttrain_trainer.status_server import StatusServer; "
              "StatusServer(int(sys.argv[1]), CollectorRegistry(), StatusSink()); print('serving', flush=True)")
    done = subprocess.run([sys.executable, "-c", script, str(free_port())], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "serving\n"), done.stderr

    port = free_port()
    server = StatusServer(port, CollectorRegistry(), StatusSink())
    idle = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as answer:
            assert answer.status == 200  # the idle connection's handler thread is running by now
        closer = threading.Thread(target=server.close, daemon=True)
        closer.start()
        closer.join(timeout=60)
        assert not closer.is_alive(), "close() waited on a client that sent nothing"
    finally:
        idle.close()


def test_build_metrics_serves_only_from_local_rank_0_and_logs_only_on_rank_0() -> None:
    """The pod contract: local rank 0 of each pod serves /metrics and /status on the metrics
    port (labelled with its job and pod); the other ranks serve nothing; rank 0 alone logs."""
    from disttrain_trainer.metrics import LogSink, NullSink, PrometheusSink, build_metrics

    port = free_port()
    cfg = MetricsConfig(port=port, namespace="ml", job="built", pod="built-worker-0")
    common = dict(restarts=2, total_steps=9, world_size=4, samples_per_step=8, tokens_per_sample=1,
                  flops_per_token=0.0, peak_flops=None)
    metrics = build_metrics(cfg, is_local_rank0=True, is_rank0=True, **common)
    try:
        assert sorted(type(s).__name__ for s in metrics.sinks) == ["LogSink", "PrometheusSink", "StatusSink"]
        metrics.record_step(3, loss=1.25, grad_norm=None)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
            text = answer.read().decode()
        assert 'disttrain_train_step{job="built",namespace="ml",pod="built-worker-0"} 3.0' in text
        assert 'disttrain_train_restarts{job="built",namespace="ml",pod="built-worker-0"} 2.0' in text
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=30) as answer:
            assert json.loads(answer.read())["worldSize"] == 4
    finally:
        metrics.close()
    other = build_metrics(cfg, is_local_rank0=False, is_rank0=False, **common)
    assert [type(s) for s in other.sinks] == [NullSink] and other.server is None
    assert not any(isinstance(s, (LogSink, PrometheusSink)) for s in other.sinks)


def test_build_metrics_opens_checkpoint_requests_only_with_the_pods_token() -> None:
    """POST /checkpoint is served when the pod has its token (DISTTRAIN_CONTROL_TOKEN) and the
    loop takes requests; without either it is 404, as on any other path."""
    from disttrain_trainer.drain import CheckpointRequest
    from disttrain_trainer.metrics import build_metrics

    common = dict(is_local_rank0=True, is_rank0=False, restarts=0, total_steps=9, world_size=1,
                  samples_per_step=8, tokens_per_sample=1, flops_per_token=0.0, peak_flops=None)

    def post(port: int) -> int:
        call = urllib.request.Request(f"http://127.0.0.1:{port}/checkpoint?holdSeconds=3", method="POST", data=b"",
                                      headers={"Authorization": "Bearer tok"})
        try:
            with urllib.request.urlopen(call, timeout=30) as answer:
                return answer.status
        except urllib.error.HTTPError as exc:
            return exc.code

    for token, request, answer in (("tok", CheckpointRequest(), 202), ("", CheckpointRequest(), 404),
                                   ("tok", None, 404)):
        port = free_port()
        metrics = build_metrics(MetricsConfig(port=port, control_token=token), checkpoint_request=request, **common)
        try:
            assert post(port) == answer, (token, request)
            if request is not None:
                assert request.pending() == (3 if answer == 202 else 0)
        finally:
            metrics.close()


def test_the_log_line_names_the_gradient_norm_or_says_n_a(caplog: pytest.LogCaptureFixture) -> None:
    """docs/trainer.md: rank 0 logs one line per log step; the norm is "n/a" when unknown."""
    from disttrain_trainer.metrics import LogSink

    caplog.set_level("INFO", logger="disttrain_trainer")
    sink = LogSink()
    sink.step(StepMetrics(step=10, total_steps=200, step_seconds=0.25, samples_per_second=32.0,
                          tokens_per_second=512.0, world_size=2, loss=3.01, grad_norm=1.8744))
    sink.step(StepMetrics(step=20, total_steps=200, step_seconds=0.25, samples_per_second=32.0,
                          tokens_per_second=512.0, world_size=2, loss=2.5, grad_norm=None))
    sink.step(StepMetrics(step=21, total_steps=200, step_seconds=0.25, samples_per_second=32.0,
                          tokens_per_second=512.0, world_size=2))  # not a log step: no line
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "step 10/200 loss 3.0100 | grad norm 1.874 | 32.0 samples/s 512 tokens/s | 250.0 ms/step | MFU n/a | world 2",
        "step 20/200 loss 2.5000 | grad norm n/a | 32.0 samples/s 512 tokens/s | 250.0 ms/step | MFU n/a | world 2"]


def test_mfu_is_tokens_times_flops_over_world_times_peak_from_the_first_window_on() -> None:
    """docs/trainer.md: MFU = tokens/s x FLOPs per token / (world size x the device's peak),
    over the last window; none before a window has closed (rates are 0 then), none without a
    peak or FLOPs."""
    from disttrain_trainer.metrics import Metrics, build_metrics

    ticks, status = Ticks(), StatusSink()
    metrics = Metrics([status], total_steps=4, world_size=2, samples_per_step=8, tokens_per_sample=16,
                      flops_per_token=3e6, peak_flops=1e9, clock=ticks)
    ticks.now += 0.5
    first = metrics.record_step(1, loss=None)
    assert (first.mfu, first.flops_per_token, status.doc["mfu"]) == (None, 3e6, None)  # no window closed yet
    assert (first.step_seconds, first.samples_per_second, status.doc["stepSeconds"]) == (0.0, 0.0, 0.0)
    ticks.now += 0.5
    logged = metrics.record_step(2, loss=1.0)
    tokens_per_second = 2 * 8 * 16 / 1.0  # two steps of 8 samples of 16 tokens in 1 s
    assert logged.mfu == pytest.approx(tokens_per_second * 3e6 / (2 * 1e9))
    assert (status.doc["mfu"], status.doc["flopsPerToken"]) == (round(logged.mfu, 6), 3e6)

    unknown = StatusSink()
    bare = Metrics([unknown], total_steps=4, world_size=1, samples_per_step=8, tokens_per_sample=1, clock=ticks)
    ticks.now += 1.0
    assert bare.record_step(1, loss=1.0).mfu is None and unknown.doc["flopsPerToken"] == 0.0

    port = free_port()
    built = build_metrics(MetricsConfig(port=port), is_local_rank0=True, is_rank0=False, restarts=0, total_steps=4,
                          world_size=2, samples_per_step=8, tokens_per_sample=16, flops_per_token=3e6, peak_flops=1e9)
    try:
        built.record_step(1, loss=1.0)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=30) as answer:
            doc = json.loads(answer.read())
        assert doc["flopsPerToken"] == 3e6 and doc["mfu"] is not None and doc["mfu"] > 0
    finally:
        built.close()
    with socket.socket() as again:  # close() closed the server: its port is free for the next trainer
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("0.0.0.0", port))
