"""The gang-scheduling integration: the PodGroup among the job's children and each worker
in it (pod_group.py: kube-scheduler's, coscheduling's or Volcano's kind, so `disttrain
render` shows them without a cluster), whether the cluster serves kube-scheduler's own
PodGroups (discovery: a built-in API, no CRD to follow), what the operator may do with
PodGroups, and what to tell a user whose PodGroup the API refuses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from disttrain.api import types as t
from disttrain.api.status_types import Resolved
from disttrain.integrations.gang.membership import NAME, NOT_SERVED, InGang
from disttrain.integrations.gang.pod_group import COSCHEDULING, NATIVE, VOLCANO, gang_member, mechanism, render_pod_group
from disttrain.integrations.protocol import Integration, Key, Setting, Shell, Use
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
FALLBACK = """DISTTRAIN_GANG_FALLBACK: the scheduler that places a gang without schedulerName where the
cluster does not serve kube-scheduler's own PodGroups (GenericWorkload off): one running the
coscheduling plugin, or volcano. Empty (the default): such a job waits, Pending, and says the fix."""


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

    settings: ClassVar[tuple[Setting, ...]] = (Setting("gang_fallback", "", FALLBACK),)

    def __init__(self, fallback: str = "") -> None:
        self._native: tuple[float, bool] | None = None  # (when looked up, served)
        self.fallback = fallback

    @classmethod
    def of(cls, settings: Any) -> Gang:
        return cls(fallback=str(getattr(settings, "gang_fallback", "") or ""))

    @property
    def falling_back(self) -> bool:
        """kube-scheduler's own gang is not served here, and the operator is told whose to use."""
        return bool(self.fallback) and self._native is not None and not self._native[1]

    def _placed(self, job: t.Job) -> t.Job:
        """The job as its gang is placed here: a native gang through the fallback scheduler
        where kube-scheduler's own is not served."""
        if not self.falling_back or mechanism(job) != "native":
            return job
        sched = dataclasses.replace(job.spec.scheduling, scheduler_name=self.fallback)  # type: ignore[arg-type]
        return dataclasses.replace(job, spec=dataclasses.replace(job.spec, scheduling=sched))

    async def observe(self, shell: Shell, key: Key, view: Any) -> Joined | None:
        """A job whose spec (or training template) may ask for a gang; kube-scheduler's own
        is looked up in discovery, at most once a DISCOVERY_SECONDS for all jobs."""
        spec = view.spec or {}
        sched = spec.get("scheduling") or {}
        if sched.get("gang") is None and not spec.get("templateRef"):
            return None
        maybe_native = not sched.get("schedulerName") or spec.get("templateRef")  # a template may set either
        return InGang(native_served=await self._native_served(shell) if maybe_native else None,
                      fallback=self.fallback or None)

    async def _native_served(self, shell: Shell) -> bool:
        now = shell.clock.monotonic()
        if self._native is None or now - self._native[0] >= DISCOVERY_SECONDS:
            group, version = NATIVE.split("/")
            self._native = (now, await shell.kube.served(group, version, "podgroups"))
        return self._native[1]

    def children(self, job: t.Job, resolved: Resolved) -> list[dict]:
        """The job's PodGroup: the gang scheduler must see it before any pod."""
        group = render_pod_group(self._placed(job), resolved)
        return [group] if group is not None else []

    def dress(self, pod: dict, job: t.Job) -> dict:
        placed = self._placed(job)
        if placed is not job:  # the fallback scheduler places the worker too
            pod["spec"]["schedulerName"] = self.fallback
        return gang_member(pod, placed)
