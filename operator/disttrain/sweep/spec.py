"""The sweep file (docs/sweeps.md): parse and validate, pure.

Errors are the API's FieldErrors: the field, the value, what is allowed and the fix.
Every parameter is checked twice: against its own bounds here, and by patching its
extreme values into the template and running the operator's validator on the result,
so a range the API would refuse (learningRate 20) fails before any trial runs.
"""

from __future__ import annotations

import math
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Literal

from disttrain.api import types as t
from disttrain.api.errors import FieldError, did_you_mean, unset
from disttrain.api.meta import json_name
from disttrain.api.names import MAX_JOB_NAME_LENGTH
from disttrain.api.pod_contract import METRIC_NAME, METRIC_NAME_RULE
from disttrain.api.report import EVAL_LOSS
from disttrain.api.validate import validate_document
from disttrain.sweep.space import ENV_PATH, FOLD_ENV, FOLDS_ENV, patch, values_at

Kind = Literal["float", "int", "choice"]
DIRECTIONS = ("minimize", "maximize")
SAMPLERS = ("tpe", "random")
PRUNERS = ("median", "none")
MODES = ("local", "cluster")
MAX_TRIALS = 10_000
MAX_PARALLELISM = 256
MAX_FOLDS = 20
# <name>-t<trial, up to 5 digits>-f<fold, up to 2 digits> must still be a job name.
MAX_NAME_LENGTH = MAX_JOB_NAME_LENGTH - len("-t00000-f00")
_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
TOP_LEVEL = ("name", "template", "parameters", "objective", "sampler", "pruner", "trials", "parallelism",
             "mode", "kfold", "namespace")


@dataclass(frozen=True, slots=True)
class Param:
    path: str  # into the DistributedTraining, e.g. spec.trainer.builtin.learningRate
    kind: Kind
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class SweepSpec:
    name: str
    template: dict[str, Any]  # a DistributedTraining document
    params: tuple[Param, ...]
    trials: int
    objective: str = "evalLoss"
    direction: str = "minimize"
    sampler: str = "tpe"
    seed: int = 0
    pruner: str = "median"
    startup_trials: int = 2
    warmup_steps: int = 0
    parallelism: int = 1
    mode: str = "local"
    folds: int = 0  # k of k-fold cross-validation; 0 = one job per trial on the template's split
    namespace: str | None = None


TemplateLoader = Callable[[str], dict[str, Any]]
"""Reads a template file (a path relative to the sweep file) -> its one DistributedTraining;
raises ValueError with a one-line reason."""


def parse_sweep(data: Any, load_template: TemplateLoader) -> tuple[SweepSpec | None, list[FieldError]]:
    """A sweep document -> (SweepSpec, []) or (None, every error found)."""
    errors: list[FieldError] = []
    if not isinstance(data, dict):
        return None, [FieldError("(sweep)", data, "is not a mapping", "a YAML mapping of name, template, "
                                 "parameters, trials, ...", "see docs/sweeps.md for an example")]
    for key in data:
        if key not in TOP_LEVEL:
            hint = did_you_mean(key, TOP_LEVEL, "field names") or "remove it"
            errors.append(FieldError(str(key), data[key], "is not a sweep field", ", ".join(TOP_LEVEL), hint))
    name = data.get("name", unset())
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > MAX_NAME_LENGTH:
        errors.append(FieldError("name", name, "is not a valid sweep name",
                                 f"a DNS label of at most {MAX_NAME_LENGTH} characters (a-z, 0-9, '-', "
                                 "starting with a letter)", "e.g. name: lr-search; it prefixes every trial's job name"))
    template = _template(data.get("template", unset()), load_template, errors)
    params = _params(data.get("parameters", unset()), errors)
    objective = _section(data, "objective", ("metric", "direction"), errors)
    metric = _metric(objective, errors)
    direction = _choice(objective, "objective", "direction", "minimize", DIRECTIONS, errors)
    sampler_section = _section(data, "sampler", ("type", "seed"), errors)
    sampler = _choice(sampler_section, "sampler", "type", "tpe", SAMPLERS, errors)
    seed = _int(sampler_section, "sampler.seed", "seed", 0, 0, 2**31 - 1, errors)
    pruner_section = _section(data, "pruner", ("type", "startupTrials", "warmupSteps"), errors)
    pruner = _choice(pruner_section, "pruner", "type", "median", PRUNERS, errors)
    startup = _int(pruner_section, "pruner.startupTrials", "startupTrials", 2, 0, MAX_TRIALS, errors)
    warmup = _int(pruner_section, "pruner.warmupSteps", "warmupSteps", 0, 0, 100_000_000, errors)
    trials = _int(data, "trials", "trials", unset(), 1, MAX_TRIALS, errors)
    parallelism = _int(data, "parallelism", "parallelism", 1, 1, MAX_PARALLELISM, errors)
    mode = _choice(data, "", "mode", "local", MODES, errors)
    kfold = _section(data, "kfold", ("folds",), errors)
    folds = _int(kfold, "kfold.folds", "folds", unset(), 2, MAX_FOLDS, errors) if kfold else 0
    namespace = data.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not _NAMESPACE.match(namespace)):
        errors.append(FieldError("namespace", namespace, "is not a namespace name", "a DNS label",
                                 "set the namespace trials run in (cluster mode), or remove it"))
    if errors:
        return None, errors
    spec = SweepSpec(name=name, template=template, params=params, trials=trials, objective=metric,
                     direction=direction, sampler=sampler, seed=seed, pruner=pruner, startup_trials=startup,
                     warmup_steps=warmup, parallelism=parallelism, mode=mode, folds=folds, namespace=namespace)
    errors += _against_template(spec)
    return (None, errors) if errors else (spec, [])


