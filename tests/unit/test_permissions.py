"""The operator's API use (disttrain/operator/permissions.py) is what its code calls and
exactly what the shipped RBAC grants; a call it does not list is never sent. The API
server's own answer for each install mode is tests/cluster/test_least_privilege.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from disttrain.integrations.kueue.shell import Kueue
from disttrain.operator import kube, permissions as p

from .helpers import ROOT


@pytest.mark.parametrize("method,path,params,expected", [
    ("GET", "/api/v1/namespaces/a/pods/w-0", None, ("get", "", "pods")),
    ("GET", "/api/v1/namespaces/a/pods", None, ("list", "", "pods")),
    ("GET", "/api/v1/namespaces/a/pods", {"watch": "true"}, ("watch", "", "pods")),
    ("POST", "/api/v1/namespaces/a/events", None, ("create", "", "events")),
    ("DELETE", "/api/v1/namespaces/a/pods/w-0", None, ("delete", "", "pods")),
    ("DELETE", "/api/v1/namespaces/a/pods", None, ("deletecollection", "", "pods")),
    ("PATCH", "/apis/disttrain.dev/v1alpha1/namespaces/a/distributedtrainings/j/status", None,
     ("patch", "disttrain.dev", "distributedtrainings/status")),
    ("PUT", "/apis/kueue.x-k8s.io/v1beta2/namespaces/a/workloads/w/status", None,
     ("update", "kueue.x-k8s.io", "workloads/status")),
    ("GET", "/apis/kueue.x-k8s.io/v1beta2/resourceflavors/gpu", None, ("get", "kueue.x-k8s.io", "resourceflavors")),
    ("GET", "/api/v1/namespaces/a", None, ("get", "", "namespaces")),
    ("GET", "/api/v1/nodes?watch=true", None, ("list", "", "nodes")),  # the query is params', not the path's
])
def test_a_call_is_named_as_rbac_names_it(method, path, params, expected):
    assert p.classify(method, path, params) == expected


def test_a_call_the_table_does_not_list_is_refused_naming_where_to_declare_it():
    p.check("POST", "/api/v1/namespaces/a/pods")
    for method, path in (("GET", "/api/v1/namespaces/a/secrets/s"), ("PATCH", "/api/v1/namespaces/a/pods/w-0"),
                         ("POST", "/api/v1/namespaces")):
        with pytest.raises(p.UndeclaredApiUse) as refused:
            p.check(method, path)
        assert "disttrain/operator/permissions.py" in str(refused.value) and path in str(refused.value)
    p.check("GET", "/apis/disttrain.dev/v1alpha1")  # discovery: every account may read it
    for method, path in (("POST", "/apis/disttrain.dev/v1alpha1"), ("GET", "/apis/disttrain.dev")):
        with pytest.raises(p.UndeclaredApiUse):
            p.check(method, path)


def test_every_kind_the_client_addresses_has_a_row():
    for kind, template in kube._PATHS.items():
        verb, group, resource = p.classify("GET", template.format(ns="a") + "/x")
        assert any((u.group, u.resource) == (group, resource) for u in p.USES), kind


def kopf_watches() -> set[tuple[str, str]]:
    """(group, plural) of every resource handlers.py, or an integration's watch, hands to
    kopf.index or kopf.on.event."""
    import sys

    from disttrain.integrations.registry import REGISTRY
    from disttrain.operator import handlers
    modules = {handlers, *(sys.modules[kind.__module__] for kind in REGISTRY)}
    found = set()
    for module in modules:  # wherever the package is (mutation mirrors it)
        for node in ast.walk(ast.parse(Path(module.__file__).read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("kopf.index", "kopf.on.event"):
                # Each argument as the module's own names give it (GROUP, kueue.GROUP, "pods" ...).
                args = [eval(ast.unparse(a), vars(module)) for a in node.args]  # noqa: S307  (our own source)
                found.add(("", args[0]) if len(args) == 1 else (args[0], args[2]))
    return found


def test_every_resource_kopf_watches_is_listed_and_watched():
    watches = kopf_watches()
    assert ("", "nodes") in watches and ("kueue.x-k8s.io", "workloads") in watches  # the parse found them
    listed = {(u.group, u.resource) for u in p.USES if {"list", "watch"} <= u.verbs}
    assert watches <= listed, watches - listed


def granted(path: str, *kinds: str) -> set[tuple[str, str, str]]:
    out = set()
    for doc in yaml.safe_load_all((ROOT / path).read_text()):
        if doc and doc["kind"] in kinds:
            for rule in doc["rules"]:
                out |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    return out


def used(scopes: tuple[str, ...], feature: str) -> set[tuple[str, str, str]]:
    return {(u.group, u.resource, v) for u in p.USES if u.scope in scopes and u.feature == feature for v in u.verbs}


def test_the_shipped_roles_grant_exactly_the_listed_calls():
    assert granted("manifests/rbac/cluster-role.yaml", "ClusterRole") == used((p.WATCHED, p.CLUSTER), p.ALWAYS)
    assert granted("manifests/rbac/leader-election.yaml", "Role") == used((p.OWN,), p.ALWAYS)
    assert granted("manifests/kueue/rbac.yaml", "ClusterRole", "Role") == used((p.WATCHED, p.CLUSTER), Kueue.feature)
