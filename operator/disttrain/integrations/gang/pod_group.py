"""The PodGroup of a gang-scheduled job (spec.scheduling.gang): all of its workers or none.

Three schedulers read PodGroups, each its own kind under the same name; schedulerName
picks which (`mechanism`):
  - unset: kube-scheduler itself (Kubernetes 1.37+, the GenericWorkload feature gate):
    scheduling.k8s.io/v1beta1, pods join with spec.schedulingGroup.podGroupName, and
    the PodGroup carries the pods' priorityClassName (the scheduler refuses a gang whose
    pods' priority differs from its own);
  - volcano: scheduling.volcano.sh/v1beta1, pods join with the annotation
    scheduling.k8s.io/group-name;
  - any other name: the coscheduling plugin of scheduler-plugins,
    scheduling.x-k8s.io/v1alpha1, pods join with the label scheduling.x-k8s.io/pod-group.
The minimum is minNodes: an elastic job may start with that many workers. The gang
integration (integration.py) adds the PodGroup to the job's children and each worker to it
(`children`, `dress`), so `disttrain render` shows both without a cluster.
"""

from __future__ import annotations

from typing import Literal

from disttrain.api import types as t
from disttrain.api.status_types import Resolved
from disttrain.render.context import child_metadata

NATIVE = "scheduling.k8s.io/v1beta1"
COSCHEDULING = "scheduling.x-k8s.io/v1alpha1"
VOLCANO = "scheduling.volcano.sh/v1beta1"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_SCHEDULER = "volcano"

Mechanism = Literal["native", "coscheduling", "volcano"]
API_VERSION: dict[Mechanism, str] = {"native": NATIVE, "coscheduling": COSCHEDULING, "volcano": VOLCANO}
# Who places a gang of each mechanism, as the job's Event says it.
SCHEDULER_WORDS: dict[Mechanism, str] = {"native": "kube-scheduler itself", "coscheduling": "the coscheduling plugin",
                                         "volcano": "Volcano"}


def gang_of(job: t.Job) -> t.Gang | None:
    return job.spec.scheduling.gang if job.spec.scheduling is not None else None


def mechanism_of(gang: bool, scheduler_name: str | None) -> Mechanism | None:
    """Which scheduler reads the job's PodGroup (None: the job is not gang-scheduled)."""
    if not gang:
        return None
    if not scheduler_name:
        return "native"
    return "volcano" if scheduler_name == VOLCANO_SCHEDULER else "coscheduling"


def mechanism(job: t.Job) -> Mechanism | None:
    sched = job.spec.scheduling
    return mechanism_of(gang_of(job) is not None, sched.scheduler_name if sched is not None else None)


def render_pod_group(job: t.Job, resolved: Resolved) -> dict | None:
    """The job's PodGroup, named as the job; None when it is not gang-scheduled."""
    kind, gang = mechanism(job), gang_of(job)
    if kind is None or gang is None:
        return None
    priority = job.spec.scheduling.priority_class_name  # type: ignore[union-attr]
    if kind == "native":
        spec: dict = {"schedulingPolicy": {"gang": {"minCount": resolved.min_nodes}}}
    elif kind == "volcano":
        spec = {"minMember": resolved.min_nodes}
    else:
        spec = {"minMember": resolved.min_nodes, "scheduleTimeoutSeconds": gang.schedule_timeout_seconds}
    if priority and kind != "coscheduling":
        spec["priorityClassName"] = priority
    return {"apiVersion": API_VERSION[kind], "kind": "PodGroup", "metadata": child_metadata(job, job.name),
            "spec": spec}


def gang_member(pod: dict, job: t.Job) -> dict:
    """Put the worker in its job's PodGroup (a field, an annotation or a label, as its scheduler reads)."""
    kind = mechanism(job)
    if kind is None:
        return pod
    meta = pod["metadata"]
    if kind == "native":
        pod["spec"] = {**pod["spec"], "schedulingGroup": {"podGroupName": job.name}}
    elif kind == "volcano":
        meta["annotations"] = {**meta.get("annotations", {}), VOLCANO_ANNOTATION: job.name}
    else:
        meta["labels"] = {**meta["labels"], COSCHEDULING_LABEL: job.name}
    return pod
