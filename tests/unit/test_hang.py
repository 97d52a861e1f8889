"""A running trainer that completes no step for failurePolicy.hangSeconds is hung: every
worker is restarted (reason Hung, one restart against backoffLimit, an entry in
status.failures); the clock is status.progress.lastStepTime (the trainer's time of its step,
within what the operator saw) and
starts again whenever the job becomes Running (plan.decide)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from disttrain.api import conditions as c
from disttrain.api.status_types import CheckpointStatus
from disttrain.operator.core.plan import decide
from disttrain.operator.core.recovery import hang_seconds
from disttrain.api.report import TrainerReport

from .plan_builders import NOW, POLICY, QUIET, at, cond, events, iso, pod, state

SPEC = {"nodes": 2, **QUIET}


def running_since(moment, *, step=100, last_step=None, restarts=0, **extra):
    """A Running job whose Running condition flipped at `moment` and whose step last moved
    at `last_step`."""
    return {"phase": "Running", "startTime": iso(moment), "restarts": restarts,
            "conditions": [{"type": "Running", "status": "True", "reason": "PodsRunning", "message": "2 of 2",
                            "lastTransitionTime": iso(moment)}],
            "progress": {"step": step, "totalSteps": 1000, "lastStepTime": iso(last_step or moment)}, **extra}


def report(step=100, step_seconds=0.5, **kw):
    return TrainerReport(step=step, total_steps=1000, step_seconds=step_seconds, **kw)


def go(status, now, rep=None, **spec):
    pods = [pod(0, **SPEC), pod(1, **SPEC)]
    return decide(state(status, **{**SPEC, **spec}), pods, now, POLICY, report=rep or report())


@pytest.mark.parametrize("spec, rep, expected", [
    ({}, report(step_seconds=0.5), 300.0),                 # the built-in trainer: at least five minutes
    ({}, report(step_seconds=45.0), 450.0),                # ... or ten steps of its own
    ({}, None, 300.0),                                     # no step time reported yet
    ({"failurePolicy": {"hangSeconds": 20}}, report(), 20.0),
    ({"failurePolicy": {"hangSeconds": 0}}, report(), None),  # 0: off
    ({"trainer": {"command": ["python", "-m", "team.train"]}}, report(), 300.0),  # a script reporting steps
    ({"trainer": {"command": ["python", "-m", "team.train"]}}, report(step_seconds=None), None),  # reports none
    ({"trainer": {"command": ["python", "-m", "team.train"]}}, None, None),  # a script that reports nothing: off
    ({"trainer": {"command": ["python", "-m", "team.train"]}, "failurePolicy": {"hangSeconds": 600}}, report(),
     600.0),
])
def test_how_long_a_trainer_may_complete_no_step(spec, rep, expected):
    st = state(None, **{**SPEC, **spec})
    assert hang_seconds(st.validation.job.spec, rep) == expected


def test_no_step_for_hang_seconds_restarts_every_worker_once():
    start = at(-1000)
    status = running_since(start, last_step=at(-301), checkpoint={"step": 90, "time": iso(at(-320)),
                                                                 "path": "/ck/step-90"})
    plan = go(status, NOW)
    assert sorted(plan.delete) == [("demo-worker-0", c.HUNG), ("demo-worker-1", c.HUNG)]
    assert plan.status.restarts == 1 and plan.restarted == 1 and plan.status.phase == "Restarting"
    restarting = cond(plan, c.RESTARTING)
    assert (restarting["status"], restarting["reason"]) == ("True", c.HUNG)
    what = f"no step completed for 301s (step 100 since {iso(at(-301))}; failurePolicy.hangSeconds 300)"
    assert ("Warning", c.HUNG, f"{what}: restarting every worker (restart 1 of backoffLimit 6); the trainer "
            "resumes from the newest checkpoint") in events(plan)
    [entry] = plan.new_failures
    assert (entry.cause, entry.pod, entry.message, entry.resumed_from_step, entry.steps_lost) == (
        "Hung", "demo-worker-0", what, 90, 10)
    assert plan.status.failures == [entry]


def test_before_its_time_nothing_happens_and_the_job_is_woken_when_it_is_up():
    plan = go(running_since(at(-1000), last_step=at(-100)), NOW)
    assert plan.delete == [] and plan.status.phase == "Running" and plan.new_failures == []
    assert plan.wake_at == at(200)


def test_a_step_that_moves_restarts_the_clock():
    status = running_since(at(-1000), step=100, last_step=at(-299))
    plan = go(status, at(5), rep=report(step=101))
    assert plan.delete == [] and plan.status.progress.last_step_time == iso(at(5))
    assert plan.wake_at == at(305)
    # The same step again: the time it moved stays.
    again = go({**status, "progress": {"step": 101, "totalSteps": 1000, "lastStepTime": iso(at(5))}}, at(6),
               rep=report(step=101))
    assert again.status.progress.last_step_time == iso(at(5))


def test_becoming_running_again_restarts_the_clock():
    """After a restart round, or a resume, the trainer needs time to load a checkpoint:
    the last step it made before is no measure of a hang."""
    status = running_since(at(-10), last_step=at(-3600))
    plan = go(status, NOW)
    assert plan.delete == [] and plan.wake_at == at(290)


def test_a_trainer_that_has_not_stepped_since_it_became_running_gets_the_starting_time():
    """A short hangSeconds watches training, not the start: until the first step after a
    start, a restart or a resume (imports, rendezvous, a checkpoint to load, on a node that
    may be busy), the limit is at least STARTING_SECONDS. A busy machine once made a
    restarted job look hung again in the 20 s it took to load its checkpoint."""
    status = running_since(at(-100), last_step=at(-3600))
    plan = go(status, NOW, failurePolicy={"hangSeconds": 20})
    assert plan.delete == [] and plan.new_failures == [] and plan.wake_at == at(200)
    # Still no step after the starting time: hung.
    assert [f.cause for f in go(status, at(201), failurePolicy={"hangSeconds": 20}).new_failures] == ["Hung"]
    # Once it stepped, hangSeconds alone counts.
    stepped = running_since(at(-100), last_step=at(-21))
    assert [f.cause for f in go(stepped, NOW, failurePolicy={"hangSeconds": 20}).new_failures] == ["Hung"]


def test_only_a_running_job_with_a_report_and_no_outcome_is_watched():
    status = running_since(at(-1000), last_step=at(-900))
    assert go({**status, "phase": "Restarting"}, NOW).new_failures == []
    assert go({k: v for k, v in status.items() if k != "progress"}, NOW).new_failures == []
    finishing = go(status, NOW, rep=report(outcome="Finished"))
    assert not any(why == c.HUNG for _, why in finishing.delete)
    assert go(status, NOW, failurePolicy={"hangSeconds": 0}).delete == []


def test_a_crash_in_the_same_pass_is_the_failure_not_a_hang():
    status = running_since(at(-1000), last_step=at(-900))
    pods = [pod(0, **SPEC), pod(1, phase="Failed", exit_code=1, **SPEC)]
    plan = decide(state(status, **SPEC), pods, NOW, POLICY, report=report())
    assert [f.cause for f in plan.new_failures] == ["ExitCode"]


def test_a_hang_after_backoff_limit_restarts_fails_the_job():
    status = running_since(at(-1000), last_step=at(-400), restarts=1)
    plan = go(status, NOW, backoffLimit=1)
    assert plan.status.phase == "Failed"
    failed = cond(plan, c.FAILED)
    assert failed["reason"] == c.BACKOFF_LIMIT_EXCEEDED
    assert failed["message"].startswith("no step completed for 400s") and "backoffLimit 1 reached" in failed["message"]
    assert [f.cause for f in plan.status.failures] == ["Hung"]


def test_the_restart_reason_stays_hung_while_the_workers_come_back():
    status = running_since(at(-1000), last_step=at(-400))
    plan = go(status, NOW)
    back = decide(replace(state(None, **SPEC), status=plan.status), [pod(0, **SPEC)], at(2), POLICY,
                  report=report())
    assert cond(back, c.RESTARTING)["reason"] == c.HUNG


def test_the_entry_prices_the_steps_since_the_newest_checkpoint():
    status = running_since(at(-1000), step=250, last_step=at(-400))
    plan = go(status, NOW, rep=report(step=250, checkpoint=CheckpointStatus(step=200, time=iso(at(-500)),
                                                                            path="/ck/step-200")))
    assert (plan.new_failures[0].resumed_from_step, plan.new_failures[0].steps_lost) == (200, 50)


def test_a_report_without_a_step_moves_no_clock():
    from disttrain.api.status_types import Progress
    from disttrain.operator.core.plan import progress_of

    assert progress_of(TrainerReport(total_steps=10, loss=1.5), None, iso(NOW)).last_step_time is None
    old = Progress(step=7, last_step_time=iso(at(-50)))
    assert progress_of(TrainerReport(total_steps=10), old, iso(NOW)).last_step_time == iso(at(-50))


def test_the_step_is_dated_by_the_trainer_within_what_the_operator_saw():
    """The poll sees a step up to progressSeconds after the trainer made it: the trainer's
    lastUpdateTime dates it, so a hang is found that much sooner; a pod clock that is off
    moves it no earlier than the step seen before and no later than now."""
    from disttrain.api.status_types import Progress
    from disttrain.operator.core.plan import progress_of

    old = Progress(step=7, last_step_time=iso(at(-20)))
    for said, dated in [(at(-12), at(-12)), (at(-3600), at(-20)), (at(600), NOW), (None, NOW)]:
        rep = TrainerReport(step=8, last_update_time=iso(said) if said else None)
        assert progress_of(rep, old, iso(NOW)).last_step_time == iso(dated), said
    # The first step seen has nothing before it: the trainer's time, up to now.
    assert progress_of(TrainerReport(step=1, last_update_time=iso(at(-9))), None, iso(NOW)).last_step_time == \
        iso(at(-9))
