"""A DistributedTraining object from a dict or a typed spec (pure): what Client.create
sends. The typed spec's fields map to their Kubernetes names through the same metadata
the CRD is generated from (api/meta.py), so a spec built in Python and one written in
YAML are the same object."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from .api import types as t
from .api.meta import fields_of, json_name


def manifest_of(job: dict[str, Any] | t.DistributedTrainingSpec, *, name: str | None = None) -> dict[str, Any]:
    """A whole object: apiVersion and kind filled in, `name` (if given) set."""
    if isinstance(job, t.DistributedTrainingSpec):
        obj: dict[str, Any] = {"metadata": {}, "spec": spec_dict(job)}
    elif isinstance(job, dict):
        obj = copy.deepcopy(job)
    else:
        raise TypeError(f"a job is a dict or a DistributedTrainingSpec, not {type(job).__name__}")
    obj.setdefault("apiVersion", t.API_VERSION)
    obj.setdefault("kind", t.KIND)
    if not isinstance(obj.get("metadata"), dict):
        obj["metadata"] = {}
    if name:
        obj["metadata"]["name"] = name
    return obj


def spec_dict(value: Any) -> Any:
    """A typed value -> its JSON form (camelCase keys, unset fields left out)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f, _ in fields_of(type(value)):
            item = getattr(value, f.name)
            if item is not None:
                out[json_name(f)] = spec_dict(item)
        return out
    if isinstance(value, list):
        return [spec_dict(v) for v in value]
    if isinstance(value, dict):
        return {k: spec_dict(v) for k, v in value.items()}
    return value
