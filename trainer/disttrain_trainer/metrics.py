"""Training metrics: a processor derives rates, sinks export them.

Rates are averaged over the logging window (the steps since the previous log step, as
torchtitan does), and the time the loop spends on checkpoints is taken out of the window
and reported on its own: a save neither slows the step after it nor hides in a mean.

Sinks: Prometheus (design-brief names), the log, and the `/status` JSON of the pod
contract. Local rank 0 of each pod serves `/metrics`, `/healthz`, `/status` on the
metrics port (status_server.py); other ranks get a no-op sink and start no server.

The same report, with its `outcome` (Finished | Interrupted), is written once more as the
container's termination message when the loop ends: the operator reads it from the
ended pod, so the job's final step and checkpoint are exact and "finished" is told
apart from "stopped on a signal" (docs/pod-contract.md, "Success contract").
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Gauge

# FINISHED and INTERRUPTED: the trainer's final word (Metrics.finish), the loop's to give.
from disttrain.api.pod_contract import (FINISHED, INTERRUPTED, MAX_METRICS, METRIC_NAME, METRIC_NAME_RULE,  # noqa: F401
                                        WORKER_TIMES_WINDOWS, Key)
from disttrain_trainer.checkpoint import CheckpointInfo
from disttrain_trainer.config import MetricsConfig
from disttrain_trainer.drain import CheckpointRequest
from disttrain_trainer.flops import format_mfu, mfu
from disttrain_trainer.status_server import Control, StatusServer
from disttrain_trainer.timing import ComputeTimer
from disttrain_trainer.tracking import tracking_sinks

log = logging.getLogger("disttrain_trainer")


@dataclass(kw_only=True, slots=True)
class StepMetrics:
    step: int
    total_steps: int
    step_seconds: float
    """Mean optimizer step over the last logging window, checkpoint time excluded."""
    samples_per_second: float
    """Global samples per second over the last logging window, checkpoint time excluded."""
    tokens_per_second: float
    world_size: int
    loss: float | None = None  # only on log steps (all-reduced there)
    grad_norm: float | None = None  # only on log steps: global L2 norm before clipping
    flops_per_token: float = 0.0
    mfu: float | None = None  # None when the device's peak is unknown (CPU, unlisted GPU)


# Evaluations /status keeps, newest last: a poller (a sweep's pruner) sees every one
# though it polls less often than the trainer evaluates; small enough for the 4 KiB
# termination message.
EVAL_HISTORY = 32


def eval_metrics(metrics: Mapping[str, Any], *, strict: bool) -> dict[str, float]:
    """Named metrics -> {name: float}. A name the report cannot carry, a value that is no
    number, or a 17th name: ValueError when `strict` (your own call), else left out with a
    warning (what a framework logged)."""
    out: dict[str, float] = {}
    for name, value in metrics.items():
        problem = None
        if not isinstance(name, str) or not METRIC_NAME.match(name):
            problem = ("is not a metric name the report can carry", METRIC_NAME_RULE)
        elif len(out) == MAX_METRICS:
            problem = ("is one metric too many", f"at most {MAX_METRICS} named metrics per evaluation")
        else:
            try:
                out[name] = float(value.item() if hasattr(value, "item") else value)
                continue
            except (TypeError, ValueError, RuntimeError):
                problem = ("is not a number", "a float, an int or a one-element tensor")
        message = f"evaluation metric {name!r} = {value!r} {problem[0]}; allowed: {problem[1]}"
        if strict:
            raise ValueError(message + "; rename or drop it")
        log.warning("%s: left out of the report", message)
    return out


class Sink(Protocol):
    def step(self, m: StepMetrics) -> None: ...

    def checkpoint(self, info: CheckpointInfo) -> None: ...

    def eval(self, step: int, loss: float | None, metrics: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


class NullSink:
    def step(self, m: StepMetrics) -> None:
        pass

    def eval(self, step: int, loss: float | None, metrics: Mapping[str, float]) -> None:
        pass

    def checkpoint(self, info: CheckpointInfo) -> None:
        pass

    def close(self) -> None:
        pass


class LogSink:
    """One line per log step (rank 0 only; see context._setup_logging)."""

    def step(self, m: StepMetrics) -> None:
        if m.loss is not None:
            norm = "n/a" if m.grad_norm is None else f"{m.grad_norm:.3f}"
            log.info(
                "step %d/%d loss %.4f | grad norm %s | %.1f samples/s %.0f tokens/s | %.1f ms/step | "
                "MFU %s | world %d",
                m.step, m.total_steps, m.loss, norm, m.samples_per_second, m.tokens_per_second,
                1000 * m.step_seconds, format_mfu(m.mfu), m.world_size,
            )

    def checkpoint(self, info: CheckpointInfo) -> None:
        pass

    def eval(self, step: int, loss: float | None, metrics: Mapping[str, float]) -> None:
        shown = ([f"loss {loss:.4f}"] if loss is not None else []) + [f"{k} {v:.4g}" for k, v in metrics.items()]
        log.info("step %d eval %s (held-out split)", step, ", ".join(shown))

    def close(self) -> None:
        pass


class PrometheusSink:
    def __init__(self, cfg: MetricsConfig, *, restarts: int, registry: CollectorRegistry) -> None:
        labels = {"namespace": cfg.namespace, "job": cfg.job, "pod": cfg.pod}
        names = list(labels)

        def gauge(name: str, doc: str) -> Any:
            return Gauge(name, doc, names, registry=registry).labels(**labels)

        self._labels = labels

        self.step_g = gauge("disttrain_train_step",
                            "Optimizer steps completed (a gauge: steps redone after a resume are not counted twice).")
        self.loss = gauge("disttrain_train_loss", "Loss, mean over data-parallel ranks, at the last log step.")
        self.sps = gauge("disttrain_train_samples_per_second",
                         "Global samples/s averaged over the last logging window, checkpoint time excluded.")
        self.tps = gauge("disttrain_train_tokens_per_second",
                         "Global tokens/s averaged over the last logging window, checkpoint time excluded "
                         "(samples x sequence length; 1 token per sample for the MLP).")
        self.step_s = gauge("disttrain_train_step_seconds",
                            "Mean optimizer step over the last logging window, checkpoint time excluded.")
        self.grad_norm = gauge("disttrain_train_grad_norm",
                               "Global L2 norm of the gradients before clipping, at the last log step "
                               "(computed on log steps even with clipping off).")
        self.flops = gauge("disttrain_train_flops_per_token",
                           "The model's training FLOPs per token: 6 per matmul weight plus attention's "
                           "12 x layers x d_model x sequence length.")
        # Left unlabelled (hence absent from /metrics) until the device's peak is known.
        self.mfu = Gauge("disttrain_train_mfu_ratio",
                         "Model FLOPs utilisation (0..1) over the last window: tokens/s x FLOPs per token / "
                         "(world size x the device's dense peak in the compute dtype); absent when the peak "
                         "is unknown (CPU, an unlisted GPU).", names, registry=registry)
        self.world = gauge("disttrain_train_world_size", "Processes in the current process group.")
        self.restarts = gauge("disttrain_train_restarts", "Torchrun restarts of this node's worker group.")
        self.save_s = gauge("disttrain_checkpoint_save_seconds",
                            "Duration of the last save, start to commit (an async save's background write "
                            "included).")
        self.blocked_s = gauge("disttrain_checkpoint_blocked_seconds",
                               "How long the last save held the training loop: the whole save when synchronous, "
                               "the copy to CPU memory when async; excluded from step time.")
        self.ckpt_step = gauge("disttrain_checkpoint_last_step", "Step of the newest complete checkpoint.")
        self.ckpt_ts = gauge("disttrain_checkpoint_last_timestamp_seconds",
                             "Unix time of the newest complete checkpoint.")
        self.eval_loss = gauge("disttrain_train_eval_loss", "Loss on the held-out split at the last evaluation.")
        self.eval_metric = Gauge("disttrain_train_eval_metric", "A named metric of the last evaluation "
                                 "(status.progress.evalMetrics), by name.", [*names, "metric"], registry=registry)
        self.restarts.set(restarts)

    def step(self, m: StepMetrics) -> None:
        self.step_g.set(m.step)
        self.sps.set(m.samples_per_second)
        self.tps.set(m.tokens_per_second)
        self.step_s.set(m.step_seconds)
        self.world.set(m.world_size)
        self.flops.set(m.flops_per_token)
        if m.loss is not None:
            self.loss.set(m.loss)
        if m.grad_norm is not None:
            self.grad_norm.set(m.grad_norm)
        if m.mfu is not None:
            self.mfu.labels(**self._labels).set(m.mfu)

    def checkpoint(self, info: CheckpointInfo) -> None:
        self.ckpt_step.set(info.step)
        self.ckpt_ts.set(info.time)
        if info.save_seconds:
            self.save_s.set(info.save_seconds)
            self.blocked_s.set(info.blocked_seconds)

    def eval(self, step: int, loss: float | None, metrics: Mapping[str, float]) -> None:
        if loss is not None:
            self.eval_loss.set(loss)
        for name, value in metrics.items():
            self.eval_metric.labels(**self._labels, metric=name).set(value)

    def close(self) -> None:
        pass


@dataclass
class StatusSink:
    """Holds the `/status` document of the pod contract; at the end, writes it with its
    outcome to the termination-message file."""

    termination_log: str = ""
    doc: dict[str, Any] = field(
        default_factory=lambda: {
            Key.STEP: 0, Key.TOTAL_STEPS: 0, Key.LOSS: None, Key.GRAD_NORM: None, Key.SAMPLES_PER_SECOND: 0.0,
            Key.TOKENS_PER_SECOND: 0.0, Key.STEP_SECONDS: None, Key.FLOPS_PER_TOKEN: 0.0, Key.MFU: None,
            Key.WORLD_SIZE: 0, Key.CHECKPOINT: None, Key.CHECKPOINT_SAVE_SECONDS: None,
            Key.CHECKPOINT_BLOCKED_SECONDS: None, Key.LAST_UPDATE_TIME: _now_iso(), Key.OUTCOME: None,
            Key.EVAL_LOSS: None, Key.EVAL_STEP: None, Key.HELD_AT_STEP: None,
        }
    )
    lock: threading.Lock = field(default_factory=threading.Lock)

    def step(self, m: StepMetrics) -> None:
        with self.lock:
            self.doc.update({
                Key.STEP: m.step, Key.TOTAL_STEPS: m.total_steps,
                Key.SAMPLES_PER_SECOND: round(m.samples_per_second, 3),
                Key.TOKENS_PER_SECOND: round(m.tokens_per_second, 3), Key.STEP_SECONDS: round(m.step_seconds, 6),
                Key.FLOPS_PER_TOKEN: m.flops_per_token, Key.MFU: None if m.mfu is None else round(m.mfu, 6),
                Key.WORLD_SIZE: m.world_size, Key.LAST_UPDATE_TIME: _now_iso(),
            })
            if m.loss is not None:
                self.doc[Key.LOSS] = round(m.loss, 6)
            if m.grad_norm is not None:
                self.doc[Key.GRAD_NORM] = round(m.grad_norm, 6)

    def checkpoint(self, info: CheckpointInfo) -> None:
        with self.lock:
            self.doc[Key.CHECKPOINT] = info.as_status()
            if info.save_seconds:  # saved by this process (not found on disk at start)
                self.doc[Key.CHECKPOINT_SAVE_SECONDS] = round(info.save_seconds, 6)
                self.doc[Key.CHECKPOINT_BLOCKED_SECONDS] = round(info.blocked_seconds, 6)

    def eval(self, step: int, loss: float | None, metrics: Mapping[str, float]) -> None:
        value = _finite(loss)
        named = {k: _finite(v) for k, v in metrics.items()}
        with self.lock:
            entry = [step, value, named] if named else [step, value]
            history = [*self.doc.get(Key.EVAL_HISTORY, []), entry][-EVAL_HISTORY:]
            self.doc.update({Key.EVAL_LOSS: value, Key.EVAL_STEP: step, Key.EVAL_HISTORY: history})
            if named:
                self.doc[Key.EVAL_METRICS] = named
            else:
                self.doc.pop(Key.EVAL_METRICS, None)

    def worker_times(self, step: int, table: list[list[float]]) -> None:
        """Every worker's compute and step time in the window ending at `step` (timing.py)."""
        with self.lock:
            kept = [w for w in self.doc.get(Key.WORKER_TIMES, []) if w[0] < step]
            self.doc[Key.WORKER_TIMES] = [*kept, [step, table]][-WORKER_TIMES_WINDOWS:]

    def held(self, step: int | None) -> None:
        with self.lock:
            self.doc.update({Key.HELD_AT_STEP: step, Key.LAST_UPDATE_TIME: _now_iso()})

    def finish(self, outcome: str, step: int, total_steps: int, world_size: int) -> None:
        with self.lock:
            self.doc.update({Key.OUTCOME: outcome, Key.STEP: step, Key.TOTAL_STEPS: total_steps,
                             Key.WORLD_SIZE: world_size, Key.LAST_UPDATE_TIME: _now_iso()})
            # workerTimes grows with the workers; the message keeps 4 KiB and the operator
            # wants it only from a trainer that runs.
            blob = json.dumps({k: v for k, v in self.doc.items() if k != Key.WORKER_TIMES})
        if self.termination_log:
            # Kubernetes keeps at most 4 KiB of it; the report is far smaller.
            try:
                with open(self.termination_log, "w", encoding="utf-8") as out:
                    out.write(blob)
            except OSError as exc:
                log.warning("could not write the termination message to %s: %s", self.termination_log, exc)

    def render(self) -> bytes:
        with self.lock:
            return json.dumps(self.doc).encode()

    def close(self) -> None:
        pass


