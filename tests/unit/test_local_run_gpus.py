"""`disttrain run --local` of a job that asks for GPUs this machine lacks: it says, on the
terminal and before anything starts, where the processes will train (the trainer's clamp
was once said only in a worker's log, under a screen that promised "4 GPUs per node")."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from disttrain.api.validate import validate_document
from disttrain.local.plan import gpu_note, visible_gpus
from disttrain.local.run import run_local_job

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpus_are_the_drivers_narrowed_by_cuda_visible_devices(tmp_path: Path) -> None:
    driver = tmp_path / "gpus"
    for bus in ("0000:01:00.0", "0000:02:00.0"):
        (driver / bus).mkdir(parents=True)
    assert visible_gpus({}, driver) == 2
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "1"}, driver) == 1
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, driver) == 0
    assert visible_gpus({}, tmp_path / "no-driver") == 0


def test_the_note_is_the_one_the_guide_shows() -> None:
    guide = (ROOT / "docs" / "guide.md").read_text()
    (shown,) = re.findall(r"^warning: the job asks for .*$", guide, re.M)
    assert shown == "warning: " + gpu_note(4, 0, 4, "bf16-mixed")  # the guide's job on a machine without GPUs
    assert "on 1 GPU:" not in gpu_note(4, 1, 4, "bf16-mixed") and "on 1 GPU." in gpu_note(4, 1, 4, "32") + "."
    assert "in precision 32" in gpu_note(1, 0, 1, "16-mixed")
    assert gpu_note(2, 2, 2, "bf16-mixed") is None and gpu_note(0, 0, 1, "32") is None


@pytest.mark.slow  # starts torchrun
def test_run_local_says_it_before_the_agents_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU, whatever this machine has
    script = tmp_path / "train.py"
    script.write_text("print('trained')\n")
    doc = {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining", "metadata": {"name": "gpu-asker"},
           "spec": {"nodes": 1, "gpusPerNode": 2, "image": "registry.example.com/team/train:1",
                    "trainer": {"command": [str(script)]}}}
    result = validate_document(doc)
    assert result.ok, result.errors
    out = io.StringIO()
    outcome = run_local_job(result.job, result.resolved, workdir=tmp_path, progress=False, out=out)
    text = out.getvalue()
    warning = text.index("warning: the job asks for 2 GPUs per node and this machine has none: its 2 processes "
                         "per node train on the CPU, with bf16-mixed as CPU autocast")
    assert warning < text.index("disttrain: running gpu-asker locally") and outcome.code == 0, text
