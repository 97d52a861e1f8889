"""The gang-scheduling integration: the PodGroup among the job's children and each worker
in it (pod_group.py: coscheduling's or Volcano's kind, so `disttrain render` shows them
without a cluster), what the operator may do with PodGroups, and what to tell a user whose
PodGroup the API refuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from disttrain.api import types as t
from disttrain.api.status_types import Resolved
from disttrain.integrations.gang.pod_group import COSCHEDULING, VOLCANO, gang_member, render_pod_group
from disttrain.integrations.protocol import Integration, Use

# What to do when the API refuses a job's PodGroup (spec.scheduling.gang).
POD_GROUP_HINTS = {
    404: "the PodGroup kind is not served: install the CRD of the scheduler that reads it (for coscheduling, "
         "manifests/coscheduling/crd.yaml of scheduler-plugins), or remove spec.scheduling.gang",
    403: "the operator may not create PodGroups: install the chart of this version (its RBAC grants podgroups), "
         "or remove spec.scheduling.gang",
}


class Gang(Integration):
    """A gang-scheduled job's PodGroup, for coscheduling or Volcano."""

    name: ClassVar[str] = "gang"
    uses: ClassVar[tuple[Use, ...]] = (
        Use("scheduling.x-k8s.io", "podgroups", "create get", "watched", "gang scheduling (coscheduling)"),
        Use("scheduling.volcano.sh", "podgroups", "create get", "watched", "gang scheduling (Volcano)"),
    )
    refusal_hints: ClassVar[Mapping[str, Mapping[int, str]]] = {"PodGroup": POD_GROUP_HINTS}
    paths: ClassVar[Mapping[str, str]] = {
        f"PodGroup.{COSCHEDULING.split('/')[0]}": f"/apis/{COSCHEDULING}/namespaces/{{ns}}/podgroups",
        f"PodGroup.{VOLCANO.split('/')[0]}": f"/apis/{VOLCANO}/namespaces/{{ns}}/podgroups",
    }

    def children(self, job: t.Job, resolved: Resolved) -> list[dict]:
        """The job's PodGroup: the gang scheduler must see it before any pod."""
        group = render_pod_group(job, resolved)
        return [group] if group is not None else []

    def dress(self, pod: dict, job: t.Job) -> dict:
        return gang_member(pod, job)
