"""Progress and checkpoints through plan.decide: the trainer's report becomes status, and
CheckpointStale follows the interval and the measured step time."""

from __future__ import annotations

from datetime import timedelta

from disttrain.api import conditions as c
from disttrain.api.status_types import CheckpointStatus
from disttrain.api.times import iso
from disttrain.operator.core.plan import decide
from disttrain.api.report import TrainerReport, parse_report

from .plan_builders import CKPT, NOW, POLICY, at, cond, pod, state


def test_a_pending_job_with_an_old_report_is_not_called_stale():
    st = {"phase": "Pending", "startTime": iso(at(-7200)), "restarts": 0}
    old = TrainerReport(step=500, step_seconds=0.5, checkpoint=CheckpointStatus(step=10, time=iso(at(-7200))))
    plan = decide(state(st, **CKPT), [pod(0, phase="Pending", ready=False, **CKPT)], NOW, POLICY, report=old)
    assert cond(plan, c.CHECKPOINT_STALE) is None


def test_step_time_from_samples_per_second_and_the_global_batch():
    # builtin batchSize 8 x 1 worker: 16 samples/s is 0.5 s a step, a checkpoint every ~5 s.
    st = {"phase": "Running", "startTime": iso(at(-7200)), "restarts": 0}
    report = TrainerReport(step=500, samples_per_second=16.0,
                           checkpoint=CheckpointStatus(step=10, time=iso(at(-3600))))
    plan = decide(state(st, **CKPT), [pod(0, **CKPT)], NOW, POLICY, report=report)
    stale = cond(plan, c.CHECKPOINT_STALE)
    assert (stale["status"], stale["reason"]) == ("True", c.CHECKPOINT_TOO_OLD)
    assert stale["message"].startswith("checkpoint of step 10, 3600s old; expected one every ~5s (intervalSteps 10)")
    assert plan.checkpoint_age == 3600.0  # the disttrain_operator_checkpoint_age_seconds gauge's value
    assert decide(state(st, **CKPT), [pod(0, **CKPT)], NOW, POLICY).checkpoint_age is None  # no checkpoint yet


def test_no_checkpoint_since_the_start_is_stale_and_a_fresh_one_clears_it():
    st = {"phase": "Running", "startTime": iso(at(-3600)), "restarts": 0}
    none_yet = TrainerReport(step=500, step_seconds=0.5)
    stale = decide(state(st, **CKPT), [pod(0, **CKPT)], NOW, POLICY, report=none_yet)
    assert cond(stale, c.CHECKPOINT_STALE)["message"].startswith("no checkpoint yet, 3600s old; expected one every ~5s")
    fresh = TrainerReport(step=510, step_seconds=0.5, checkpoint=CheckpointStatus(step=510, time=iso(at(1))))
    cleared = decide(state(stale.status, **CKPT), [pod(0, **CKPT)], at(2), POLICY, report=fresh)
    after = cond(cleared, c.CHECKPOINT_STALE)
    assert (after["status"], after["reason"]) == ("False", c.CHECKPOINT_FRESH)
    assert after["message"].startswith("checkpoint of step 510, 1s old")


def test_a_job_that_keeps_no_checkpoints_is_never_called_stale():
    spec = {"nodes": 2, "checkpoint": {"storage": "none"}}
    st = state({"phase": "Running", "startTime": iso(at(-7200)), "restarts": 0}, **spec)
    plan = decide(st, [pod(0, **spec), pod(1, **spec)], NOW, POLICY,
                  report=TrainerReport(step=5000, step_seconds=0.5))
    assert cond(plan, c.CHECKPOINT_STALE) is None


def test_checkpoint_stale_uses_the_trainers_measured_step_time():
    st = state({"phase": "Running", "startTime": iso(NOW - timedelta(hours=2))}, nodes=1,
               checkpoint={"intervalSteps": 10})
    old = TrainerReport(step=500, step_seconds=0.5, checkpoint=parse_report(
        {"step": 10, "checkpoint": {"step": 10, "time": iso(NOW - timedelta(hours=1))}}).checkpoint)
    plan = decide(st, [pod(0, nodes=1, checkpoint={"intervalSteps": 10})], NOW, POLICY, report=old)
    stale = cond(plan, c.CHECKPOINT_STALE)
    assert stale["status"] == "True" and "every ~5s" in stale["message"]
