"""disttrain.train's callbacks inside the real frameworks: docs/training-api.md's
Transformers and Lightning scripts, as shown (tiny models built from code, nothing
downloaded), two ranks under a real torchrun agent configured only through the pod
contract's env. Each: /status shows the framework's steps, loss and eval loss; a
POST /checkpoint holds both ranks at one step with the framework's own checkpoint of it;
SIGTERM ends the run Interrupted there; started again, the framework resumes from that
checkpoint and finishes at exactly its steps."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from disttrain_trainer.drain import EXIT_INTERRUPTED

from dt_helpers import (CONTROL_TOKEN, Agent, doc_file, free_port, get_status, post_checkpoint, script_env,
                        stop_agents, wait_for_step)

pytestmark = [pytest.mark.dist, pytest.mark.slow]


def one_pod(tmp_path: Path, path: Path, ck: Path, steps: int, tag: str) -> tuple[Agent, int]:
    port = free_port()
    env = script_env(node=0, rdzv_port=free_port(), nnodes="1:1", nproc=2, metrics_port=port, ckpt_dir=str(ck),
                     max_restarts=0, rdzv_id=tag)
    env |= {"DISTTRAIN_CONTROL_TOKEN": CONTROL_TOKEN, "DISTTRAIN_TERMINATION_LOG": str(tmp_path / f"report-{tag}"),
            "TRANSFORMERS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    return Agent(env, tmp_path / f"agent-{tag}.log", [str(path), "--steps", str(steps)]), port


def hold_then_resume(tmp_path: Path, name: str, saved_at, check_saved, metric: str,
                     edit=lambda text: text) -> tuple[int, str]:
    """Run `name` (its text through `edit`) long, ask for a checkpoint, SIGTERM,
    `check_saved(path, held)`, run it again to held + 30 steps: the held step and the second
    run's output. The evaluation carries the script's own `metric`, an accuracy."""
    path, ck = doc_file("training-api.md", name, tmp_path), tmp_path / "ck"
    path.write_text(edit(path.read_text()))
    agent, port = one_pod(tmp_path, path, ck, 100_000, "a")
    try:
        status = wait_for_step(port, 20, timeout=300, agents=[agent])
        assert status["totalSteps"] == 100_000 and status["samplesPerSecond"] > 0
        assert status["stepSeconds"] > 0  # with totalSteps, what the CLI's ETA counts in (pod-contract.md)
        status = wait_for_step(port, 60, timeout=300, agents=[agent])
        assert status["loss"] is not None and status["evalLoss"] is not None and status["evalStep"] == 50, status
        assert 0 <= status["evalMetrics"][metric] <= 1 and status["evalHistory"][0][2] == status["evalMetrics"], status
        code, doc = post_checkpoint(port, "holdSeconds=300&waitSeconds=120")
        assert code == 200, doc
        held = doc["heldAtStep"]
        assert held >= 60 and doc["checkpoint"]["step"] == held and doc["checkpoint"]["path"] == saved_at(ck, held)
        time.sleep(1.5)  # holding: no rank trains on
        assert get_status(port)["step"] == held
        agent.proc.terminate()  # the pod deletion that follows
        agent.wait(timeout=120)
    finally:
        stop_agents([agent])
    report = json.loads((tmp_path / "report-a").read_text())
    assert (report["outcome"], report["step"], report["checkpoint"]["step"]) == ("Interrupted", held, held), report
    stopped = agent.output()  # the script's code after training is for a finished run only (issue 68 e, f)
    assert "final model in" not in stopped and f"exiting {EXIT_INTERRUPTED} before the code after training" in stopped
    check_saved(Path(saved_at(ck, held)), held)

    agent, port = one_pod(tmp_path, path, ck, held + 30, "b")
    try:
        rc = agent.wait(timeout=300)
    finally:
        stop_agents([agent])
    out = agent.output()
    assert rc == 0, out[-4000:]
    report = json.loads((tmp_path / "report-b").read_text())
    assert (report["outcome"], report["step"]) == ("Finished", held + 30), report
    assert "final model in" in out
    return held, out


def test_transformers_trainer_saves_on_request_holds_and_resumes_from_its_own_checkpoint(tmp_path: Path) -> None:
    def complete(path: Path, held: int) -> None:  # Transformers' own checkpoint folder, whole
        assert json.loads((path / "trainer_state.json").read_text())["global_step"] == held
        assert (path / "optimizer.pt").is_file() and (path / "model.safetensors").is_file()

    def world(text: str) -> str:  # what Transformers itself trained as, said once training finished
        return text + 'print(f"transformers world size {training.world_size}", flush=True)\n'

    held, out = hold_then_resume(tmp_path, "train_hf.py", lambda ck, step: str(ck / f"checkpoint-{step}"), complete,
                                 "accuracy", edit=world)  # compute_metrics' own name, not Transformers' eval_accuracy
    # Two CPU ranks are one data-parallel run, not two process-0 trainers (issue 68 a)
    assert "transformers world size 2" in out and "transformers world size 1" not in out, out[-3000:]
    assert f"resuming from {tmp_path / 'ck'}/checkpoint-{held}" in out


def test_lightning_trainer_saves_on_request_holds_and_resumes_from_it(tmp_path: Path) -> None:
    def complete(path: Path, held: int) -> None:
        assert torch.load(path, weights_only=False, map_location="cpu")["global_step"] == held

    def by_name(text: str) -> str:  # the common pattern (issue 68 c): resume from last.ckpt by its name
        shown = 'ckpt_path="last")'
        assert shown in text
        return text.replace(shown, 'ckpt_path=LAST if os.path.exists(LAST) else None)').replace(
            "trainer.fit(", 'LAST = os.path.join(checkpoints.dirpath, "last.ckpt")\ntrainer.fit(', 1)

    held, out = hold_then_resume(tmp_path, "train_lightning.py", lambda ck, step: str(ck / "last.ckpt"),
                                 complete, "val_acc", edit=by_name)
    assert f"Restoring states from the checkpoint path at {tmp_path / 'ck'}/last.ckpt" in out
    # the ModelCheckpoint kept one last checkpoint, its own (no "last-v1.ckpt" beside it)
    assert sorted(p.name for p in (tmp_path / "ck").glob("last*")) == ["last.ckpt"]
    # which of its saves it kept last depends on where validation falls in the epoch: one of this run's
    assert held <= torch.load(tmp_path / "ck" / "last.ckpt", weights_only=False, map_location="cpu")["global_step"] <= held + 30
