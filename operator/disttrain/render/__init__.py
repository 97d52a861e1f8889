"""Render: a validated job -> its children (headless Service + worker Pods) as plain dicts.

Pure and deterministic: the same job renders the same objects, byte for byte, so the
operator can re-run after a crash and create nothing twice.
"""

from __future__ import annotations

from disttrain.api import types as t
from disttrain.render.pod import TEMPLATE_HASH_ANNOTATION, render_pod, template_hash
from disttrain.render.disruption_budget import render_disruption_budget
from disttrain.render.pod_group import render_pod_group
from disttrain.render.service import render_service


def render_children(job: t.Job, resolved: t.Resolved) -> list[dict]:
    """The Service first, the PodDisruptionBudget, the PodGroup of a gang, then one pod per
    desired node."""
    extra = [obj for obj in (render_disruption_budget(job), render_pod_group(job, resolved)) if obj]
    return [render_service(job), *extra, *(render_pod(job, resolved, i) for i in range(resolved.nodes))]


__all__ = ["render_children", "render_disruption_budget", "render_pod", "render_pod_group", "render_service",
           "template_hash", "TEMPLATE_HASH_ANNOTATION"]
