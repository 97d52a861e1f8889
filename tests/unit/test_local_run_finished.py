"""`disttrain run --local` on a job whose last step is already checkpointed: it says the job
finished and how to start fresh, instead of a summary of nothing ("world size 0")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from disttrain.api.validate import validate_document
from disttrain.local.plan import finished_note, localize
from disttrain.integrations.registry import render_children

from .helpers import package_paths


def job(steps: int, trainer: dict | None = None) -> dict:
    return {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining", "metadata": {"name": "done"},
            "spec": {"nodes": 1, "gpusPerNode": 0,
                     "trainer": trainer or {"builtin": {"steps": steps}}}}


def plan_of(doc: dict, workdir: Path):
    result = validate_document(doc)
    assert result.ok
    return localize(render_children(result.job, result.resolved), workdir=workdir, rdzv_port=1, metrics_ports=[2],
                    rdzv_id="x", torchrun="torchrun", cpus=1)


def test_note_only_once_the_last_step_is_checkpointed(tmp_path):
    plan = plan_of(job(20), tmp_path)
    assert finished_note(plan, None) is None
    assert finished_note(plan, (19, tmp_path / "step-00000019")) is None
    note = finished_note(plan, (20, tmp_path / "step-00000020"))
    assert note.startswith(f"disttrain: done already finished: its checkpoint at step 20 of 20 is in "
                           f"{(tmp_path / 'done' / 'checkpoints').resolve()}")
    assert f"rm -rf {(tmp_path / 'done').resolve()}" in note and "--workdir" in note
    assert "spec.trainer.builtin.steps" in note


def test_own_scripts_have_no_known_last_step(tmp_path):
    plan = plan_of(job(0, {"command": ["/workspace/train.py"]}), tmp_path)
    assert finished_note(plan, (10**6, tmp_path / "step-01000000")) is None


def test_cli_rerun_on_a_finished_job_says_so_and_starts_nothing(tmp_path):
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job(5)))
    step = tmp_path / "work" / "done" / "checkpoints" / "step-00000005"
    step.mkdir(parents=True)
    (step / ".metadata").write_text("")  # a complete checkpoint, as DCP commits it
    env = {"PYTHONPATH": package_paths(), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "disttrain.cli", "run", "--local", "job.yaml",
                           "--workdir", "work"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "done already finished: its checkpoint at step 5 of 5" in proc.stderr
    assert "world size 0" not in proc.stderr and not (tmp_path / "work" / "done" / "logs").exists()
