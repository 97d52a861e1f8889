"""Limits on the shape of an input document, checked before anything else reads it.

A DistributedTraining is a small object: these bounds are far above any real job and far
below what would make the validator, render or the operator slow or crash. The walk is
iterative (no recursion), stops at the first few problems and visits at most
MAX_VALUES values, so it is bounded even for an alias bomb or a 10,000-deep object.
Pure: a value in, FieldErrors out. Shared by the CLI (after YAML) and the operator.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from disttrain.api.errors import FieldError

# Deepest level below the document root. A real pod spec nests about 13 levels
# (spec.podTemplate.spec.volumes[0].ephemeral.volumeClaimTemplate.spec.selector
# .matchExpressions[0].values[0]); 32 leaves room and stays far from Python's recursion
# limit in every consumer (merge, deepcopy, json).
MAX_DEPTH = 32
# Values (scalars, lists, mappings) in one document; a 256-entry env with valueFrom
# is about 1,500.
MAX_VALUES = 50_000
# One string; the API server takes objects up to about 1.5 MiB in all.
MAX_STRING_BYTES = 256 * 1024
# Everything together: the sum of string and key lengths (the JSON is a little larger).
MAX_DOCUMENT_BYTES = 1024 * 1024
# Integers beyond int64 cannot be stored by the API server.
INT64 = 2**63
MAX_ERRORS = 5

JSON_SCALARS = (str, int, float, bool, type(None))

# The API server stores objects nested up to 10,000 levels (its JSON decoder's limit),
# and an object written under an older, looser CRD keeps its depth. kopf decodes, copies
# and diffs every object it watches recursively; at Python's default limit (1,000) one
# such object kills the watcher and with it the operator, on every restart. With room for
# 10,000 levels (about three frames each) the object is read, validate_document refuses it
# (api/bounds.py, iteratively) with a SpecInvalid/Validated condition on that job only, and
# every other job is served. tests/cluster/reconcile/test_hardening.py stores such an object.
RECURSION_LIMIT = 40_000


def check_document_bounds(doc: Any) -> list[FieldError]:
    """Every way `doc` is not a bounded JSON value, naming the path (at most MAX_ERRORS)."""
    errors: list[FieldError] = []
    stack: list[tuple[str, Any, int]] = [("", doc, 0)]
    values = size = 0
    while stack and len(errors) < MAX_ERRORS:
        path, value, depth = stack.pop()
        values += 1
        if values > MAX_VALUES:
            errors.append(FieldError(path, f"more than {MAX_VALUES} values",
                                     "holds too many values", f"at most {MAX_VALUES} in one object",
                                     "remove repeated content (YAML aliases count once per use)"))
            break
        if depth > MAX_DEPTH:
            errors.append(FieldError(path, f"nesting deeper than {MAX_DEPTH} levels",
                                     "is nested too deeply", f"at most {MAX_DEPTH} levels below "
                                     "the document", "flatten it: no Kubernetes field nests this deep"))
            continue
        if isinstance(value, (dict, list)):
            size += _push_items(path, value, depth, stack, errors)
        else:
            size += len(value) if isinstance(value, str) else 0
            if (error := _scalar_error(path, value)) is not None:
                errors.append(error)
        if size > MAX_DOCUMENT_BYTES:
            errors.append(FieldError(path, f"more than {MAX_DOCUMENT_BYTES} bytes "
                                     "of text", "makes the object too large",
                                     f"at most {MAX_DOCUMENT_BYTES} bytes in one object",
                                     "keep large data in a ConfigMap or volume"))
            break
    # A problem at the top (not a mapping at all, or all of it) is named as the document.
    return [dataclasses.replace(e, path="(document)") if not e.path else e for e in errors]


def _push_items(path: str, value: dict | list, depth: int, stack: list[tuple[str, Any, int]],
                errors: list[FieldError]) -> int:
    """A mapping's or a list's items onto the stack (a key that is no string is an error);
    the text its keys add."""
    size = 0
    if isinstance(value, list):
        for i in range(len(value) - 1, -1, -1):
            stack.append((f"{path or '(document)'}[{i}]", value[i], depth + 1))
        return size
    for key, item in value.items():
        if len(errors) >= MAX_ERRORS:  # a mapping of a million int keys is one problem, not a million
            break
        if not isinstance(key, str):
            errors.append(FieldError(key_path(path, key), key, "has a key that is not a "
                                     "string", "string keys (Kubernetes objects are JSON)",
                                     f"quote the key: \"{_plain(key)}\""))
            continue
        size += len(key)
        stack.append((key_path(path, key), item, depth + 1))
    return size


def _scalar_error(path: str, value: Any) -> FieldError | None:
    """What is wrong with one value that is no mapping or list, if anything."""
    if isinstance(value, str):
        if len(value) > MAX_STRING_BYTES:
            return FieldError(path, f"a string of {len(value)} characters", "is too long",
                              f"at most {MAX_STRING_BYTES} characters", "keep large data in a ConfigMap or volume")
        return None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        if not -INT64 <= value < INT64:
            return FieldError(path, value, "is too large", "a 64-bit integer", "use a value the field's range allows")
        return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return FieldError(path, value, "is not a finite number", "a finite number (JSON has no NaN or Infinity)",
                              "write a number such as 0.001")
        return None
    return FieldError(path, value, f"is a {type(value).__name__}, not a JSON value",
                      "a string, number, boolean, list or mapping", f"quote it: \"{_plain(value)}\"")


def key_path(prefix: str, key: Any) -> str:
    """`spec.key`, or `spec['a.b']` for keys that are not plain names; a non-string key is
    shown quoted too (`affinity['1']`), since YAML maps it to a JSON string key anyway."""
    if isinstance(key, str) and key and key.isprintable() and "." not in key and "[" not in key \
            and len(key) <= 253:
        return f"{prefix}.{key}" if prefix else key
    shown = _plain(key)
    return f"{prefix or '(document)'}[{shown!r}]"


def _plain(value: Any, limit: int = 40) -> str:
    """A key or scalar as the user would quote it (never a mapping or list: those are not
    keys, and the walk enters them). A huge integer is named: str() refuses past 4,300 digits."""
    text = "a huge integer" if isinstance(value, int) and abs(value) >= 10**40 else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
