"""Render: a validated job -> its children (headless Service + worker Pods) as plain dicts.

Pure and deterministic: the same job renders the same objects, byte for byte, so the
operator can re-run after a crash and create nothing twice. What an integration adds to a
job (a PodGroup and its workers' membership) is its own: integrations/registry.py
renders the whole job, these parts and the integrations' together.
"""

from __future__ import annotations

from disttrain.api import types as t
from disttrain.api.status_types import Resolved
from disttrain.render.pod import TEMPLATE_HASH_ANNOTATION, render_pod, template_hash
from disttrain.render.disruption_budget import render_disruption_budget
from disttrain.render.network_policy import NetworkPolicySettings, render_network_policy
from disttrain.render.service import render_service


def render_owned(job: t.Job, resolved: Resolved, network_policy: NetworkPolicySettings | None = None) -> list[dict]:
    """What a job owns besides its pods, in the one order the operator creates them (and
    `disttrain render` prints them): the Service, the NetworkPolicy (when the operator
    makes one), the PodDisruptionBudget; an integration's children come after them."""
    policy = render_network_policy(job, network_policy) if network_policy is not None else None
    parts = (render_service(job), policy, render_disruption_budget(job))
    return [obj for obj in parts if obj]


__all__ = ["render_disruption_budget", "render_owned", "render_pod", "render_service", "template_hash",
           "TEMPLATE_HASH_ANNOTATION"]
