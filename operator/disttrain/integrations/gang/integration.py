"""The gang-scheduling integration: the PodGroup among the job's children and each worker
in it (pod_group.py: kube-scheduler's, coscheduling's or Volcano's kind, so `disttrain
render` shows them without a cluster), whether the cluster serves kube-scheduler's own
PodGroups (discovery: a built-in API, no CRD to follow), what the operator may do with
PodGroups, and what to tell a user whose PodGroup the API refuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from disttrain.api import types as t
from disttrain.api.status_types import Resolved
from disttrain.integrations.gang.membership import NAME, NOT_SERVED, InGang
from disttrain.integrations.gang.pod_group import COSCHEDULING, NATIVE, VOLCANO, gang_member, render_pod_group
from disttrain.integrations.protocol import Integration, Key, Shell, Use
from disttrain.operator.core.integration import Joined

NO_RIGHTS = ("the operator may not create PodGroups: install the chart of this version (its RBAC grants "
             "podgroups), or remove spec.scheduling.gang")
# What to do when the API refuses a job's PodGroup (spec.scheduling.gang), by kind (kubectl's KIND.GROUP first).
POD_GROUP_HINTS = {
    404: "the PodGroup kind is not served: install the CRD of the scheduler that reads it (for coscheduling, "
         "manifests/coscheduling/crd.yaml of scheduler-plugins), or remove spec.scheduling.gang",
    403: NO_RIGHTS,
}
NATIVE_HINTS = {404: NOT_SERVED, 403: NO_RIGHTS}
DISCOVERY_SECONDS = 60.0  # how long one discovery answer stands, for every job


def _group(api_version: str) -> str:
    return api_version.split("/")[0]


class Gang(Integration):
    """A gang-scheduled job's PodGroup, for kube-scheduler itself, coscheduling or Volcano."""

    name: ClassVar[str] = NAME
    uses: ClassVar[tuple[Use, ...]] = (
        Use("scheduling.k8s.io", "podgroups", "create get", "watched", "gang scheduling (kube-scheduler)"),
        Use("scheduling.x-k8s.io", "podgroups", "create get", "watched", "gang scheduling (coscheduling)"),
        Use("scheduling.volcano.sh", "podgroups", "create get", "watched", "gang scheduling (Volcano)"),
    )
    refusal_hints: ClassVar[Mapping[str, Mapping[int, str]]] = {
        f"PodGroup.{_group(NATIVE)}": NATIVE_HINTS, "PodGroup": POD_GROUP_HINTS}
    paths: ClassVar[Mapping[str, str]] = {
        f"PodGroup.{_group(version)}": f"/apis/{version}/namespaces/{{ns}}/podgroups"
        for version in (NATIVE, COSCHEDULING, VOLCANO)}

    def __init__(self) -> None:
        self._native: tuple[float, bool] | None = None  # (when looked up, served)

    async def observe(self, shell: Shell, key: Key, view: Any) -> Joined | None:
        """A job whose spec (or training template) may ask for a gang; kube-scheduler's own
        is looked up in discovery, at most once a DISCOVERY_SECONDS for all jobs."""
        spec = view.spec or {}
        sched = spec.get("scheduling") or {}
        if sched.get("gang") is None and not spec.get("templateRef"):
            return None
        maybe_native = not sched.get("schedulerName") or spec.get("templateRef")  # a template may set either
        return InGang(native_served=await self._native_served(shell) if maybe_native else None)

    async def _native_served(self, shell: Shell) -> bool:
        now = shell.clock.monotonic()
        if self._native is None or now - self._native[0] >= DISCOVERY_SECONDS:
            group, version = NATIVE.split("/")
            self._native = (now, await shell.kube.served(group, version, "podgroups"))
        return self._native[1]

    def children(self, job: t.Job, resolved: Resolved) -> list[dict]:
        """The job's PodGroup: the gang scheduler must see it before any pod."""
        group = render_pod_group(job, resolved)
        return [group] if group is not None else []

    def dress(self, pod: dict, job: t.Job) -> dict:
        return gang_member(pod, job)
