"""What the operator's own Pod lets in, in every install as shipped: the port its probes ask
is the port the operator serves /healthz on, open to every source (the kubelet); the port it
serves /metrics on is its `metrics` port, reachable only from the monitoring peers the
install names, because those series name every tenant's jobs. Ports are read the way the
operator and the kubelet read them: its arguments and env (operator_reading.py), the
probes' named ports. Enforcement needs a CNI, which neither KWOK nor the real node's bridge
is, so the objects are checked."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest
import yaml

from operator_reading import chart_objects, kustomize_text, operator_deployment, operator_reading

pytestmark = [pytest.mark.cluster]

MONITORING = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
PROMETHEUS_PODS = [{"podSelector": {"matchLabels": {"app": "prometheus"}}}]
EVERYONE = "every source"


def installs(cluster) -> dict[str, tuple[list[dict], list[dict]]]:
    """install -> (its objects, the peers that must alone reach the operator's metrics)."""
    def chart(*values: str) -> list[dict]:
        return chart_objects(cluster, "dt", "dt-system", *values)

    def kustomize(path: str) -> list[dict]:
        return [d for d in yaml.safe_load_all(kustomize_text(cluster, path)) if d]

    return {
        "chart": (chart(), MONITORING),
        "chart, namespaced": (chart("--set", "watchNamespaces={ml}"), MONITORING),
        "chart, its own ports and peers": (
            chart("--set", "metrics.port=9100", "--set", "healthPort=9101",
                  "--set-json", f"networkPolicy.metricsFrom={json.dumps(PROMETHEUS_PODS)}"),
            PROMETHEUS_PODS),
        "kustomize manifests/": (kustomize("manifests"), MONITORING),
        "kustomize manifests/ha": (kustomize("manifests/ha"), MONITORING),
        "kustomize manifests/namespaced": (kustomize("manifests/namespaced"), MONITORING),
    }


def who_reaches(policy: dict, port: int, named: dict[str, int]) -> list[dict] | str:
    """The peers an Ingress policy admits on this port (EVERYONE for a rule without `from`).
    A rule without `ports` covers every port; a named port is the container's."""
    peers: list[dict] = []
    for rule in policy["spec"].get("ingress") or []:
        ports = [named.get(p["port"], p["port"]) for p in rule.get("ports") or []]
        if ports and port not in ports:
            continue
        if not rule.get("from"):
            return EVERYONE
        peers += rule["from"]
    return peers


def test_the_operator_pod_lets_every_source_reach_its_probes_and_only_monitoring_its_metrics(cluster):
    wrong = []
    for install, (objects, monitoring) in installs(cluster).items():
        deployment = operator_deployment(objects)
        policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
        assert len(policies) == 1, f"{install}: one NetworkPolicy for the operator's Pod, found {len(policies)}"
        policy, pod = policies[0], deployment["spec"]["template"]
        args, settings = operator_reading(deployment)
        container = pod["spec"]["containers"][0]
        named = {p["name"]: p["containerPort"] for p in container["ports"]}
        health = urlsplit(args.liveness).port
        probed = {named.get(p, p) for p in (container[k]["httpGet"]["port"] for k in ("readinessProbe", "livenessProbe"))}
        facts = {
            "the probes ask the port it serves /healthz on": probed == {health},
            "its `metrics` port is the one it serves /metrics on": named.get("metrics") == settings.metrics_port,
            "the policy is in its namespace": policy["metadata"]["namespace"] == deployment["metadata"]["namespace"],
            "the policy selects its Pod": policy["spec"]["podSelector"]["matchLabels"].items()
            <= pod["metadata"]["labels"].items(),
            "the policy is about ingress": policy["spec"].get("policyTypes") == ["Ingress"],
            "every source reaches the health port": who_reaches(policy, health, named) == EVERYONE,
            "only the monitoring peers reach the metrics port": who_reaches(policy, settings.metrics_port, named)
            == monitoring,
        }
        wrong += [f"{install}: not so: {fact}" for fact, holds in facts.items() if not holds]
    assert wrong == []
