"""CrdState: when a CRD the operator watches went and came back (crds.py)."""

from __future__ import annotations

from disttrain.operator.crds import RESUME_SECONDS, CrdState

JOBS, OTHER = "distributedtrainings.disttrain.dev", "widgets.example.com"
ESTABLISHED = {"status": {"conditions": [{"type": "Established", "status": "True"}]}}
NEW = {"status": {"conditions": [{"type": "NamesAccepted", "status": "True"}]}}


def test_a_crd_served_from_the_start_asks_for_nothing_when_it_changes():
    crds = CrdState(needed=frozenset({JOBS}))
    assert crds.seen(JOBS, ESTABLISHED, deleted=False, now=1) is False  # an upgrade of the CRD
    assert crds.describe() == {JOBS: "served"} and crds.stuck(now=1000) == []


def test_a_deleted_crd_is_served_again_once_it_is_established_again():
    crds = CrdState(needed=frozenset({JOBS}))
    assert crds.seen(JOBS, ESTABLISHED, deleted=True, now=10) is False
    assert crds.describe() == {JOBS: "not installed: no job of this kind is served until it is created"}
    assert crds.seen(JOBS, NEW, deleted=False, now=11) is False  # created, not yet served
    assert crds.seen(JOBS, ESTABLISHED, deleted=False, now=12) is True  # start kopf over
    assert crds.seen(JOBS, ESTABLISHED, deleted=False, now=13) is False  # once
    assert crds.describe() == {JOBS: "back, about to be served"}


def test_a_crd_missing_at_the_start_counts_as_gone_and_others_are_ignored():
    crds = CrdState(needed=frozenset({JOBS}))
    crds.missing(JOBS, now=0)
    crds.missing(OTHER, now=0)
    assert crds.seen(OTHER, ESTABLISHED, deleted=False, now=1) is False
    assert crds.seen(JOBS, ESTABLISHED, deleted=False, now=1) is True


def test_liveness_fails_only_once_a_returned_crd_waited_too_long_to_be_served():
    crds = CrdState(needed=frozenset({JOBS}))
    crds.missing(JOBS, now=0)
    assert crds.stuck(now=10_000) == []  # gone: a restart would serve nothing
    crds.seen(JOBS, ESTABLISHED, deleted=False, now=100)
    assert crds.stuck(now=100 + RESUME_SECONDS) == []
    assert crds.stuck(now=101 + RESUME_SECONDS) == [JOBS]