def _finite(value: float | None) -> float | None:
    return round(value, 6) if value is not None and math.isfinite(value) else None


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Metrics:
    """The processor: turns step timings into window-averaged rates and fans out to the
    sinks. A window closes at each log step; `paused()` takes checkpoint work out of it."""

    def __init__(self, sinks: list[Sink], *, total_steps: int, world_size: int,
                 samples_per_step: int, tokens_per_sample: int, flops_per_token: float = 0.0,
                 peak_flops: float | None = None, server: StatusServer | None = None,
                 clock: Callable[[], float] = time.perf_counter, timer: ComputeTimer | None = None) -> None:
        self.sinks = sinks
        self.clock = clock
        """Seconds on a monotonic clock; tests pass their own, so window rates are exact."""
        self.total_steps = total_steps
        self.world_size = world_size
        self.samples_per_step = samples_per_step
        self.tokens_per_sample = tokens_per_sample
        self.flops_per_token = flops_per_token
        self.peak_flops = peak_flops
        """Peak FLOP/s of one device in the compute dtype; None = unknown (MFU n/a)."""
        self.server = server
        self.timer = timer or ComputeTimer()
        """Times the steps' compute (timing.py): `with metrics.timer.section():`."""
        self.last_window: tuple[int, float, float] | None = None
        """(last step, compute seconds per step, step seconds) of the newest closed window."""
        self.start()
        self._rates = (0.0, 0.0, 0.0)  # step seconds, samples/s, tokens/s of the last closed window

    def start(self) -> None:
        """Open a fresh window (after loading, before the first step)."""
        self._window_start = self.clock()
        self._window_steps = 0
        self._window_samples = 0.0
        self._window_tokens = 0.0
        self._paused = 0.0
        self.timer.take()  # compute before the window (loading, a hold) is not the window's

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent inside is left out of the window (checkpoint saves and commits)."""
        t0 = self.clock()
        try:
            yield
        finally:
            self._paused += self.clock() - t0

    def record_step(self, step: int, loss: float | None, grad_norm: float | None = None, *,
                    samples: float | None = None, tokens: float | None = None,
                    close: bool | None = None) -> StepMetrics:
        """Every step; `loss` is given on log steps only, and closes the window (`close`
        says so when a log step has no loss). `samples` and `tokens` (global, this step)
        default to samples_per_step and tokens_per_sample."""
        samples = self.samples_per_step if samples is None else samples
        self._window_steps += 1
        self._window_samples += samples
        self._window_tokens += samples * self.tokens_per_sample if tokens is None else tokens
        if loss is not None if close is None else close:
            now = self.clock()
            busy = max(now - self._window_start - self._paused, 1e-9)
            self._rates = (busy / self._window_steps, self._window_samples / busy, self._window_tokens / busy)
            self.last_window = (step, self.timer.take() / self._window_steps, self._rates[0])
            self.start()
        step_seconds, sps, tps = self._rates
        m = StepMetrics(
            step=step, total_steps=self.total_steps, step_seconds=step_seconds, samples_per_second=sps,
            tokens_per_second=tps, world_size=self.world_size, loss=loss, grad_norm=grad_norm,
            flops_per_token=self.flops_per_token,
            mfu=mfu(tps, self.flops_per_token, self.world_size, self.peak_flops) if tps else None,
        )
        self.publish(m)
        return m

    def publish(self, m: StepMetrics) -> None:
        """Hand a step's metrics to every sink (again, once a loss averaged late is known)."""
        for sink in self.sinks:
            sink.step(m)

    def record_checkpoint(self, info: CheckpointInfo | None) -> None:
        if info is not None:
            for sink in self.sinks:
                sink.checkpoint(info)

    def record_eval(self, step: int, loss: float | None, metrics: Mapping[str, float] | None = None) -> None:
        for sink in self.sinks:
            sink.eval(step, loss, metrics or {})

    def record_worker_times(self, step: int, table: list[list[float]]) -> None:
        """The workers' times of the window ending at `step`, as the ranks exchanged them."""
        if table:
            for sink in self.sinks:
                if isinstance(sink, StatusSink):
                    sink.worker_times(step, table)

    def record_held(self, step: int | None) -> None:
        """The ranks hold at `step` after a requested checkpoint (None: training again)."""
        for sink in self.sinks:
            if isinstance(sink, StatusSink):
                sink.held(step)

    def record_framework(self, label: str) -> None:
        """The framework the report comes from ("transformers 5.24.0"): the report's `framework`."""
        for sink in self.sinks:
            if isinstance(sink, StatusSink):
                with sink.lock:
                    sink.doc[Key.FRAMEWORK] = label

    def finish(self, outcome: str, step: int) -> None:
        """The loop ended: report the outcome (FINISHED or INTERRUPTED) where sinks keep it."""
        for sink in self.sinks:
            finish = getattr(sink, "finish", None)  # the report and the trackers keep it
            if finish is not None:
                finish(outcome, step, self.total_steps, self.world_size)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
        if self.server is not None:
            self.server.close()


