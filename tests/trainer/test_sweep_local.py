"""`disttrain sweep` in local mode, end to end: real torchrun agents running the built-in
trainer (tiny MLP, one process per trial, two trials at once), a real Optuna study in
SQLite. The sweep is interrupted with SIGINT after two trials ended and run again:

(a) no trial that had ended runs again, and the ones cut off resume from their checkpoint;
(b) the median pruner stops every diverging trial the interrupt did not cut off before its last evaluation
    (learning rate 0.2 diverges; the sampler's seed puts it at trials 3 and 5, after trials with good rates
    have completed);
(c) the best trial's evalLoss is below the median over all trials, and best.yaml is a
    valid DistributedTraining holding the best parameters.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml

from disttrain.api import load_job
from disttrain.sweep.results import best_trial, median_value

ROOT = Path(__file__).resolve().parents[2]
TRIALS = 6

SWEEP = {
    "name": "tiny",
    "template": {
        "apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining", "metadata": {"name": "tiny"},
        "spec": {
            "nodes": 1, "nprocPerNode": 1, "gpusPerNode": 0,
            "env": [{"name": "OMP_NUM_THREADS", "value": "1"}],
            "trainer": {"builtin": {"model": "mlp", "dataset": "synthetic-regression", "steps": 30,
                                    "batchSize": 16, "evalIntervalSteps": 10}},
        },
    },
    "parameters": {"spec.trainer.builtin.learningRate": {"choices": [0.001, 0.003, 0.2]}},
    "sampler": {"type": "random", "seed": 8},
    "pruner": {"type": "median", "startupTrials": 1},
    "trials": TRIALS,
    "parallelism": 2,
}


def command(path: Path, workdir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "DISTTRAIN_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "operator"), str(ROOT / "trainer")])
    return {"args": [sys.executable, "-m", "disttrain.cli", "sweep", str(path), "--workdir", str(workdir)],
            "env": env, "text": True}


def runs_of(workdir: Path, number: int) -> list[str]:
    """The `run --local` start lines of one trial's job: one per time it was (re)started."""
    log = workdir / "tiny" / "trials" / f"tiny-t{number:03d}" / "run.log"
    return [line for line in log.read_text().splitlines() if line.startswith("disttrain: running")]


def worker_log(workdir: Path, number: int) -> str:
    logs = list((workdir / "tiny" / "trials" / f"tiny-t{number:03d}" / "logs").glob("*.log"))
    return logs[0].read_text(errors="replace") if logs else ""


