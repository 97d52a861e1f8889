"""Trainer /status -> status.progress, status.checkpoint and CheckpointStale (pure)."""

from __future__ import annotations

import pytest

from datetime import datetime, timedelta, timezone

from disttrain_operator.api import load_job
from disttrain_operator.plan import iso
from disttrain_operator.status import (checkpoint_from_trainer, checkpoint_staleness, global_batch,
                                       progress_from_trainer, status_sources)

from .helpers import job
from .test_plan import pod

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)


def test_progress_from_the_trainer_report():
    report = {"step": 45, "totalSteps": 100, "loss": 2.3456789, "samplesPerSecond": 512.0, "worldSize": 2}
    assert progress_from_trainer(report) == {"step": 45, "totalSteps": 100, "percentComplete": "45%",
                                             "loss": 2.345679, "samplesPerSecond": 512.0}


def test_progress_ignores_missing_or_malformed_values():
    assert progress_from_trainer({"step": "x", "loss": float("nan"), "samplesPerSecond": True}) == {}
    assert progress_from_trainer({"step": 0, "totalSteps": 0}) == {"step": 0}


def test_a_tenants_report_is_bounded_so_no_status_write_can_be_refused_for_it():
    """A step of 2**63 is no int64 for the API server: every status write would fail with
    422, freezing the job. Out-of-range counts, over-long texts and unreadable times are
    dropped at parse time instead."""
    huge = {"step": 2**63, "totalSteps": -1, "worldSize": 2**53,
            "checkpoint": {"step": 2**53 - 1, "time": "yesterday", "path": "/c/" + "x" * 5000}}
    assert progress_from_trainer(huge) == {}
    assert checkpoint_from_trainer(huge) == {"step": 2**53 - 1}
    assert progress_from_trainer({"step": 2**53 - 1, "totalSteps": 0}) == {"step": 2**53 - 1}


def test_checkpoint_from_the_trainer_report():
    ckpt = {"step": 40, "time": "2026-11-22T11:59:00Z", "path": "/checkpoints/step-00000040"}
    assert checkpoint_from_trainer({"checkpoint": ckpt}) == ckpt
    assert checkpoint_from_trainer({"checkpoint": None}) is None
    assert checkpoint_from_trainer({}) is None


def test_staleness_follows_the_interval_and_the_measured_step_time():
    progress = {"samplesPerSecond": 64.0}  # global batch 64 -> 1 s per step
    fresh = {"step": 100, "time": iso(NOW - timedelta(seconds=200))}
    stale, message, age = checkpoint_staleness(progress, fresh, 100, 64, None, NOW)
    assert not stale and age == 200  # allowed: 3 x 100 s + 120 s
    old = {"step": 100, "time": iso(NOW - timedelta(seconds=421))}
    stale, message, _ = checkpoint_staleness(progress, old, 100, 64, None, NOW)
    assert stale and "checkpoint of step 100, 421s old" in message


def test_no_checkpoint_yet_counts_from_the_start():
    stale, message, _ = checkpoint_staleness({"samplesPerSecond": 64.0}, None, 10, 64, iso(NOW - timedelta(hours=1)), NOW)
    assert stale and message.startswith("no checkpoint yet")


def test_staleness_is_off_without_interval_or_throughput():
    assert checkpoint_staleness({"samplesPerSecond": 1.0}, None, 0, 8, iso(NOW), NOW)[0] is False
    assert checkpoint_staleness({}, None, 10, 8, iso(NOW - timedelta(days=1)), NOW)[0] is False


def test_global_batch():
    j, r, _ = load_job(job(nodes=2, gpusPerNode=4, accumulateGradBatches=2, trainer={"builtin": {"batchSize": 8}}))
    assert global_batch(j.spec, r) == 8 * 8 * 2
    j, r, _ = load_job(job(nodes=1, gpusPerNode=4, mesh={"fsdp": 2, "tp": 2}, trainer={"builtin": {"batchSize": 8}}))
    assert global_batch(j.spec, r) == 8 * 2  # tensor-parallel ranks share a batch


def test_status_sources_are_ready_workers_lowest_index_first():
    pods = [pod(2, nodes=3), pod(0, nodes=3, phase="Pending"), pod(1, nodes=3)]
    assert [p.name for p in status_sources(pods)] == ["demo-worker-1", "demo-worker-2"]


def test_typed_status_round_trips_what_the_schema_allows_and_drops_unset_fields():
    from disttrain_operator.status import typed_status

    full = {"phase": "Running", "observedGeneration": 3, "selector": "disttrain.dev/job=a",
            "conditions": [{"type": "Running", "status": "True", "reason": "PodsRunning", "message": "2 of 2",
                            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 3}],
            "resolved": {"strategy": "ddp", "nodes": 2, "minNodes": 2, "maxNodes": 2, "nprocPerNode": 1,
                         "worldSize": 2, "precision": "32"},
            "workers": {"desired": 2, "active": 2, "ready": 1, "succeeded": 0, "failed": 0},
            "progress": {"step": 5, "totalSteps": 10, "loss": 1.5, "samplesPerSecond": 12.0, "percentComplete": "50%"},
            "checkpoint": {"step": 4, "time": "2026-01-01T00:01:00Z", "path": "/ckpt/step-4"},
            "restarts": 0, "warnings": ["w"], "startTime": "2026-01-01T00:00:00Z"}
    assert typed_status(full) == full
    assert typed_status({"phase": "Pending", "nextRestartTime": None, "progress": {"loss": None, "step": 1}}) == \
        {"phase": "Pending", "progress": {"step": 1}}


@pytest.mark.parametrize("status, field", [
    ({"phase": "Running", "workerz": {}}, "status.workerz"),
    ({"phase": "Sleeping"}, "status.phase"),
    ({"progress": {"step": "five"}}, "status.progress.step"),
])
def test_typed_status_refuses_what_the_schema_does_not_describe(status, field):
    from disttrain_operator.status import StatusSchemaError, typed_status

    with pytest.raises(StatusSchemaError, match=field.replace(".", r"\.")):
        typed_status(status)