def build_metrics(cfg: MetricsConfig, *, is_local_rank0: bool, is_rank0: bool, restarts: int,
                  total_steps: int, world_size: int, samples_per_step: int, tokens_per_sample: int,
                  flops_per_token: float, peak_flops: float | None,
                  checkpoint_request: CheckpointRequest | None = None,
                  params: Mapping[str, Any] | None = None, timer: ComputeTimer | None = None) -> Metrics:
    """The sinks this process feeds: the log on rank 0, the report and server on local
    rank 0 of each pod, the trackers the job names on rank 0 (with the run's `params`)."""
    sinks: list[Sink] = []
    server = None
    if is_rank0:
        sinks.append(LogSink())
        sinks.extend(tracking_sinks(cfg, is_rank0=is_rank0, restarts=restarts, params=params or {}))
    if is_local_rank0 and (cfg.port or cfg.termination_log):
        status = StatusSink(termination_log=cfg.termination_log)
        sinks.append(status)
        if cfg.port:
            registry = CollectorRegistry()
            sinks.append(PrometheusSink(cfg, restarts=restarts, registry=registry))
            control = (Control(cfg.control_token, checkpoint_request)
                       if cfg.control_token and checkpoint_request is not None else None)
            server = StatusServer(cfg.port, registry, status, control)
    if not sinks:
        sinks.append(NullSink())
    return Metrics(sinks, total_steps=total_steps, world_size=world_size,
                   samples_per_step=samples_per_step, tokens_per_sample=tokens_per_sample,
                   flops_per_token=flops_per_token, peak_flops=peak_flops, server=server, timer=timer)
