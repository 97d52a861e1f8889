"""The API model's small vocabulary, called directly: type shapes, field metadata, error text.

The schema generator and the parser run these at import (and `fields_of` caches them), so
only a direct call shows what they do for a given annotation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pytest

from disttrain.api import types as t
from disttrain.api.errors import FieldError, InvalidSpec, _BoundedRepr, _short, did_you_mean, unset
from disttrain.api.meta import (META_KEY, FieldMeta, Shape, fields_of, json_name, matches, meta_of, shape_of,
                                spec_field, to_camel)


@dataclass
class Small:
    a: int | None = spec_field("a: one.", minimum=1)


@pytest.mark.parametrize("annotation,shape", [
    (int, Shape("int")), (float, Shape("float")), (bool, Shape("bool")), (str, Shape("str")),
    (int | None, Shape("int")), (str | None, Shape("str")),
    (int | str, Shape("int_or_str")), (int | str | None, Shape("int_or_str")),
    (Literal["x", "y"], Shape("enum", values=("x", "y"))),
    (Literal["x", "y"] | None, Shape("enum", values=("x", "y"))),
    (list[str], Shape("list", inner=Shape("str"))),
    (list[Small] | None, Shape("list", inner=Shape("object", cls=Small))),
    (dict[str, int], Shape("map", inner=Shape("int"))),
    (dict[str, Any], Shape("map", inner=Shape("any"))),
    (Any, Shape("any")),
    (Small, Shape("object", cls=Small)),
])
def test_shape_of_each_annotation(annotation, shape):
    assert shape_of(annotation) == shape


@pytest.mark.parametrize("annotation", [int | float, bytes, tuple[int, int], set[str]])
def test_shape_of_refuses_what_the_schema_cannot_say(annotation):
    with pytest.raises(TypeError, match="unsupported"):
        shape_of(annotation)


def test_spec_field_carries_its_metadata_and_starts_unset():
    f = spec_field("x: the x.", minimum=2, json_name="xX")
    assert f.default is None
    meta = f.metadata[META_KEY]
    assert meta == FieldMeta(doc="x: the x.", minimum=2, json_name="xX")
    assert Small().a is None
    (field_, shape), = fields_of(Small)
    assert meta_of(field_).minimum == 1 and shape == Shape("int") and json_name(field_) == "a"


def test_json_names_are_camel_case_and_overridable():
    assert to_camel("join_timeout_seconds") == "joinTimeoutSeconds"
    assert to_camel("async_") == "async" and to_camel("nodes") == "nodes"
    names = {f.name: json_name(f) for f, _ in fields_of(t.Checkpoint)}
    assert names["async_"] == "async" and names["claim_name"] == "claimName"


def test_patterns_match_the_whole_value():
    assert matches(r"^[a-z]+$", "abc") and not matches(r"^[a-z]+$", "abc1")
    assert not matches(r"^[a-z]+$", "1abc") and matches("[0-9]", "7")


def test_field_error_reads_as_one_line():
    assert str(FieldError("spec.nodes", 0, "is out of range", ">= 1", "choose 1")) == \
        "spec.nodes: is out of range (got 0); allowed: >= 1. Fix: choose 1"
    assert str(FieldError("metadata.name", unset(), "is required")) == "metadata.name: is required (not set)"
    assert str(FieldError("p", "x", "bad", hint="h")) == "p: bad (got 'x'). Fix: h"


def test_invalid_spec_carries_every_error():
    errors = [FieldError("a", 1, "bad"), FieldError("b", 2, "worse")]
    exc = InvalidSpec(iter(errors))
    assert exc.errors == errors and str(exc) == "a: bad (got 1); b: worse (got 2)"


def test_long_values_are_shortened_to_the_limit():
    # the bounded repr keeps a string's repr up to 70 characters, then keeps both ends
    assert _short("x" * 68) == repr("x" * 68)  # 70 characters with the quotes
    assert _short("x" * 69) == "'" + "x" * 32 + "..." + "x" * 33 + "'" and len(_short("x" * 69)) == 70
    assert _short(list(range(10))) == "[0, 1, 2, 3, ...]"
    assert _short(10**40) == "<an integer of 133 bits>"
    # then the limit cuts what is left
    assert _short("x" * 200, limit=20) == "'" + "x" * 16 + "..." and len(_short("x" * 200, limit=20)) == 20
    assert _short(5, limit=1) == "5"


class _LongRepr:
    def __repr__(self) -> str:
        return "o" * 100


def test_the_bounded_repr_limits_each_kind_of_value():
    # A fresh instance: the module's shared one is built at import, before a test can look.
    bounded = _BoundedRepr()
    assert bounded.repr([[[[[1]]]]]) == "[[[[...]]]]"  # 3 levels
    assert bounded.repr({i: i for i in range(6)}) == "{0: 0, 1: 1, 2: 2, 3: 3, ...}"  # 4 entries
    assert bounded.repr(list(range(5))) == "[0, 1, 2, 3, ...]"  # 4 items
    assert bounded.repr("x" * 68) == repr("x" * 68) and len(bounded.repr("x" * 69)) == 70  # 70 characters
    assert bounded.repr(_LongRepr()) == "o" * 33 + "..." + "o" * 34  # 70 for any other object
    assert bounded.repr(10**30 - 1) == str(10**30 - 1) and bounded.repr(-(10**30)) == "<an integer of 100 bits>"


def test_did_you_mean():
    assert did_you_mean("DDP", ["auto", "ddp"]) == "use 'ddp' (values are case-sensitive)"
    assert did_you_mean("fsdpp", ["auto", "ddp", "fsdp"]) == "did you mean 'fsdp'?"
    assert did_you_mean("zzz", ["auto", "ddp"]) == ""
    assert did_you_mean(3, ["auto"]) == ""
    assert did_you_mean("autx", iter(["auto"])) == "did you mean 'auto'?"


def test_builtin_and_command_together_name_both_in_the_error():
    from disttrain.api import validate_document

    from .helpers import job

    (error,) = validate_document(job(trainer={"builtin": {}, "command": ["t.py"]})).errors
    assert error.value == {"builtin": "...", "command": "..."}
    (error,) = validate_document(job(trainer={})).errors
    assert error.value == {}


@dataclass
class Documented:
    """Documented: a table of its own."""

    free: Any = spec_field("free: anything | everything.")


def test_reference_tables_escape_pipes_and_name_free_form_types():
    from disttrain.api.reference import _table

    lines = _table(Documented)
    assert lines[:3] == ["### Documented", "", "Documented: a table of its own."]
    assert "| `free` | object |  |  | anything \\| everything. |" in lines
