"""Every command's exit codes that need no cluster (docs/cli.md, "Exit codes and errors"):
2 for a usage error on every command, 0 for the offline commands' output, 1 for an invalid
file given to `run --local`. The codes that need the API server are proven in
tests/cluster/test_cli_commands.py, Ctrl-C's 130 on a training run in tests/trainer/."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from disttrain.cli.main import COMMANDS, main

from .conftest import ROOT
from .helpers import disttrain

EXAMPLE = Path(ROOT) / "manifests" / "examples" / "cpu-ddp-2x1.yaml"


def test_every_command_refuses_an_unknown_option_with_2_naming_it(capsys):
    commands = (("validate", "job.yaml"), ("render", "job.yaml"), ("crd",), ("docs", "api"), ("version",),
                ("completion", "bash"), ("run", "--local", "job.yaml"), ("submit",), ("apply",), ("get",),
                ("status", "j"), ("logs", "j"), ("wait", "j"), ("suspend",), ("resume",), ("delete",), ("top",),
                ("sweep", "sweep.yaml"))
    assert {c[0] for c in commands} == {c.name for c in COMMANDS}  # a new command joins this table
    for command in commands:
        with pytest.raises(SystemExit) as exited:
            main([*command, "--no-such-option"])
        assert exited.value.code == 2, command
        assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err, command


def test_usage_errors_that_name_what_is_missing_exit_2(capsys):
    """Not an unknown option: an argument left out or a choice outside the list. `disttrain`
    alone names the missing COMMAND, as it does a missing FILE."""
    for argv, says in (([], "the following arguments are required: COMMAND"),
                       (["validate"], "the following arguments are required: FILE"),
                       (["docs", "tutorial"], "invalid choice: 'tutorial' (choose from 'api', 'cli')"),
                       (["sweep"], "the following arguments are required")):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2 and says in capsys.readouterr().err, argv
    render = disttrain("render")
    assert render.returncode == 2 and "required" in render.stderr, render.stderr
    # apply and submit check their files before they read a kubeconfig: no cluster is asked.
    apply = disttrain("apply")
    assert apply.returncode == 2, apply.stderr
    assert apply.stderr == "error: give the file of jobs: FILE or -f FILE (- reads stdin)\n"


def test_the_offline_commands_print_what_they_promise_and_exit_0(capsys):
    assert main(["crd"]) == 0
    crds = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [(crd["kind"], crd["metadata"]["name"]) for crd in crds] == [
        ("CustomResourceDefinition", f"{plural}.disttrain.dev")
        for plural in ("distributedtrainings", "trainingtemplates", "clustertrainingtemplates")]
    assert main(["docs", "api"]) == 0
    assert capsys.readouterr().out.startswith("# API reference: `disttrain.dev/v1alpha1` DistributedTraining")
    assert main(["version", "-o", "json"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["api"] == "disttrain.dev/v1alpha1"
    assert main(["completion", "bash"]) == 0
    assert "complete" in capsys.readouterr().out


def test_run_local_exits_1_on_a_file_it_will_not_run_and_starts_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE.read_text().replace("nodes: 2", "nodes: 0"))
    invalid = disttrain("run", "--local", str(bad), "--workdir", str(tmp_path / "work"))
    assert invalid.returncode == 1 and "spec.nodes" in invalid.stderr, invalid.stderr
    two = tmp_path / "two.yaml"
    two.write_text(EXAMPLE.read_text() + "\n---\n" + EXAMPLE.read_text())
    double = disttrain("run", "--local", str(two), "--workdir", str(tmp_path / "work"))
    assert double.returncode == 1 and "holds 2 DistributedTrainings" in double.stderr, double.stderr
    assert not (tmp_path / "work").exists() or not any((tmp_path / "work").iterdir())
