"""What the operator reads from one pod (pods.summarize_pod): phase, index, exit code,
disruption, owner, why it is unschedulable, its last words."""

from __future__ import annotations

import json

import pytest
from disttrain.api import load_job
from disttrain.api.names import INDEX_LABEL
from disttrain.operator.core.pods import PodInfo, summarize_pod
from disttrain.render import render_pod

from .helpers import job as job_doc
from .plan_builders import terminated


def test_owner_and_unschedulable_are_read_from_the_pod():
    j, r, _ = load_job(job_doc(nodes=1))
    body = render_pod(j, r, 0)
    body["metadata"]["uid"] = "pod-uid"
    body["metadata"]["ownerReferences"] = [{"kind": "DistributedTraining", "name": "demo", "uid": "job-uid",
                                           "controller": True}]
    body["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": '0/6 nodes are available: persistentvolumeclaim "ck" not found.'}]}
    info = summarize_pod(body)
    assert (info.uid, info.owner_uid) == ("pod-uid", "job-uid")
    assert "persistentvolumeclaim" in info.unschedulable


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


def test_last_words_keep_the_end_of_a_long_line():
    line = "E" * 100 + "x" * 300
    crashed = summarize_pod({"status": {"phase": "Failed", **terminated(exitCode=1, message=f"first\n{line}\n")}})
    assert crashed.last_words == "x" * 300
