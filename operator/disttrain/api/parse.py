"""dict (a YAML document) -> typed Job, checking types, enums and bounds from the field
metadata. Never raises: every problem becomes a FieldError."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from disttrain.api import k8s
from disttrain.api import types as t
from disttrain.api.bounds import key_path
from disttrain.api.errors import FieldError, did_you_mean, one_of, unset, wrong_type
from disttrain.api.meta import (DNS1035_LABEL, DNS1123_LABEL, MAP_VALUE_MAX_LENGTH, FieldMeta, Shape, fields_of,
                                json_name, matches, meta_of)
from disttrain.api.names import MAX_JOB_NAME_LENGTH

_TYPE_WORDS = {"int": "an integer", "float": "a number", "bool": "true or false",
               "str": "a string", "enum": "a string", "int_or_str": "an integer or a string",
               "list": "a list", "map": "a mapping", "object": "a mapping", "any": "a value"}


def parse_job(doc: Any) -> tuple[t.Job | None, list[FieldError]]:
    """Parse one DistributedTraining document. Returns (job or None, errors)."""
    if not isinstance(doc, dict):
        return None, [FieldError("(document)", doc, "is not a mapping",
                                 "a DistributedTraining object",
                                 "start the document with apiVersion: disttrain.dev/v1alpha1")]
    errors: list[FieldError] = []
    if doc.get("apiVersion") != t.API_VERSION:
        errors.append(FieldError("apiVersion", doc.get("apiVersion", unset()), "is not ours",
                                 t.API_VERSION, f"set apiVersion: {t.API_VERSION}"))
    if doc.get("kind") != t.KIND:
        errors.append(FieldError("kind", doc.get("kind", unset()), "is not ours", t.KIND,
                                 f"set kind: {t.KIND}"))
    metadata = doc.get("metadata")
    if not isinstance(metadata, dict):
        errors.append(FieldError("metadata", metadata if metadata is not None else unset(),
                                 "must be a mapping with a name", "",
                                 "add metadata: {name: my-job}"))
        metadata = {}
    name = metadata.get("name")
    errors += check_job_name(name)
    namespace = metadata.get("namespace")
    if namespace is not None and not (isinstance(namespace, str) and matches(DNS1123_LABEL, namespace)
                                      and len(namespace) <= 63):
        errors.append(FieldError("metadata.namespace", namespace, "is not a valid namespace name",
                                 "a DNS label (lowercase letters, digits, '-')",
                                 "use an existing namespace, e.g. team-a, or leave it out"))
    raw_spec = doc.get("spec", {})
    if raw_spec is None:
        raw_spec = {}
    spec, spec_errors = parse_object(t.DistributedTrainingSpec, raw_spec, "spec")
    errors += spec_errors
    for key in doc:
        if key not in ("apiVersion", "kind", "metadata", "spec", "status"):
            errors.append(FieldError(key_path("", key), doc[key], "is not a top-level field",
                                     "apiVersion, kind, metadata, spec",
                                     did_you_mean(key, ["apiVersion", "kind", "metadata", "spec"], "field names")
                                     or "indent it under spec"))
    if errors:
        return None, errors
    return t.Job(name=name, namespace=namespace, uid=metadata.get("uid"),
                 generation=metadata.get("generation"),
                 labels=dict(metadata.get("labels") or {}),
                 annotations=dict(metadata.get("annotations") or {}),
                 spec=spec), []


def check_job_name(name: Any) -> list[FieldError]:
    if name is None or name == "":
        return [FieldError("metadata.name", unset() if name is None else name, "is required",
                           "a DNS label", "set metadata.name: my-job")]
    if not isinstance(name, str):
        shown = _plain_name(name)
        return [FieldError("metadata.name", name, "must be a string", "a DNS label",
                           f"quote it: name: \"{shown}\"" if matches(DNS1035_LABEL, shown)
                           else f"rename it, e.g. {_suggest_name(shown)!r}")]
    if len(name) > MAX_JOB_NAME_LENGTH:
        return [FieldError("metadata.name", name, f"is {len(name)} characters long",
                           f"at most {MAX_JOB_NAME_LENGTH} so that pod names <name>-worker-<i> "
                           "stay DNS labels (63)", f"choose a shorter name, e.g. {_suggest_name(name)!r}")]
    if not matches(DNS1035_LABEL, name):
        return [FieldError("metadata.name", name, "is not a valid DNS-1035 label",
                           "lowercase letters, digits and '-', starting with a letter and "
                           "ending with a letter or digit (it names a Service)",
                           f"rename it, e.g. {_suggest_name(name)!r}")]
    return []


def _plain_name(name: Any) -> str:
    if isinstance(name, bool):
        return str(name).lower()
    if isinstance(name, (int, float)) and not (isinstance(name, int) and abs(name) >= 10**30):
        return str(name)
    return "my-job"


def _suggest_name(name: str) -> str:
    """A valid DNS-1035 label close to `name`: ASCII lowercase letters and digits kept,
    everything else one '-', a letter in front when needed, cut to the length limit."""
    out: list[str] = []
    for c in name[:4 * MAX_JOB_NAME_LENGTH].lower():
        if c.isascii() and c.isalnum():
            out.append(c)
        elif out and out[-1] != "-":
            out.append("-")
    cleaned = "".join(out)  # never starts with '-'; a '-' at the end goes with the cut
    if not cleaned[:1].isalpha():
        cleaned = "job-" + cleaned
    return cleaned[:MAX_JOB_NAME_LENGTH].rstrip("-")


def parse_object(cls: type, raw: Any, path: str) -> tuple[Any, list[FieldError]]:
    if not isinstance(raw, dict):
        return None, [FieldError(path, raw, "must be a mapping", "", f"write {path} as key: value pairs")]
    errors: list[FieldError] = []
    known = {json_name(f): (f, shape) for f, shape in fields_of(cls)}
    for key in raw:
        if key not in known:
            hint = did_you_mean(key, known, "field names") or f"remove it (see `kubectl explain dt.{path}`)"
            errors.append(FieldError(key_path(path, key), raw[key], "is not a known field",
                                     ", ".join(known), hint))
    values = {}
    for key, (f, shape) in known.items():
        meta = meta_of(f)
        if key not in raw or raw[key] is None:
            if meta.required:
                errors.append(FieldError(f"{path}.{key}", unset(), "is required", "",
                                         f"set {path}.{key}"))
            continue
        value, errs = parse_value(shape, meta, raw[key], f"{path}.{key}")
        errors += errs
        values[f.name] = value
    return (None if errors else cls(**values)), errors


def dump_object(obj: Any) -> Any:
    """The inverse of parse_object: typed values -> their JSON form (camelCase, unset
    fields left out)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        for f, _shape in fields_of(type(obj)):
            value = getattr(obj, f.name)
            if value is not None:
                out[json_name(f)] = dump_object(value)
        return out
    if isinstance(obj, list):
        return [dump_object(v) for v in obj]
    if isinstance(obj, dict):
        return {k: dump_object(v) for k, v in obj.items()}
    return obj


