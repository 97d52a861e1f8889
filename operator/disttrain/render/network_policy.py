"""A NetworkPolicy per job: its worker pods accept traffic from the other workers of the
same job (rendezvous, gloo/NCCL collectives on ephemeral ports) and, on the metrics port
only, from the operator (it reads /status) and from where the platform says Prometheus
runs. Everything else is refused once a policy selects the pods.

Enforcement needs a CNI that implements NetworkPolicy (Calico, Cilium, ...); without one
the object is stored and has no effect. Pure: the settings are passed in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from disttrain.api import types as t
from disttrain.render.context import child_metadata, worker_selector

ENV_ENABLED = "DISTTRAIN_NETWORK_POLICY"
ENV_METRICS_FROM = "DISTTRAIN_NETWORK_POLICY_METRICS_FROM"
ENV_OPERATOR_NAMESPACE = "DISTTRAIN_OPERATOR_NAMESPACE"
OPERATOR_LABELS = {"app.kubernetes.io/name": "disttrain", "app.kubernetes.io/component": "operator"}


@dataclass(frozen=True, slots=True)
class NetworkPolicySettings:
    """What the per-job NetworkPolicy admits besides the job's own workers."""

    metrics_from: tuple[dict, ...] = ()
    """metrics_from: NetworkPolicyPeers allowed on the metrics port (Prometheus)."""
    operator_namespace: str | None = None
    """operator_namespace: where the operator runs (it reads each trainer's /status)."""


def network_policy_from_env(environ: Mapping[str, str]) -> NetworkPolicySettings | None:
    """None when turned off (DISTTRAIN_NETWORK_POLICY=false). Raises ValueError naming a
    bad value."""
    enabled = environ.get(ENV_ENABLED, "true").strip().lower()
    if enabled not in ("true", "false"):
        raise ValueError(f"{ENV_ENABLED}={environ[ENV_ENABLED]!r}: set it to true or false")
    if enabled == "false":
        return None
    raw = environ.get(ENV_METRICS_FROM, "").strip() or "[]"
    try:
        peers = json.loads(raw)
    except ValueError:
        peers = None
    if not isinstance(peers, list) or not all(isinstance(p, dict) for p in peers):
        raise ValueError(f"{ENV_METRICS_FROM}={raw[:200]!r}: give a JSON list of NetworkPolicyPeers, "
                         'e.g. [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]')
    return NetworkPolicySettings(metrics_from=tuple(peers),
                                 operator_namespace=environ.get(ENV_OPERATOR_NAMESPACE) or None)


def render_network_policy(job: t.Job, settings: NetworkPolicySettings) -> dict[str, Any]:
    meta = child_metadata(job, job.name)
    workers = {"matchLabels": worker_selector(job)}
    ingress: list[dict[str, Any]] = [{"from": [{"podSelector": workers}]}]
    peers = list(settings.metrics_from)
    if settings.operator_namespace:
        peers.insert(0, {"namespaceSelector": {"matchLabels": {
                             "kubernetes.io/metadata.name": settings.operator_namespace}},
                         "podSelector": {"matchLabels": dict(OPERATOR_LABELS)}})
    if peers:
        ingress.append({"from": peers, "ports": [{"protocol": "TCP", "port": job.spec.metrics.port}]})
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta,
            "spec": {"podSelector": workers, "policyTypes": ["Ingress"], "ingress": ingress}}
