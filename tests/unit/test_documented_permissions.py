"""docs/operations.md's permissions table is exact: the same resources and verbs as the
ClusterRole the operator runs with in every cluster test (manifests/rbac)."""

from __future__ import annotations

import re

import yaml

from .helpers import ROOT


def documented() -> dict[str, set[str]]:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text[text.index("## Permissions (least privilege)"):]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            if rows:
                break
            continue
        resources, verbs = (c.strip() for c in line.strip("|").split("|")[:2])
        for resource in re.findall(r"`([a-z/]+)`", resources):
            rows[resource] = {v.strip() for v in verbs.split(",")}
    return rows


def granted() -> dict[str, set[str]]:
    rows: dict[str, set[str]] = {}
    for path in ("cluster-role.yaml", "leader-election.yaml"):
        for doc in yaml.safe_load_all((ROOT / "manifests" / "rbac" / path).read_text()):
            if doc and doc["kind"] in ("ClusterRole", "Role"):
                for rule in doc["rules"]:
                    for resource in rule["resources"]:
                        rows.setdefault(resource, set()).update(rule["verbs"])
    return rows


def test_the_permissions_table_is_the_role_the_operator_runs_with():
    assert documented() == granted()
