"""instrument: auto, the worker's side: what the init container installs makes the hooks
importable in an interpreter that has no disttrain, runs the image's own sitecustomize
after its own, and attaches the callback to the Trainer of a script that never imports
disttrain (docs/training-api.md's Transformers script without its two disttrain lines),
which then reports and checkpoints on the operator's request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from dt_helpers import (CONTROL_TOKEN, Agent, base_env, doc_file, free_port, get_status, pod_env, post_checkpoint,
                        stop_agents, wait_for_step)
from disttrain_trainer.instrument import hooks
from disttrain_trainer.instrument.install import install

BARE_PYTHON = getattr(sys, "_base_executable", sys.executable)  # the interpreter under the venv: no disttrain


def test_the_install_serves_an_interpreter_without_disttrain_and_runs_the_images_own_sitecustomize(tmp_path: Path):
    install(tmp_path / "i")
    image = tmp_path / "image"  # the image's own start-up file, found after ours
    image.mkdir()
    (image / "sitecustomize.py").write_text("import os\nopen(os.environ['MARK'], 'w').write('ran')\n")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{tmp_path / 'i' / 'boot'}{os.pathsep}{image}",
           "DISTTRAIN_JOB_NAME": "t", "RANK": "0", "LOCAL_RANK": "0", "MARK": str(tmp_path / "mark")}
    probe = ("import disttrain_trainer.instrument.hooks as h, prometheus_client, disttrain; "
             "print(h.__file__); print(prometheus_client.__file__); print(h.attached)")
    done = subprocess.run([BARE_PYTHON, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    hooked, client, attached = done.stdout.splitlines()
    assert hooked.startswith(str(tmp_path / "i" / "lib")) and client.startswith(str(tmp_path / "i" / "lib"))
    assert attached == "[]" and (tmp_path / "mark").read_text() == "ran"
    assert "disttrain instrument: this program built no Transformers or Lightning Trainer" in done.stderr
    # torchrun's agent (no RANK) and a process outside a disttrain pod are left alone, silently
    for quiet in ({"RANK": ""}, {"DISTTRAIN_JOB_NAME": ""}):
        env_quiet = {k: v for k, v in (env | quiet).items() if v}
        done = subprocess.run([BARE_PYTHON, "-c", "pass"], env=env_quiet, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stderr == "", done.stderr


def test_an_older_framework_is_left_alone_with_a_warning_and_a_newer_one_gets_the_callback_once(capsys):
    class Trainer:  # stands in for a framework's class: only its __init__ is wrapped
        def __init__(self, callbacks=None):
            self.callbacks = callbacks

    old = hooks.Framework("lightning", "fake_lightning", "fake_lightning.trainer", (2, 0), hooks._attach_lightning)
    sys.modules["fake_lightning"] = types.SimpleNamespace(__version__="1.9.5")
    try:
        hooks._patch(old, types.SimpleNamespace(Trainer=Trainer))
        assert Trainer().callbacks is None and "lightning 1.9.5 is older than lightning 2.0" in capsys.readouterr().err
        sys.modules["fake_lightning"] = types.SimpleNamespace(__version__="2.6.6")
        hooks._patch(old, types.SimpleNamespace(Trainer=Trainer))
        from disttrain_trainer.lightning_callback import DisttrainCallback
        mine = DisttrainCallback()
        assert [type(c) for c in Trainer().callbacks] == [DisttrainCallback]
        assert Trainer(callbacks=[mine]).callbacks == [mine]  # one the code added itself counts
        assert Trainer(callbacks=mine).callbacks == [mine]
        assert Trainer(callbacks=[]).callbacks[0].framework == "lightning 2.6.6"
    finally:
        del sys.modules["fake_lightning"]
        hooks.attached.clear()


@pytest.mark.dist
@pytest.mark.slow
def test_a_transformers_script_that_never_imports_disttrain_reports_and_holds_at_a_checkpoint(tmp_path: Path):
    script = doc_file("training-api.md", "train_hf.py", tmp_path)
    text = script.read_text()
    plain = text.replace("from disttrain.train.hf import DisttrainCallback\n", "").replace(
        ", callbacks=[DisttrainCallback()]", "")
    assert "from disttrain" not in plain and "Disttrain" not in plain  # the two lines the doc says to leave out
    script.write_text(plain)
    install(tmp_path / "i")
    ck, port = tmp_path / "ck", free_port()
    env = pod_env(node=0, rdzv_port=free_port(), nnodes="1:1", nproc=2, metrics_port=port, ckpt_dir=str(ck),
                  max_restarts=0)
    env = {k: v for k, v in env.items() if not k.startswith(("DISTTRAIN_MODEL", "DISTTRAIN_DATASET", "DISTTRAIN_STEPS",
                                                              "DISTTRAIN_BATCH", "DISTTRAIN_SEED", "DISTTRAIN_LEARNING"))}
    env |= {"DISTTRAIN_CONTROL_TOKEN": CONTROL_TOKEN, "DISTTRAIN_TERMINATION_LOG": str(tmp_path / "report"),
            "PYTHONPATH": f"{tmp_path / 'i' / 'boot'}{os.pathsep}{base_env()['PYTHONPATH']}", "HF_HUB_OFFLINE": "1"}
    agent = Agent(env, tmp_path / "agent.log", [str(script), "--steps", "100000"])
    try:
        status = wait_for_step(port, 60, timeout=300, agents=[agent])
        assert status["framework"].startswith("transformers ") and status["totalSteps"] == 100_000
        assert status["stepSeconds"] > 0  # the ETA's unit (pod-contract.md)
        code, doc = post_checkpoint(port, "holdSeconds=300&waitSeconds=120")
        assert code == 200 and doc["checkpoint"]["path"] == str(ck / f"checkpoint-{doc['heldAtStep']}"), doc
        time.sleep(1.0)
        assert get_status(port)["step"] == doc["heldAtStep"]
        agent.proc.terminate()
        agent.wait(timeout=120)
    finally:
        stop_agents([agent])
    report = json.loads((tmp_path / "report").read_text())
    assert (report["outcome"], report["step"]) == ("Interrupted", doc["heldAtStep"]), report
    assert "built no Transformers" not in agent.output()
    assert "final model in" not in agent.output()  # a stop ends the process before the code after train()
