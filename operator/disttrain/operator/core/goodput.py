"""Goodput: where a job's worker-seconds went (pure).

Every pass adds the time since the last one, in worker-seconds (seconds x desired workers),
to the job's total while it is Running, Restarting or Pending (a Suspended or finished job
accrues nothing). What the total is made of:

  productive  the steps that count, each once: the trainer's steps past the highest step
              counted so far, times its step time (a step done again after a restart
              counts no second time). Time Running that made no new step (start-up:
              imports, rendezvous, loading a checkpoint; saves; the restarts torchrun does
              inside a pod, which the operator never sees) is not productive. Until the
              trainer reports a step and its step time (a script without a status server
              never does) nothing is measured: productive and the ratio stay unset (no
              figure without a measurement, issue 70) and the time Running counts as
              restarting; the first such report makes productive what its steps took, out
              of that time.
  lost        the steps a recorded failure made be done again (stepsLost x the step time,
              out of the time that made no new step), and the waiting of a job a queue
              evicted (its workers' time was taken from it)
  waiting     Pending: scheduling, image pulls, a queue's admission
  restarting  the rest: phase Restarting, and the time Running that made no new step
The ratio is productive over the total, once a step was measured.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from disttrain.api.status_types import FailureRecord, Goodput
from disttrain.api.times import iso, parse_time

ACCRUING = frozenset({"Running", "Restarting", "Pending"})


def account(old: Goodput | None, phase: str | None, workers: int, now: datetime, new_failures: Iterable[FailureRecord],
            step_seconds: float | None, *, step: int | None = None,
            waiting_lost_to: str | None = None) -> tuple[Goodput, dict[str, float]]:
    """(the goodput after this pass, the worker-seconds lost by cause in it). `phase` is
    the one the job was in since the last pass; `workers` its desired workers; `step` the
    trainer's newest step (None: it reports none); `waiting_lost_to`: the cause its
    waiting is lost to (a queue's eviction)."""
    workers = max(workers, 0)
    productive, lost, waiting = _get(old, "productive_seconds"), _get(old, "lost_seconds"), _get(old, "waiting_seconds")
    total = productive + lost + waiting + _get(old, "restarting_seconds")
    counted = old.step if old is not None else None  # None: no step reported yet
    if counted is None:
        productive = 0.0  # nothing measured yet (an older operator counted the time Running)
    now = now.replace(microsecond=0)  # updateTime is written in whole seconds: count in them too
    since = parse_time(old.update_time) if old is not None else None
    lost_by_cause: dict[str, float] = {}
    spent = (now - since).total_seconds() * workers if since is not None and phase in ACCRUING and now > since else 0.0
    total += spent
    if phase == "Pending" and waiting_lost_to is not None:
        lost += spent
        if spent:
            lost_by_cause[waiting_lost_to] = spent
    elif phase == "Pending":
        waiting += spent
    if step is not None and step_seconds is not None and counted is None:
        # The first step with its step time: steps count from now on, and the steps done
        # so far were done in the time that made no measured step (capped below).
        productive = step * step_seconds * workers
        counted = step
    elif step is not None and step_seconds is not None and phase in ACCRUING:
        assert counted is not None
        productive += max(step - counted, 0) * step_seconds * workers
        counted = max(counted, step)
    productive = min(productive, max(total - lost - waiting, 0.0))  # a step time a little high never makes more
    for failure in new_failures:  # the steps done again are lost to its cause, out of what made no progress
        moved = min((failure.steps_lost or 0) * (step_seconds or 0.0) * workers, total - productive - lost - waiting)
        if moved > 0 and failure.cause:
            lost += moved
            lost_by_cause[failure.cause] = lost_by_cause.get(failure.cause, 0.0) + moved
    restarting = max(total - productive - lost - waiting, 0.0)
    measured = counted is not None
    return Goodput(ratio=round(productive / total, 4) if total > 0 and measured else None,
                   productive_seconds=_round(productive) if measured else None, lost_seconds=_round(lost),
                   restarting_seconds=_round(restarting), waiting_seconds=_round(waiting),
                   step=counted, update_time=iso(now)), lost_by_cause


def _get(goodput: Goodput | None, name: str) -> float:
    value = getattr(goodput, name) if goodput is not None else None
    return float(value) if value is not None else 0.0


def _round(value: float) -> float:
    return round(value, 1)
