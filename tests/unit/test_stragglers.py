"""Stragglers (operator/core/stragglers.py): the rule over the trainer's workerTimes, the
Straggler condition and its Event, and failurePolicy.stragglers Replace moving the job off
the slow worker's node checkpoint first, with a history entry and the node avoided."""

from __future__ import annotations

from disttrain.api import conditions as c
from disttrain.api import load_job
from disttrain.api.validate import validate_document
from disttrain.api.report import TrainerReport, WorkerTime, WorkerWindow, parse_report
from disttrain.api.status_types import CheckpointStatus
from disttrain.operator.core.plan import decide
from disttrain.operator.core.stragglers import MIN_EXCESS_SECONDS, find, ratios

from .helpers import job as job_doc
from .plan_builders import NOW, POLICY, QUIET, RUNNING, at, iso, state
from .plan_builders import ready_node as node
from .plan_builders import worker_on as worker

SPEC = {"nodes": 3, "checkpoint": {"intervalSteps": 100, "evictGraceSeconds": 60}, **QUIET}
REPLACE = {**SPEC, "failurePolicy": {"stragglers": "Replace", "stragglerWindows": 3}}
PODS = [worker(0, "a", SPEC), worker(1, "b", SPEC), worker(2, "c", SPEC)]
NODES = {n: node(n) for n in "abc"}


def window(step: int, *compute: float) -> WorkerWindow:
    return WorkerWindow(step, tuple(WorkerTime(i, s, 0.5) for i, s in enumerate(compute)))


def report(*windows: WorkerWindow, **fields) -> TrainerReport:
    fields = {"checkpoint": CheckpointStatus(step=200, time=iso(at(-30))), **fields}
    return TrainerReport(step=windows[-1].step, last_update_time=iso(NOW), worker_windows=windows, **fields)


SLOW_1 = tuple(window(10 * k, 0.10, 0.21, 0.11) for k in range(1, 6))


def test_the_rule_wants_every_one_of_the_last_windows_slow_against_the_others_median():
    assert ratios(window(10, 0.1, 0.2)) == {0: 0.5, 1: 2.0}  # a pair: each against the other
    [s] = find(SLOW_1, 1.3, 5)
    assert (s.worker, s.ratio, s.windows, s.step) == (1, 2.0, 5, 50)
    # One window of five not slow breaks the run; so do too few windows.
    broken = SLOW_1[:3] + (window(40, 0.1, 0.1, 0.1),) + SLOW_1[4:]
    assert find(broken, 1.3, 3) == [] and [s.windows for s in find(broken, 1.3, 1)] == [1]
    assert find(SLOW_1[:2], 1.3, 3) == []
    # Under the ratio, or over it by less than the noise floor: not slow.
    assert find(SLOW_1, 2.5, 3) == []
    tiny = tuple(window(10 * k, 0.0002, 0.0002 + MIN_EXCESS_SECONDS / 2) for k in range(1, 4))
    assert find(tiny, 1.3, 3) == []
    assert find(tuple(window(10 * k, 0.1) for k in range(1, 4)), 1.3, 1) == []  # one worker: no peers


def test_the_report_is_bounded_and_malformed_parts_are_skipped():
    doc = {"step": 30, "workerTimes": [[10, [[0, 0.1, 0.5], [1, 0.2, 0.5]]], "junk", [20, "x"],
                                       [30, [[0, 0.1, 0.5], [0, 9.0, 0.5], [1, -1, 0.5], [2, True, 1], [3, 0.1]]]]}
    parsed = parse_report(doc)
    assert parsed.worker_windows == (window(10, 0.1, 0.2), WorkerWindow(30, (WorkerTime(0, 0.1, 0.5),)))
    many = {"step": 99, "workerTimes": [[k, [[0, 0.1, 0.1]]] for k in range(20)]}
    assert [w.step for w in parse_report(many).worker_windows] == list(range(12, 20))  # the newest 8


