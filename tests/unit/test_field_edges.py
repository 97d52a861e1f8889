"""Every bounded number of the API at its edges, read from the types themselves: just below
the minimum and just above the maximum it is refused naming the field and the range; the
minimum and the maximum themselves are taken; absent, its documented default is applied;
and where 0 is allowed, docs/api.md says what 0 does."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from disttrain.api import types as t
from disttrain.api import validate_document
from disttrain.api.meta import FieldMeta, fields_of, json_name, meta_of

from .helpers import ROOT, job


def bounded(cls: type = t.DistributedTrainingSpec, prefix: str = "spec") -> list[tuple[str, str, FieldMeta]]:
    out = []
    for f, shape in fields_of(cls):
        path, meta = f"{prefix}.{json_name(f)}", meta_of(f)
        if shape.kind in ("int", "float") and (meta.minimum is not None or meta.maximum is not None):
            out.append((path, shape.kind, meta))
            OWNER[path] = cls.__name__
        if shape.kind == "object" and shape.cls is not None:
            out += bounded(shape.cls, path)
    return out


OWNER: dict[str, str] = {}  # path -> the type whose table in docs/api.md has its row
BOUNDED = bounded()
# What a field is tested beside: a gang of a second scheduler's (its scheduleTimeoutSeconds counts there).
NEEDS = {"spec.scheduling.gang": {"scheduling": {"schedulerName": "scheduler-plugins-scheduler"}}}


def with_value(path: str, value: Any) -> dict:
    """A valid job whose field at `path` is `value` (absent for ...), its parents present."""
    spec: dict = copy.deepcopy(next((v for k, v in NEEDS.items() if path.startswith(k + ".")), {}))
    node = spec
    *parents, leaf = path.split(".")[1:]
    for key in parents:
        node = node.setdefault(key, {})
    if value is not ...:
        node[leaf] = value
    return job(**spec)


def range_errors(path: str, value: Any) -> list[str]:
    result = validate_document(with_value(path, value))
    return [str(e) for e in result.errors if str(e).startswith(f"{path}: is out of range")]


def outside(kind: str, meta: FieldMeta) -> list[float]:
    step = 1 if kind == "int" else 0.01
    values = []
    if meta.minimum is not None:
        values.append(meta.minimum if meta.exclusive_minimum else meta.minimum - step)
    if meta.maximum is not None:
        values.append(meta.maximum + step)
    return values


def inside(kind: str, meta: FieldMeta) -> list[float]:
    step = 1 if kind == "int" else 0.01
    values = []
    if meta.minimum is not None:
        values.append(meta.minimum + step if meta.exclusive_minimum else meta.minimum)
    if meta.maximum is not None:
        values.append(meta.maximum)
    return values


def test_the_walk_finds_the_bounded_numbers():
    paths = [p for p, _, _ in BOUNDED]
    assert len(paths) >= 25 and {"spec.nodes", "spec.checkpoint.keep", "spec.trainer.builtin.learningRate"} <= set(paths)


@pytest.mark.parametrize("path,kind,meta", BOUNDED, ids=[p for p, _, _ in BOUNDED])
def test_a_bounded_number_is_refused_just_outside_its_range_and_taken_at_its_ends(path, kind, meta):
    for value in outside(kind, meta):
        errors = range_errors(path, value)
        assert len(errors) == 1 and f"(got {value})" in errors[0] and "allowed: " in errors[0], (value, errors)
    for value in inside(kind, meta):
        assert range_errors(path, value) == [], value


def typed(obj: Any, path: str) -> Any:
    for key in path.split(".")[1:]:
        obj = getattr(obj, next(f.name for f, _ in fields_of(type(obj)) if json_name(f) == key))
    return obj


@pytest.mark.parametrize("path,kind,meta", [b for b in BOUNDED if b[2].default is not None],
                         ids=[p for p, _, m in BOUNDED if m.default is not None])
def test_an_absent_number_takes_its_documented_default(path, kind, meta):
    result = validate_document(with_value(path, ...))
    assert result.errors == [] and typed(result.job.spec, "spec." + path.split(".", 1)[1]) == meta.default
    row = api_row(path)
    assert f"`{meta.default}`" in row, row  # docs/api.md's default column says the same


def api_row(path: str) -> str:
    """docs/api.md's row of a field, in the table of the type that holds it."""
    text = (ROOT / "docs" / "api.md").read_text()
    section = text[text.index(f"\n### {OWNER[path]}\n"):]
    leaf = path.rsplit(".", 1)[1]
    found = re.search(rf"^\| `{re.escape(leaf)}` \|.*$", section, re.M)
    assert found, path
    return found.group()


@pytest.mark.parametrize("path", [p for p, _, m in BOUNDED if m.minimum == 0 and not m.exclusive_minimum])
def test_where_0_is_allowed_the_reference_says_what_it_does(path):
    meaning = api_row(path).rstrip(" |").rsplit(" | ", 1)[1]
    assert re.search(r"(?<![\w.])0(?![\w.])", meaning), f"{path}: say what 0 does in its doc ({meaning})"
