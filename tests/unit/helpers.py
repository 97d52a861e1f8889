"""Small builders shared by the unit tests."""

from __future__ import annotations

import copy
from typing import Any

from disttrain_operator.api import validate_document


SHARED_CLAIM = "shared-checkpoints"


def job(*, shared_claim: bool = True, **spec: Any) -> dict:
    """A minimal valid DistributedTraining document with `spec` overrides. A spec that can
    have more than one pod gets checkpoint.claimName (required then) unless it names one,
    or `shared_claim=False` asks for none."""
    spec = copy.deepcopy(spec)
    pods = [spec.get(k) for k in ("nodes", "maxNodes")]
    if shared_claim and any(isinstance(n, int) and n > 1 for n in pods) and isinstance(spec.get("checkpoint", {}), dict):
        spec["checkpoint"] = {"claimName": SHARED_CLAIM, **spec.get("checkpoint", {})}
    return {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
            "metadata": {"name": "demo", "namespace": "team-a"}, "spec": spec}


# The metadata of every child of job() with uid "u-1": named and placed like the job, its
# labels, and owned by it (garbage-collected with it).
CHILD_METADATA = {
    "name": "demo", "namespace": "team-a",
    "labels": {"app.kubernetes.io/name": "disttrain", "app.kubernetes.io/instance": "demo",
               "app.kubernetes.io/managed-by": "disttrain-operator", "app.kubernetes.io/part-of": "disttrain",
               "disttrain.dev/job": "demo"},
    "ownerReferences": [{"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining", "name": "demo",
                         "uid": "u-1", "controller": True, "blockOwnerDeletion": True}]}


def errors_of(doc: dict) -> list[str]:
    return [str(e) for e in validate_document(doc).errors]


def warnings_of(doc: dict) -> dict[str, str]:
    return {w.reason: w.message for w in validate_document(doc).warnings}
