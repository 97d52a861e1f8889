"""The DRA integration: the job's ResourceClaimTemplate among its children and each worker's
claim of it (claim.py), what the operator may do with templates, and what to tell a user
whose template the API refuses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from disttrain.api import types as t
from disttrain.api.status_types import Resolved
from disttrain.integrations.dynamic_resources.claim import API_VERSION, claiming, render_claim_template
from disttrain.integrations.protocol import Integration, Use

# What to do when the API refuses a job's ResourceClaimTemplate (spec.devices).
TEMPLATE_HINTS = {
    404: f"{API_VERSION} is not served: Dynamic Resource Allocation needs Kubernetes 1.34 or later; or ask for "
         "GPUs with spec.gpusPerNode (a device plugin's count) instead of spec.devices",
    403: "the operator may not create ResourceClaimTemplates: install the chart of this version (its RBAC grants "
         "resourceclaimtemplates), or use spec.gpusPerNode instead of spec.devices",
}


class DynamicResources(Integration):
    """A job's devices (spec.devices) through Dynamic Resource Allocation."""

    name: ClassVar[str] = "dynamic_resources"
    uses: ClassVar[tuple[Use, ...]] = (
        Use("resource.k8s.io", "resourceclaimtemplates", "create get", "watched",
            "a job's devices through DRA (spec.devices): one template per job, a claim per worker"),
    )
    refusal_hints: ClassVar[Mapping[str, Mapping[int, str]]] = {"ResourceClaimTemplate": TEMPLATE_HINTS}
    paths: ClassVar[Mapping[str, str]] = {
        "ResourceClaimTemplate.resource.k8s.io": f"/apis/{API_VERSION}/namespaces/{{ns}}/resourceclaimtemplates",
    }

    def children(self, job: t.Job, resolved: Resolved) -> list[dict]:
        """The template every worker's claim is made from: it must be there before any worker."""
        template = render_claim_template(job)
        return [template] if template is not None else []

    def dress(self, pod: dict, job: t.Job) -> dict:
        return claiming(pod, job)
