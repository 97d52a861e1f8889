"""Trainer progress -> status.progress, status.checkpoint and CheckpointStale (pure)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .plan import parse_time

# A checkpoint is stale when it is this many intervals old (plus a grace for slow saves).
STALE_INTERVALS = 3
STALE_GRACE_SECONDS = 120


def progress_from_trainer(report: dict[str, Any]) -> dict[str, Any]:
    """The trainer's /status JSON (docs/pod-contract.md) -> status.progress."""
    step, total = _int(report.get("step")), _int(report.get("totalSteps"))
    progress: dict[str, Any] = {}
    if step is not None:
        progress["step"] = step
    if total:
        progress["totalSteps"] = total
        if step is not None:
            progress["percentComplete"] = f"{min(100, int(100 * step / total))}%"
    for key, name in (("loss", "loss"), ("samplesPerSecond", "samplesPerSecond")):
        value = report.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
            progress[name] = round(float(value), 6)
    return progress


def checkpoint_from_trainer(report: dict[str, Any]) -> dict[str, Any] | None:
    ckpt = report.get("checkpoint")
    if not isinstance(ckpt, dict) or _int(ckpt.get("step")) is None:
        return None
    out: dict[str, Any] = {"step": _int(ckpt["step"])}
    for key in ("time", "path"):
        if isinstance(ckpt.get(key), str):
            out[key] = ckpt[key]
    return out


def checkpoint_staleness(progress: dict[str, Any], checkpoint: dict[str, Any] | None,
                         interval_steps: int, global_batch: int, start_time: str | None,
                         now: datetime) -> tuple[bool, str, float | None]:
    """(stale?, message, age in seconds) of the newest checkpoint.

    The allowed age follows the interval: intervalSteps x seconds per step (from the
    trainer's samples/s and the global batch), times STALE_INTERVALS, plus a grace.
    """
    made = parse_time(checkpoint.get("time")) if checkpoint else None
    since = made or parse_time(start_time)
    age = (now - since).total_seconds() if since else None
    if interval_steps <= 0:
        return False, "periodic checkpoints are off (intervalSteps 0)", age
    rate = progress.get("samplesPerSecond")
    if not rate or age is None:
        return False, "waiting for the trainer's throughput", age
    step_seconds = global_batch / rate
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


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
