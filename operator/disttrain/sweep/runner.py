"""The Optuna study: ask for trials, run each as a job through a backend (local or
cluster), report its evaluations for pruning, tell the result. The only module that
talks to Optuna.

Resuming: the study lives in SQLite (or any Optuna storage URL), so trials that ended
(done, pruned, failed) are never run again. A trial still RUNNING in the storage was cut
off by an interrupt; it is resumed under its own number and parameters, and since its
job has the same name it resumes from that job's newest checkpoint (locally) or is
re-attached to (in a cluster). Trial n's sampler is seeded with seed + n, so a sweep
interrupted and resumed suggests what an uninterrupted one would (given the same
history; with parallelism > 1 the order trials finish in already varies).
"""

from __future__ import annotations

import functools
import logging
import statistics
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TextIO

from disttrain.api.report import EVAL_LOSS, TrainerReport
from disttrain.sweep.space import suggest, trial_job
from disttrain.sweep.spec import SweepSpec

EvalPoints = tuple[tuple[int, float | None], ...]
Watch = Callable[[EvalPoints, "int | None"], bool]
"""Gets the job's evaluations so far, (step, the objective's value) oldest first, and the
job's last step (None when not known); True = stop it (pruned)."""


@dataclass(frozen=True, slots=True)
class JobResult:
    state: Literal["finished", "stopped", "interrupted", "failed"]
    value: float | None = None  # the objective at the job's last evaluation
    eval_history: EvalPoints = ()
    message: str = ""


def objective_points(report: TrainerReport | None, metric: str) -> EvalPoints:
    """A report's evaluations as (step, the objective's value), oldest first."""
    return tuple((e.step, e.value(metric)) for e in report.evaluations()) if report else ()


def finished(report: TrainerReport | None, metric: str) -> JobResult:
    """A job that ended well: the objective at its last evaluation, or why there is none."""
    history = objective_points(report, metric)
    return JobResult("finished", value=history[-1][1] if history else None, eval_history=history,
                     message=missing(report, metric))


def missing(report: TrainerReport | None, metric: str) -> str:
    """Why a finished job has no value for the objective ("" when it has one): what it
    reported instead, so a misspelt metric is found from the table."""
    evaluations = report.evaluations() if report else ()
    if evaluations and evaluations[-1].value(metric) is not None:
        return ""
    names = sorted({EVAL_LOSS for e in evaluations if e.loss is not None} | {k for e in evaluations for k in e.metrics})
    return (f"the job reported no {metric}" + (f" (it reported {', '.join(names)})" if names
                                               else " (it reported no evaluation)"))


class Backend(Protocol):
    def run(self, job: dict[str, Any], watch: Watch, metric: str) -> JobResult:
        """Run one DistributedTraining to its end, reading `metric` (evalLoss or a named
        one) from its evaluations. `finished` carries its final value;
        `stopped` when watch asked (stopped gracefully, with a checkpoint); `interrupted`
        when the sweep is stopping (the job can be resumed); `failed` with a message."""
        ...


def make_sampler(spec: SweepSpec, number: int) -> Any:
    import optuna

    seed = spec.seed + number
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def make_pruner(spec: SweepSpec) -> Any:
    import optuna

    if spec.pruner == "none":
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=spec.startup_trials, n_warmup_steps=spec.warmup_steps)


def open_study(spec: SweepSpec, storage: str) -> Any:
    import optuna

    optuna.logging.set_verbosity(logging.WARNING)
    return optuna.create_study(study_name=spec.name, storage=storage, load_if_exists=True,
                               direction=spec.direction, pruner=make_pruner(spec))


def space_changes(spec: SweepSpec, study: Any) -> list[str]:
    """Where the file's search space differs from the one the stored trials were drawn
    from (Optuna cannot resume a trial under another distribution)."""
    import optuna.distributions as d

    wanted: dict[str, Any] = {}
    for p in spec.params:
        if p.kind == "choice":
            wanted[p.path] = d.CategoricalDistribution(list(p.choices))
        elif p.kind == "int":
            wanted[p.path] = d.IntDistribution(int(p.low), int(p.high), log=p.log, step=int(p.step or 1))
        else:
            wanted[p.path] = d.FloatDistribution(float(p.low), float(p.high), log=p.log, step=p.step)
    out = []
    for t in study.get_trials(deepcopy=False):
        for name in sorted(set(t.distributions) | set(wanted)):
            if t.distributions.get(name) != wanted.get(name):
                out.append(f"parameters[{name}]: differs from trial {t.number}'s "
                           f"({t.distributions.get(name, 'absent')})")
        if out:
            break
    return out


