"""Issue 70: a stop checkpoint-first asks the trainer for a checkpoint now, not of a step:
the step the operator saw last (322) is only that; once the trainer holds at the step it
checkpointed (565), status.eviction.step says that step."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from disttrain.api.report import parse_report
from disttrain.api.times import iso
from disttrain.operator.core.eviction import stop

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def report(step: int, *, held: int | None = None, ckpt: int | None = None):
    return parse_report({"step": step, "totalSteps": 1000, "heldAtStep": held, "checkpoint": None if ckpt is None
                         else {"step": ckpt, "time": iso(NOW), "path": f"/checkpoints/step-{ckpt}"}})


def test_the_request_says_now_and_the_held_step_is_what_the_stop_records():
    began = stop(None, "Suspended", stopped=False, report=report(322), trainer_running=True, grace=60,
                 refused=None, now=NOW)
    assert began.eviction.step == 322 and not began.delete
    assert began.eviction.message == ("asked the trainer for a checkpoint now (the last step seen was 322); the "
                                      "pods are deleted once it is written, or after 60s")
    done = stop(began.eviction, "Suspended", stopped=False, report=report(565, held=565, ckpt=565),
                trainer_running=True, grace=60, refused=None, now=NOW + timedelta(seconds=5))
    assert done.delete and done.eviction.handshake == "Checkpointed"
    assert done.eviction.step == 565, done.eviction
    assert done.eviction.message == "the trainer checkpointed step 565 on request; nothing is lost"


def test_a_stop_the_trainer_never_answers_keeps_the_last_step_seen():
    began = stop(None, "Suspended", stopped=False, report=report(322), trainer_running=True, grace=60,
                 refused=None, now=NOW)
    late = stop(began.eviction, "Suspended", stopped=False, report=report(330), trainer_running=True, grace=60,
                refused=None, now=NOW + timedelta(seconds=61))
    assert late.eviction.handshake == "TimedOut" and late.eviction.step == 322
