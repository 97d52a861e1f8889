"""The status (status.py): read from the API server's JSON and written back the same,
checkpoint age and staleness, the global batch, whom to ask for /status."""

from __future__ import annotations

from datetime import timedelta

import pytest
from disttrain.api import load_job
from disttrain.api.status_types import CheckpointStatus
from disttrain.api.times import iso
from disttrain.api.report import TrainerReport
from disttrain.operator.core.status import (STALE_GRACE_SECONDS, STALE_INTERVALS, checkpoint_staleness, global_batch,
                                            read_status, seconds_per_step, status_sources)

from .helpers import job, written
from .plan_builders import NOW, pod, ready


def test_seconds_per_step_prefers_the_measured_step_time_then_throughput():
    assert seconds_per_step(None, 64) is None
    assert seconds_per_step(TrainerReport(step_seconds=0.25, samples_per_second=1000.0), 64) == 0.25
    assert seconds_per_step(TrainerReport(samples_per_second=32.0), 64) == 2.0
    assert seconds_per_step(TrainerReport(step=5), 64) is None


def staleness(age_seconds: float, interval: int = 10, step_seconds: float | None = 2.0):
    checkpoint = CheckpointStatus(step=40, time=(NOW - timedelta(seconds=age_seconds)).isoformat())
    return checkpoint_staleness(checkpoint, interval, None, NOW, step_seconds)


def test_a_checkpoint_is_stale_only_past_three_intervals_and_the_grace():
    allowed = STALE_INTERVALS * 10 * 2.0 + STALE_GRACE_SECONDS  # 180 s
    assert staleness(allowed) == (False, "checkpoint of step 40, 180s old (stale after 180s)", allowed)
    stale, message, age = staleness(allowed + 1)
    assert stale and age == allowed + 1
    assert message == ("checkpoint of step 40, 181s old; expected one every ~20s (intervalSteps 10); check the "
                       "checkpoint volume and the trainer logs")


def test_the_allowed_age_grows_with_the_step_time():
    assert not staleness(300, step_seconds=10.0)[0]  # allowed 3 x 10 x 10 + 120 = 420 s
    assert staleness(300, step_seconds=0.1)[0]  # allowed 123 s


def test_throughput_stands_in_for_the_step_time():
    fast, slow = TrainerReport(samples_per_second=32.0), TrainerReport(samples_per_second=8.0)
    assert staleness(200, step_seconds=seconds_per_step(fast, 64))[0]  # 64 / 32 = 2 s a step: allowed 180 s
    assert not staleness(200, step_seconds=seconds_per_step(slow, 64))[0]  # 8 s a step: allowed 360 s


def test_staleness_is_off_with_interval_0_and_waits_for_a_throughput():
    assert staleness(10_000, interval=0) == (False, "periodic checkpoints are off (intervalSteps 0, or storage none)", 10_000)
    assert staleness(10_000, interval=1)[0]  # an interval of 1 step is checked like any other
    assert staleness(10_000, step_seconds=None) == (False, "waiting for the trainer's throughput", 10_000)


def test_without_a_checkpoint_the_age_counts_from_the_start():
    stale, message, age = checkpoint_staleness(None, 10, (NOW - timedelta(seconds=500)).isoformat(),
                                               NOW, 2.0)
    assert stale and age == 500 and message.startswith("no checkpoint yet, 500s old;")
    assert checkpoint_staleness(None, 10, None, NOW, 2.0) == (False, "waiting for the trainer's throughput",
                                                                      None)


def test_status_is_asked_of_ready_workers_with_an_ip_lowest_index_first():
    pods = [ready("c", None), ready("b", 2), ready("a", 1), ready("z", 0, ip=None), ready("y", 3, is_ready=False),
            ready("x", 5)]
    assert [p.name for p in status_sources(pods)] == ["a", "b", "x"]
    assert [p.name for p in status_sources(pods, limit=5)] == ["a", "b", "x", "c"]  # no index: asked last


class _Builtin:
    batch_size = 16


class _Spec:
    def __init__(self, builtin, mesh=None, accumulate=1):
        self.trainer = type("T", (), {"builtin": builtin})()
        self.mesh, self.accumulate_grad_batches = mesh, accumulate


def test_global_batch_is_batch_times_data_parallel_times_accumulation():
    resolved = type("R", (), {"world_size": 8})()
    assert global_batch(_Spec(_Builtin(), accumulate=2), resolved) == 16 * 8 * 2
    assert global_batch(_Spec(None), resolved) == 8  # a user's script: one sample per rank and step
    assert global_batch(_Spec(_Builtin(), mesh=type("M", (), {"fsdp": 2})()), resolved) == 32


def test_checkpoint_age_counts_from_the_newest_checkpoint():
    from disttrain.operator.core.status import checkpoint_age

    made = (NOW - timedelta(seconds=42)).isoformat()
    assert checkpoint_age(CheckpointStatus(step=1, time=made), NOW) == 42
    assert checkpoint_age(CheckpointStatus(step=1), NOW) is None
    assert checkpoint_age(None, NOW) is None


def test_a_status_outside_the_schema_names_every_field_and_keeps_the_rest():
    from disttrain.operator.core.status import read_status

    status, errors = read_status({"phase": "Running", "bogus": 1, "restarts": "x"})
    assert status.phase == "Running" and status.restarts is None
    assert str(errors[0]).startswith("status.bogus: is not a known field (got 1); allowed: ")
    assert str(errors[1]) .startswith("status.restarts: must be an integer (got 'x')")


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
