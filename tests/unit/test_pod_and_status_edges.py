"""Edges of summarize_pod and the status helpers that the decision tables do not reach: a
pod the API server reported with fields missing, an exit without a code, the boundary of
"checkpoint stale", throughput turned into seconds per step, and whom to ask for /status."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from disttrain_operator.api.names import CONTAINER_NAME, INDEX_LABEL
from disttrain_operator.pods import PodInfo, summarize_pod
from disttrain_operator.api.types import CheckpointStatus
from disttrain_operator.report import TrainerReport, parse_report
from disttrain_operator.status import (STALE_GRACE_SECONDS, STALE_INTERVALS, checkpoint_staleness, global_batch,
                                       seconds_per_step, status_sources)

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=timezone.utc)


def terminated(**state) -> dict:
    return {"containerStatuses": [{"name": CONTAINER_NAME, "state": {"terminated": state}}]}


def test_a_bare_pod_reads_as_pending_with_no_index_and_no_name():
    info = summarize_pod({})
    assert (info.name, info.index, info.phase, info.exit_code, info.reason, info.terminating) == (
        "", None, "Pending", None, "", False)
    assert info.unschedulable == "" and info.last_words == "" and info.report is None


@pytest.mark.parametrize(("label", "index"), [("3", 3), ("x3", None), ("-1", None), (3, None)])
def test_the_worker_index_comes_only_from_a_digit_label(label, index):
    assert summarize_pod({"metadata": {"labels": {INDEX_LABEL: label}}}).index == index


def test_a_failed_container_without_a_reason_or_message():
    info = summarize_pod({"metadata": {"name": "w"}, "status": {"phase": "Failed", **terminated(exitCode=2)}})
    assert (info.exit_code, info.reason, info.last_words) == (2, "", "")
    assert info.describe_failure() == "w failed: Error (exit code 2)"


def test_the_last_words_are_the_last_line_of_a_crash_and_only_of_a_crash():
    log = "Traceback (most recent call last):\n  File x\nValueError: boom\n\n"
    crashed = summarize_pod({"status": {"phase": "Failed", **terminated(exitCode=1, reason="Error", message=log)}})
    assert crashed.last_words == "ValueError: boom"
    ok = summarize_pod({"status": {"phase": "Succeeded", **terminated(exitCode=0, message=log)}})
    assert ok.last_words == ""
    # A termination message that is the trainer's report is not a crash's last words.
    report = json.dumps({"step": 3, "outcome": "Interrupted"})
    assert summarize_pod({"status": {"phase": "Failed", **terminated(exitCode=143, message=report)}}).last_words == ""
    assert summarize_pod({"status": {"phase": "Failed", **terminated(exitCode=1, message="\n \n")}}).last_words == ""


def test_no_exit_code_is_said_so():
    info = PodInfo(name="w", index=0, phase="Failed", ready=False, terminating=False, disrupted=False,
                   exit_code=None, reason="", template_hash=None, ip=None)
    assert info.describe_failure() == "w failed: Error (no exit code)"


def test_a_running_pod_has_no_exit_code_and_no_report():
    running = summarize_pod({"status": {"phase": "Running"}})
    assert running.exit_code is None and running.report is None


def test_only_an_unschedulable_pod_scheduled_false_is_unschedulable():
    def scheduled(**cond):
        return summarize_pod({"status": {"conditions": [{"type": "PodScheduled", **cond}]}}).unschedulable

    assert scheduled(status="False", reason="Unschedulable", message="0/3 nodes") == "0/3 nodes"
    assert scheduled(status="False", reason="Unschedulable") == "Unschedulable"
    assert scheduled(status="False", reason="SchedulingGated", message="gated") == ""
    assert scheduled(status="True", reason="Unschedulable", message="old") == ""


def test_a_deleted_pod_is_terminating():
    assert summarize_pod({"metadata": {"deletionTimestamp": "2026-11-22T12:00:00Z"}}).terminating is True


# ---- status helpers --------------------------------------------------------------------


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
    assert staleness(10_000, interval=0) == (False, "periodic checkpoints are off (intervalSteps 0)", 10_000)
    assert staleness(10_000, interval=1)[0]  # an interval of 1 step is checked like any other
    assert staleness(10_000, step_seconds=None) == (False, "waiting for the trainer's throughput", 10_000)


def test_without_a_checkpoint_the_age_counts_from_the_start():
    stale, message, age = checkpoint_staleness(None, 10, (NOW - timedelta(seconds=500)).isoformat(),
                                               NOW, 2.0)
    assert stale and age == 500 and message.startswith("no checkpoint yet, 500s old;")
    assert checkpoint_staleness(None, 10, None, NOW, 2.0) == (False, "waiting for the trainer's throughput",
                                                                      None)


def test_progress_from_a_report_that_is_not_one_is_empty():
    assert parse_report({"loss": "x"}) is None
    assert parse_report({"step": "x", "loss": 1.0}).progress().loss == 1.0
    assert parse_report({"step": 7}).progress().step == 7


def ready(name, index, ip="10.0.0.1", is_ready=True):
    return PodInfo(name=name, index=index, phase="Running", ready=is_ready, terminating=False, disrupted=False,
                   exit_code=None, reason="", template_hash=None, ip=ip)


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


def test_last_words_keep_the_end_of_a_long_line():
    line = "E" * 100 + "x" * 300
    crashed = summarize_pod({"status": {"phase": "Failed", **terminated(exitCode=1, message=f"first\n{line}\n")}})
    assert crashed.last_words == "x" * 300


def test_checkpoint_age_counts_from_the_newest_checkpoint():
    from disttrain_operator.status import checkpoint_age

    made = (NOW - timedelta(seconds=42)).isoformat()
    assert checkpoint_age(CheckpointStatus(step=1, time=made), NOW) == 42
    assert checkpoint_age(CheckpointStatus(step=1), NOW) is None
    assert checkpoint_age(None, NOW) is None


def test_a_status_outside_the_schema_names_every_field_and_keeps_the_rest():
    from disttrain_operator.status import read_status

    status, errors = read_status({"phase": "Running", "bogus": 1, "restarts": "x"})
    assert status.phase == "Running" and status.restarts is None
    assert str(errors[0]).startswith("status.bogus: is not a known field (got 1); allowed: ")
    assert str(errors[1]) .startswith("status.restarts: must be an integer (got 'x')")
