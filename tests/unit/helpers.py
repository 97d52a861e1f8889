"""Small builders shared by the unit tests."""

from __future__ import annotations

import copy
from typing import Any

from disttrain_operator.api import validate_document


def job(**spec: Any) -> dict:
    """A minimal valid DistributedTraining document with `spec` overrides."""
    return {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
            "metadata": {"name": "demo", "namespace": "team-a"},
            "spec": copy.deepcopy(spec)}


def errors_of(doc: dict) -> list[str]:
    return [str(e) for e in validate_document(doc).errors]


def warnings_of(doc: dict) -> dict[str, str]:
    return {w.reason: w.message for w in validate_document(doc).warnings}
