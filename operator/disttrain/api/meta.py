"""Field metadata: the one place a field's docs, default and bounds are written.

`api/types.py` declares every field with `spec_field(...)`; `api/schema.py` turns the
metadata into the CRD's openAPIV3Schema, and `api/parse.py` / `api/defaults.py` enforce
and apply the very same numbers offline. Nothing else states a bound or a default.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class FieldMeta:
    """What the schema and the offline validator know about one field."""

    doc: str
    default: Any = None
    minimum: int | float | None = None
    maximum: int | float | None = None
    # Why the maximum is what it is; shown with the bound in errors and the API reference.
    maximum_reason: str | None = None
    exclusive_minimum: bool = False
    max_length: int | None = None
    max_items: int | None = None
    pattern: str | None = None
    pattern_hint: str | None = None
    json_name: str | None = None
    # A Kubernetes-shaped value we pass through (affinity, tolerations, pod spec).
    free_form: bool = False
    # Its core/v1 definition (api/k8s.py): typed and bounded in the CRD and offline.
    k8s: str | None = None
    # Only for k8s: a partial object (merged into ours), no top-level required fields.
    k8s_partial: bool = False
    # Only for k8s: keep its descriptions this many levels down (the CRD's size).
    k8s_description_depth: int | None = None
    # list-type map: entries are unique by these keys (e.g. env by name).
    list_map_keys: tuple[str, ...] = ()
    # Fields that cannot change while pods run: suspend the job to change them.
    immutable_while_running: bool = False
    required: bool = False


META_KEY = "disttrain"
# A string value in a map field (labels, annotations, nodeSelector, resources): Kubernetes
# bounds labels at 63 and all annotations together at 256 KiB; one value stays below that.
MAP_VALUE_MAX_LENGTH = 65536


def spec_field(doc: str, **meta: Any) -> Any:
    """A dataclass field that is unset (None) until parsed or defaulted."""
    return field(default=None, metadata={META_KEY: FieldMeta(doc=doc, **meta)})


def meta_of(f: dataclasses.Field) -> FieldMeta:
    return f.metadata[META_KEY]


def json_name(f: dataclasses.Field) -> str:
    m = meta_of(f)
    return m.json_name or to_camel(f.name)


def to_camel(name: str) -> str:
    head, *rest = name.rstrip("_").split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# Extended resource names such as nvidia.com/gpu or amd.com/gpu.
RESOURCE_NAME = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"


def matches(pattern: str, value: str) -> bool:
    return re.fullmatch(pattern.strip("^$"), value) is not None
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


# ---- type shapes ---------------------------------------------------------------------
# One small vocabulary for the annotations used in api/types.py, so the schema
# generator and the parser walk the same shapes.


@dataclass(frozen=True, slots=True)
class Shape:
    kind: str  # int | float | bool | str | enum | int_or_str | list | map | object | any
    values: tuple[str, ...] = ()  # enum members
    inner: "Shape | None" = None  # list items / map values
    cls: type | None = None  # object dataclass


def shape_of(tp: Any) -> Shape:
    import types as _types
    import typing

    origin = typing.get_origin(tp)
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if origin in (typing.Union, _types.UnionType):
        if set(args) == {int, str}:
            return Shape("int_or_str")
        if len(args) == 1:
            return shape_of(args[0])
        raise TypeError(f"unsupported union {tp!r}")
    if origin is typing.Literal:
        return Shape("enum", values=tuple(typing.get_args(tp)))
    if origin is list:
        return Shape("list", inner=shape_of(args[0]))
    if origin is dict:
        return Shape("map", inner=shape_of(args[1]))
    if tp is Any:
        return Shape("any")
    if dataclasses.is_dataclass(tp):
        return Shape("object", cls=tp)
    simple = {int: "int", float: "float", bool: "bool", str: "str"}
    if tp in simple:
        return Shape(simple[tp])
    raise TypeError(f"unsupported annotation {tp!r}")


@functools.cache
def fields_of(cls: type) -> tuple[tuple[dataclasses.Field, Shape], ...]:
    """The dataclass's fields with their resolved shapes, in declaration order."""
    import typing

    hints = typing.get_type_hints(cls)
    return tuple((f, shape_of(hints[f.name])) for f in dataclasses.fields(cls))