def run_sweep(spec: SweepSpec, backend: Backend, study: Any, *, stopping: threading.Event, out: TextIO) -> Any:
    """Run trials, at most `parallelism` at once, until `trials` have ended or `stopping`
    is set (then the running ones stop gracefully and stay resumable)."""
    import optuna

    states = optuna.trial.TrialState
    stale = [optuna.trial.Trial(study, t._trial_id)  # noqa: SLF001 (Optuna keeps the id private)
             for t in study.get_trials(deepcopy=False, states=(states.RUNNING,))]
    running: dict[Future[None], Any] = {}
    with ThreadPoolExecutor(max_workers=spec.parallelism, thread_name_prefix="trial") as pool:
        while True:
            while not stopping.is_set() and len(running) < spec.parallelism:
                ended = len(study.get_trials(deepcopy=False, states=(states.COMPLETE, states.PRUNED, states.FAIL)))
                if stale:
                    trial, resumed = stale.pop(0), True
                elif ended + len(running) < spec.trials:
                    study.sampler = make_sampler(spec, len(study.get_trials(deepcopy=False)))
                    trial, resumed = study.ask(), False
                else:
                    break
                # Suggest here, not in the trial's thread: the next ask replaces study.sampler.
                values = suggest(trial, spec.params)
                running[pool.submit(_run_trial, spec, backend, study, trial, values, resumed, out)] = trial
            if not running:
                break
            done, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
            for future in done:
                del running[future]
                try:
                    future.result()
                except BaseException:
                    stopping.set()  # a bug, not a trial's failure: stop the others gracefully, then raise
                    wait(running)
                    raise
    return study


def _run_trial(spec: SweepSpec, backend: Backend, study: Any, trial: Any, params: dict[str, Any], resumed: bool,
               out: TextIO) -> None:
    shown = ", ".join(f"{p.rsplit('.', 1)[-1]}={_fmt(v)}" for p, v in params.items())
    _say(out, f"trial {trial.number}: {'resuming' if resumed else 'starting'} ({shown})")
    frozen = next(t for t in study.get_trials(deepcopy=False) if t.number == trial.number)
    reports = _Reports(trial, max(frozen.intermediate_values, default=-1))
    folds: list[int | None] = list(range(spec.folds)) if spec.folds else [None]
    values: list[float] = []
    metric = spec.objective
    for fold in folds:
        if fold is not None and f"fold{fold}" in frozen.user_attrs:  # done before an interrupt
            values.append(frozen.user_attrs[f"fold{fold}"])
            continue
        if not _run_fold(spec, backend, study, trial, params, fold, reports, values, out):
            return
    value = statistics.fmean(values)
    study.tell(trial, value)
    _say(out, f"trial {trial.number}: done, {metric} {value:.4f}"
         + (f" (mean of {len(values)} folds)" if spec.folds else ""))


class _Reports:
    """A trial's evaluations handed to the pruner as they come, each step once (`watch`)."""

    def __init__(self, trial: Any, reported: int) -> None:
        self.trial = trial
        self.reported = reported  # the newest step the study already has

    def watch(self, points: EvalPoints, last_step: int | None, fold: int | None = None) -> bool:
        """A Watch: True when the pruner stops the trial."""
        if fold is not None:  # k-fold prunes between folds, on the running mean
            return False
        for step, value in points:
            if step > self.reported and value is not None:
                self.trial.report(value, step)
                self.reported = step
                # The evaluation at the last step is the run's result: stopping the run
                # then saves nothing, and would record a finished trial as pruned.
                if (last_step is None or step < last_step) and self.trial.should_prune():
                    return True
        return False


def _run_fold(spec: SweepSpec, backend: Backend, study: Any, trial: Any, params: dict[str, Any], fold: int | None,
              reports: _Reports, values: list[float], out: TextIO) -> bool:
    """One job of the trial (its only one, or a fold's), its value added to `values`; False
    when the trial ends with it (interrupted, pruned, failed)."""
    import optuna

    pruned = optuna.trial.TrialState.PRUNED
    metric = spec.objective
    watch = functools.partial(reports.watch, fold=fold)
    result = backend.run(trial_job(spec, trial.number, params, fold), watch, metric)
    if result.state == "interrupted":
        _say(out, f"trial {trial.number}: interrupted; it resumes on the next run")
        return False
    if result.state == "stopped":
        study.tell(trial, state=pruned)
        _say(out, f"trial {trial.number}: pruned at step {reports.reported}")
        return False
    watch(result.eval_history, 0)  # evaluations between polls, for the pruner's later medians
    if result.state == "failed" or result.value is None:
        note = result.message or f"the job reported no {metric}"
        trial.set_user_attr("note", note[:200])
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        _say(out, f"trial {trial.number}: failed: {note}")
        return False
    values.append(result.value)
    if fold is not None:
        trial.set_user_attr(f"fold{fold}", result.value)
        trial.report(statistics.fmean(values), fold)
        if fold < spec.folds - 1 and trial.should_prune():
            study.tell(trial, state=pruned)
            _say(out, f"trial {trial.number}: pruned after fold {fold} "
                 f"(mean {metric} {statistics.fmean(values):.4f})")
            return False
    return True


_print_lock = threading.Lock()


def _say(out: TextIO, line: str) -> None:
    with _print_lock:
        print(line, file=out, flush=True)


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
