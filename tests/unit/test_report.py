"""The trainer's report (report.py): /status and the termination message parsed alike,
bounded, and the newest one chosen."""

from __future__ import annotations

import json

import pytest
from disttrain.api.times import iso
from disttrain.api.report import FINISHED, TrainerReport, newest, parse_report

from .helpers import written
from .plan_builders import NOW, report_json


def test_report_parses_status_and_termination_message_alike():
    final = parse_report(report_json(FINISHED))
    assert final.finished and final.step == 60 and final.step_seconds == 0.2
    assert written(final.checkpoint) == {"step": 60, "time": iso(NOW), "path": "/ck/step-00000060"}
    assert written(final.progress()) == {"step": 60, "totalSteps": 60, "percentComplete": "100%", "loss": 2.5,
                                         "samplesPerSecond": 40.0, "stepSeconds": 0.2}
    assert parse_report(json.loads(report_json())).outcome is None


@pytest.mark.parametrize("junk", ["Traceback (most recent call last): ...", "", "[1, 2]", b"\xff",
                                  '{"loss": 1}', '{"step": "x", "outcome": "Maybe"}'])
def test_anything_else_is_not_a_report_or_has_no_false_fields(junk):
    parsed = parse_report(junk)
    assert parsed is None or (parsed.step is None and parsed.outcome is None)


def test_non_finite_numbers_are_dropped():
    parsed = parse_report({"step": 3, "loss": float("nan"), "samplesPerSecond": float("inf")})
    assert parsed.loss is None and parsed.samples_per_second is None


def test_newest_report_is_the_furthest_step_and_a_final_one_wins_a_tie():
    running = TrainerReport(step=59)
    final = TrainerReport(step=60, outcome=FINISHED)
    assert newest(running, None, final) is final
    assert newest(TrainerReport(step=60), final) is final
    assert newest(None, None) is None


def test_progress_from_a_report_that_is_not_one_is_empty():
    assert parse_report({"loss": "x"}) is None
    assert parse_report({"step": "x", "loss": 1.0}).progress().loss == 1.0
    assert parse_report({"step": 7}).progress().step == 7


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
