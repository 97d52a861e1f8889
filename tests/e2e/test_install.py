"""The operator installed as a user installs it, running as a pod from our image on the real node."""

from __future__ import annotations

import pytest
import yaml

from .conftest import (CHART, OPERATOR_NS, READERS, REPO, helm, operator_log, wait_operator_ready)

pytestmark = [pytest.mark.slow]


def assert_logs_json(cluster, namespace: str) -> None:
    """The shipped logFormat json: every line the operator wrote is one JSON object."""
    import json
    lines = cluster.wait_for(
        lambda: [line for line in operator_log(cluster, namespace).splitlines() if line.strip()],
        timeout=60, what="the operator's first log lines")
    for line in lines:
        record = json.loads(line)
        assert {"message", "severity"} <= set(record), line


def test_helm_default_values_operator_ready_and_scraped_through_its_service(node_cluster, prometheus):
    """Default values but one: metrics.readers names Prometheus's account, as a user of the chart does."""
    helm(node_cluster, "install", "disttrain", str(CHART), "-n", OPERATOR_NS, "--create-namespace", *READERS)
    try:
        pod = wait_operator_ready(node_cluster)
        container = pod["status"]["containerStatuses"][0]
        assert container["restartCount"] == 0, operator_log(node_cluster)
        assert container["image"].endswith("ghcr.io/disttrain/operator:0.1.0")
        assert_logs_json(node_cluster, OPERATOR_NS)

        def scraped():
            return prometheus.query('up{job="disttrain-operator"} == 1')
        series = node_cluster.wait_for(scraped, timeout=90, interval=1,
                                       what="Prometheus to scrape the operator through the chart's Service")
        assert series[0]["metric"]["instance"].startswith(pod["status"]["podIP"] + ":")
        # the operator's own series arrive under their names (the dashboards' queries)
        assert node_cluster.wait_for(lambda: prometheus.query("disttrain_operator_reconcile_seconds_count"),
                                     timeout=30, what="disttrain_operator_reconcile_seconds in Prometheus")
        # Reaching the port is not enough: without a token, or with one the API server
        # does not allow /metrics, the operator answers 401 and 403 (and names no job).
        port = next(p["containerPort"] for p in pod["spec"]["containers"][0]["ports"] if p["name"] == "metrics")
        address = f"https://{pod['status']['podIP']}:{port}/metrics"
        assert refused(address, None) == 401
        assert refused(address, node_cluster.kubectl("create", "token", "default", "-n", OPERATOR_NS).stdout.strip()) == 403
    finally:
        helm(node_cluster, "uninstall", "disttrain", "-n", OPERATOR_NS, "--wait", "--timeout=120s")
        node_cluster.kubectl("delete", "namespace", OPERATOR_NS, "--timeout=120s", check=False, timeout=150)


def refused(url: str, token: str | None) -> int:
    """The HTTP status of a GET that must fail (0: it succeeded)."""
    import ssl
    import urllib.error
    import urllib.request
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        urllib.request.urlopen(request, timeout=10, context=ssl._create_unverified_context()).read()
    except urllib.error.HTTPError as exc:
        return exc.code
    return 0


def test_helm_non_default_values(node_cluster, ns, tmp_path):
    """One namespace watched, plain logs, another metrics port served as plain HTTP to
    anyone (metrics.auth none), no leader election."""
    values = {"watchNamespaces": [ns], "logFormat": "plain", "metrics": {"port": 9090, "auth": "none"},
              "leaderElection": {"enabled": False}, "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}}}
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    release_ns = f"{ns}-op"
    helm(node_cluster, "install", "dt", str(CHART), "-n", release_ns, "--create-namespace",
         "-f", str(tmp_path / "values.yaml"))
    try:
        pod = wait_operator_ready(node_cluster, release_ns)
        spec = pod["spec"]["containers"][0]
        assert f"--namespace={ns}" in spec["args"] and "--leader-elect" not in spec["args"]
        assert {"name": "metrics", "containerPort": 9090, "protocol": "TCP"} in spec["ports"]
        # plain text logs: kopf's own format, not JSON
        log = node_cluster.wait_for(lambda: operator_log(node_cluster, release_ns), timeout=60,
                                    what="the operator's first log lines")
        assert not log.lstrip().startswith("{"), log[:500]
        # metrics answer on the chosen port, as seen from the API server's proxy
        out = node_cluster.kubectl("get", "--raw",
                                   f"/api/v1/namespaces/{release_ns}/pods/{pod['metadata']['name']}:9090/proxy/metrics")
        assert "disttrain_operator_reconcile_seconds" in out.stdout
    finally:
        helm(node_cluster, "uninstall", "dt", "-n", release_ns, "--wait", "--timeout=120s")
        node_cluster.kubectl("delete", "namespace", release_ns, "--timeout=120s", check=False, timeout=150)


def test_kustomize_install(node_cluster):
    node_cluster.kubectl("apply", "-k", str(REPO / "manifests"), timeout=120)
    try:
        pod = wait_operator_ready(node_cluster)
        assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
        assert_logs_json(node_cluster, OPERATOR_NS)
    finally:
        node_cluster.kubectl("delete", "-k", str(REPO / "manifests"), "--timeout=120s", check=False, timeout=150)