# ---- sections --------------------------------------------------------------------------


def _template(value: Any, load: TemplateLoader, errors: list[FieldError]) -> dict[str, Any]:
    hint = "a path to a DistributedTraining file (relative to the sweep file) or one inline"
    if isinstance(value, str):
        try:
            doc = load(value)
        except ValueError as exc:
            errors.append(FieldError("template", value, f"cannot be read: {exc}", hint, "fix the path or the file"))
            return {}
    elif isinstance(value, dict):
        doc = value
    else:
        errors.append(FieldError("template", value, "is not a DistributedTraining", hint,
                                 "template: job.yaml, or template: {apiVersion: disttrain.dev/v1alpha1, ...}"))
        return {}
    result = validate_document(doc)
    for e in result.errors:
        errors.append(FieldError(f"template.{e.path}", e.value, e.problem, e.allowed, e.hint))
    return doc if result.ok else {}


def _params(value: Any, errors: list[FieldError]) -> tuple[Param, ...]:
    if not isinstance(value, dict) or not value:
        errors.append(FieldError("parameters", value, "must map at least one field path to its range",
                                 "{spec.<field>: {type: float|int, low, high, log}} or {spec.<field>: {choices: [...]}}",
                                 "e.g. parameters: {spec.trainer.builtin.learningRate: {type: float, low: 1e-4, "
                                 "high: 1e-2, log: true}}"))
        return ()
    out = []
    for path, body in value.items():
        where = f"parameters[{path}]"
        leaf = field_type(str(path))
        if leaf is None:
            inside = [p for p in _all_paths() if p.startswith(f"{path}.")]
            hint = (f"name one of its fields: {', '.join(inside[:6])}" if inside else
                    did_you_mean(str(path), _all_paths()) or "e.g. spec.trainer.builtin.learningRate")
            errors.append(FieldError(where, path, "is not a field of a DistributedTraining's spec",
                                     "a dotted path to a number, string or boolean field in docs/api.md", hint))
            continue
        param = _param(str(path), where, body, leaf, errors)
        if param is not None:
            out.append(param)
    return tuple(out)


def _param(path: str, where: str, body: Any, leaf: set[type], errors: list[FieldError]) -> Param | None:
    if not isinstance(body, dict):
        errors.append(FieldError(where, body, "is not a range", "{type: float|int, low, high[, log, step]} or "
                                 "{choices: [...]}", "write the range as a mapping"))
        return None
    known = ("type", "low", "high", "log", "step", "choices")
    for key in body:
        if key not in known:
            errors.append(FieldError(f"{where}.{key}", body[key], "is not a parameter field", ", ".join(known),
                                     did_you_mean(key, known, "field names") or "remove it"))
    if "choices" in body:
        return _choice_param(path, where, body, errors)
    return _range_param(path, where, body, leaf, errors)


def _choice_param(path: str, where: str, body: dict[str, Any], errors: list[FieldError]) -> Param | None:
    """{choices: [...]}: distinct values, and no range beside them."""
    choices = body["choices"]
    if body.get("type", "choice") != "choice" or any(k in body for k in ("low", "high", "log", "step")):
        errors.append(FieldError(where, body, "mixes choices with a range", "choices alone, or type/low/high",
                                 "keep one of the two"))
        return None
    if (not isinstance(choices, list) or not choices or len(set(map(repr, choices))) != len(choices)
            or not all(isinstance(c, (str, int, float, bool)) for c in choices)):
        errors.append(FieldError(f"{where}.choices", choices, "is not a list of distinct values",
                                 "a non-empty list of distinct strings, numbers or booleans",
                                 "e.g. choices: [ddp, fsdp]"))
        return None
    return Param(path=path, kind="choice", choices=tuple(choices))


