"""DISTTRAIN_LOG_FORMAT: the shipped `json` really makes the operator log JSON lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import kopf
import pytest
from disttrain.operator.logformat import log_format

from .helpers import package_paths


@pytest.mark.parametrize(("value", "expected"), [
    (None, kopf.LogFormat.FULL),
    ("", kopf.LogFormat.FULL),
    ("plain", kopf.LogFormat.FULL),
    ("json", kopf.LogFormat.JSON),
    ("JSON", kopf.LogFormat.JSON),
])
def test_known_formats_map_to_kopf_choices(value, expected):
    environ = {} if value is None else {"DISTTRAIN_LOG_FORMAT": value}
    assert log_format(environ) is expected


def test_unknown_format_names_variable_value_and_choices():
    with pytest.raises(SystemExit) as err:
        log_format({"DISTTRAIN_LOG_FORMAT": "logfmt"})
    assert str(err.value) == ("DISTTRAIN_LOG_FORMAT='logfmt' is not a log format: "
                              "set it to one of plain, json")


def test_operator_started_with_json_logs_json_lines(tmp_path):
    """The shipped Deployment sets json: the operator must start and log one JSON object a line.

    No cluster: the startup handler fails to load credentials, and that failure is the
    first record; it must come out as JSON with kopf's severity, not as a crash.
    """
    env = {**os.environ, "DISTTRAIN_LOG_FORMAT": "json", "DISTTRAIN_OPERATOR_METRICS_PORT": "0",
           "KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path),
           "PYTHONPATH": package_paths()}
    for var in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        env.pop(var, None)
    proc = subprocess.Popen([sys.executable, "-m", "disttrain.operator", "-n", "nowhere", "--liveness="],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        while not lines or json.loads(lines[-1])["severity"] != "error":  # every line must be JSON
            line = proc.stdout.readline()
            assert line, "the operator exited without logging its start-up failure"
            lines.append(line)
    finally:
        proc.terminate()
        rest, _ = proc.communicate(timeout=30)
    record = json.loads(lines[-1])
    assert "Activity 'start' failed" in record["message"] and "kube-config" in record["message"]
    assert "timestamp" in record
    for line in rest.splitlines():
        json.loads(line)  # every later line is JSON too
