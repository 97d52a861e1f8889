"""The devices of a job with spec.devices, through Dynamic Resource Allocation (pure).

Kubernetes' own DRA (resource.k8s.io/v1, GA since 1.34) does the rest:
  - the job owns one ResourceClaimTemplate: a request `gpus` of `count` devices of the
    DeviceClass, every device meeting the CEL selectors;
  - each worker names the template in spec.resourceClaims and its container uses the
    claim; kube-controller-manager makes the worker's own ResourceClaim from the template
    (owned by the pod: it goes with the pod), kube-scheduler allocates devices on the node
    it picks, and the node's DRA driver hands them to the container;
  - processes per worker follow `count` (api/types.py's `gpus`), as they follow gpusPerNode.
"""

from __future__ import annotations

from disttrain.api import types as t
from disttrain.render.context import child_metadata

API_VERSION = "resource.k8s.io/v1"
CLAIM = "gpus"  # the pod's name for its claim, and the template's request
# A NoExecute device taint is tolerated this long past evictGraceSeconds: the operator's pass,
# the checkpoint request and the pods' deletion fit in it.
TAINT_MARGIN_SECONDS = 30


def template_name(job: t.Job) -> str:
    return f"{job.name}-devices"


def render_claim_template(job: t.Job) -> dict | None:
    """The job's ResourceClaimTemplate; None when it asks for no devices."""
    devices = job.spec.devices
    if devices is None:
        return None
    exactly: dict = {"deviceClassName": devices.class_name, "allocationMode": "ExactCount", "count": devices.count}
    if devices.selectors:
        exactly["selectors"] = [{"cel": {"expression": expression}} for expression in devices.selectors]
    grace = job.spec.checkpoint.evict_grace_seconds if job.spec.checkpoint is not None else 0
    if grace:  # time to move off a sick device checkpoint first, before Kubernetes evicts (taints.py)
        exactly["tolerations"] = [{"operator": "Exists", "effect": "NoExecute",
                                   "tolerationSeconds": grace + TAINT_MARGIN_SECONDS}]
    meta = child_metadata(job, template_name(job))
    return {"apiVersion": API_VERSION, "kind": "ResourceClaimTemplate", "metadata": meta,
            # Each worker's claim carries the job's labels: the operator finds the devices it holds.
            "spec": {"metadata": {"labels": dict(meta["labels"])},
                     "spec": {"devices": {"requests": [{"name": CLAIM, "exactly": exactly}]}}}}


def claiming(pod: dict, job: t.Job) -> dict:
    """The worker with its claim of the job's template, used by its trainer container."""
    return with_claim(pod, CLAIM, template_name(job)) if job.spec.devices is not None else pod


def with_claim(pod: dict, name: str, template: str) -> dict:
    """The worker claiming from `template` under `name`, the claim used by its trainer container."""
    spec = pod["spec"]
    spec["resourceClaims"] = [*(spec.get("resourceClaims") or []), {"name": name, "resourceClaimTemplateName": template}]
    resources = spec["containers"][0].setdefault("resources", {})
    resources["claims"] = [*(resources.get("claims") or []), {"name": name}]
    return pod
