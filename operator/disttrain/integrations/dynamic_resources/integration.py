"""The DRA integration: the job's ResourceClaimTemplate among its children and each worker's
claim of it (claim.py), what the operator may do with templates, and what to tell a user
whose template the API refuses."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from disttrain.api import types as t
from disttrain.api.names import JOB_LABEL
from disttrain.api.status_types import Resolved
from disttrain.integrations.dynamic_resources import taints
from disttrain.integrations.dynamic_resources import compute_domain as nvlink
from disttrain.integrations.dynamic_resources.claim import API_VERSION, claiming, render_claim_template
from disttrain.integrations.protocol import Integration, Key, Shell, Use
from disttrain.operator.core.integration import Joined

GROUP, VERSION = API_VERSION.split("/")
# kopf's indexes: the devices each job's claims hold, the tainted devices of every
# ResourceSlice, the DeviceTaintRules.
CLAIMS, SLICES, RULES = "job_claims", "tainted_devices", "device_taint_rules"

# What to do when the API refuses a job's ResourceClaimTemplate (spec.devices).
TEMPLATE_HINTS = {
    404: f"{API_VERSION} is not served: Dynamic Resource Allocation needs Kubernetes 1.34 or later; or ask for "
         "GPUs with spec.gpusPerNode (a device plugin's count) instead of spec.devices",
    403: "the operator may not create ResourceClaimTemplates: install the chart of this version (its RBAC grants "
         "resourceclaimtemplates), or use spec.gpusPerNode instead of spec.devices",
}


# What to do when the API refuses a job's ComputeDomain (spec.computeDomain).
DOMAIN_HINTS = {
    404: f"the ComputeDomain kind ({nvlink.API_VERSION}) is not served: install NVIDIA's DRA driver with its "
         "ComputeDomain support (GB200 and similar multi-node NVLink racks), or remove spec.computeDomain",
    403: "the operator may not create ComputeDomains: install the chart of this version (its RBAC grants "
         "computedomains), or remove spec.computeDomain",
}


class DynamicResources(Integration):
    """A job's devices (spec.devices) through Dynamic Resource Allocation."""

    name: ClassVar[str] = "dynamic_resources"
    uses: ClassVar[tuple[Use, ...]] = (
        Use("resource.k8s.io", "resourceclaimtemplates", "create get", "watched",
            "a job's devices through DRA (spec.devices): one template per job, a claim per worker"),
        Use("resource.k8s.io", "resourceclaims", "list watch", "watched", "the devices each worker holds"),
        Use("resource.k8s.io", "resourceslices", "list watch", "cluster", "a driver's taints on a sick device"),
        Use("resource.k8s.io", "devicetaintrules", "list watch", "cluster", "an admin's taints on a sick device"),
        Use("resource.nvidia.com", "computedomains", "create get", "watched",
            "multi-node NVLink (spec.computeDomain): one NVIDIA ComputeDomain per job"),
    )
    refusal_hints: ClassVar[Mapping[str, Mapping[int, str]]] = {"ResourceClaimTemplate": TEMPLATE_HINTS,
                                                                 "ComputeDomain": DOMAIN_HINTS}
    paths: ClassVar[Mapping[str, str]] = {
        "ResourceClaimTemplate.resource.k8s.io": f"/apis/{API_VERSION}/namespaces/{{ns}}/resourceclaimtemplates",
        "ComputeDomain.resource.nvidia.com": f"/apis/{nvlink.API_VERSION}/namespaces/{{ns}}/computedomains",
    }

    def children(self, job: t.Job, resolved: Resolved) -> list[dict]:
        """The template every worker's claim is made from, and the ComputeDomain whose channel
        each worker claims: both there before any worker."""
        return [c for c in (render_claim_template(job), nvlink.render_compute_domain(job)) if c is not None]

    def dress(self, pod: dict, job: t.Job) -> dict:
        return nvlink.joining(claiming(pod, job), job)

    def __init__(self) -> None:
        self.indexes: Mapping[str, Any] = {}

    def watch(self, queue_job: Callable[[Any, Key], None]) -> None:
        """Index the devices each job's workers hold (their claims carry the job's label, from
        the template) and every device taint; a taint that comes or goes queues the jobs."""
        import kopf

        @kopf.index(GROUP, VERSION, "resourceclaims", labels={JOB_LABEL: kopf.PRESENT}, id=CLAIMS)
        async def job_claims(namespace: str, labels: kopf.Labels, body: kopf.Body, **_: Any) -> dict:
            return {(namespace, labels[JOB_LABEL]): taints.allocated(body)}

        @kopf.index(GROUP, VERSION, "resourceslices", id=SLICES)
        async def tainted_devices(name: str, body: kopf.Body, **_: Any) -> dict:
            found = taints.slice_taints(body)
            return {name: found} if found else {}

        @kopf.index(GROUP, VERSION, "devicetaintrules", id=RULES)
        async def device_taint_rules(name: str, body: kopf.Body, **_: Any) -> dict:
            rule = taints.rule_of(body)
            return {name: rule} if rule is not None else {}

        @kopf.on.event(GROUP, VERSION, "resourceslices", id="device_slice_changed")
        async def slice_changed(body: kopf.Body, memo: kopf.Memo, job_claims: kopf.Index, **_: Any) -> None:
            if taints.slice_taints(body):  # a slice without a taint sends no job anywhere
                taint_changed(memo, job_claims)

        @kopf.on.event(GROUP, VERSION, "devicetaintrules", id="device_taint_rule_changed")
        async def rule_changed(memo: kopf.Memo, job_claims: kopf.Index, **_: Any) -> None:
            taint_changed(memo, job_claims)

        def taint_changed(memo: kopf.Memo, job_claims: kopf.Index) -> None:
            for key in list(job_claims):  # taints change rarely: every job holding devices looks again
                queue_job(memo, key)

    def attach(self, indices: Mapping[str, Any]) -> None:
        self.indexes = indices

    async def observe(self, shell: Shell, key: Key, view: Any) -> Joined | None:
        claims, slices, rules = (self.indexes.get(name) for name in (CLAIMS, SLICES, RULES))
        if claims is None or not (view.spec or {}).get("devices"):
            return None
        tainted: dict[taints.Device, tuple[taints.Taint, ...]] = {}
        for name in list(slices or ()):
            for found in slices[name]:
                tainted.update(found)
        sick = taints.sick_workers(list(claims.get(key, [])), tainted,
                                   [rule for name in list(rules or ()) for rule in rules[name]])
        return taints.Claimed(sick=sick) if sick else None
