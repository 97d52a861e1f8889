"""status.goodput: each pass adds the time since the last to the job's total (worker-seconds:
x desired workers); the steps past the highest counted are productive, a failure's re-done
steps are lost to its cause, Pending is waiting, the rest restarting; the ratio is
productive over all (goodput.py, plan.decide)."""

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


def vars_of(goodput: Goodput) -> dict:
    return {name: getattr(goodput, name) for name in Goodput.__slots__}


@pytest.mark.parametrize("phase, field", [("Running", "productive_seconds"), ("Restarting", "restarting_seconds"),
                                          ("Pending", "waiting_seconds")])
def test_the_time_since_the_last_pass_goes_to_the_phase_it_was_in(phase, field):
    new_steps = 40 if phase == "Running" else 0  # Running made 40 steps of 0.25 s, on 4 workers: 40 s
    goodput, lost = account(since(10, step=5), phase, 4, NOW, [], 0.25, step=5 + new_steps)
    assert getattr(goodput, field) == 40.0 and lost == {}  # 10 s x 4 workers
    assert goodput.update_time == iso(NOW)


@pytest.mark.parametrize("phase", ["Suspended", "Succeeded", "Failed", None])
def test_nothing_accrues_while_suspended_finished_or_before_the_first_pass(phase):
    goodput, _ = account(since(10, productive_seconds=5.0, step=3), phase, 4, NOW, [], None)
    assert (goodput.productive_seconds, goodput.restarting_seconds, goodput.waiting_seconds) == (5.0, 0.0, 0.0)
    first, _ = account(None, "Running", 4, NOW, [], None)
    assert written(first) == {"lostSeconds": 0.0, "restartingSeconds": 0.0,
                              "waitingSeconds": 0.0, "updateTime": iso(NOW)}  # no ratio of nothing yet


def test_steps_count_once_and_time_without_new_steps_is_not_productive():
    """Start-up, saves and the restarts torchrun does inside a pod make no new step: only
    the steps past the highest counted are productive, at the trainer's step time."""
    goodput, _ = account(since(10), "Running", 2, NOW, [], None, step=0)  # the trainer's report before its first step
    assert (goodput.productive_seconds, goodput.restarting_seconds, goodput.step) == (None, 20.0, None)
    goodput, _ = account(Goodput(**{**vars_of(goodput), "update_time": iso(at(-10))}), "Running", 2, NOW, [], 0.5, step=16)
    assert (goodput.productive_seconds, goodput.restarting_seconds, goodput.step) == (16.0, 24.0, 16)  # 16 x 0.5 s x 2
    # A rank killed and restarted in place between two polls: the steps it does again
    # (back to 10, then up to 16) count no second time; only the 4 past 16 do.
    again, _ = account(Goodput(**{**vars_of(goodput), "update_time": iso(at(-10))}), "Running", 2, NOW, [], 0.5, step=20)
    assert (again.productive_seconds, again.restarting_seconds, again.step) == (20.0, 40.0, 20)


def test_until_the_first_step_nothing_is_productive_and_the_ratio_is_unknown():
    """A figure without a measurement is no figure (issue 70): a script that never reports,
    or pods that never trained (KWOK), leave productiveSeconds and the ratio unset, their
    time Running counted as time that made no step; a trainer's first report with a step
    time makes productive what its steps took, out of that time."""
    silent, _ = account(since(30), "Running", 2, NOW, [], None)
    assert (silent.productive_seconds, silent.ratio, silent.restarting_seconds, silent.step) == (None, None, 60.0, None)
    assert "productiveSeconds" not in written(silent) and "ratio" not in written(silent)
    untimed, _ = account(since(30, restarting_seconds=100.0), "Running", 2, NOW, [], None, step=40)
    assert (untimed.productive_seconds, untimed.ratio, untimed.restarting_seconds) == (None, None, 160.0)
    first, _ = account(since(30, restarting_seconds=100.0), "Running", 2, NOW, [], 0.5, step=40)
    assert (first.productive_seconds, first.restarting_seconds, first.step, first.ratio) == (40.0, 120.0, 40, 0.25)
    # What an older operator counted as productive before any step is no measurement either.
    upgraded, _ = account(since(30, productive_seconds=100.0), "Suspended", 2, NOW, [], None)
    assert (upgraded.productive_seconds, upgraded.ratio, upgraded.restarting_seconds) == (None, None, 100.0)


def test_re_done_steps_are_lost_to_their_cause():
    failures = [FailureRecord(cause="OOMKilled", steps_lost=30), FailureRecord(cause="NodeLost", steps_lost=None)]
    old = since(100, productive_seconds=1000.0, step=500)
    goodput, lost = account(old, "Restarting", 2, NOW, failures, step_seconds=2.5, step=500)
    assert lost == {"OOMKilled": 150.0}  # 30 steps x 2.5 s x 2 workers, out of the 200 s that made no step
    assert (goodput.productive_seconds, goodput.lost_seconds, goodput.restarting_seconds) == (1000.0, 150.0, 50.0)
    # Never more than made no new step; an unknown step time loses nothing.
    capped, lost = account(since(10, productive_seconds=10.0, step=500), "Running", 2, NOW, failures, 2.5, step=500)
    assert (capped.productive_seconds, capped.lost_seconds, lost) == (10.0, 20.0, {"OOMKilled": 20.0})
    assert account(since(10, productive_seconds=10.0, step=500), "Running", 2, NOW, failures, None, step=500)[1] == {}


def test_a_step_time_a_little_high_never_makes_more_productive_than_the_time():
    goodput, _ = account(since(10, step=0), "Running", 1, NOW, [], 1.0, step=15)
    assert (goodput.productive_seconds, goodput.restarting_seconds, goodput.ratio) == (10.0, 0.0, 1.0)


def test_the_ratio_is_productive_over_all_four():
    old = since(0, productive_seconds=60.0, lost_seconds=10.0, restarting_seconds=20.0, waiting_seconds=10.0, step=6)
    assert account(old, "Running", 1, NOW, [], None)[0].ratio == 0.6


def test_passes_inside_one_second_count_the_seconds_once():
    """updateTime is written in whole seconds, so the passes count in whole seconds too:
    however the passes fall, the sum is the time between the first and the last."""
    goodput, _ = account(None, "Running", 1, NOW, [], None)
    for ms in (300, 700, 1200, 1900, 2100, 5000):
        goodput, _ = account(goodput, "Running", 1, NOW + timedelta(milliseconds=ms), [], None)
    assert goodput.restarting_seconds == 5.0


def test_goodput_alone_never_makes_a_status_write_but_rides_along():
    from disttrain.api.status_types import DistributedTrainingStatus as Status

    old = Status(phase="Running", goodput=since(5))
    moved = Status(phase="Running", goodput=account(old.goodput, "Running", 1, NOW, [], None)[0])
    assert status_write(old, moved, since_last_write=3600) == ({}, None)
    changed = Status(phase="Restarting", goodput=moved.goodput)
    patch, _ = status_write(old, changed, since_last_write=0)
    assert set(patch) == {"phase", "goodput"}