def newest_step(workdir: Path, number: int) -> int | None:
    done = [int(p.name.split("-")[1]) for p in (workdir / "tiny" / "trials" / f"tiny-t{number:03d}" / "checkpoints")
            .glob("step-*") if (p / ".metadata").is_file()]
    return max(done, default=None)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_local_sweep_resumes_prunes_and_finds_the_best(tmp_path: Path) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(SWEEP))
    first = subprocess.Popen(**command(path, tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        lines, ended = [], set()
        while len(ended) < 2:
            line = first.stdout.readline()
            assert line, "the sweep ended early:\n" + "".join(lines)
            lines.append(line)
            if m := re.match(r"trial (\d+): (done|pruned)", line):
                ended.add(int(m.group(1)))
        # Interrupt once a running trial is past its first log step: it must checkpoint and resume.
        deadline = time.monotonic() + 300
        while not (training := [n for n in range(TRIALS) if n not in ended
                                and "step 10/30" in (log := worker_log(tmp_path, n)) and "step 30/30" not in log]):
            assert time.monotonic() < deadline and first.poll() is None, "".join(lines)
            time.sleep(0.2)
        first.send_signal(signal.SIGINT)
        rest, _ = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    out1 = "".join(lines) + rest
    assert first.returncode == 130, out1

    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{tmp_path / 'tiny' / 'study.db'}")
    states = optuna.trial.TrialState
    ended_before = {t.number for t in study.get_trials(states=(states.COMPLETE, states.PRUNED))}
    cut_off = {t.number for t in study.get_trials(states=(states.RUNNING,))}
    assert len(ended_before) >= 2 and set(training) <= cut_off | ended_before, out1
    saved = {n: newest_step(tmp_path, n) for n in cut_off}
    assert any(saved.values()), (saved, out1)

    second = subprocess.run(**command(path, tmp_path), capture_output=True, timeout=500)
    out2 = second.stdout + second.stderr
    assert second.returncode == 0, out1 + out2

    # (a) ended trials are not run again; cut-off ones resume, from their checkpoint
    for number in ended_before:
        assert not re.search(rf"^trial {number}:", out2, re.M), out2
        assert len(runs_of(tmp_path, number)) == 1
    for number in cut_off:
        assert re.search(rf"^trial {number}: resuming", out2, re.M), out2
        starts = runs_of(tmp_path, number)
        assert len(starts) == 2, starts
        if saved[number]:  # cut off before its trainer was up: nothing to resume from
            assert f"(resuming from step {saved[number]})" in starts[1], starts
    trials = optuna.load_study(study_name="tiny", storage=f"sqlite:///{tmp_path / 'tiny' / 'study.db'}").trials
    assert len(trials) == TRIALS and all(t.state in (states.COMPLETE, states.PRUNED) for t in trials), out2

    # (b) pruned on an evaluation before the last step, and stopped with a checkpoint. The
    # stop itself may land after step 30: a tiny step takes ~15 ms, a poll and SIGTERM longer.
    pruned = [t for t in trials if t.state == states.PRUNED]
    diverging = {t.number for t in trials if t.params["spec.trainer.builtin.learningRate"] == 0.2}
    # A diverging trial cut off by the interrupt may resume past its last prunable evaluation
    # (the pruner never stops a trial at its last step), so only the uninterrupted must be pruned.
    assert diverging - cut_off and diverging - cut_off <= {t.number for t in pruned}, out1 + out2
    for t in pruned:
        at = max(t.intermediate_values)
        assert at < 30 and re.search(rf"^trial {t.number}: pruned at step {at}$", out1 + out2, re.M), out1 + out2
        ckpts = sorted((tmp_path / "tiny" / "trials" / f"tiny-t{t.number:03d}" / "checkpoints").glob("step-*"))
        assert ckpts and int(ckpts[-1].name.split("-")[1]) >= at, ckpts

    # (c) the best beats the median, and best.yaml is that job, ready to apply
    best = best_trial(trials)
    assert best is not None and best.value < median_value(trials), out2
    assert f"best trial {best.number}: evalLoss {best.value:.4f}" in out2
    doc = yaml.safe_load((tmp_path / "tiny" / "best.yaml").read_text())
    job, _, _ = load_job(doc)
    assert job.name == "tiny-best"
    assert job.spec.trainer.builtin.learning_rate == best.params["spec.trainer.builtin.learningRate"]
    assert re.search(r"^trial\s+state\s+evalLoss\s+learningRate", out2, re.M), out2


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_sweep_over_your_own_script_holds_out_each_fold_and_names_the_best(tmp_path: Path) -> None:
    """docs/sweeps.md's script and sweep file (its image and path swapped for this machine's,
    3 trials): the learning rate reaches the script as spec.env.LEARNING_RATE, each fold's job
    holds out the fold the sweep gives it, the objective is the accuracy the script names,
    maximized, and the sweep ends naming the best trial, whose best.yaml carries its rate."""
    from dt_helpers import doc_blocks, doc_file
    parsed = doc_blocks.parse_blocks("docs/sweeps.md", (ROOT / "docs" / "sweeps.md").read_text())
    (sweep_block,) = [b for b in parsed if b.lang == "yaml" and "name: own-lr" in b.text]
    doc_file("sweeps.md", "train_sweep.py", tmp_path)
    sweep = yaml.safe_load(sweep_block.text)
    sweep["template"]["spec"].pop("image")
    sweep["template"]["spec"]["trainer"]["command"] = [str(tmp_path / "train_sweep.py")]
    sweep["template"]["spec"]["env"] = [{"name": "OMP_NUM_THREADS", "value": "1"}]
    sweep["trials"] = 3
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    done = subprocess.run(**command(path, tmp_path), capture_output=True, timeout=500)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    study = optuna.load_study(study_name="own-lr", storage=f"sqlite:///{tmp_path / 'own-lr' / 'study.db'}")
    states = optuna.trial.TrialState
    complete = [t for t in study.trials if t.state == states.COMPLETE]
    assert len(study.trials) == 3 and len(complete) >= 2, out  # the third may be pruned after its fold 0
    assert all(t.state in (states.COMPLETE, states.PRUNED) for t in study.trials), out
    best = max(complete, key=lambda t: t.value)  # the file's objective: accuracy, maximized
    assert 0.5 < best.value <= 1 and re.search(rf"best trial {best.number}: accuracy {best.value:.4f}", out), out
    assert re.search(r"^trial\s+state\s+accuracy\s+LEARNING_RATE", out, re.M), out
    for trial in complete:
        for fold in (0, 1):
            logs = (tmp_path / "own-lr" / "trials" / f"own-lr-t{trial.number:03d}-f{fold}" / "logs").glob("*.log")
            assert f"holding out fold {fold} of 2 (500 samples)" in "".join(p.read_text() for p in logs)
    job, _, _ = load_job(yaml.safe_load((tmp_path / "own-lr" / "best.yaml").read_text()))
    env = {e.name: e.value for e in job.spec.env}
    assert float(env["LEARNING_RATE"]) == pytest.approx(best.params["spec.env.LEARNING_RATE"])
    assert "SWEEP_FOLD" not in env  # the best job trains on the template's own split
