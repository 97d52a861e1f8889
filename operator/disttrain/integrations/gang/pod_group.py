"""The PodGroup of a gang-scheduled job (spec.scheduling.gang): all of its workers or none.

Two schedulers read PodGroups, each its own kind under the same name:
  - the coscheduling plugin of scheduler-plugins: scheduling.x-k8s.io/v1alpha1, pods join
    with the label scheduling.x-k8s.io/pod-group;
  - Volcano (schedulerName: volcano): scheduling.volcano.sh/v1beta1, pods join with the
    annotation scheduling.k8s.io/group-name.
minMember is minNodes: an elastic job may start with that many workers. The gang
integration (integration.py) adds the PodGroup to the job's children and each worker to it
(`children`, `dress`), so `disttrain render` shows both without a cluster.
"""

from __future__ import annotations

from disttrain.api import types as t
from disttrain.api.status_types import Resolved
from disttrain.render.context import child_metadata

COSCHEDULING = "scheduling.x-k8s.io/v1alpha1"
VOLCANO = "scheduling.volcano.sh/v1beta1"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_SCHEDULER = "volcano"


def _volcano(job: t.Job) -> bool:
    return job.spec.scheduling is not None and job.spec.scheduling.scheduler_name == VOLCANO_SCHEDULER


def gang_of(job: t.Job) -> t.Gang | None:
    return job.spec.scheduling.gang if job.spec.scheduling is not None else None


def render_pod_group(job: t.Job, resolved: Resolved) -> dict | None:
    """The job's PodGroup, named as the job; None when it is not gang-scheduled."""
    gang = gang_of(job)
    if gang is None:
        return None
    meta = child_metadata(job, job.name)
    if _volcano(job):
        spec: dict = {"minMember": resolved.min_nodes}
        priority = job.spec.scheduling.priority_class_name  # type: ignore[union-attr]
        if priority:
            spec["priorityClassName"] = priority
        return {"apiVersion": VOLCANO, "kind": "PodGroup", "metadata": meta, "spec": spec}
    return {"apiVersion": COSCHEDULING, "kind": "PodGroup", "metadata": meta,
            "spec": {"minMember": resolved.min_nodes, "scheduleTimeoutSeconds": gang.schedule_timeout_seconds}}


def gang_member(pod: dict, job: t.Job) -> dict:
    """Put the worker in its job's PodGroup (a label or an annotation, as its scheduler reads)."""
    if gang_of(job) is None:
        return pod
    meta = pod["metadata"]
    if _volcano(job):
        meta["annotations"] = {**meta.get("annotations", {}), VOLCANO_ANNOTATION: job.name}
    else:
        meta["labels"] = {**meta["labels"], COSCHEDULING_LABEL: job.name}
    return pod
