"""Server-side apply of a job, as `disttrain apply` and `Client.apply` do it: our field
manager, which conflicts are our own, and whether an apply changed what a user writes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# Who writes what the CLI and client create or apply (metadata.managedFields): the same
# name for both, so `apply` after `submit` changes the fields it set without a conflict.
FIELD_MANAGER = "disttrain"
APPLY = "application/apply-patch+yaml"  # server-side apply


def own_fields_only(causes: Iterable[dict[str, Any]]) -> bool:
    """Are all of a server-side apply's conflicts with fields FIELD_MANAGER itself set?"""
    conflicts = [c for c in causes if c.get("reason") == "FieldManagerConflict"]
    return bool(conflicts) and all(f'"{FIELD_MANAGER}"' in str(c.get("message", "")) for c in conflicts)


def same_content(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Did an apply leave what a user writes as it was (spec, labels, annotations)?"""
    def content(obj: dict[str, Any]) -> tuple[Any, ...]:
        meta = obj.get("metadata") or {}
        return obj.get("spec"), meta.get("labels"), meta.get("annotations")

    return content(before) == content(after)
