"""The Helm chart ships copies of the CRDs and the RBAC rules: they must match manifests/."""

from __future__ import annotations

import json
import os
import re

import yaml

from .conftest import ROOT
from .exported_metrics import DESIGN_METRICS, METRICS, exported_families, metric_names

CHART = os.path.join(ROOT, "charts", "disttrain")
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


def test_the_code_exports_every_design_metric_name():
    exported = set(exported_families())
    assert DESIGN_METRICS <= exported, sorted(DESIGN_METRICS - exported)


def test_dashboards_query_only_metrics_we_export():
    for name in ("operator.json", "training.json"):
        with open(os.path.join(CHART, "dashboards", name)) as handle:
            board = json.load(handle)
        exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
        assert exprs, name
        for expr in exprs:
            assert metric_names(expr) and metric_names(expr) <= METRICS, (name, expr, metric_names(expr) - METRICS)


def test_namespaced_rbac_is_the_cluster_role_split():
    """The namespaced mode's Role and read-only ClusterRole are generated from the same
    rules (`make crd`): together they grant nothing the cluster-wide role does not, and
    nothing cluster-scoped beyond reads and reviews."""
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
        "podgroups", "poddisruptionbudgets", "trainingtemplates", "resourceclaimtemplates", "resourceclaims", "computedomains"}
    # Cluster-scoped: reads, and the reviews /metrics asks for (created only to read a verdict).
    assert all(set(rule["verbs"]) <= {"get", "list", "watch"}
               or (rule["verbs"] == ["create"] and set(rule["resources"]) <= {"tokenreviews", "subjectaccessreviews"})
               for rule in cluster)


def test_alert_rules_use_only_metrics_we_export():
    with open(os.path.join(CHART, "alerts.yaml")) as handle:
        exprs = re.findall(r"^\s*expr:\s*(.+)$", handle.read(), flags=re.M)
    assert len(exprs) >= 3
    for expr in exprs:
        assert metric_names(expr) and metric_names(expr) <= METRICS, (expr, metric_names(expr) - METRICS)


def test_docs_name_only_metrics_we_export():
    docs = [os.path.join(ROOT, "README.md"), os.path.join(CHART, "README.md"),
            *(os.path.join(ROOT, "docs", n) for n in sorted(os.listdir(os.path.join(ROOT, "docs"))) if n.endswith(".md"))]
    seen = set()
    for path in docs:
        with open(path) as handle:
            names = metric_names(handle.read())
        assert names <= METRICS, (os.path.relpath(path, ROOT), sorted(names - METRICS))
        seen |= names
    assert seen >= {"disttrain_train_step", "disttrain_operator_jobs"}, "the docs name the metrics"


def _hack(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "hack", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_values_schema_is_generated():
    with open(os.path.join(CHART, "values.schema.json")) as handle:
        assert handle.read() == _hack("chart_values_schema").render(), \
            "charts/disttrain/values.schema.json drifted from hack/chart_values_schema.py: run `make chart-docs`"


def test_chart_readme_values_table_is_generated():
    table = _hack("chart_values_table")
    with open(os.path.join(CHART, "README.md")) as handle:
        readme = handle.read()
    assert table.replace_block(readme, table.table(*table.load())) == readme, \
        "the values table of charts/disttrain/README.md drifted: run `make chart-docs`"


def test_values_schema_refuses_unknown_keys_and_describes_every_value():
    with open(os.path.join(CHART, "values.schema.json")) as handle:
        schema = json.load(handle)
    open_objects = []

    def walk(node, path):
        if not isinstance(node, dict):
            return
        if "properties" in node and node.get("additionalProperties") is not False:
            open_objects.append(path)
        for name, sub in node.get("properties", {}).items():
            walk(sub, f"{path}.{name}")
        for key in ("items", "additionalProperties"):
            walk(node.get(key), f"{path}[]")
    walk(schema, "")
    assert open_objects == [], open_objects
    with open(os.path.join(CHART, "values.yaml")) as handle:
        values = yaml.safe_load(handle)
    keys = [row[0] for row in _hack("chart_values_table").rows(schema, values)]
    assert all(row[3] for row in _hack("chart_values_table").rows(schema, values))
    # every default in values.yaml is a documented key (helm lint checks the types)
    for top, value in values.items():
        assert any(k == top or k.startswith(top + ".") for k in keys), top


def _documented_meanings() -> dict[str, tuple[str | None, str]]:
    """{metric: (type or None, meaning)} from the metric tables of docs/operations.md
    (metric | type | meaning) and docs/trainer.md (metric | meaning)."""
    out = {}
    for page in ("operations.md", "trainer.md"):
        with open(os.path.join(ROOT, "docs", page)) as handle:
            for line in map(str.strip, handle):  # (trainer.md's table sits in a list item)
                if not line.startswith("| `disttrain_"):
                    continue
                cells = [c.strip() for c in line.strip("|").split("|")]
                name = re.fullmatch(r"`(disttrain_[a-z_]+)(?:\{[a-z_,]+\})?`", cells[0])
                assert name, f"docs/{page}: one metric a row: {cells[0]}"
                out[name.group(1)] = (cells[1] if len(cells) == 3 else None, cells[-1])
    return out


def help_text(meaning: str) -> str:
    """A documented meaning as the HELP line says it: its links' text only (a parenthesised
    link to another section goes), no backticks, a capital and a full stop."""
    text = re.sub(r"\s*\(\[[^\]]+\]\([^)]+\)\)", "", meaning)
    text = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", text).replace("`", "")
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def test_every_metric_says_in_its_help_line_what_the_docs_say_it_means():
    """Prometheus, Grafana's metric browser and `curl /metrics` show the HELP line: it is the
    meaning users read next to the number, so it is the documented one, word for word."""
    from prometheus_client import CollectorRegistry

    from disttrain.operator.metrics import OperatorMetrics
    from disttrain_trainer.config import MetricsConfig
    from disttrain_trainer.metrics import PrometheusSink

    trainer = CollectorRegistry()
    PrometheusSink(MetricsConfig(job="j", namespace="n", pod="p"), restarts=0, registry=trainer)
    exported = {family.name + ("_total" if family.type == "counter" else ""): (family.type, family.documentation)
                for registry in (OperatorMetrics().registry, trainer) for family in registry.collect()}
    documented = _documented_meanings()
    assert sorted(documented) == sorted(exported), "one row per exported metric in docs/operations.md or trainer.md"
    for name, (kind, meaning) in documented.items():
        assert kind in (None, exported[name][0]), (name, kind, exported[name][0])
        assert exported[name][1] == help_text(meaning), name
