"""Kueue, as an external framework (pure).

A job labelled `kueue.x-k8s.io/queue-name` (with the operator started with DISTTRAIN_KUEUE)
creates no worker until Kueue admits it. The protocol is Kueue's own for a job kind it
does not know (its jobframework, written here for DistributedTraining):

  1. the operator creates the job's Workload: owned by the job, one podSet "workers"
     (count = nodes, minCount = minNodes for an elastic job: partial admission), the
     worker pod's template, the LocalQueue and the priority;
  2. Kueue reserves quota and admits it (status.admission: the ClusterQueue, the flavor of
     each resource and the admitted count); the operator creates the workers with the
     flavors' node labels and tolerations, at the admitted count;
  3. Kueue evicts it (preemption, a deactivated Workload, a stopped queue): Evicted=True.
     The operator stops the job through the checkpoint handshake (eviction.py) and, once
     no worker is active, releases the quota: admission cleared, QuotaReserved=False,
     Requeued. The job waits in its queue again, its progress kept;
  4. while admitted, the operator keeps the Workload's PodsReady condition as Kueue's own
     integrations do (its jobframework's PodsReady): True once every admitted worker is
     Ready (or finished), False while one is not, WaitForRecovery after it had been True.
     Kueue's waitForPodsReady (on by default, 30 minutes) evicts a job that never gets
     there, or (recoveryTimeout) does not get back;
  5. the job ends: the operator marks the Workload Finished, which frees the quota. A job
     deleted takes its Workload with it (owner reference);
  6. an elastic job (minNodes < maxNodes) admitted below `nodes` asks for the rest through
     a Workload slice (Kueue's elastic workloads, ElasticJobsViaWorkloadSlices, on by
     default since v0.18): a Workload `<name>-<k>` annotated elastic-job and
     workload-slice-replacement-for the current one, for `nodes` workers. Kueue admits it
     when the quota allows and marks the old Workload Finished (WorkloadSliceReplaced); the
     job then grows into it. Scaled down, a job on a slice lowers the slice's count in
     place and Kueue gives the freed quota back at once. The first Workload keeps Kueue's
     partial admission (minCount), which Kueue does not allow on an elastic one, so a job
     that never grew cannot shrink its reservation in place: it holds it until it grows
     or ends, and says so.

Here: the Workload rendered, what its status means for the job, and the status changes
the operator writes (release, pods_ready, finish). The shell (controller.py) reads and writes them.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from typing import Any, Mapping

from disttrain.api import types as t
from disttrain.api.status_types import Resolved
from disttrain.api.names import JOB_LABEL
from disttrain.integrations.kueue import topology as tas
from disttrain.integrations.protocol import Placement

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"  # Kueue v0.19's storage version
API_VERSION = f"{GROUP}/{VERSION}"
QUEUE_LABEL = f"{GROUP}/queue-name"
PRIORITY_LABEL = f"{GROUP}/priority-class"  # a WorkloadPriorityClass, Kueue's own label
# How Kueue is told that DistributedTraining is a job kind of its own (its configuration's
# integrations.externalFrameworks): Kind.version.group.
FRAMEWORK = f"{t.KIND}.{t.API_VERSION.split('/')[1]}.{t.GROUP}"
POD_SET = "workers"
TEMPLATE_ANNOTATION = f"{t.GROUP}/workload-template"
# The job's newest committed checkpoint, on its Workload, for a cluster's preemption tooling
# to prefer victims that just saved (docs/operations.md, "Kueue").
CHECKPOINT_STEP_ANNOTATION = f"{t.GROUP}/checkpoint-step"
CHECKPOINT_TIME_ANNOTATION = f"{t.GROUP}/checkpoint-time"
# Kueue's elastic workloads: a slice is elastic and names the Workload it replaces (ns/name).
ELASTIC_ANNOTATION = f"{GROUP}/elastic-job"
REPLACEMENT_ANNOTATION = f"{GROUP}/workload-slice-replacement-for"
SLICE_REPLACED = "WorkloadSliceReplaced"  # the Finished reason Kueue gives a replaced slice

# Workload condition types and the reasons the operator writes.
QUOTA_RESERVED, ADMITTED, EVICTED, REQUEUED, FINISHED, PODS_READY = (
    "QuotaReserved", "Admitted", "Evicted", "Requeued", "Finished", "PodsReady")
# PodsReady's reasons, Kueue's own words: never ready since the admission; ready; not
# ready again after it had been; ready again after that.
WAIT_FOR_START, STARTED, WAIT_FOR_RECOVERY, RECOVERED = "WaitForStart", "Started", "WaitForRecovery", "Recovered"
_PODS_READY_MESSAGES = {
    WAIT_FOR_START: "Not all pods are ready or succeeded",
    WAIT_FOR_RECOVERY: "At least one pod has failed, waiting for recovery",
    STARTED: "All pods reached readiness and the workload is running",
    RECOVERED: "All pods reached readiness and the workload is running",
}
PREEMPTED_REASONS = ("Preempted", "NodeFailures")  # Requeued=True after these, as Kueue does


def queue_of(labels: Mapping[str, str] | None) -> str | None:
    """The LocalQueue a job asks for, None when it does not use Kueue."""
    value = (labels or {}).get(QUEUE_LABEL, "").strip()
    return value or None


def workload_name(job_name: str, uid: str, slice_number: int = 0) -> str:
    """The job's Workload: its name, shortened, and a hash of its uid (a job deleted and
    created again under the same name gets a new Workload, never the old one's quota);
    its k-th slice ends in -k. At most 63 characters."""
    digest = hashlib.sha256(uid.encode()).hexdigest()[:5]
    suffix = f"-{slice_number}" if slice_number else ""
    return f"distributedtraining-{job_name[:37 - len(suffix)].rstrip('-.')}-{digest}{suffix}"


@dataclass(frozen=True, slots=True)
class Priority:
    """Where the job's priority comes from, and its value (read from the class)."""

    kind: str  # PriorityClass | WorkloadPriorityClass
    name: str
    value: int

    @property
    def group(self) -> str:
        return priority_class_group(self.kind)


