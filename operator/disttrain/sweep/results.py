"""Trials -> the table, the best trial and its median comparison, pure.

Works on anything shaped like optuna's FrozenTrial (number, state.name, value, params,
intermediate_values, user_attrs), so tests build rows without a study.
"""

from __future__ import annotations

import statistics
from typing import Any, Iterable

STATES = {"COMPLETE": "done", "PRUNED": "pruned", "FAIL": "failed", "RUNNING": "running", "WAITING": "waiting"}


def complete(trials: Iterable[Any]) -> list[Any]:
    return [t for t in trials if t.state.name == "COMPLETE" and t.value is not None]


def best_trial(trials: Iterable[Any], direction: str = "minimize") -> Any | None:
    done = complete(trials)
    sign = -1 if direction == "maximize" else 1
    return min(done, key=lambda t: (sign * t.value, t.number)) if done else None


def last_value(trial: Any) -> float | None:
    """A completed trial's objective, else the last evaluation it reported (pruned)."""
    if trial.state.name == "COMPLETE":
        return trial.value
    steps = trial.intermediate_values
    return steps[max(steps)] if steps else None


def median_value(trials: Iterable[Any]) -> float | None:
    """Median of every trial's last objective value, pruned ones included: what a typical
    configuration of the space gives, for the best to be compared with."""
    values = [v for t in trials if (v := last_value(t)) is not None]
    return statistics.median(values) if values else None


def table(trials: Iterable[Any], paths: list[str], metric: str = "evalLoss", direction: str = "minimize") -> str:
    """One row per trial: number, state, the objective, the parameters, and a note (where a
    pruned trial stopped, why one failed)."""
    trials = sorted(trials, key=lambda t: t.number)
    best = best_trial(trials, direction)
    heads = ["trial", "state", metric, *(p.rsplit(".", 1)[-1] for p in paths), "note"]
    rows = []
    for t in trials:
        note = t.user_attrs.get("note", "")
        if t.state.name == "PRUNED" and t.intermediate_values:
            step = max(t.intermediate_values)
            note = note or f"pruned at step {step} ({metric} {t.intermediate_values[step]:.4f})"
        rows.append([
            f"{t.number}{' *' if best is not None and t.number == best.number else ''}",
            STATES.get(t.state.name, t.state.name.lower()),
            f"{t.value:.4f}" if t.value is not None else "-",
            *(_fmt(t.params.get(p)) for p in paths),
            note,
        ])
    widths = [max(len(str(r[i])) for r in [heads, *rows]) for i in range(len(heads))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [heads, *rows]]
    return "\n".join(lines)


def summary(trials: Iterable[Any], metric: str = "evalLoss", direction: str = "minimize") -> str:
    trials = list(trials)
    counts = {name: sum(1 for t in trials if t.state.name == state) for state, name in STATES.items()}
    parts = [f"{n} {name}" for name, n in counts.items() if n]
    best, median = best_trial(trials, direction), median_value(trials)
    line = f"{len(trials)} trials: " + ", ".join(parts)
    if best is not None:
        line += f"; best trial {best.number}: {metric} {best.value:.4f} (median over all trials {median:.4f})"
    return line


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)
