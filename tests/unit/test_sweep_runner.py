"""The sweep runner with a real Optuna study in SQLite and a backend that answers at once
(no jobs run here; tests/trainer/test_sweep_local.py and tests/cluster/test_sweep_cluster.py
run real ones): k-fold means, a resumed trial that skips its finished folds, pruning on
reported evaluations, failures kept with their reason, and at most `parallelism` jobs."""

from __future__ import annotations

import io
import threading

import optuna
import pytest

from disttrain.sweep.runner import JobResult, open_study, run_sweep, space_changes
from disttrain.sweep.spec import parse_sweep

TEMPLATE = {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining", "metadata": {"name": "x"},
            "spec": {"trainer": {"builtin": {"model": "mlp", "steps": 100, "evalIntervalSteps": 10}}}}


def spec_of(**fields):
    doc = {"name": "s", "template": TEMPLATE, "trials": 4, "sampler": {"type": "random", "seed": 1},
           "parameters": {"spec.trainer.builtin.learningRate": {"type": "float", "low": 1e-4, "high": 1e-1,
                                                                "log": True}}} | fields
    spec, errors = parse_sweep(doc, lambda p: {})
    assert not errors, errors
    return spec


class Backend:
    """evalLoss = learning rate x 10 + fold; a job per call, recorded."""

    def __init__(self, interrupt_at: str | None = None, stopping: threading.Event | None = None,
                 steps: tuple[int, ...] = (10, 20, 30), last_step: int | None = 30):
        self.jobs: list[dict] = []
        self.steps, self.last_step = steps, last_step
        self.interrupt_at, self.stopping = interrupt_at, stopping
        self.lock = threading.Lock()
        self.running = self.max_running = 0

    def run(self, job, watch, metric):
        with self.lock:
            self.jobs.append(job)
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        try:
            name = job["metadata"]["name"]
            if name == self.interrupt_at:
                self.stopping.set()
                return JobResult("interrupted")
            lr = job["spec"]["trainer"]["builtin"]["learningRate"]
            fold = job["spec"]["trainer"]["builtin"].get("evalFold", 0)
            history = tuple((step, lr * 10 + fold + 1 / step) for step in self.steps)
            if lr > 0.05:
                return JobResult("failed", message="diverged")
            if watch(history, self.last_step):
                return JobResult("stopped", eval_history=history)
            return JobResult("finished", value=lr * 10 + fold, eval_history=history)
        finally:
            with self.lock:
                self.running -= 1


def names(backend):
    return [j["metadata"]["name"] for j in backend.jobs]


@pytest.mark.slow  # SQLite: about 10 s on a busy machine
def test_k_fold_objective_is_the_mean_and_a_resumed_trial_skips_finished_folds(tmp_path):
    spec = spec_of(kfold={"folds": 3}, pruner={"type": "none"}, trials=2)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    stopping = threading.Event()
    first = Backend(interrupt_at="s-t000-f2", stopping=stopping)
    run_sweep(spec, first, open_study(spec, storage), stopping=stopping, out=io.StringIO())
    assert names(first) == ["s-t000-f0", "s-t000-f1", "s-t000-f2"]
    folds = [j["spec"]["trainer"]["builtin"] for j in first.jobs]
    assert [(round(b["evalFraction"], 6), b["evalFold"]) for b in folds] == [(0.333333, 0), (0.333333, 1), (0.333333, 2)]
    assert first.jobs[2]["metadata"]["labels"] == {"disttrain.dev/sweep": "s", "disttrain.dev/trial": "0",
                                                   "disttrain.dev/fold": "2"}

    second = Backend()
    out = io.StringIO()
    study = run_sweep(spec, second, open_study(spec, storage), stopping=threading.Event(), out=out)
    assert names(second) == ["s-t000-f2", "s-t001-f0", "s-t001-f1", "s-t001-f2"]
    assert "trial 0: resuming" in out.getvalue()
    for t in study.trials:
        lr = t.params["spec.trainer.builtin.learningRate"]
        assert t.state == optuna.trial.TrialState.COMPLETE
        assert abs(t.value - (lr * 10 + 1)) < 1e-9  # mean of folds 0, 1, 2


def test_pruning_failures_and_parallelism():
    spec = spec_of(trials=12, parallelism=3, pruner={"type": "median", "startupTrials": 2})
    backend = Backend()
    out = io.StringIO()
    study = run_sweep(spec, backend, open_study(spec, None), stopping=threading.Event(), out=out)  # in memory
    states = [t.state for t in study.trials]
    assert len(states) == 12 and backend.max_running <= 3
    assert optuna.trial.TrialState.PRUNED in states, out.getvalue()
    for t in study.trials:
        lr = t.params["spec.trainer.builtin.learningRate"]
        if t.state == optuna.trial.TrialState.FAIL:
            assert lr > 0.05 and t.user_attrs["note"] == "diverged"
        elif t.state == optuna.trial.TrialState.COMPLETE:
            assert t.value == lr * 10 and sorted(t.intermediate_values) == [10, 20, 30]
    # trial n is sampled with seed + n: the same file suggests the same values again
    again = run_sweep(spec, Backend(), open_study(spec, None), stopping=threading.Event(), out=io.StringIO())
    assert [t.params for t in again.trials] == [t.params for t in study.trials]


def test_the_evaluation_at_the_last_step_never_prunes():
    """A poll that first sees the run's final evaluation (the job was fast, the sweep was
    busy) records the trial as done: stopping it then would save nothing."""
    spec = spec_of(trials=8, parallelism=1, pruner={"type": "median", "startupTrials": 1},
                   parameters={"spec.trainer.builtin.learningRate": {"type": "float", "low": 1e-4, "high": 0.05}})

    def states(last_step):
        study = run_sweep(spec, Backend(steps=(30,), last_step=last_step), open_study(spec, None),
                          stopping=threading.Event(), out=io.StringIO())
        return [t.state for t in study.trials]

    assert optuna.trial.TrialState.PRUNED in states(None)  # the same reports do prune before the last step
    assert states(30) == [optuna.trial.TrialState.COMPLETE] * 8


def test_a_changed_search_space_is_refused_before_a_trial_runs():
    spec = spec_of(trials=1, pruner={"type": "none"})
    study = run_sweep(spec, Backend(), open_study(spec, None), stopping=threading.Event(), out=io.StringIO())
    assert space_changes(spec, study) == []
    wider = spec_of(parameters={"spec.trainer.builtin.learningRate": {"type": "float", "low": 1e-5, "high": 1e-1,
                                                                      "log": True}})
    assert space_changes(wider, study) == [
        "parameters[spec.trainer.builtin.learningRate]: differs from trial 0's (FloatDistribution(high=0.1, "
        "log=True, low=0.0001, step=None))"]
