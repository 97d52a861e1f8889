"""Render: a validated job -> its children (headless Service + worker Pods) as plain dicts.

Pure and deterministic: the same job renders the same objects, byte for byte, so the
operator can re-run after a crash and create nothing twice.
"""

from __future__ import annotations

from disttrain.api import types as t
from disttrain.api.status_types import Resolved
from disttrain.render.pod import TEMPLATE_HASH_ANNOTATION, render_pod, template_hash
from disttrain.render.disruption_budget import render_disruption_budget
from disttrain.render.network_policy import NetworkPolicySettings, render_network_policy
from disttrain.render.pod_group import render_pod_group
from disttrain.render.service import render_service


def render_owned(job: t.Job, resolved: Resolved, network_policy: NetworkPolicySettings | None = None) -> list[dict]:
    """What a job owns besides its pods, in the one order the operator creates them (and
    `disttrain render` prints them): the Service, the NetworkPolicy (when the operator
    makes one), the PodDisruptionBudget, then the PodGroup of a gang, which the gang
    scheduler must see before any pod."""
    policy = render_network_policy(job, network_policy) if network_policy is not None else None
    parts = (render_service(job), policy, render_disruption_budget(job), render_pod_group(job, resolved))
    return [obj for obj in parts if obj]


def render_children(job: t.Job, resolved: Resolved, network_policy: NetworkPolicySettings | None = None) -> list[dict]:
    """render_owned, then one pod per desired node."""
    return [*render_owned(job, resolved, network_policy), *(render_pod(job, resolved, i) for i in range(resolved.nodes))]


__all__ = ["render_children", "render_disruption_budget", "render_owned", "render_pod", "render_pod_group",
           "render_service", "template_hash", "TEMPLATE_HASH_ANNOTATION"]