def priority_class_group(kind: str) -> str:
    """The API group of a priority class kind: a PriorityClass or Kueue's WorkloadPriorityClass."""
    return "scheduling.k8s.io" if kind == "PriorityClass" else GROUP


def priority_source(job: t.Job, labels: Mapping[str, str] | None) -> tuple[str, str] | None:
    """(kind, name) of the class that sets the job's priority: Kueue's label names a
    WorkloadPriorityClass and wins, as it does for Kueue's own jobs; else the workers'
    spec.scheduling.priorityClassName. None: priority 0."""
    label = (labels or {}).get(PRIORITY_LABEL, "").strip()
    if label:
        return "WorkloadPriorityClass", label
    sched = job.spec.scheduling
    if sched is not None and sched.priority_class_name:
        return "PriorityClass", sched.priority_class_name
    return None


def topology_of(job: t.Job) -> t.Topology | None:
    """The job's topology request, if it makes one."""
    return job.spec.scheduling.topology if job.spec.scheduling is not None else None


@dataclass(frozen=True, slots=True)
class Slice:
    """A growth slice: the k-th Workload of the job, replacing `replaces` (its name)."""

    number: int
    replaces: str


def render_workload(job: t.Job, resolved: Resolved, pod: Mapping[str, Any], queue: str,
                    priority: Priority | None, template: str, growth: Slice | None = None) -> dict:
    """The Workload of a job (job.uid set): one podSet of the worker pod (index 0, as
    rendered) for `nodes` workers, or as few as minNodes for an elastic job. `template`
    is the job's template hash: a Workload of an older spec is replaced while it waits.
    A growth slice asks for `nodes` exactly (Kueue refuses partial admission on it)."""
    assert job.uid, "a Workload is owned by its job: render it from the job as stored"
    meta = pod.get("metadata") or {}
    pod_template = {"metadata": {"labels": dict(meta.get("labels") or {}),
                                 "annotations": dict(meta.get("annotations") or {})},
                    "spec": copy.deepcopy(dict(pod.get("spec") or {}))}
    pod_set: dict[str, Any] = {"name": POD_SET, "count": resolved.nodes, "template": pod_template}
    topo = topology_of(job)
    if topo is not None:
        pod_set["topologyRequest"] = tas.request(topo)
    annotations = {TEMPLATE_ANNOTATION: template}
    if growth is not None:
        annotations |= {ELASTIC_ANNOTATION: "true",
                        REPLACEMENT_ANNOTATION: f"{job.namespace or 'default'}/{growth.replaces}"}
    elif resolved.min_nodes < resolved.nodes:
        pod_set["minCount"] = resolved.min_nodes
    spec: dict[str, Any] = {"queueName": queue, "podSets": [pod_set]}
    if priority is not None:
        spec["priorityClassRef"] = {"group": priority.group, "kind": priority.kind, "name": priority.name}
        spec["priority"] = priority.value
    return {"apiVersion": API_VERSION, "kind": "Workload", "metadata": {
        "name": workload_name(job.name, job.uid, growth.number if growth else 0),
        "namespace": job.namespace or "default", "labels": {JOB_LABEL: job.name}, "annotations": annotations,
        "ownerReferences": [{"apiVersion": t.API_VERSION, "kind": t.KIND, "name": job.name, "uid": job.uid,
                             "controller": True, "blockOwnerDeletion": True}]},
        "spec": spec}


