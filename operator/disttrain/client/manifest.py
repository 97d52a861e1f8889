"""A DistributedTraining object from a dict or a typed spec (pure): what Client.create
sends. The typed spec's fields map to their Kubernetes names through the same metadata
the CRD is generated from (api/meta.py), so a spec built in Python and one written in
YAML are the same object."""

from __future__ import annotations

import copy
from typing import Any

from disttrain.api import types as t
from disttrain.api.parse import dump_object


def manifest_of(job: dict[str, Any] | t.DistributedTrainingSpec, *, name: str | None = None) -> dict[str, Any]:
    """A whole object: apiVersion and kind filled in, `name` (if given) set."""
    if isinstance(job, t.DistributedTrainingSpec):
        obj: dict[str, Any] = {"metadata": {}, "spec": dump_object(job)}
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


