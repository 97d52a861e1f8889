"""Search space -> trial jobs, pure: suggest values, patch them into the template by path,
name and label each trial's DistributedTraining."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Protocol

from disttrain.api.types import GROUP

if TYPE_CHECKING:
    from disttrain.sweep.spec import Param, SweepSpec

SWEEP_LABEL = f"{GROUP}/sweep"
TRIAL_LABEL = f"{GROUP}/trial"
FOLD_LABEL = f"{GROUP}/fold"
# A parameter for your own script: an environment variable of the trial's workers.
ENV_PATH = "spec.env."
# k-fold with your own script: the fold to hold out (0..k-1) and k, in its environment.
FOLD_ENV, FOLDS_ENV = "SWEEP_FOLD", "SWEEP_FOLDS"


class Suggester(Protocol):
    """The part of optuna.Trial a search space needs."""

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float: ...

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int: ...

    def suggest_categorical(self, name: str, choices: Any) -> Any: ...


def suggest(trial: Suggester, params: tuple[Param, ...]) -> dict[str, Any]:
    """One value per parameter, named by its path (the study's parameter names)."""
    out: dict[str, Any] = {}
    for p in params:
        if p.kind == "choice":
            out[p.path] = trial.suggest_categorical(p.path, list(p.choices))
        elif p.kind == "int":
            out[p.path] = trial.suggest_int(p.path, int(p.low), int(p.high), step=int(p.step or 1), log=p.log)
        else:
            out[p.path] = trial.suggest_float(p.path, float(p.low), float(p.high), step=p.step, log=p.log)
    return out


def patch(doc: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A copy of `doc` with each dotted path set (missing mappings created)."""
    out = copy.deepcopy(doc)
    for path, value in values.items():
        if path.startswith(ENV_PATH):
            _set_env(out, path[len(ENV_PATH):], value)
            continue
        node = out
        *parents, leaf = path.split(".")
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[leaf] = value
    return out


def _set_env(doc: dict[str, Any], name: str, value: Any) -> None:
    """Set (or add) spec.env[name] to the value as a script reads it: a string."""
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        spec = doc["spec"] = {}
    env = [e for e in spec.get("env") or [] if not (isinstance(e, dict) and e.get("name") == name)]
    spec["env"] = [*env, {"name": name, "value": text}]


def values_at(doc: dict[str, Any], path: str) -> Any:
    node: Any = doc
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def trial_name(sweep: str, number: int, fold: int | None = None) -> str:
    return f"{sweep}-t{number:03d}" + (f"-f{fold}" if fold is not None else "")


def trial_job(spec: SweepSpec, number: int, values: dict[str, Any], fold: int | None = None) -> dict[str, Any]:
    """The DistributedTraining of one trial (one fold of it with k-fold), labelled so a
    sweep finds its own jobs: disttrain.dev/sweep, disttrain.dev/trial[, disttrain.dev/fold]."""
    values = dict(values)
    if fold is not None and isinstance(values_at(spec.template, "spec.trainer.builtin"), dict):
        values |= {"spec.trainer.builtin.evalFraction": round(1 / spec.folds, 12),
                   "spec.trainer.builtin.evalFold": fold}
    elif fold is not None:  # your own script holds out the fold it is given
        values |= {ENV_PATH + FOLD_ENV: fold, ENV_PATH + FOLDS_ENV: spec.folds}
    doc = patch(spec.template, values)
    meta = doc.setdefault("metadata", {})
    meta["name"] = trial_name(spec.name, number, fold)
    labels = {**(meta.get("labels") or {}), SWEEP_LABEL: spec.name, TRIAL_LABEL: str(number)}
    if fold is not None:
        labels[FOLD_LABEL] = str(fold)
    meta["labels"] = labels
    for key in ("uid", "resourceVersion", "generation", "creationTimestamp"):
        meta.pop(key, None)
    doc.pop("status", None)
    if spec.namespace:
        meta["namespace"] = spec.namespace
    return doc


def best_job(spec: SweepSpec, values: dict[str, Any], number: int) -> dict[str, Any]:
    """The template with the best trial's values: ready to apply, named <sweep>-best."""
    doc = patch(spec.template, values)
    meta = doc.setdefault("metadata", {})
    meta["name"] = f"{spec.name}-best"
    meta["annotations"] = {**(meta.get("annotations") or {}), f"{GROUP}/sweep-trial": f"{spec.name}/{number}"}
    doc.pop("status", None)
    return doc
