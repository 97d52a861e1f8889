"""The job's status, typed (api/status_types.py) from the API server's JSON to the patch, and
the rules that read it: how old the newest checkpoint is and when that is stale, and
whom to ask for the trainer's /status (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from disttrain.api.errors import FieldError
from disttrain.api.parse import dump_object, parse_object
from disttrain.api.status_types import CheckpointStatus, DistributedTrainingStatus
from disttrain.api.report import TrainerReport
from disttrain.api.times import parse_time

# A checkpoint is stale when it is this many intervals old (plus a grace for slow saves).
STALE_INTERVALS = 3
STALE_GRACE_SECONDS = 120
STATUS_PATH = "status"  # where a status field's error says it is


def read_status(raw: Mapping[str, Any] | None) -> tuple[DistributedTrainingStatus, list[FieldError]]:
    """A job's status as the API server holds it -> the typed status, the one shape the
    operator works with until it writes a change (status_json). The CRD's schema makes a
    stored status fit these classes; a field that still does not (written by another
    client through /status, or by an older operator) is left out, with its error, so
    the next write replaces it instead of the job being stuck on it."""
    raw = dict(raw or {})
    typed, errors = parse_object(DistributedTrainingStatus, raw, STATUS_PATH)
    if not errors:
        return typed, []
    known = {k: v for k, v in raw.items() if not _field_errors(k, v)}
    typed, _ = parse_object(DistributedTrainingStatus, known, STATUS_PATH)
    return typed, errors


def _field_errors(key: str, value: Any) -> list[FieldError]:
    return parse_object(DistributedTrainingStatus, {key: value}, STATUS_PATH)[1]


def status_json(status: DistributedTrainingStatus) -> dict[str, Any]:
    """The typed status in the JSON form the API server stores (unset fields left out)."""
    return dump_object(status)


def checkpoint_age(checkpoint: CheckpointStatus | None, now: datetime) -> float | None:
    """Seconds since the checkpoint was made (None: no checkpoint, or no time on it)."""
    made = parse_time(checkpoint.time) if checkpoint is not None else None
    return (now - made).total_seconds() if made else None


def seconds_per_step(report: TrainerReport | None, global_batch: int) -> float | None:
    """The trainer's measured step time, else derived from its throughput."""
    if report is None:
        return None
    if report.step_seconds:
        return report.step_seconds
    if report.samples_per_second:
        return global_batch / report.samples_per_second
    return None


def checkpoint_staleness(checkpoint: CheckpointStatus | None, interval_steps: int, start_time: str | None,
                         now: datetime, step_seconds: float | None) -> tuple[bool, str, float | None]:
    """(stale?, message, age in seconds) of the newest checkpoint.

    The allowed age follows the interval: intervalSteps x seconds per step (measured by
    the trainer, or from its samples/s and the global batch: seconds_per_step), times
    STALE_INTERVALS, plus a grace. Without a checkpoint the age counts from the start.
    """
    age = checkpoint_age(checkpoint, now)
    if age is None:
        since = parse_time(start_time)
        age = (now - since).total_seconds() if since else None
    if interval_steps <= 0:
        return False, "periodic checkpoints are off (intervalSteps 0, or storage none)", age
    if not step_seconds or age is None:
        return False, "waiting for the trainer's throughput", age
    allowed = STALE_INTERVALS * interval_steps * step_seconds + STALE_GRACE_SECONDS
    what = f"checkpoint of step {checkpoint.step}" if checkpoint else "no checkpoint yet"
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
