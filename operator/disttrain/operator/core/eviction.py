"""Checkpoint-then-evict, the operator's side (pure).

When the operator stops a running job on purpose (spec.suspend), deleting the pods at
once would leave the trainer only SIGTERM and the termination grace period to save its
state, with no word back on whether it did. Instead the stop is a handshake, recorded in
status.eviction:

  1. ask: POST /checkpoint to a ready worker (the shell does it once per stop), and wait
     up to spec.checkpoint.evictGraceSeconds;
  2. the trainer's report shows every rank holding at a checkpoint of the step they
     stopped on (heldAtStep): the pods are deleted, nothing is lost (Checkpointed);
  3. otherwise the pods are deleted when the grace runs out (TimedOut) or at once when the
     trainer says it cannot (NotSupported: a script of your own), and SIGTERM's emergency
     checkpoint is what the job resumes from.

After the pods are gone, the newest checkpoint and the last step seen (the pods' final
reports come in after the deletion) give resumeFromStep and stepsLost.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta

from disttrain.api.status_types import CheckpointStatus, Eviction, Progress
from disttrain.api.report import TrainerReport
from disttrain.api.times import iso, parse_time

# The trainer holds this much longer than the operator waits, so that it still holds
# when the deletion's SIGTERM comes (a slow pass, a slow API server).
HOLD_MARGIN_SECONDS = 60


@dataclass(frozen=True, slots=True)
class StopStep:
    """What to do now about a job being stopped."""

    eviction: Eviction | None
    delete: bool  # delete the worker pods now
    ask_hold: int | None = None  # ask the trainer for a checkpoint and a hold this long (None: do not ask)
    wait_seconds: float = 0.0  # how long the request may wait for the checkpoint
    wake_at: datetime | None = None  # when the grace runs out
    began: bool = False  # this pass began the stop


def stop(old: Eviction | None, reason: str, *, stopped: bool, report: TrainerReport | None,
         trainer_running: bool, grace: int, refused: str | None, now: datetime) -> StopStep:
    """The next step of stopping the job: begin (ask), wait, or delete.

    old: status.eviction as it stands; stopped: the job was stopped already (a later pass
    only deletes stragglers); report: the trainer's newest; trainer_running: a
    worker is Running and ready and its trainer reported, unfinished; refused: why the
    trainer did not take this stop's request (the shell's answer; None: it did, or no
    answer yet)."""
    if in_progress(old):
        return _waiting(old, report, grace, refused, now)  # type: ignore[arg-type]
    if stopped:
        return StopStep(eviction=old, delete=True)  # only stragglers go
    step = report.step if report is not None else None
    began = Eviction(reason=reason, request_time=iso(now), step=step)  # type: ignore[arg-type]
    if grace == 0:
        return _stopped(began, "Off", now, "spec.checkpoint.evictGraceSeconds is 0: the pods were deleted at "
                        "once and saved what they could on SIGTERM", began=True)
    if not trainer_running or step is None:
        return _stopped(began, "NotRunning", now, "no trainer was running yet: nothing to checkpoint", began=True)
    asked = dataclasses.replace(began, handshake="Requested",
                                message=f"asked the trainer for a checkpoint now (the last step seen was {step}); "
                                        f"the pods are deleted once it is written, or after {grace}s")
    return StopStep(eviction=asked, delete=False, ask_hold=grace + HOLD_MARGIN_SECONDS, wait_seconds=grace,
                    wake_at=now + timedelta(seconds=grace), began=True)


def in_progress(ev: Eviction | None) -> bool:
    """A stop is waiting for the trainer's checkpoint."""
    return ev is not None and ev.handshake == "Requested"


def cancelled(ev: Eviction) -> Eviction:
    """The stop was called off (suspend set back to false) before the pods were deleted."""
    return dataclasses.replace(ev, handshake="Cancelled", message="the stop was called off before the pods were "
                               "deleted: the trainer trains on once its hold runs out")


def _waiting(old: Eviction, report: TrainerReport | None, grace: int, refused: str | None,
             now: datetime) -> StopStep:
    held = report.held_at_step if report is not None else None
    if held is not None and (old.step is None or held >= old.step):
        # What was done: the step the trainer stopped on, not the last one seen when asked.
        done = dataclasses.replace(old, step=held)
        ckpt = report.checkpoint if report is not None else None
        if ckpt is not None and ckpt.step == held:
            return _stopped(done, "Checkpointed", now, f"the trainer checkpointed step {held} on request; "
                            "nothing is lost")
        return _stopped(done, "Checkpointed", now, f"the trainer stopped at step {held} on request, but wrote no "
                        "checkpoint (checkpointing is off)")
    if refused is not None:
        return _stopped(old, "NotSupported", now, f"the trainer did not take the checkpoint request ({refused}): "
                        "the pods were deleted and saved what they could on SIGTERM")
    asked = parse_time(old.request_time)
    deadline = asked + timedelta(seconds=grace) if asked is not None else now
    if now >= deadline:
        return _stopped(old, "TimedOut", now, f"no checkpoint within evictGraceSeconds ({grace}s): the pods "
                        "were deleted and saved what they could on SIGTERM")
    return StopStep(eviction=old, delete=False, ask_hold=grace + HOLD_MARGIN_SECONDS,
                    wait_seconds=(deadline - now).total_seconds(), wake_at=deadline)


def _stopped(ev: Eviction, handshake: str, now: datetime, message: str, *, began: bool = False) -> StopStep:
    return StopStep(eviction=dataclasses.replace(ev, handshake=handshake, stop_time=iso(now),  # type: ignore[arg-type]
                                                 message=message), delete=True, began=began)


def settle(ev: Eviction | None, checkpoint: CheckpointStatus | None, progress: Progress | None) -> Eviction | None:
    """A stopped job's resume point and loss, from the newest checkpoint and the last step
    seen (the pods' final reports arrive after they are deleted)."""
    if ev is None:
        return None
    resume = checkpoint.step if checkpoint is not None and checkpoint.step is not None else 0
    last = progress.step if progress is not None and progress.step is not None else ev.step
    lost = max(0, last - resume) if last is not None else None
    return dataclasses.replace(ev, resume_from_step=resume, steps_lost=lost)