def parse_value(shape: Shape, meta: FieldMeta, raw: Any, path: str) -> tuple[Any, list[FieldError]]:
    kind = shape.kind
    if kind == "object":
        return parse_object(shape.cls, raw, path)
    if not _has_type(kind, raw):
        return None, [_type_error(kind, raw, path)]
    if kind == "enum":
        if raw not in shape.values:
            return None, [FieldError(path, raw, "is not allowed", ", ".join(shape.values),
                                     one_of(raw, shape.values, path))]
        return raw, []
    if kind == "list":
        return _parse_list(shape, meta, raw, path)
    if kind == "map":
        return _parse_map(shape, meta, raw, path)
    return raw, _check_bounds(meta, raw, path)


def _has_type(kind: str, raw: Any) -> bool:
    if kind == "int":
        return isinstance(raw, int) and not isinstance(raw, bool)
    if kind == "float":
        return isinstance(raw, (int, float)) and not isinstance(raw, bool) and math.isfinite(raw)
    if kind == "bool":
        return isinstance(raw, bool)
    if kind in ("str", "enum"):
        return isinstance(raw, str)
    if kind == "int_or_str":
        return isinstance(raw, (int, str)) and not isinstance(raw, bool)
    if kind == "list":
        return isinstance(raw, list)
    if kind == "map":
        return isinstance(raw, dict)
    return True


