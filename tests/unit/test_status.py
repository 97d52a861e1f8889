"""Trainer /status -> status.progress, status.checkpoint and CheckpointStale (pure)."""

from __future__ import annotations

import pytest

from datetime import datetime, timedelta, timezone

from disttrain_operator.api import load_job
from disttrain_operator.plan import iso
from disttrain_operator.api.types import CheckpointStatus
from disttrain_operator.report import TrainerReport, parse_report
from disttrain_operator.status import checkpoint_staleness, global_batch, read_status, seconds_per_step, status_sources

from .helpers import job, written
from .test_plan import pod

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)


def progress_from_trainer(report: dict) -> dict:
    """status.progress as written, from a trainer's /status document."""
    parsed = parse_report(report)
    progress = parsed.progress() if parsed else None
    return written(progress) if progress is not None else {}


def checkpoint_from_trainer(report: dict) -> dict | None:
    parsed = parse_report(report)
    return written(parsed.checkpoint) if parsed and parsed.checkpoint else None


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
    step = seconds_per_step(TrainerReport(samples_per_second=64.0), 64)  # global batch 64 -> 1 s per step
    fresh = CheckpointStatus(step=100, time=iso(NOW - timedelta(seconds=200)))
    stale, message, age = checkpoint_staleness(fresh, 100, None, NOW, step)
    assert not stale and age == 200  # allowed: 3 x 100 s + 120 s
    old = CheckpointStatus(step=100, time=iso(NOW - timedelta(seconds=421)))
    stale, message, _ = checkpoint_staleness(old, 100, None, NOW, step)
    assert stale and "checkpoint of step 100, 421s old" in message


def test_no_checkpoint_yet_counts_from_the_start():
    stale, message, _ = checkpoint_staleness(None, 10, iso(NOW - timedelta(hours=1)), NOW, 1.0)
    assert stale and message.startswith("no checkpoint yet")


def test_staleness_is_off_without_interval_or_throughput():
    assert checkpoint_staleness(None, 0, iso(NOW), NOW, 8.0)[0] is False
    assert checkpoint_staleness(None, 10, iso(NOW - timedelta(days=1)), NOW, None)[0] is False


def test_global_batch():
    j, r, _ = load_job(job(nodes=2, gpusPerNode=4, accumulateGradBatches=2, trainer={"builtin": {"batchSize": 8}}))
    assert global_batch(j.spec, r) == 8 * 8 * 2
    j, r, _ = load_job(job(nodes=1, gpusPerNode=4, mesh={"fsdp": 2, "tp": 2}, trainer={"builtin": {"batchSize": 8}}))
    assert global_batch(j.spec, r) == 8 * 2  # tensor-parallel ranks share a batch


def test_status_sources_are_ready_workers_lowest_index_first():
    pods = [pod(2, nodes=3), pod(0, nodes=3, phase="Pending"), pod(1, nodes=3)]
    assert [p.name for p in status_sources(pods)] == ["demo-worker-1", "demo-worker-2"]


def test_the_status_read_from_the_api_is_written_back_the_same_and_unset_fields_are_left_out():
    full = {"phase": "Running", "observedGeneration": 3, "selector": "disttrain.dev/job=a",
            "conditions": [{"type": "Running", "status": "True", "reason": "PodsRunning", "message": "2 of 2",
                            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 3}],
            "resolved": {"strategy": "ddp", "nodes": 2, "minNodes": 2, "maxNodes": 2, "nprocPerNode": 1,
                         "worldSize": 2, "precision": "32"},
            "workers": {"desired": 2, "active": 2, "ready": 1, "succeeded": 0, "failed": 0},
            "progress": {"step": 5, "totalSteps": 10, "loss": 1.5, "samplesPerSecond": 12.0, "percentComplete": "50%"},
            "checkpoint": {"step": 4, "time": "2026-01-01T00:01:00Z", "path": "/ckpt/step-4"},
            "restarts": 0, "warnings": ["w"], "startTime": "2026-01-01T00:00:00Z"}
    status, errors = read_status(full)
    assert errors == [] and written(status) == full
    status, errors = read_status({"phase": "Pending", "nextRestartTime": None, "progress": {"loss": None, "step": 1}})
    assert errors == [] and written(status) == {"phase": "Pending", "progress": {"step": 1}}


@pytest.mark.parametrize("status, field, kept", [
    ({"phase": "Running", "workerz": {}}, "status.workerz", {"phase": "Running"}),
    ({"phase": "Sleeping", "restarts": 2}, "status.phase", {"restarts": 2}),
    ({"progress": {"step": "five"}, "restarts": 1}, "status.progress.step", {"restarts": 1}),
])
def test_a_stored_status_field_outside_the_schema_is_named_and_left_out(status, field, kept):
    """Written by another client through /status: the operator does not stop on it, its
    next write replaces it."""
    typed, errors = read_status(status)
    assert [e.path for e in errors] == [field]
    assert written(typed) == kept
