"""status.goodput: each pass adds the time since the last to the category of the phase the
job was in (worker-seconds: x desired workers), a failure's re-done steps move from
productive to lost, and the ratio is productive over all (goodput.py, plan.decide)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from disttrain.api.status_types import FailureRecord, Goodput
from disttrain.operator.core.goodput import account
from disttrain.operator.core.writes import status_write

from .helpers import written
from .plan_builders import NOW, at, iso


def since(seconds_ago: float, **seconds) -> Goodput:
    return Goodput(update_time=iso(at(-seconds_ago)), **seconds)


@pytest.mark.parametrize("phase, field", [("Running", "productive_seconds"), ("Restarting", "restarting_seconds"),
                                          ("Pending", "waiting_seconds")])
def test_the_time_since_the_last_pass_goes_to_the_phase_it_was_in(phase, field):
    goodput, lost = account(since(10), phase, 4, NOW, [], None)
    assert getattr(goodput, field) == 40.0 and lost == {}  # 10 s x 4 workers
    assert goodput.update_time == iso(NOW)


@pytest.mark.parametrize("phase", ["Suspended", "Succeeded", "Failed", None])
def test_nothing_accrues_while_suspended_finished_or_before_the_first_pass(phase):
    goodput, _ = account(since(10, productive_seconds=5.0), phase, 4, NOW, [], None)
    assert (goodput.productive_seconds, goodput.restarting_seconds, goodput.waiting_seconds) == (5.0, 0.0, 0.0)
    first, _ = account(None, "Running", 4, NOW, [], None)
    assert written(first) == {"productiveSeconds": 0.0, "lostSeconds": 0.0, "restartingSeconds": 0.0,
                              "waitingSeconds": 0.0, "updateTime": iso(NOW)}  # no ratio of nothing yet


def test_re_done_steps_move_from_productive_to_lost_by_cause():
    failures = [FailureRecord(cause="OOMKilled", steps_lost=30), FailureRecord(cause="NodeLost", steps_lost=None)]
    goodput, lost = account(since(0, productive_seconds=1000.0), "Running", 2, NOW, failures, step_seconds=2.5)
    assert lost == {"OOMKilled": 150.0}  # 30 steps x 2.5 s x 2 workers
    assert (goodput.productive_seconds, goodput.lost_seconds, goodput.ratio) == (850.0, 150.0, 0.85)
    # Never more than was counted productive; an unknown step time loses nothing.
    capped, lost = account(since(0, productive_seconds=10.0), "Running", 2, NOW, failures, step_seconds=2.5)
    assert (capped.productive_seconds, capped.lost_seconds, lost) == (0.0, 10.0, {"OOMKilled": 10.0})
    assert account(since(0, productive_seconds=10.0), "Running", 2, NOW, failures, None)[1] == {}


def test_the_ratio_is_productive_over_all_four():
    old = since(0, productive_seconds=60.0, lost_seconds=10.0, restarting_seconds=20.0, waiting_seconds=10.0)
    assert account(old, "Running", 1, NOW, [], None)[0].ratio == 0.6


def test_passes_inside_one_second_count_the_seconds_once():
    """updateTime is written in whole seconds, so the passes count in whole seconds too:
    however the passes fall, the sum is the time between the first and the last."""
    goodput, _ = account(None, "Running", 1, NOW, [], None)
    for ms in (300, 700, 1200, 1900, 2100, 5000):
        goodput, _ = account(goodput, "Running", 1, NOW + timedelta(milliseconds=ms), [], None)
    assert goodput.productive_seconds == 5.0


def test_goodput_alone_never_makes_a_status_write_but_rides_along():
    from disttrain.api.status_types import DistributedTrainingStatus as Status

    old = Status(phase="Running", goodput=since(5))
    moved = Status(phase="Running", goodput=account(old.goodput, "Running", 1, NOW, [], None)[0])
    assert status_write(old, moved, since_last_write=3600) == ({}, None)
    changed = Status(phase="Restarting", goodput=moved.goodput)
    patch, _ = status_write(old, changed, since_last_write=0)
    assert set(patch) == {"phase", "goodput"}
