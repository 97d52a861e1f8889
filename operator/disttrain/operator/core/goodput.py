"""Goodput: where a job's worker-seconds went (pure).

Every pass adds the time since the last one to the category of the phase the job was in
during it, in worker-seconds (seconds x desired workers): Running is productive,
Restarting is restarting, Pending is waiting (lost, when Kueue evicted the job and it
waits to be admitted again: its workers' time was taken from it); a Suspended or finished
job accrues nothing.
A failure that makes steps be done again moves those steps' time (stepsLost x the step
time) from productive to lost. The ratio is productive over all four.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from disttrain.api.status_types import FailureRecord, Goodput
from disttrain.api.times import iso, parse_time

CATEGORY = {"Running": "productive", "Restarting": "restarting", "Pending": "waiting"}


def account(old: Goodput | None, phase: str | None, workers: int, now: datetime, new_failures: Iterable[FailureRecord],
            step_seconds: float | None, *, waiting_lost_to: str | None = None) -> tuple[Goodput, dict[str, float]]:
    """(the goodput after this pass, the worker-seconds lost by cause in it). `phase` is
    the one the job was in since the last pass; `workers` its desired workers;
    `waiting_lost_to`: the cause its waiting is lost to (a Kueue eviction)."""
    seconds = {"productive": _get(old, "productive_seconds"), "lost": _get(old, "lost_seconds"),
               "restarting": _get(old, "restarting_seconds"), "waiting": _get(old, "waiting_seconds")}
    now = now.replace(microsecond=0)  # updateTime is written in whole seconds: count in them too
    since = parse_time(old.update_time) if old is not None else None
    category = CATEGORY.get(phase or "")
    lost_by_cause: dict[str, float] = {}
    if since is not None and category is not None and now > since:
        spent = (now - since).total_seconds() * max(workers, 0)
        if category == "waiting" and waiting_lost_to is not None:
            category, lost_by_cause[waiting_lost_to] = "lost", spent
        seconds[category] += spent
    for failure in new_failures:
        lost = (failure.steps_lost or 0) * (step_seconds or 0.0) * max(workers, 0)
        lost = min(lost, seconds["productive"])  # never more than was counted productive
        if lost > 0 and failure.cause:
            seconds["productive"] -= lost
            seconds["lost"] += lost
            lost_by_cause[failure.cause] = lost_by_cause.get(failure.cause, 0.0) + lost
    total = sum(seconds.values())
    return Goodput(ratio=round(seconds["productive"] / total, 4) if total > 0 else None,
                   productive_seconds=_round(seconds["productive"]), lost_seconds=_round(seconds["lost"]),
                   restarting_seconds=_round(seconds["restarting"]), waiting_seconds=_round(seconds["waiting"]),
                   update_time=iso(now)), lost_by_cause


def _get(goodput: Goodput | None, name: str) -> float:
    value = getattr(goodput, name) if goodput is not None else None
    return float(value) if value is not None else 0.0


def _round(value: float) -> float:
    return round(value, 1)
