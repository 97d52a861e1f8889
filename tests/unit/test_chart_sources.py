"""The Helm chart ships copies of the CRDs and the RBAC rules: they must match manifests/."""

from __future__ import annotations

import json
import os
import re

import yaml

from .conftest import ROOT

CHART = os.path.join(ROOT, "charts", "disttrain")
# DESIGN.md's metric names: dashboards and alerts may use only these.
METRICS = {
    "disttrain_operator_jobs", "disttrain_operator_reconcile_seconds", "disttrain_operator_pods_created_total",
    "disttrain_operator_job_restarts_total", "disttrain_operator_job_time_to_running_seconds",
    "disttrain_operator_validation_warnings_total", "disttrain_operator_job_failures_total",
    "disttrain_operator_checkpoint_age_seconds", "disttrain_train_step", "disttrain_train_loss",
    "disttrain_train_samples_per_second", "disttrain_train_step_seconds", "disttrain_train_world_size",
    "disttrain_train_restarts", "disttrain_checkpoint_save_seconds", "disttrain_checkpoint_last_step",
    "disttrain_checkpoint_last_timestamp_seconds",
}


def load(path):
    with open(path) as handle:
        return list(yaml.safe_load_all(handle))


def test_chart_crds_are_the_manifests_crds():
    for name in [n for n in os.listdir(os.path.join(ROOT, "manifests", "crd")) if n.endswith(".yaml")]:
        assert load(os.path.join(CHART, "crds", name)) == load(os.path.join(ROOT, "manifests", "crd", name)), \
            f"charts/disttrain/crds/{name} drifted: run `make crd`"


def test_chart_rbac_rules_are_the_manifests_rules():
    rules = load(os.path.join(CHART, "rbac-rules.yaml"))[0]
    role = load(os.path.join(ROOT, "manifests", "rbac", "cluster-role.yaml"))[0]
    assert rules == role["rules"], "charts/disttrain/rbac-rules.yaml drifted: run `make crd`"


def metric_names(expr: str) -> set[str]:
    names = set(re.findall(r"\b(disttrain_[a-z_]+)", expr))
    return {re.sub(r"_(bucket|count|sum)$", "", n) if n.endswith(("_bucket", "_count", "_sum")) else n
            for n in names}


def test_dashboards_query_only_metrics_we_export():
    for name in ("operator.json", "training.json"):
        with open(os.path.join(CHART, "dashboards", name)) as handle:
            board = json.load(handle)
        exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
        assert exprs, name
        for expr in exprs:
            assert metric_names(expr) and metric_names(expr) <= METRICS, (name, expr)


def test_namespaced_rbac_is_the_cluster_role_split():
    """The namespaced mode's Role and read-only ClusterRole are generated from the same
    rules (`make crd`): together they grant nothing the cluster-wide role does not, and
    nothing cluster-scoped beyond reads."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("rbac", os.path.join(ROOT, "hack", "chart_rbac_rules.py"))
    rbac = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rbac)
    namespaced, cluster = rbac.split(rbac.rules())
    assert load(os.path.join(CHART, "rbac-rules-namespaced.yaml"))[0] == namespaced, "run `make crd`"
    assert load(os.path.join(CHART, "rbac-rules-cluster-read.yaml"))[0] == cluster, "run `make crd`"
    overlay = [d for d in load(os.path.join(ROOT, "manifests", "namespaced", "rbac.yaml")) if d]
    assert next(d for d in overlay if d["kind"] == "Role")["rules"] == namespaced
    assert next(d for d in overlay if d["kind"] == "ClusterRole")["rules"] == cluster
    assert {r for rule in namespaced for r in rule["resources"]} == {
        "distributedtrainings", "distributedtrainings/status", "pods", "services", "networkpolicies", "events",
        "kopfpeerings"}
    assert all(set(rule["verbs"]) <= {"get", "list", "watch"} for rule in cluster)
