"""The trainer's report, typed: what `/status` serves while a pod trains and what its
termination message says when it ends (docs/pod-contract.md). One parser for the
operator and `disttrain run --local`, so both read the same fields the same way.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from disttrain.api.pod_contract import FINISHED, INTERRUPTED, MAX_METRICS, METRIC_NAME, WORKER_TIMES_WINDOWS, Key
from disttrain.api.status_types import CheckpointStatus, Progress
from disttrain.api.times import parse_time

EVAL_LOSS = Key.EVAL_LOSS  # the metric a sweep's objective names when not one of evalMetrics


@dataclass(frozen=True, slots=True)
class Evaluation:
    step: int
    loss: float | None = None
    metrics: dict[str, float | None] = field(default_factory=dict)

    def value(self, metric: str) -> float | None:
        """The named metric at this evaluation: evalLoss, or one of its metrics."""
        return self.loss if metric == EVAL_LOSS else self.metrics.get(metric)


@dataclass(frozen=True, slots=True)
class WorkerTime:
    worker: int  # the worker index (pod <job>-worker-<i>)
    compute_seconds: float  # per step, the slowest of its ranks: the part no collective runs in
    step_seconds: float  # per step, all of it (compute, gradient exchange, waiting for peers)


@dataclass(frozen=True, slots=True)
class WorkerWindow:
    step: int  # the window's last step
    times: tuple[WorkerTime, ...]


@dataclass(frozen=True, slots=True)
class TrainerReport:
    step: int | None = None
    total_steps: int | None = None
    loss: float | None = None
    samples_per_second: float | None = None
    tokens_per_second: float | None = None
    step_seconds: float | None = None
    world_size: int | None = None
    checkpoint: CheckpointStatus | None = None  # as status.checkpoint has it
    last_update_time: str | None = None
    outcome: str | None = None  # None while training; FINISHED or INTERRUPTED at the end
    eval_loss: float | None = None  # loss on the held-out split, measured at eval_step
    eval_step: int | None = None
    eval_metrics: dict[str, float | None] = field(default_factory=dict)  # named metrics at eval_step
    eval_history: tuple[Evaluation, ...] = ()  # the run's latest evaluations, oldest first
    held_at_step: int | None = None  # the ranks hold here after a requested checkpoint (POST /checkpoint)
    framework: str | None = None  # what reports: "transformers 5.24.0" (disttrain.train's callbacks)
    worker_windows: tuple[WorkerWindow, ...] = ()  # each worker's compute and step time, newest windows last

    @property
    def finished(self) -> bool:
        return self.outcome == FINISHED

    @property
    def evaluated(self) -> bool:
        return self.eval_step is not None and (self.eval_loss is not None or bool(self.eval_metrics))

    def latest_eval(self) -> Evaluation | None:
        """The newest evaluation: evalLoss, evalStep and evalMetrics as one."""
        if not self.evaluated:
            return None
        assert self.eval_step is not None
        return Evaluation(self.eval_step, self.eval_loss, self.eval_metrics)

    def evaluations(self) -> tuple[Evaluation, ...]:
        """Every evaluation the report holds, oldest first: its history, else the newest."""
        latest = self.latest_eval()
        return self.eval_history or ((latest,) if latest else ())

    def progress(self) -> Progress | None:
        """status.progress of the DistributedTraining (None: the report says nothing of it)."""
        percent = None
        if self.total_steps and self.step is not None:
            percent = f"{min(100, int(100 * self.step / self.total_steps))}%"
        progress = Progress(step=self.step, total_steps=self.total_steps or None, percent_complete=percent,
                            loss=_rounded(self.loss), samples_per_second=_rounded(self.samples_per_second),
                            step_seconds=_rounded(self.step_seconds),
                            eval_loss=_rounded(self.eval_loss),
                            eval_metrics={k: round(v, 6) for k, v in self.eval_metrics.items() if v is not None} or None,
                            eval_step=self.eval_step if self.evaluated else None)
        return progress if progress != Progress() else None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def parse_report(data: Any) -> TrainerReport | None:
    """A /status document or termination message (dict or JSON text) -> TrainerReport.
    None for anything that is not a trainer report (a user's script's last log lines)."""
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except ValueError:
            return None
    if not isinstance(data, dict) or not any(k in data for k in (Key.STEP, Key.OUTCOME, Key.CHECKPOINT)):
        return None
    outcome = data.get(Key.OUTCOME)
    return TrainerReport(
        step=_int(data.get(Key.STEP)),
        total_steps=_int(data.get(Key.TOTAL_STEPS)),
        loss=_num(data.get(Key.LOSS)),
        samples_per_second=_num(data.get(Key.SAMPLES_PER_SECOND)),
        tokens_per_second=_num(data.get(Key.TOKENS_PER_SECOND)),
        step_seconds=_num(data.get(Key.STEP_SECONDS)),
        world_size=_int(data.get(Key.WORLD_SIZE)),
        checkpoint=_checkpoint(data.get(Key.CHECKPOINT)),
        last_update_time=_text(data.get(Key.LAST_UPDATE_TIME)),
        outcome=outcome if outcome in (FINISHED, INTERRUPTED) else None,
        eval_loss=_num(data.get(Key.EVAL_LOSS)),
        eval_step=_int(data.get(Key.EVAL_STEP)),
        eval_metrics=_metrics(data.get(Key.EVAL_METRICS)),
        eval_history=_history(data.get(Key.EVAL_HISTORY)),
        held_at_step=_int(data.get(Key.HELD_AT_STEP)),
        framework=_text(data.get(Key.FRAMEWORK)),
        worker_windows=_worker_windows(data.get(Key.WORKER_TIMES)),
    )


def newest(*reports: TrainerReport | None) -> TrainerReport | None:
    """The report furthest along (highest step; a final one wins a tie)."""
    present = [r for r in reports if r is not None]
    if not present:
        return None
    return max(present, key=lambda r: (r.step if r.step is not None else -1, r.outcome is not None))


def _checkpoint(value: Any) -> CheckpointStatus | None:
    if not isinstance(value, dict) or _int(value.get("step")) is None:
        return None
    return CheckpointStatus(step=_int(value["step"]),
                            time=value.get("time") if parse_time(_text(value.get("time"))) else None,
                            path=_text(value.get("path")) or None)


def _history(value: Any) -> tuple[Evaluation, ...]:
    """[[step, loss], [step, loss, {name: value}], ...] -> Evaluations; malformed entries
    are skipped."""
    if not isinstance(value, list):
        return ()
    out = []
    for item in value[:1000]:
        if isinstance(item, list) and len(item) in (2, 3) and _int(item[0]) is not None:
            out.append(Evaluation(item[0], _num(item[1]), _metrics(item[2]) if len(item) == 3 else {}))
    return tuple(out)


MAX_WORKERS = 4096  # spec.maxNodes' bound is far lower: a longer list is no trainer's


def _worker_windows(value: Any) -> tuple[WorkerWindow, ...]:
    """[[step, [[worker, compute, step], ...]], ...] -> the newest WORKER_TIMES_WINDOWS
    windows; malformed windows and entries are skipped, a worker is kept once per window."""
    if not isinstance(value, list):
        return ()
    out = []
    for item in value[-WORKER_TIMES_WINDOWS:]:
        if not (isinstance(item, list) and len(item) == 2 and _int(item[0]) is not None
                and isinstance(item[1], list)):
            continue
        times: dict[int, WorkerTime] = {}
        for entry in item[1][:MAX_WORKERS]:
            if isinstance(entry, list) and len(entry) == 3 and _int(entry[0]) is not None:
                compute, step = _num(entry[1]), _num(entry[2])
                if compute is not None and step is not None and compute >= 0 and step >= 0:
                    times.setdefault(entry[0], WorkerTime(entry[0], compute, step))
        if times:
            out.append(WorkerWindow(item[0], tuple(sorted(times.values(), key=lambda t: t.worker))))
    return tuple(out)


def _metrics(value: Any) -> dict[str, float | None]:
    """{name: number} -> the first MAX_METRICS well-named entries; others are skipped."""
    if not isinstance(value, dict):
        return {}
    named = [(k, v) for k, v in value.items() if isinstance(k, str) and METRIC_NAME.match(k)]
    return {k: _num(v) for k, v in named[:MAX_METRICS]}


# A report comes from a tenant's pod: every value is bounded and typed here, so nothing
# it says can make a status the API server refuses (a step of 2**63 is no int64 there).
MAX_COUNT = 2**53 - 1  # also exact in JSON numbers read as doubles
MAX_TEXT = 4096


def _int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and len(value) <= MAX_TEXT else None


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None
