"""metav1.Condition helpers: shape, transition times, capped one-line messages."""

from __future__ import annotations

from disttrain.api import conditions as c
from disttrain.api.status_types import Condition

from .helpers import written

T0, T1 = "2026-11-22T12:00:00Z", "2026-11-22T12:05:00Z"


def test_a_new_condition_has_the_metav1_shape():
    (cond,) = c.set_condition([], c.RUNNING, True, c.PODS_RUNNING, "2 of 2 running", 4, T0)
    assert written(cond) == {"type": "Running", "status": "True", "reason": "PodsRunning",
                             "message": "2 of 2 running", "lastTransitionTime": T0, "observedGeneration": 4}
    (off,) = c.set_condition([], c.RUNNING, False, c.PODS_PENDING, "waiting", None, T0)
    assert off.status == "False" and "observedGeneration" not in written(off)


def test_transition_time_moves_only_when_the_status_flips():
    first = c.set_condition([], c.RUNNING, True, c.PODS_RUNNING, "a", 1, T0)
    same = c.set_condition(first, c.RUNNING, True, c.PODS_RUNNING, "b", 2, T1)
    assert same[0].last_transition_time == T0
    assert (same[0].message, same[0].observed_generation) == ("b", 2)
    flipped = c.set_condition(same, c.RUNNING, False, c.WORKER_FAILED, "c", 2, T1)
    assert flipped[0].last_transition_time == T1 and flipped[0].status == "False"


def test_a_condition_without_a_time_gets_now_and_others_are_untouched():
    other = Condition(type=c.VALIDATED, status="True", reason=c.VALID, message="", last_transition_time=T0)
    out = c.set_condition([other, Condition(type=c.RUNNING, status="True")], c.RUNNING, True, c.PODS_RUNNING, "m",
                          1, T1)
    assert out[0] is other
    assert out[1].last_transition_time == T1
    assert [x.type for x in out] == [c.VALIDATED, c.RUNNING]


def test_get_condition_finds_by_type():
    conds = c.set_condition([], c.FAILED, True, c.INVALID_SPEC, "m", 1, T0)
    assert c.get_condition(conds, c.FAILED).reason == c.INVALID_SPEC
    assert c.get_condition(conds, c.RUNNING) is None and c.get_condition(None, c.RUNNING) is None


def test_messages_are_one_capped_line():
    assert c.cap("a\n  b\tc ") == "a b c"
    exact = "x" * c.MESSAGE_LIMIT
    assert c.cap(exact) == exact
    long = c.cap("y" * (c.MESSAGE_LIMIT + 1))
    assert len(long) == c.MESSAGE_LIMIT and long.endswith("yy...")
    assert c.cap("abcdef", limit=5) == "ab..."
    (cond,) = c.set_condition([], c.FAILED, True, c.INVALID_SPEC, "z" * 5000, 1, T0)
    assert len(cond.message) == c.MESSAGE_LIMIT



def test_the_crd_documents_every_condition_type_the_operator_writes():
    """status_types.CONDITION_TYPES (the CRD's and docs/api.md's words) is the one list:
    conditions.py names its types from it (CONDITION), each under its own name, so a type
    added to the list is named, and a name that is not in the list fails at import."""
    from disttrain.api import conditions
    from disttrain.api.status_types import CONDITION, CONDITION_TYPES

    assert sorted(vars(CONDITION).values()) == sorted(CONDITION_TYPES)
    assert all(getattr(conditions, name) == value for name, value in vars(CONDITION).items())
    assert (CONDITION.CHECKPOINT_STALE, CONDITION.POD_CREATION_FORBIDDEN) == ("CheckpointStale", "PodCreationForbidden")
