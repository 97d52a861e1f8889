"""The Helm chart with real helm, a real API server and real promtool."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from unit.test_chart_sources import METRICS, metric_names

pytestmark = pytest.mark.cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHART = os.path.join(REPO, "charts", "disttrain")
ALL_ON = ["--set", "serviceMonitor.enabled=true", "--set", "podMonitor.enabled=true",
          "--set", "prometheusRule.enabled=true", "--set", "dashboards.enabled=true",
          "--set", "standby.enabled=true"]


def helm(cluster, *args: str) -> str:
    proc = subprocess.run([str(cluster.bin_dir / "helm"), *args], capture_output=True, text=True, env=cluster.env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_chart_lints(cluster):
    assert "0 chart(s) failed" in helm(cluster, "lint", CHART, *ALL_ON)


def test_chart_renders_objects_the_api_server_accepts(cluster, namespace):
    cluster.kubectl("apply", "--server-side", "-f", os.path.join(CHART, "crds"))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/clusterkopfpeerings.kopf.dev", "crd/distributedtrainings.disttrain.dev")
    rendered = helm(cluster, "template", "disttrain", CHART, "-n", namespace,
                    "--set", "standby.enabled=true", "--set", "dashboards.enabled=true")
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(rendered) if d)
    assert kinds == ["ClusterKopfPeering", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "ConfigMap",
                     "Deployment", "Deployment", "Service", "ServiceAccount"]
    cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=rendered)


def test_chart_role_is_the_one_the_tests_run_the_operator_with(cluster):
    rendered = [d for d in yaml.safe_load_all(helm(cluster, "template", "disttrain", CHART)) if d]
    role = next(d for d in rendered if d["kind"] == "ClusterRole")
    with open(os.path.join(REPO, "manifests", "rbac", "cluster-role.yaml")) as handle:
        assert role["rules"] == yaml.safe_load(handle)["rules"]


def test_alert_rules_pass_promtool_and_use_our_metrics(cluster, tmp_path):
    rendered = [d for d in yaml.safe_load_all(helm(cluster, "template", "disttrain", CHART, *ALL_ON)) if d]
    rule = next(d for d in rendered if d["kind"] == "PrometheusRule")
    groups = tmp_path / "rules.yaml"
    groups.write_text(yaml.safe_dump(rule["spec"]))
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: hack/ensure-promtool.sh installs it (make tools)"
    check = subprocess.run([promtool, "check", "rules", str(groups)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    alerts = {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {"DistTrainJobFailed", "DistTrainJobStalled", "DistTrainCheckpointTooOld"} <= set(alerts)
    for expr in alerts.values():
        assert metric_names(expr) <= METRICS, expr


def test_alerts_fire_on_failure_stall_and_old_checkpoint(cluster, tmp_path):
    """promtool's rule unit tests: the alerts fire on synthetic series, and only then."""
    rendered = [d for d in yaml.safe_load_all(helm(cluster, "template", "disttrain", CHART, *ALL_ON)) if d]
    rule = next(d for d in rendered if d["kind"] == "PrometheusRule")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            {"series": 'disttrain_operator_job_failures_total{reason="BackoffLimitExceeded"}', "values": "0 0 1 1 1"},
            {"series": 'disttrain_train_step{namespace="ml",job="stuck",pod="stuck-worker-0"}', "values": "5x40"},
            {"series": 'disttrain_train_step{namespace="ml",job="busy",pod="busy-worker-0"}', "values": "0+1x40"},
            {"series": 'disttrain_operator_checkpoint_age_seconds{namespace="ml",job="old"}', "values": "4000x20"},
        ],
        "alert_rule_test": [
            {"eval_time": "4m", "alertname": "DistTrainJobFailed", "exp_alerts": [
                {"exp_labels": {"severity": "warning", "reason": "BackoffLimitExceeded"},
                 "exp_annotations": {"summary": "A DistributedTraining failed (BackoffLimitExceeded)",
                                     "description": "kubectl get dt -A shows which; kubectl describe dt NAME has the message."}}]},
            {"eval_time": "30m", "alertname": "DistTrainJobStalled", "exp_alerts": [
                {"exp_labels": {"severity": "warning", "namespace": "ml", "job": "stuck"},
                 "exp_annotations": {"summary": "ml/stuck made no step in 15 minutes",
                                     "description": "The trainer runs but its step does not move: a hung collective, a stuck data loader or a dead node. Check kubectl logs of its workers."}}]},
            {"eval_time": "10m", "alertname": "DistTrainCheckpointTooOld", "exp_alerts": [
                {"exp_labels": {"severity": "warning", "namespace": "ml", "job": "old"},
                 "exp_annotations": {"summary": "ml/old: newest checkpoint older than 60 minutes",
                                     "description": "A failure now would lose that much training. Check the checkpoint volume and the CheckpointStale condition."}}]},
        ],
    }]}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run([shutil.which("promtool") or "promtool", "test", "rules", "tests.yaml"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
