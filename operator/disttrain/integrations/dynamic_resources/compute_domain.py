"""Multi-node NVLink for a job with spec.computeDomain, through NVIDIA's ComputeDomain (pure).

NVIDIA's DRA driver serves the kind (resource.nvidia.com/v1beta1). The job owns one
ComputeDomain, and NVIDIA's controller makes the ResourceClaimTemplate of its channel, named
in the ComputeDomain. Each worker claims that channel, so the driver joins its node to the
domain's IMEX daemons. numNodes is left out (0, the driver's recommended value since its DNS
names): no worker waits for a fixed count, which suits an elastic job.
"""

from __future__ import annotations

from disttrain.api import types as t
from disttrain.integrations.dynamic_resources.claim import with_claim
from disttrain.render.context import child_metadata

API_VERSION = "resource.nvidia.com/v1beta1"
CHANNEL = "nvlink"  # the pod's name for its channel claim


def domain_name(job: t.Job) -> str:
    return f"{job.name}-nvlink"


def channel_template(job: t.Job) -> str:
    """The ResourceClaimTemplate NVIDIA's controller makes for the domain's channel."""
    return f"{job.name}-nvlink-channel"


def render_compute_domain(job: t.Job) -> dict | None:
    """The job's ComputeDomain; None when it asks for none."""
    domain = job.spec.compute_domain
    if domain is None:
        return None
    return {"apiVersion": API_VERSION, "kind": "ComputeDomain", "metadata": child_metadata(job, domain_name(job)),
            "spec": {"channel": {"resourceClaimTemplate": {"name": channel_template(job)},
                                 "allocationMode": domain.allocation_mode or "Single"}}}


def joining(pod: dict, job: t.Job) -> dict:
    """The worker with a claim of the domain's channel, used by its trainer container."""
    return with_claim(pod, CHANNEL, channel_template(job)) if job.spec.compute_domain is not None else pod
