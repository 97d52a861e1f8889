"""The Instrumented condition of a job with `trainer.instrument: auto`: did the start-up
hook find a Trainer to attach disttrain's callback to? The trainer's report names the
framework it reports from; a job that runs STARTING_SECONDS with no report found none."""

from __future__ import annotations

from datetime import datetime, timedelta

from disttrain.api import conditions as c
from disttrain.api.report import TrainerReport
from disttrain.api.times import parse_time
from disttrain.operator.core.recovery import STARTING_SECONDS
from disttrain.operator.core.state import JobState, Plan


def instrumented(plan: Plan, report: TrainerReport | None, job: JobState) -> datetime | None:
    """Set Instrumented when it is known; the moment to look again when it is not yet."""
    if job.validation.job.spec.trainer.instrument != "auto":
        return None
    st = plan.status
    if report is not None and report.framework:
        plan.condition(c.INSTRUMENTED, True, c.CALLBACK_ATTACHED,
                       f"disttrain's callback reports from {report.framework}'s Trainer: progress, hang detection "
                       "and checkpoint-then-evict")
        return None
    running = c.get_condition(st.conditions, c.RUNNING)
    since = parse_time(running.last_transition_time) if running is not None and running.status == "True" else None
    if st.phase != "Running" or since is None or c.get_condition(st.conditions, c.INSTRUMENTED) is not None:
        return None
    due = since + timedelta(seconds=STARTING_SECONDS)
    if plan.now < due:
        return due
    plan.condition(c.INSTRUMENTED, False, c.NO_TRAINER_FOUND,
                   f"no report from the trainer {STARTING_SECONDS:.0f}s after it started: instrument: auto found no "
                   "Transformers (4.40 or newer) or Lightning (2.0 or newer) Trainer in your code, and the worker's "
                   "log says what it found; the job trains on without progress, hang detection or "
                   "checkpoint-then-evict (docs/training-api.md)")
    return None
