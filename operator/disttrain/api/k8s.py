"""Kubernetes-shaped fields (pod spec, affinity, tolerations, env sources) typed and
bounded from the vendored core/v1 OpenAPI (api/k8s_openapi.py).

One source for both sides: `schema(name)` is what the CRD embeds (so the API server
rejects absurd or mistyped objects at `kubectl apply`), and `check(name, value, path)` is
the same schema checked offline, naming the field. Kubernetes leaves most lists, strings
and maps unbounded; the CRD may not, so every one gets a bound here (far above real use).
Pure: no I/O.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from disttrain.api.errors import FieldError, did_you_mean, one_of, unset, wrong_type
from disttrain.api.k8s_openapi import KUBERNETES_VERSION, SCHEMAS

PREFIX = "io.k8s.api.core.v1."
# Bounds where Kubernetes has none, by property name; the defaults below otherwise.
MAX_ITEMS = {"containers": 16, "initContainers": 16, "volumes": 128, "volumeMounts": 128, "env": 256,
             "envFrom": 64, "args": 1024, "command": 256, "values": 256, "items": 256, "ports": 64,
             "sources": 64}
DEFAULT_MAX_ITEMS = 64
MAX_LENGTH = {"value": 32768, "args": 32768, "command": 4096}
DEFAULT_MAX_LENGTH = 4096
MAX_PROPERTIES = 64

__all__ = ["KUBERNETES_VERSION", "schema", "check", "POD_SPEC", "AFFINITY", "TOLERATION", "ENV_VAR_SOURCE"]

POD_SPEC = PREFIX + "PodSpec"
AFFINITY = PREFIX + "Affinity"
TOLERATION = PREFIX + "Toleration"
ENV_VAR_SOURCE = PREFIX + "EnvVarSource"


def schema(name: str, partial: bool = False, descriptions: bool = True,
           description_depth: int | None = None) -> dict[str, Any]:
    """The inlined, bounded structural schema of a definition. `partial`: no `required`
    at the top (a podTemplate.spec is merged into ours, so `containers` is optional).
    `description_depth`: keep descriptions only that many levels down (size of the CRD)."""
    out = copy.deepcopy(_inlined(name, descriptions))
    if partial:
        out.pop("required", None)
    if description_depth is not None:
        _drop_descriptions(out, description_depth)
    return out


def _drop_descriptions(node: dict[str, Any], depth: int) -> None:
    stack = [(node, 0)]
    while stack:
        current, level = stack.pop()
        if level > depth:
            current.pop("description", None)
        for key in ("items", "additionalProperties"):
            if isinstance(current.get(key), dict):
                stack.append((current[key], level))
        for child in current.get("properties", {}).values():
            stack.append((child, level + 1))


@functools.cache
def _inlined(name: str, descriptions: bool) -> dict[str, Any]:
    return _inline(SCHEMAS[name], "", descriptions)


def _inline(node: dict[str, Any], prop: str, descriptions: bool) -> dict[str, Any]:
    if "$ref" in node:
        target = _inlined(node["$ref"], descriptions)
        merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
        if not descriptions:
            merged.pop("description", None)
        return merged
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "description" and not descriptions:
            continue
        if key == "properties":
            out[key] = {k: _inline(v, k, descriptions) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _inline(value, prop, descriptions)
        else:
            out[key] = copy.deepcopy(value)
    kind = out.get("type")
    if kind == "array":
        out.setdefault("maxItems", MAX_ITEMS.get(prop, DEFAULT_MAX_ITEMS))
    elif kind == "string" and "enum" not in out:
        out.setdefault("maxLength", MAX_LENGTH.get(prop, DEFAULT_MAX_LENGTH))
    elif kind == "object" and "additionalProperties" in out:
        out.setdefault("maxProperties", MAX_PROPERTIES)
    return out


# ---- the same schema, offline ---------------------------------------------------------

_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
          "object": (dict,), "array": (list,)}
_WORDS = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
          "object": "a mapping", "array": "a list"}


def check(name: str, value: Any, path: str, partial: bool = False) -> list[FieldError]:
    """Every way `value` does not fit the definition `name` (at most 20), naming the field."""
    errors: list[FieldError] = []
    node = _inlined(name, False)  # shared and cached: read, never changed
    if partial:
        node = {k: v for k, v in node.items() if k != "required"}
    _check(node, value, path, errors)
    return errors[:20]


def _check(node: dict[str, Any], value: Any, path: str, errors: list[FieldError]) -> None:
    if len(errors) >= 20 or value is None:
        return
    if node.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            errors.append(wrong_type(path, value, "an integer or a string"))
        return
    kind = node.get("type")
    if kind in _TYPES and (not isinstance(value, _TYPES[kind]) or (isinstance(value, bool) and kind != "boolean")):
        errors.append(wrong_type(path, value, _WORDS[kind]))
        return
    if "enum" in node and value not in node["enum"]:
        errors.append(FieldError(path, value, "is not allowed", ", ".join(map(str, node["enum"])),
                                 one_of(value, node["enum"], path)))
    if kind == "string" and len(value) > node.get("maxLength", len(value)):
        errors.append(FieldError(path, f"{len(value)} characters", "is too long",
                                 f"at most {node['maxLength']} characters", "shorten it"))
    elif kind == "array":
        if len(value) > node.get("maxItems", len(value)):
            errors.append(FieldError(path, f"{len(value)} items", "has too many items",
                                     f"at most {node['maxItems']}", "remove some"))
            return
        for i, item in enumerate(value):
            _check(node.get("items", {}), item, f"{path}[{i}]", errors)
    elif kind == "object":
        _check_object(node, value, path, errors)


def _check_object(node: dict[str, Any], value: dict, path: str, errors: list[FieldError]) -> None:
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        if len(value) > node.get("maxProperties", len(value)):
            errors.append(FieldError(path, f"{len(value)} entries", "has too many entries",
                                     f"at most {node['maxProperties']}", "remove some"))
            return
        for key, item in value.items():
            _check(extra, item, f"{path}.{key}", errors)
        return
    props = node.get("properties", {})
    for key, item in value.items():
        if key not in props:
            hint = (did_you_mean(key, props, "field names")
                    or f"remove it (see `kubectl explain` for {path.split('.')[-1]})")
            errors.append(FieldError(f"{path}.{key}", item, "is not a known field",
                                     f"the Kubernetes {KUBERNETES_VERSION} fields here", hint))
            continue
        _check(props[key], item, f"{path}.{key}", errors)
    for key in node.get("required", ()):
        if key not in value:
            errors.append(FieldError(f"{path}.{key}", unset(), "is required", hint=f"set {path}.{key}"))