def test_report_names_the_worker_its_node_and_the_ratio_once_and_clears_quietly():
    plan = decide(state(RUNNING, **SPEC), PODS, NOW, POLICY, report=report(*SLOW_1), nodes=NODES)
    cond = c.get_condition(plan.status.conditions, c.STRAGGLER)
    assert (cond.status, cond.reason) == ("True", c.SLOW_WORKER)
    assert cond.message.startswith("demo-worker-1 on node b takes 2.00x the other workers' median compute time per "
                                   "step, over stragglerRatio 1.3 for 5 report windows in a row (through step 50")
    [event] = [e for e in plan.events if e.reason == c.STRAGGLER]
    assert event.type == "Warning" and event.message == cond.message
    assert plan.delete == [] and plan.status.eviction is None and plan.straggler_ratio == 2.0
    # The next window: the same worker, no second Event.
    later = report(*SLOW_1[1:], window(60, 0.1, 0.22, 0.1))
    again = decide(state(plan.status, **SPEC), PODS, at(10), POLICY, report=later, nodes=NODES)
    assert not [e for e in again.events if e.reason == c.STRAGGLER]
    assert c.get_condition(again.status.conditions, c.STRAGGLER).message.startswith("demo-worker-1 on node b takes 2.20x")
    even = report(*SLOW_1, window(60, 0.1, 0.1, 0.1))
    cleared = decide(state(again.status, **SPEC), PODS, at(20), POLICY, report=even, nodes=NODES)
    assert c.get_condition(cleared.status.conditions, c.STRAGGLER).status == "False"
    assert not [e for e in cleared.events if e.reason == c.STRAGGLER]
    # A job that never had one gets no condition; Off watches nothing.
    assert c.get_condition(decide(state(RUNNING, **SPEC), PODS, NOW, POLICY, report=report(*SLOW_1[:1]),
                                  nodes=NODES).status.conditions, c.STRAGGLER) is None
    off = {**SPEC, "failurePolicy": {"stragglers": "Off"}}
    assert c.get_condition(decide(state(RUNNING, **off), PODS, NOW, POLICY, report=report(*SLOW_1),
                                  nodes=NODES).status.conditions, c.STRAGGLER) is None


def test_replace_moves_off_the_stragglers_node_checkpoint_first_and_avoids_it():
    asking = decide(state(RUNNING, **REPLACE), PODS, NOW, POLICY, report=report(*SLOW_1), nodes=NODES)
    assert asking.ask_checkpoint == (120, 60.0) and asking.delete == []
    assert (asking.status.eviction.reason, asking.status.eviction.handshake) == ("Straggler", "Requested")
    assert "moving the workers off its node, checkpoint first" in \
        c.get_condition(asking.status.conditions, c.STRAGGLER).message

    held = report(*SLOW_1, held_at_step=50, checkpoint=CheckpointStatus(step=50, time=iso(at(1))))
    moving = decide(state(asking.status, **REPLACE), PODS, at(2), POLICY, report=held, nodes=NODES)
    assert sorted(moving.delete) == [(f"demo-worker-{i}", c.STRAGGLER_REPLACED) for i in range(3)]
    assert moving.status.eviction.handshake == "Checkpointed" and moving.status.restarts == 0
    (entry,) = moving.status.failures
    assert (entry.cause, entry.node, entry.steps_lost) == ("Straggler", "b", 0)
    assert entry.message.startswith("demo-worker-1 on node b takes 2.00x")
    [moved] = [e for e in moving.events if e.reason == c.STRAGGLER_REPLACED]
    assert "away from the straggler's" in moved.message

    # Recreated off node b; the old report (from before the move) flags no one again.
    again = decide(state(moving.status, **REPLACE), [], at(4), POLICY, report=held, nodes=NODES)
    assert again.create == [0, 1, 2] and [a.node for a in again.status.avoided_nodes] == ["b"]
    [avoided] = [e for e in again.events if e.reason == c.NODE_AVOIDED]
    assert avoided.message.startswith("node b was a straggler: the workers were moved off it")
    new_pods = [worker(0, "a", REPLACE), worker(1, "c", REPLACE), worker(2, "d", REPLACE)]
    running = decide(state(again.status, **REPLACE), new_pods, at(30), POLICY, report=held,
                     nodes={**NODES, "d": node("d")})
    assert running.delete == [] and running.status.eviction.handshake == "Checkpointed"
    assert c.get_condition(running.status.conditions, c.STRAGGLER).status == "False"


def test_the_api_bounds_and_defaults():
    job, _, _ = load_job(job_doc(**SPEC))
    policy = job.spec.failure_policy
    assert (policy.stragglers, policy.straggler_ratio, policy.straggler_windows) == ("Report", 1.3, 5)
    for bad, field in [({"stragglerWindows": 9}, "stragglerWindows"), ({"stragglerRatio": 1.0}, "stragglerRatio"),
                       ({"stragglers": "Evict"}, "stragglers")]:
        result = validate_document(job_doc(**{**SPEC, "failurePolicy": bad}))
        assert not result.ok and any(field in str(e) for e in result.errors), (bad, result.errors)