@dataclass(frozen=True, slots=True)
class WorkloadView:
    """A Workload as the job's decision needs it."""

    name: str
    owner_uid: str | None
    template: str | None  # the job template hash it was rendered from
    active: bool  # spec.active (false: deactivated, Kueue evicts it)
    quota_reserved: bool
    admitted: bool
    finished: bool
    cluster_queue: str | None
    flavors: dict[str, str] = field(default_factory=dict)  # resource -> ResourceFlavor
    count: int | None = None  # workers admitted
    evicted: tuple[str, str] | None = None  # (reason, message) while Evicted=True
    pending: tuple[str, str] | None = None  # (reason, message) of QuotaReserved=False: why it waits
    pods_ready: tuple[bool, str] | None = None  # (status, reason) of PodsReady, once set
    checkpoint: tuple[str, str] | None = None  # (step, time) its annotations publish, once set
    elastic: bool = False  # a slice of Kueue's elastic workloads: it may shrink in place
    replaces: str | None = None  # the name of the Workload this slice replaces (a growth slice)
    requested: int | None = None  # spec.podSets' worker count: what it asks for (lowered by a shrink)
    finished_reason: str | None = None  # Finished's reason (WorkloadSliceReplaced: grown into a slice)
    assignment: tas.Assignment | None = None  # the workers' topology domains, once Kueue's TAS admitted it
    topology_request: Mapping[str, Any] | None = None  # spec.podSets' topologyRequest, if it asks one

    @property
    def holds(self) -> int | None:
        """The workers whose quota it holds: the admitted count, or less once it asks for
        less (a slice shrunk in place: Kueue's usage follows the spec)."""
        if self.count is None or self.requested is None:
            return self.count
        return min(self.count, self.requested)


