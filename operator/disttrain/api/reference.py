"""docs/api.md, generated from the same field metadata as the CRD (`disttrain docs api`)."""

from __future__ import annotations

import json

from disttrain.api import types as t
from disttrain.api.status_types import DistributedTrainingStatus
from disttrain.api.meta import FieldMeta, Shape, fields_of, json_name, meta_of
from disttrain.api.schema import CHECKPOINT_RULES, SPEC_RULES, TRAINER_RULES


def _type_word(shape: Shape) -> str:
    if shape.kind == "enum":
        return " \\| ".join(f"`{v}`" for v in shape.values)
    if shape.kind == "object":
        return f"[{shape.cls.__name__}](#{shape.cls.__name__.lower()})"
    if shape.kind == "list":
        return f"list of {_type_word(shape.inner)}"
    if shape.kind == "map":
        return "map" if shape.inner.kind == "any" else f"map of {_type_word(shape.inner)}"
    return {"int": "integer", "float": "number", "bool": "boolean", "str": "string",
            "int_or_str": "integer or string", "any": "object"}[shape.kind]


def _default(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _bounds(meta: FieldMeta) -> str:
    parts = []
    if meta.minimum is not None:
        parts.append(f"{'>' if meta.exclusive_minimum else '>='} {meta.minimum}")
    if meta.maximum is not None:
        parts.append(f"<= {meta.maximum}" + (f" ({meta.maximum_reason})" if meta.maximum_reason else ""))
    if meta.max_items is not None:
        parts.append(f"at most {meta.max_items} entries")
    if meta.required:
        parts.append("required")
    if meta.immutable_while_running:
        parts.append("change only while suspended")
    return "; ".join(parts)


def _table(cls: type) -> list[str]:
    lines = [f"### {cls.__name__}", "", (cls.__doc__ or "").strip(), "",
             "| field | type | default | limits | description |", "| --- | --- | --- | --- | --- |"]
    nested = []
    for f, shape in fields_of(cls):
        meta = meta_of(f)
        doc = meta.doc.split(": ", 1)[-1].replace("|", "\\|")
        default = "" if meta.default is None else f"`{_default(meta.default)}`"
        lines.append(f"| `{json_name(f)}` | {_type_word(shape)} | {default} | {_bounds(meta)} | {doc} |")
        inner = shape.inner if shape.kind == "list" else shape
        if inner is not None and inner.kind == "object":
            nested.append(inner.cls)
    lines.append("")
    for child in nested:
        lines += _table(child)
    return lines


def api_reference() -> str:
    rules = [f"- {r['message']}" for r in SPEC_RULES + TRAINER_RULES + CHECKPOINT_RULES]
    out = [
        "# API reference: `disttrain.dev/v1alpha1` DistributedTraining",
        "",
        "Generated from `operator/disttrain/api/types.py` and `status_types.py` by `disttrain docs api`; "
        "a test fails when this file drifts. `kubectl explain dt.spec.<field>` prints the same text.",
        "",
        f"Short names: {', '.join(f'`{n}`' for n in t.SHORT_NAMES)}. Subresources: `status`, "
        "`scale` (`kubectl scale dt/NAME --replicas=N` sets `spec.nodes`).",
        "",
        "## Cross-field rules checked by the API server (CEL)",
        "",
        *rules,
        "- fields marked *change only while suspended* are rejected on a running job: set "
        "`spec.suspend: true`, change them, then resume.",
        "",
        "Semantic checks the schema cannot express (reserved env names, GPU resources outside "
        "`gpusPerNode`, mesh size, launchers in `command`, ...) run in `disttrain validate` "
        "and in the operator, which then marks the job `Failed` with reason `InvalidSpec`.",
        "",
        "## spec",
        "",
        *_table(t.DistributedTrainingSpec),
        "## status",
        "",
        *_table(DistributedTrainingStatus),
    ]
    return "\n".join(out).rstrip() + "\n"
