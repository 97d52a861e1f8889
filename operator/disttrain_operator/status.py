"""Trainer report -> status.progress, status.checkpoint and CheckpointStale (pure); and
the status itself as the typed classes of api/types.py have it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .api.parse import dump_object, parse_object
from .api.types import DistributedTrainingStatus
from .report import TrainerReport, parse_report
from .times import parse_time

# A checkpoint is stale when it is this many intervals old (plus a grace for slow saves).
STALE_INTERVALS = 3
STALE_GRACE_SECONDS = 120


class StatusSchemaError(ValueError):
    """The operator built a status its own schema does not allow: a bug, never sent."""


def typed_status(status: dict[str, Any]) -> dict[str, Any]:
    """The status parsed into DistributedTrainingStatus and written back from it, so what
    the operator writes is exactly what the CRD's status schema (made from the same
    classes) describes: a field or value outside it raises here instead of being pruned
    or refused by the API server. Unset (None) fields are left out."""
    typed, errors = parse_object(DistributedTrainingStatus, status, "status")
    if errors:
        raise StatusSchemaError("; ".join(str(e) for e in errors))
    return dump_object(typed)


def progress_from_trainer(report: dict[str, Any]) -> dict[str, Any]:
    """The trainer's /status JSON (docs/pod-contract.md) -> status.progress."""
    parsed = parse_report(report)
    return parsed.progress() if parsed else {}


def checkpoint_from_trainer(report: dict[str, Any]) -> dict[str, Any] | None:
    parsed = parse_report(report)
    return parsed.checkpoint.as_status() if parsed and parsed.checkpoint else None


def seconds_per_step(report: TrainerReport | None, global_batch: int) -> float | None:
    """The trainer's measured step time, else derived from its throughput."""
    if report is None:
        return None
    if report.step_seconds:
        return report.step_seconds
    if report.samples_per_second:
        return global_batch / report.samples_per_second
    return None


def checkpoint_staleness(progress: dict[str, Any], checkpoint: dict[str, Any] | None,
                         interval_steps: int, global_batch: int, start_time: str | None,
                         now: datetime, step_seconds: float | None = None) -> tuple[bool, str, float | None]:
    """(stale?, message, age in seconds) of the newest checkpoint.

    The allowed age follows the interval: intervalSteps x seconds per step (measured by
    the trainer, or from its samples/s and the global batch), times STALE_INTERVALS, plus
    a grace.
    """
    made = parse_time(checkpoint.get("time")) if checkpoint else None
    since = made or parse_time(start_time)
    age = (now - since).total_seconds() if since else None
    if interval_steps <= 0:
        return False, "periodic checkpoints are off (intervalSteps 0)", age
    rate = progress.get("samplesPerSecond")
    if step_seconds is None and rate:
        step_seconds = global_batch / rate
    if not step_seconds or age is None:
        return False, "waiting for the trainer's throughput", age
    allowed = STALE_INTERVALS * interval_steps * step_seconds + STALE_GRACE_SECONDS
    what = f"checkpoint of step {checkpoint['step']}" if checkpoint else "no checkpoint yet"
    if age > allowed:
        return True, (f"{what}, {age:.0f}s old; expected one every ~{interval_steps * step_seconds:.0f}s "
                      f"(intervalSteps {interval_steps}); check the checkpoint volume and the trainer logs"), age
    return False, f"{what}, {age:.0f}s old (stale after {allowed:.0f}s)", age


def status_sources(pods: list, limit: int = 3) -> list:
    """Ready workers with an IP, lowest index first: whom to ask for /status."""
    ready = [p for p in pods if p.ready and p.ip]
    return sorted(ready, key=lambda p: p.index if p.index is not None else 1 << 30)[:limit]


def global_batch(spec, resolved) -> int:
    """Samples per optimizer step: batchSize x data-parallel degree x accumulation."""
    builtin = spec.trainer.builtin
    data_parallel = spec.mesh.fsdp if spec.mesh else resolved.world_size
    return (builtin.batch_size if builtin else 1) * data_parallel * spec.accumulate_grad_batches