def view_of(body: Mapping[str, Any]) -> WorkloadView:
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    conds = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, Mapping)}

    def true(kind: str) -> bool:
        return (conds.get(kind) or {}).get("status") == "True"

    admission = status.get("admission") or None
    flavors: dict[str, str] = {}
    count, placed = None, None
    if admission:
        for assignment in admission.get("podSetAssignments") or []:
            if assignment.get("name") == POD_SET:
                flavors = dict(assignment.get("flavors") or {})
                count = assignment.get("count")
                placed = tas.decode(assignment.get("topologyAssignment"))
    owner = next((o.get("uid") for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    evicted = conds.get(EVICTED) if true(EVICTED) else None
    reserved = conds.get(QUOTA_RESERVED)
    pending = (reserved.get("reason") or "", reserved.get("message") or "") \
        if reserved is not None and reserved.get("status") == "False" else None
    ready = conds.get(PODS_READY)
    annotations = meta.get("annotations") or {}
    replaces = annotations.get(REPLACEMENT_ANNOTATION, "").rpartition("/")[2] or None
    pod_set = next((ps for ps in (body.get("spec") or {}).get("podSets") or []
                    if isinstance(ps, Mapping) and ps.get("name") == POD_SET), {})
    requested = pod_set.get("count")
    return WorkloadView(
        name=meta.get("name") or "", owner_uid=owner,
        template=(meta.get("annotations") or {}).get(TEMPLATE_ANNOTATION),
        active=(body.get("spec") or {}).get("active", True) is not False,
        quota_reserved=admission is not None and true(QUOTA_RESERVED), admitted=admission is not None and true(ADMITTED),
        finished=true(FINISHED), cluster_queue=(admission or {}).get("clusterQueue"), flavors=flavors,
        count=count if isinstance(count, int) else None,
        evicted=(evicted.get("reason") or "", evicted.get("message") or "") if evicted is not None else None,
        pending=pending,
        pods_ready=(true(PODS_READY), ready.get("reason") or "") if ready is not None else None,
        checkpoint=_checkpoint_of(annotations), elastic=annotations.get(ELASTIC_ANNOTATION) == "true",
        replaces=replaces, requested=requested if isinstance(requested, int) else None,
        finished_reason=(conds.get(FINISHED) or {}).get("reason") if true(FINISHED) else None, assignment=placed,
        topology_request=dict(pod_set.get("topologyRequest") or {}) or None)


def _checkpoint_of(annotations: Mapping[str, str]) -> tuple[str, str] | None:
    step, time = annotations.get(CHECKPOINT_STEP_ANNOTATION), annotations.get(CHECKPOINT_TIME_ANNOTATION)
    return (step, time) if step is not None and time is not None else None


def checkpoint_annotations(step: int, time: str) -> dict[str, Any]:
    """The merge patch that publishes the job's newest committed checkpoint on its Workload."""
    return {"metadata": {"annotations": {CHECKPOINT_STEP_ANNOTATION: str(step), CHECKPOINT_TIME_ANNOTATION: time}}}


def shrunk(body: Mapping[str, Any], count: int) -> dict | None:
    """The merge patch that lowers an elastic Workload's worker count in place (Kueue then
    gives the freed quota back); None when it asks for no more than that already."""
    pod_sets = copy.deepcopy(list((body.get("spec") or {}).get("podSets") or []))
    changed = False
    for pod_set in pod_sets:
        if pod_set.get("name") == POD_SET and isinstance(pod_set.get("count"), int) and pod_set["count"] > count:
            pod_set["count"], changed = count, True
    return {"spec": {"podSets": pod_sets}} if changed else None


def current_and_growth(own: list[WorkloadView]) -> tuple[WorkloadView | None, WorkloadView | None]:
    """Of a job's own Workloads: the one it runs on (or waits with), and a growth slice
    that waits to replace it. A slice Kueue admitted is current even before Kueue marks the
    one it replaces Finished; a finished Workload is current only when no other is left."""
    live = [w for w in own if not w.finished]
    admitted = [w for w in live if w.admitted]
    current = next((w for w in admitted if w.replaces), None) or next(iter(admitted), None) \
        or next((w for w in live if not w.replaces), None) or next(iter(live), None) \
        or next((w for w in own if w.finished_reason != SLICE_REPLACED), own[0] if own else None)
    growth = next((w for w in live if w is not current and w.replaces and current is not None
                   and w.replaces == current.name), None)
    return current, growth


def slices_made(own: list[WorkloadView]) -> int:
    """The highest slice number among the job's Workloads (0: only the first one)."""
    numbers = [int(w.name.rpartition("-")[2]) for w in own if w.replaces and w.name.rpartition("-")[2].isdigit()]
    return max(numbers, default=0)


def pods_ready_condition(before: tuple[bool, str] | None, ready: bool) -> tuple[bool, str]:
    """PodsReady (status, reason) of an admitted Workload whose workers are `ready` or not,
    from the condition it has: Kueue's own rules, so its waitForPodsReady timeouts (the
    first start, then each recovery) count as they do for its built-in job kinds."""
    if ready:
        return True, RECOVERED if before is not None and before[1] in (WAIT_FOR_RECOVERY, RECOVERED) else STARTED
    if before is not None and (before[0] or before[1] == WAIT_FOR_RECOVERY):
        return False, WAIT_FOR_RECOVERY
    return False, WAIT_FOR_START


def placement_of(view: WorkloadView, flavors: Mapping[str, Mapping[str, Any]]) -> Placement:
    """The placement of an admitted Workload, from its ResourceFlavors (name -> object);
    with a topology request, what Kueue's TAS needs on each worker to place it (topology.py)."""
    selector: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    for name in sorted(set(view.flavors.values())):
        spec = (flavors.get(name) or {}).get("spec") or {}
        selector.update(spec.get("nodeLabels") or {})
        tolerations += [dict(tol) for tol in spec.get("tolerations") or [] if tol not in tolerations]
    if view.assignment is None:
        return Placement(node_selector=selector, tolerations=tuple(tolerations), count=view.count)
    # Placed by TAS (asked, or implied by a ClusterQueue of TAS flavors only): gated for its ungater.
    return Placement(node_selector=selector, tolerations=tuple(tolerations), count=view.count,
                     labels={tas.PODSET_LABEL: POD_SET}, annotations=tas.pod_annotations(view.topology_request, view.name),
                     scheduling_gates=(tas.GATE,))


def _set(conditions: list[dict], kind: str, status: bool, reason: str, message: str, now: str,
         generation: int | None) -> list[dict]:
    """metav1.Condition semantics on plain dicts: the transition time moves on a flip only."""
    value = "True" if status else "False"
    before = next((c for c in conditions if c.get("type") == kind), None)
    moved = before is None or before.get("status") != value
    new = {"type": kind, "status": value, "reason": reason, "message": message[:32768],
           "lastTransitionTime": now if moved else before.get("lastTransitionTime", now)}  # type: ignore[union-attr]
    if generation is not None:
        new["observedGeneration"] = generation
    return [*(c for c in conditions if c.get("type") != kind), new]


def release(body: Mapping[str, Any], now: str) -> dict | None:
    """The Workload's status once an evicted job has no active worker: the quota given back
    (admission cleared, QuotaReserved=False, Admitted=False, PodsReady=False/WaitForStart)
    and Requeued, True after a preemption, so Kueue queues it again. None when nothing is
    held."""
    status = copy.deepcopy(dict(body.get("status") or {}))
    view = view_of(body)
    if view.evicted is None or status.get("admission") is None:
        return None
    reason, message = view.evicted
    generation = (body.get("metadata") or {}).get("generation")
    conds = list(status.get("conditions") or [])
    conds = _set(conds, REQUEUED, reason in PREEMPTED_REASONS, reason, message, now, generation)
    conds = _set(conds, QUOTA_RESERVED, False, "Pending", message, now, generation)
    if any(c.get("type") == ADMITTED and c.get("status") == "True" for c in conds):
        conds = _set(conds, ADMITTED, False, "NoReservation", "The workload has no reservation", now, generation)
    if view.pods_ready is not None and view.pods_ready != (False, WAIT_FOR_START):
        # Admitted again later, its workers start anew: Kueue's timeout, not its recoveryTimeout.
        conds = _set_pods_ready(conds, False, WAIT_FOR_START, now, generation)
    status["conditions"] = conds
    status.pop("admission", None)
    return status


def pods_ready(body: Mapping[str, Any], status: bool, reason: str, now: str) -> dict | None:
    """The Workload's status with PodsReady set; None when it already says so, or when it
    holds no admission any more (Kueue then owns the condition: it resets it itself)."""
    view = view_of(body)
    if not view.admitted or view.pods_ready == (status, reason):
        return None
    new = copy.deepcopy(dict(body.get("status") or {}))
    generation = (body.get("metadata") or {}).get("generation")
    new["conditions"] = _set_pods_ready(list(new.get("conditions") or []), status, reason, now, generation)
    return new


def _set_pods_ready(conditions: list[dict], status: bool, reason: str, now: str, generation: int | None) -> list[dict]:
    return _set(conditions, PODS_READY, status, reason, _PODS_READY_MESSAGES[reason], now, generation)


def finish(body: Mapping[str, Any], succeeded: bool, message: str, now: str) -> dict | None:
    """The Workload's status once its job ended: Finished, so Kueue frees the quota. None
    when it is already finished."""
    if view_of(body).finished:
        return None
    status = copy.deepcopy(dict(body.get("status") or {}))
    generation = (body.get("metadata") or {}).get("generation")
    status["conditions"] = _set(list(status.get("conditions") or []), FINISHED, True,
                                "Succeeded" if succeeded else "Failed", message, now, generation)
    return status