def _type_error(kind: str, raw: Any, path: str) -> FieldError:
    if kind == "float" and isinstance(raw, float) and not math.isfinite(raw):
        return FieldError(path, raw, "is not a finite number", "a finite number",
                          "write a number such as 0.001")
    return wrong_type(path, raw, _TYPE_WORDS[kind])


def _check_bounds(meta: FieldMeta, raw: Any, path: str) -> list[FieldError]:
    errors = []
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        low, high = meta.minimum, meta.maximum
        too_low = low is not None and (raw <= low if meta.exclusive_minimum else raw < low)
        if too_low or (high is not None and raw > high):
            lower = "" if low is None else (f"> {low}" if meta.exclusive_minimum else f">= {low}")
            upper = "" if high is None else f"<= {high}"
            if high is not None and raw > high and meta.maximum_reason:
                upper += f" ({meta.maximum_reason})"
            errors.append(FieldError(path, raw, "is out of range",
                                     " and ".join(x for x in (lower, upper) if x),
                                     "choose a value in that range"))
    if isinstance(raw, str):
        if meta.max_length is not None and len(raw) > meta.max_length:
            errors.append(FieldError(path, raw, f"is {len(raw)} characters long",
                                     f"at most {meta.max_length}", "shorten it"))
        elif meta.pattern is not None and not matches(meta.pattern, raw):
            errors.append(FieldError(path, raw, "has an invalid format",
                                     meta.pattern_hint or meta.pattern, "rewrite it in that form"))
    return errors


def _parse_list(shape: Shape, meta: FieldMeta, raw: list, path: str) -> tuple[Any, list[FieldError]]:
    errors = []
    if meta.max_items is not None and len(raw) > meta.max_items:
        errors.append(FieldError(path, f"{len(raw)} items", "has too many items",
                                 f"at most {meta.max_items}", "remove some"))
    # The list's own count, pattern and keys are not its items' (required is only read
    # for an object's fields).
    item_meta = dataclasses.replace(meta, max_items=None, pattern=None, list_map_keys=())
    items = []
    for i, item in enumerate(raw):
        if meta.free_form and isinstance(item, dict):
            if meta.k8s is not None:
                errors += k8s.check(meta.k8s, item, f"{path}[{i}]")
            items.append(item)
            continue
        value, errs = parse_value(shape.inner, item_meta, item, f"{path}[{i}]")
        errors += errs
        items.append(value)
    for key in meta.list_map_keys:
        seen: dict[Any, int] = {}
        for i, item in enumerate(raw):
            k = item.get(key) if isinstance(item, dict) else None
            if k is not None and k in seen:
                errors.append(FieldError(f"{path}[{i}].{key}", k, "is duplicated",
                                         f"each {key} once", f"merge it with {path}[{seen[k]}]"))
            seen.setdefault(k, i)
    return items, errors


def _parse_map(shape: Shape, meta: FieldMeta, raw: dict, path: str) -> tuple[Any, list[FieldError]]:
    if meta.k8s is not None:
        return raw, k8s.check(meta.k8s, raw, path, partial=meta.k8s_partial)
    if meta.free_form or shape.inner.kind == "any":
        return raw, []
    errors = []
    if meta.max_items is not None and len(raw) > meta.max_items:
        errors.append(FieldError(path, f"{len(raw)} entries", "has too many entries",
                                 f"at most {meta.max_items}", "remove some"))
    value_meta = FieldMeta(doc="", max_length=MAP_VALUE_MAX_LENGTH)
    out = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            errors.append(FieldError(f"{path}", key, "has a key that is not a string", "",
                                     "quote the key"))
            continue
        parsed, errs = parse_value(shape.inner, value_meta, value, f"{path}.{key}")
        errors += errs
        out[key] = parsed
    return out, errors
