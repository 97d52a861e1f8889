"""The CRD's CEL rules evaluated offline, as the API server would evaluate them.

The API server first applies the schema's defaults, then runs every
`x-kubernetes-validations` rule of each node present in the object. Transition rules
(those reading `oldSelf`) run only on an update, when the node existed before. This
walks the generated CRD (api/schema.py) the same way with cel-python, so a unit test
sees what `kubectl apply` would answer.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import celpy

from disttrain.api import schema

_ENV = celpy.Environment()


def root_schema() -> dict:
    return schema.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


@functools.cache
def _program(rule: str):
    return _ENV.program(_ENV.compile(rule))


def evaluate(rule: str, self: Any, old_self: Any = None) -> bool:
    """The rule's verdict. An evaluation error rejects the object, as on the API server
    (cel-python has no heterogeneous equality: `2 == 'auto'` is an error here and false
    there; both reject)."""
    activation = {"self": celpy.json_to_cel(self)}
    if old_self is not None:
        activation["oldSelf"] = celpy.json_to_cel(old_self)
    try:
        result = _program(rule).evaluate(activation)
    except celpy.CELEvalError:
        return False
    return not isinstance(result, celpy.CELEvalError) and bool(result)


def apply_defaults(node: dict, value: Any) -> Any:
    """Structural defaulting: absent properties with a default get it, recursively."""
    if not isinstance(value, dict) or "properties" not in node:
        return value
    out = dict(value)
    for name, child in node["properties"].items():
        if name not in out and "default" in child:
            out[name] = copy.deepcopy(child["default"])
        if name in out:
            out[name] = apply_defaults(child, out[name])
    return out


def rules_of(node: dict, path: str = "") -> list[tuple[str, dict]]:
    """(path, rule) for every rule in the schema, for coverage checks."""
    out = [(path, r) for r in node.get("x-kubernetes-validations", [])]
    for name, child in node.get("properties", {}).items():
        out += rules_of(child, f"{path}.{name}")
    if "items" in node:
        out += rules_of(node["items"], f"{path}[]")
    return out


def violations(obj: dict, old: dict | None = None) -> list[tuple[str, str]]:
    """(path, message) of every rule the object breaks; `old` makes it an update."""
    root = root_schema()
    new = apply_defaults(root, obj)
    before = apply_defaults(root, old) if old is not None else None
    return _walk(root, new, before, "")


def _walk(node: dict, value: Any, old: Any, path: str) -> list[tuple[str, str]]:
    out = []
    for rule in node.get("x-kubernetes-validations", []):
        transition = "oldSelf" in rule["rule"]
        if transition and old is None:
            continue  # transition rules run on updates of an existing node only
        if not evaluate(rule["rule"], value, old if transition else None):
            out.append((path + rule.get("fieldPath", ""), rule["message"]))
    if isinstance(value, dict):
        for name, child in node.get("properties", {}).items():
            if name in value:
                was = old.get(name) if isinstance(old, dict) else None
                out += _walk(child, value[name], was, f"{path}.{name}")
    if isinstance(value, list) and "items" in node:
        for i, item in enumerate(value):
            out += _walk(node["items"], item, None, f"{path}[{i}]")
    return out