def _range_param(path: str, where: str, body: dict[str, Any], leaf: set[type], errors: list[FieldError]
                 ) -> Param | None:
    """{type: float|int, low, high[, log, step]}: a type the field holds, and bounds that make a range."""
    kind = body.get("type", unset())
    holds = "/".join(sorted(x.__name__ for x in leaf))
    fits = [k for k, py in (("float", float), ("int", int)) if py in leaf]
    if kind not in ("float", "int"):
        errors.append(FieldError(f"{where}.type", kind, "is not a range type", "float, int (or choices: [...])",
                                 did_you_mean(kind, ("float", "int")) or f"{path} holds {holds}"))
        return None
    if kind not in fits:
        errors.append(FieldError(f"{where}.type", kind, f"does not fit {path}, which holds {holds}",
                                 " or ".join(fits) if fits else "choices: [...]",
                                 f"use type: {fits[0]}" if fits else "list the values as choices: [...]"))
        return None
    # PyYAML reads 1e-4 (no dot) as a string: accept the numbers it leaves as text.
    low, high = (_as_float(body.get(k, unset())) if kind == "float" else body.get(k, unset()) for k in ("low", "high"))
    ok = True
    for key, v in (("low", low), ("high", high)):
        if not _number(v, kind):
            errors.append(FieldError(f"{where}.{key}", v, f"is not {'an integer' if kind == 'int' else 'a number'}",
                                     "a finite number" if kind == "float" else "an integer", f"set {key}"))
            ok = False
    log = body.get("log", False)
    if not isinstance(log, bool):
        errors.append(FieldError(f"{where}.log", log, "is not a boolean", "true or false", "log: true samples "
                                 "evenly in log space (learning rates)"))
        ok = False
    step = body.get("step")
    if step is not None and (not _number(step, kind) or step <= 0):
        errors.append(FieldError(f"{where}.step", step, "is not a positive step", "a number > 0",
                                 "set step or remove it"))
        ok = False
    if not ok:
        return None
    if low >= high:
        errors.append(FieldError(f"{where}.high", high, f"is not above low {low}", f"a value > {low}",
                                 "swap low and high, or use choices for a single value"))
        return None
    if log and low <= 0:
        errors.append(FieldError(f"{where}.low", low, "must be > 0 on a log scale", "a value > 0",
                                 "raise low or set log: false"))
        return None
    if log and step is not None:
        errors.append(FieldError(f"{where}.step", step, "cannot be combined with log: true", "log or step",
                                 "remove one of them"))
        return None
    return Param(path=path, kind=kind, low=low, high=high, log=log, step=step)


def _against_template(spec: SweepSpec) -> list[FieldError]:
    """Each parameter at its extremes (and every choice) must give a valid job."""
    errors: list[FieldError] = []
    for p in spec.params:
        where = f"parameters[{p.path}]"
        probes = [(f"{where}.choices", c) for c in p.choices] or [(f"{where}.low", p.low), (f"{where}.high", p.high)]
        for field_path, value in probes:
            result = validate_document(patch(spec.template, {p.path: value}))
            bad = [e for e in result.errors if e.path == p.path] or result.errors[:1]
            for e in bad:
                errors.append(FieldError(field_path, value, f"makes the template invalid: {e.problem}", e.allowed,
                                         "remove it from choices" if p.choices else e.hint or "narrow the range"))
    builtin = values_at(spec.template, "spec.trainer.builtin")
    swept = {p.path for p in spec.params}
    if spec.folds:
        owned_paths = ([f"spec.trainer.builtin.{f}" for f in ("evalFraction", "evalFold")] if isinstance(builtin, dict)
                       else [ENV_PATH + FOLD_ENV, ENV_PATH + FOLDS_ENV])
        for owned in owned_paths:
            if owned in swept:
                errors.append(FieldError(f"parameters[{owned}]", owned.rpartition(".")[2],
                                         "is set by kfold for every fold", "any other field",
                                         "remove the parameter or kfold"))
    if isinstance(builtin, dict) and spec.objective != EVAL_LOSS:
        errors.append(FieldError("objective.metric", spec.objective, "is not reported by the built-in trainer",
                                 f"{EVAL_LOSS} for a template with spec.trainer.builtin; a named metric for your "
                                 "own code that reports it (disttrain.train)", f"metric: {EVAL_LOSS}"))
    if spec.pruner != "none" and isinstance(builtin, dict) and not spec.folds:
        interval = builtin.get("evalIntervalSteps") or 0
        if not interval and "spec.trainer.builtin.evalIntervalSteps" not in swept:
            errors.append(FieldError("pruner.type", spec.pruner, "needs intermediate eval losses, and the template "
                                     "evaluates only after its last step", "none, or median with "
                                     "spec.trainer.builtin.evalIntervalSteps > 0 in the template",
                                     "set spec.trainer.builtin.evalIntervalSteps (e.g. a tenth of steps) or "
                                     "pruner: {type: none}"))
        if isinstance(builtin, dict) and builtin.get("evalFraction", 0.1) == 0:
            errors.append(FieldError("template.spec.trainer.builtin.evalFraction", 0,
                                     "turns evaluation off: trials would report no evalLoss",
                                     "a fraction in (0, 0.5]", "remove it (default 0.1)"))
    return errors


