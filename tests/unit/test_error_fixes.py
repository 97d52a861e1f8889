"""Every error `disttrain` prints names the field, the value, what is allowed and a `Fix:`
(README, docs/troubleshooting.md), at the line of the key to fix (issue 70 item 5). The
wrong files users write, through the CLI as they run it; and every error the message
goldens pin."""

from __future__ import annotations

import json

import pytest

from .conftest import ROOT
from .helpers import disttrain

HEAD = """apiVersion: disttrain.dev/v1alpha1
kind: DistributedTraining
metadata:
  name: demo
spec:
  trainer:
    builtin: {model: gpt-nano, dataset: text, steps: 60}
"""

# name: (lines added under spec:, the line of the first error or warning, its text)
WRONG = {
    "an unsupported strategy": ("  strategy: deepspeed\n", 6, "error: spec.strategy: is not allowed (got 'deepspeed'); "
                                "allowed: auto, ddp, fsdp, fsdp_native. Fix: set spec.strategy to one of the allowed "
                                "values (`kubectl explain dt.spec.strategy` says what each does)"),
    "fsdp on one GPU": ("  gpusPerNode: 1\n  strategy: fsdp\n", 7,
                        "warning [FSDPSingleDevice] spec.strategy: FSDP requires multiple devices, falling back to "
                        "single-device training: the job runs strategy auto. Fix: set strategy: auto, or give the job "
                        "more devices (nodes, gpusPerNode) to shard across"),
    "a field in the wrong case": ("  checkpoint: {claimname: ckpt}\n", 6,
                                  "error: spec.checkpoint.claimname: is not a known field (got 'ckpt'); allowed: path, "
                                  "intervalSteps, keep, async, claimName, uri, secretRef, endpoint, storage, "
                                  "evictGraceSeconds. Fix: use 'claimName' (field names are case-sensitive)"),
    "two nodes and no checkpoint storage": ("  nodes: 2\n", 5,
                                            "error: spec.checkpoint: has no storage every pod reaches, and the job can "
                                            "have more than one pod (nodes 2): the built-in trainer could never resume "
                                            "(not set); allowed:"),
}


@pytest.mark.parametrize("name", WRONG)
def test_a_wrong_file_gets_the_fix_at_its_line(tmp_path, name):
    added, line, said = WRONG[name]
    path = tmp_path / "job.yaml"
    path.write_text(HEAD.replace("spec:\n", "spec:\n" + added))
    checked = disttrain("validate", str(path))
    found = [text.strip() for text in checked.stdout.splitlines() if text.split(": ", 1)[-1].startswith(said)]
    assert found, checked.stdout
    assert found[0].startswith(f"{path}:{line}: ") and "Fix: " in found[0], checked.stdout


def test_a_misspelt_top_level_key_is_pointed_at_its_own_line(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(HEAD.replace("spec:", "spce:"))
    checked = disttrain("validate", str(path))
    assert checked.returncode == 1
    assert f"  {path}:5: error: spce: is not a top-level field" in checked.stdout, checked.stdout
    assert "Fix: did you mean 'spec'?" in checked.stdout


def test_the_storage_error_names_max_nodes_only_where_the_user_set_it(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(HEAD.replace("spec:\n", "spec:\n  nodes: 1\n  maxNodes: 3\n"))
    assert "the job can have more than one pod (maxNodes 3)" in disttrain("validate", str(path)).stdout


def test_an_option_a_command_lacks_gets_that_commands_usage_and_the_fix():
    """`top --once`: top's own usage, not the top-level one, and what to run instead."""
    shown = disttrain("top", "--once")
    assert shown.returncode == 2
    lines = shown.stderr.splitlines()
    assert lines[0] == ("disttrain top: error: unrecognized arguments: --once. Fix: leave it out (`disttrain "
                        "top --help` lists top's options); top redraws on every change until Ctrl-C, `disttrain get` "
                        "lists the jobs once"), shown.stderr
    assert lines[1].startswith("usage: disttrain top [-h]"), shown.stderr
    other = disttrain("validate", "--once", "x.yaml").stderr.splitlines()
    assert other[0] == ("disttrain validate: error: unrecognized arguments: --once. Fix: leave it out "
                        "(`disttrain validate --help` lists validate's options)")


def pinned_errors(golden: str) -> list[str]:
    """The error lines a message golden pins: its `errors` lists, and its sections that are
    lists of errors alone (bounds, pod policy)."""
    with open(f"{ROOT}/tests/unit/golden/{golden}.json") as handle:
        pinned = json.load(handle)
    errors = []
    for section in pinned.values():
        for case in section.values():
            errors += case if isinstance(case, list) else case.get("errors") or []
    return errors


@pytest.mark.parametrize("golden", ["validate_messages", "parse_messages"])
def test_every_error_the_goldens_pin_names_its_fix(golden):
    errors = pinned_errors(golden)
    assert errors
    assert [e for e in errors if ". Fix: " not in e] == []