# ---- field paths -------------------------------------------------------------------------


def field_type(path: str) -> set[type] | None:
    """The scalar types a spec field holds ({float}, {int}, {str}, {bool}), None if the path
    does not name a scalar field of DistributedTrainingSpec."""
    parts = path.split(".")
    if len(parts) < 2 or parts[0] != "spec":
        return None
    if path.startswith(ENV_PATH):  # spec.env.NAME: any value, as the string the script reads
        return {float, int, str, bool} if len(parts) == 3 and parts[2] else None
    cls: Any = t.DistributedTrainingSpec
    for i, part in enumerate(parts[1:]):
        if not is_dataclass(cls):
            return None
        hints = typing.get_type_hints(cls)
        match = next((f for f in fields(cls) if json_name(f) == part), None)
        if match is None:
            return None
        inner = [a for a in typing.get_args(hints[match.name]) if a is not type(None)] or [hints[match.name]]
        last = i == len(parts) - 2
        nested = [a for a in inner if is_dataclass(a)]
        if not last:
            if not nested:
                return None
            cls = nested[0]
            continue
        out: set[type] = set()
        for a in inner:
            if typing.get_origin(a) is Literal:
                out |= {type(v) for v in typing.get_args(a)}
            elif a in (int, float, str, bool):
                out.add(a)
        return out or None
    return None


def _all_paths(cls: Any = t.DistributedTrainingSpec, prefix: str = "spec") -> list[str]:
    out = []
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        path = f"{prefix}.{json_name(f)}"
        inner = [a for a in typing.get_args(hints[f.name]) if is_dataclass(a)]
        out += _all_paths(inner[0], path) if inner else [path]
    return out


# ---- small readers -----------------------------------------------------------------------


def _section(data: dict[str, Any], key: str, fields_: tuple[str, ...], errors: list[FieldError]) -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        errors.append(FieldError(key, value, "is not a mapping", "a mapping (see docs/sweeps.md)",
                                 f"write {key}: {{...}} or remove it"))
        return {}
    for name in value:
        if name not in fields_:
            errors.append(FieldError(f"{key}.{name}", value[name], f"is not a {key} field", ", ".join(fields_),
                                     did_you_mean(name, fields_, "field names") or "remove it"))
    return value


def _metric(section: dict[str, Any], errors: list[FieldError]) -> str:
    value = section.get("metric", EVAL_LOSS)
    if not isinstance(value, str) or not METRIC_NAME.match(value):
        errors.append(FieldError("objective.metric", value, "is not a metric name",
                                 f"{EVAL_LOSS} (the held-out loss), or a named metric your code reports "
                                 f"({METRIC_NAME_RULE})",
                                 "e.g. metric: accuracy with direction: maximize (docs/sweeps.md)"))
        return EVAL_LOSS
    return value


def _choice(section: dict[str, Any], prefix: str, key: str, default: str, allowed: tuple[str, ...],
            errors: list[FieldError]) -> str:
    value = section.get(key, default)
    if value not in allowed:
        path = f"{prefix}.{key}" if prefix else key
        errors.append(FieldError(path, value, "is not supported", ", ".join(allowed),
                                 did_you_mean(value, allowed) or f"use one of {', '.join(allowed)}"))
        return default
    return value


def _int(section: dict[str, Any], path: str, key: str, default: Any, low: int, high: int,
         errors: list[FieldError]) -> int:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        errors.append(FieldError(path, value, "is out of range" if isinstance(value, int) else "is not an integer",
                                 f"an integer in {low}..{high}", f"set {key}"))
        return low
    return value


def _as_float(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _number(value: Any, kind: str) -> bool:
    if isinstance(value, bool):
        return False
    if kind == "int":
        return isinstance(value, int)
    return isinstance(value, (int, float)) and math.isfinite(value)
