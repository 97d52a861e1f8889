"""Admission through Kueue, the pure half of the Kueue integration (a `Joined`, see
operator/core/integration.py): a queued job waits for its Workload's admission, runs at
the admitted size, stops when Kueue evicts it, gives its quota back when suspended, and
tells Kueue when its pods are ready, its newest checkpoint and when it ended. The steps
it asks for are carried out by shell.py; workload.py is the Workload itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from disttrain.api import conditions as c
from disttrain.api.report import TrainerReport
from disttrain.api.status_types import CAUSE, TOPOLOGY_DOMAINS_SHOWN, Admission, PlacedDomain, TopologyPlacement
from disttrain.integrations.kueue import topology as tas
from disttrain.integrations.kueue.workload import QUEUE_LABEL, WorkloadView, pods_ready_condition, topology_of
from disttrain.operator.core.integration import Joined, NodeHealth, Step
from disttrain.operator.core.pods import PodInfo
from disttrain.operator.core.state import TERMINAL_PHASES, Event, JobState, Plan, Refusal, creation_refused, workers
from disttrain.operator.core.stopping import gone, settle_stop, stop_first
from disttrain.render import template_hash

NAME = "kueue"

# The failure causes only Kueue's stops record (Kueue.causes); its preemptions are the
# API's Preempted, as the scheduler's are.
PODS_READY_TIMEOUT = CAUSE.PODS_READY_TIMEOUT
QUEUE_EVICTED = CAUSE.QUEUE_EVICTED
PREEMPTED = CAUSE.PREEMPTED
CAUSES = (PODS_READY_TIMEOUT, QUEUE_EVICTED)
STOP_CAUSES = (PREEMPTED, *CAUSES)  # what queue_stop_cause returns


# The steps a pass asks of the Workload, carried out in this order (shell.py).
@dataclass(frozen=True, slots=True)
class WorkloadStep(Step):
    integration: ClassVar[str] = NAME


@dataclass(frozen=True, slots=True)
class DeleteWorkload(WorkloadStep):
    """Delete it: one of an older spec, while it waits; or a growth slice no longer wanted."""

    name: str | None = None  # None: the current one


@dataclass(frozen=True, slots=True)
class CreateWorkload(WorkloadStep):
    """Make the job's Workload (with its priority read from its class)."""

    creates: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class CreateSlice(WorkloadStep):
    """Ask Kueue for `nodes` workers through a growth slice that replaces the current one."""

    creates: ClassVar[bool] = True
    number: int
    replaces: str


@dataclass(frozen=True, slots=True)
class ShrinkWorkload(WorkloadStep):
    """Lower the current (elastic) Workload's worker count in place: Kueue frees the rest."""

    count: int


@dataclass(frozen=True, slots=True)
class ActivateWorkload(WorkloadStep):
    """Set its spec.active: a suspend deactivates it (Kueue evicts it), a resume activates it."""

    active: bool


@dataclass(frozen=True, slots=True)
class PublishCheckpoint(WorkloadStep):
    """Annotate it with the job's newest committed checkpoint (kueue#477)."""

    step: int
    time: str


@dataclass(frozen=True, slots=True)
class ReleaseWorkload(WorkloadStep):
    """Give its quota back after an eviction, once no worker is left."""


@dataclass(frozen=True, slots=True)
class SetPodsReady(WorkloadStep):
    """Set its PodsReady condition."""

    ready: bool
    reason: str


@dataclass(frozen=True, slots=True)
class FinishWorkload(WorkloadStep):
    """Mark it Finished: Kueue frees the quota."""

    succeeded: bool
    message: str


STEP_ORDER = (DeleteWorkload, CreateWorkload, CreateSlice, ShrinkWorkload, ActivateWorkload, PublishCheckpoint,
              ReleaseWorkload, SetPodsReady, FinishWorkload)


# Kueue's eviction reasons -> the cause of the stop: its preemptions are preemptions;
# every other reason (a stopped queue, a deactivation, node failures) is QueueEvicted.
_BY_QUEUE_REASON = {"Preempted": PREEMPTED, "PodsReadyTimeout": PODS_READY_TIMEOUT}


def queue_stop_cause(kueue_reason: str) -> str:
    """The cause a Kueue eviction of the job is recorded under."""
    return _BY_QUEUE_REASON.get(kueue_reason, QUEUE_EVICTED)


@dataclass(frozen=True, slots=True)
class Queued(Joined):
    """A job in a Kueue LocalQueue, with its Workload as the watch shows it."""

    integration: ClassVar[str] = NAME
    queue: str  # the LocalQueue it asks for
    workload: WorkloadView | None = None  # its Workload, once made (workload.current_and_growth)
    cluster_queue: str | None = None  # the ClusterQueue its LocalQueue feeds (None: not known)
    growth: WorkloadView | None = None  # a growth slice waiting to replace the Workload
    slices: int = 0  # the highest slice number made so far

    def hold(self, job: JobState, pods: list[PodInfo], plan: Plan, *, report: TrainerReport | None,
             checkpoint_refused: str | None, refusal: Refusal | None,
             nodes: Mapping[str, NodeHealth] | None = None) -> Plan | None:
        return queued(self, job, pods, plan, report, checkpoint_refused, refusal, nodes or {})

    def sized(self, job: JobState) -> JobState:
        return at_admitted_size(self.workload, job)

    def suspended(self, job: JobState, pods: list[PodInfo], plan: Plan) -> None:
        """Suspended by its user, the job gives its quota back: its Workload is deactivated
        (Kueue evicts it), and released once no worker is left."""
        wl = self.workload
        if self.growth is not None:  # no growth while suspended
            plan.steps.append(DeleteWorkload(name=self.growth.name))
        if wl is None:
            return
        if wl.active:
            plan.steps.append(ActivateWorkload(active=False))
        if wl.evicted is not None and wl.quota_reserved and gone(pods):
            plan.steps.append(ReleaseWorkload())

    def tell(self, job: JobState, pods: list[PodInfo], plan: Plan) -> None:
        if self.growth is not None and plan.status.phase in TERMINAL_PHASES:
            plan.steps.append(DeleteWorkload(name=self.growth.name))  # it ended: no more growth
        tell_kueue_finished(self.workload, plan)
        tell_kueue_pods_ready(self.workload, job, pods, plan)
        tell_kueue_checkpoint(self.workload, plan)

    def lost_to(self, job: JobState) -> str | None:
        """Back in the queue after Kueue evicted it: its workers' time is lost to that."""
        old = job.status
        evicted = c.get_condition(old.conditions, c.EVICTED)
        if old.phase == "Pending" and evicted is not None and evicted.status == "True":
            return queue_stop_cause(evicted.reason or "")
        return None


@dataclass(frozen=True, slots=True)
class QueueIgnored(Joined):
    """A job that names a LocalQueue while this operator runs without Kueue: it starts
    without waiting for quota, and says so; one that asks for a topology waits (Unplaced)."""

    integration: ClassVar[str] = NAME
    queue: str

    def hold(self, job: JobState, pods: list[PodInfo], plan: Plan, *, report: TrainerReport | None,
             checkpoint_refused: str | None, refusal: Refusal | None,
             nodes: Mapping[str, NodeHealth] | None = None) -> Plan | None:
        if topology_of(job.validation.job) is not None:
            return unplaced(job, pods, plan, "this operator runs without Kueue: run it with DISTTRAIN_KUEUE (the "
                            "chart's kueue.enabled), or remove spec.scheduling.topology")
        plan.events.append(Event("Warning", c.QUEUE_IGNORED, f"the label {QUEUE_LABEL}={self.queue} is "
                                 "ignored: this operator runs without Kueue (DISTTRAIN_KUEUE, the chart's "
                                 "kueue.enabled), so the job starts without waiting for quota"))
        return None


@dataclass(frozen=True, slots=True)
class Unqueued(Joined):
    """A job that asks for a topology but names no LocalQueue: only Kueue's Topology-Aware
    Scheduling places by topology here, so it waits and says how to fix it, never placed as
    if it had not asked."""

    integration: ClassVar[str] = NAME

    def hold(self, job: JobState, pods: list[PodInfo], plan: Plan, *, report: TrainerReport | None,
             checkpoint_refused: str | None, refusal: Refusal | None,
             nodes: Mapping[str, NodeHealth] | None = None) -> Plan | None:
        return unplaced(job, pods, plan, f"the job is in no Kueue queue: add the label {QUEUE_LABEL}: <a LocalQueue "
                        "whose ClusterQueue has a ResourceFlavor with a topologyName>, or remove "
                        "spec.scheduling.topology")


def unplaced(job: JobState, pods: list[PodInfo], plan: Plan, fix: str) -> Plan:
    """The job asks for a topology nothing here places by: Pending, no worker, a Warning once."""
    topo = topology_of(job.validation.job)
    level = tas.asked_level(tas.request(topo)) if topo is not None else None
    message = (f"spec.scheduling.topology ({level}) is placed by Kueue's Topology-Aware Scheduling, and {fix}")
    before = c.get_condition(job.status.conditions, c.RUNNING)
    if before is None or before.reason != c.TOPOLOGY_UNPLACED or before.message != c.cap(message):
        plan.events.append(Event("Warning", c.TOPOLOGY_UNPLACED, message))
    plan.condition(c.RUNNING, False, c.TOPOLOGY_UNPLACED, message)
    st = plan.status
    st.phase, st.start_time = "Pending", None
    plan.delete = plan.delete or [(p.name, c.TOPOLOGY_UNPLACED) for p in pods if p.active]
    st.workers = workers(pods, 0)
    return plan


# Kueue writes QuotaReserved=False with its words only on a Workload its scheduler tried
# (scheduler.go, requeueAndUpdate). It tries a ClusterQueue's head first (queue/manager.go,
# heads: one Pop per ClusterQueue per cycle): behind a head that does not fit, a StrictFIFO
# queue keeps that head and tries it again (cluster_queue.go, RequeueIfNotPresent:
# immediate), and a BestEffortFIFO queue sets aside the Workloads of the same shape
# untried (cluster_queue.go, requeueIfNotPresent / PushOrUpdate: SchedulingEquivalenceHashing,
# on by default). Kueue's own batch Jobs' Workloads wait so too (seen on v0.19.2, both
# strategies); it tries them once they are the head.
UNEVALUATED = ("not evaluated by Kueue yet: its Workload has no QuotaReserved condition (behind a head that "
               "does not fit, a StrictFIFO ClusterQueue tries no other Workload, and a BestEffortFIFO one skips "
               "those of the head's shape)")


def queued(seen: Queued, job: JobState, pods: list[PodInfo], plan: Plan, report: TrainerReport | None,
           refused: str | None, refusal: Refusal | None, nodes: Mapping[str, NodeHealth]) -> Plan | None:
    """A job in a Kueue queue runs only while its Workload is admitted. Returns the plan
    when it may not run now (it waits, or is being evicted); None when it is admitted and
    the rest of decide applies, at the admitted size."""
    wl, st = seen.workload, plan.status
    queue = f"{seen.queue} (ClusterQueue {seen.cluster_queue})" if seen.cluster_queue else seen.queue
    if wl is None or (not wl.quota_reserved and wl.template != template_hash(job.validation.job,
                                                                              job.validation.resolved)):
        # No Workload yet, or one of an older spec while it waits: (re)made, and Kueue looks again.
        plan.steps.append(CreateWorkload() if wl is None else DeleteWorkload())
        if refusal is not None:  # the Workload could not be made: said, and tried again
            creation_refused(plan, refusal)
        return _waiting(job, pods, plan, c.WORKLOAD_CREATED,
                        f"waiting for Kueue in LocalQueue {queue}: its Workload was just made")
    if not wl.active:  # resumed after a suspend
        plan.steps.append(ActivateWorkload(active=True))
    evicting = c.get_condition(st.conditions, c.EVICTED)
    if wl.evicted is not None and (wl.quota_reserved or not gone(pods)):
        reason, message = wl.evicted
        stopped = (evicting is not None and evicting.status == "True" and st.eviction is not None
                   and st.eviction.reason == "Evicted" and st.eviction.stop_time is not None)
        if not stop_first(job, pods, plan, "Evicted", c.EVICTED, stopped=stopped, report=report, refused=refused,
                          record=[(queue_stop_cause(reason), f"evicted by Kueue ({reason}): {message}", None)],
                          doing="evicted by Kueue"):
            plan.condition(c.EVICTED, True, reason, f"{message}; {st.eviction.message if st.eviction else ''}")
            return plan
        if wl.quota_reserved and gone(pods):
            plan.steps.append(ReleaseWorkload())
        plan.condition(c.EVICTED, True, reason, message)
        return _waiting(job, pods, plan, reason, f"evicted by Kueue ({reason}: {message}); waiting in LocalQueue "
                        f"{queue} to be admitted again, to resume from the newest checkpoint")
    if not wl.admitted:
        # No word from Kueue yet (UNEVALUATED says why: docs/operations.md, "Kueue").
        reason, message = wl.pending or ("Pending", UNEVALUATED)
        return _waiting(job, pods, plan, reason, f"waiting in LocalQueue {queue}: {message}")
    _admitted(seen, job, plan, wl, nodes)
    return None


def _admitted(seen: Queued, job: JobState, plan: Plan, wl: WorkloadView, nodes: Mapping[str, NodeHealth]) -> None:
    """Admitted: at which size and why, said once as an Event and kept in status.admission."""
    st, resolved = plan.status, job.validation.resolved
    holds = wl.holds if wl.holds is not None else resolved.nodes
    size = (f"{holds} of {resolved.nodes} workers (minNodes {resolved.min_nodes})"
            if holds < resolved.nodes else f"{resolved.nodes} workers")
    why = follow_quota(seen, job, plan)
    before = c.get_condition(st.conditions, c.ADMITTED)
    placed, where = placed_by_topology(wl, nodes)
    admitted = f"admitted by ClusterQueue {wl.cluster_queue}: {size}" + (f"; {where}" if where else "")
    plan.condition(c.ADMITTED, True, c.QUOTA_RESERVED, f"{admitted}; {why}" if why else admitted)
    if before is None or before.status != "True" or (where and where not in (before.message or "")):
        plan.events.append(Event("Normal", c.ADMITTED, admitted))
    st.admission = Admission(cluster_queue=wl.cluster_queue, workload=wl.name, nodes=holds,
                             requested_nodes=resolved.nodes, message=why or None,
                             growth_workload=seen.growth.name if seen.growth is not None else None, topology=placed)
    plan.condition(c.QUEUED, False, c.ADMITTED, f"admitted by ClusterQueue {wl.cluster_queue}", only_if_present=True)
    plan.condition(c.EVICTED, False, c.ADMITTED, "admitted again", only_if_present=True)


def placed_by_topology(wl: WorkloadView, nodes: Mapping[str, NodeHealth]) -> tuple[TopologyPlacement | None, str]:
    """Where Kueue's TAS placed the workers (status.admission.topology) and its words; (None,
    "") for a Workload admitted without a topology assignment."""
    if wl.assignment is None:
        return None, ""
    level = tas.asked_level(wl.topology_request)

    def label_of(host: str, key: str) -> str | None:  # every pass of an admitted job: no copies
        node = nodes.get(host)
        return next((value for name, value in node.labels if name == key), None) if node is not None else None

    grouped = tas.at_level(wl.assignment, level, label_of)
    hosts = len(wl.assignment.domains) if wl.assignment.levels[-1:] == (tas.HOSTNAME,) else None
    placed = TopologyPlacement(level=level or wl.assignment.levels[-1], domain_count=len(grouped), hosts=hosts,
                               domains=[PlacedDomain(name=name, workers=n)
                                        for name, n in grouped[:TOPOLOGY_DOMAINS_SHOWN]])
    return placed, tas.words(wl.topology_request, grouped, level)


def _waiting(job: JobState, pods: list[PodInfo], plan: Plan, reason: str, message: str) -> Plan:
    """The job waits in its queue: no worker runs (any left go), its progress is kept."""
    st = plan.status
    before = c.get_condition(st.conditions, c.QUEUED)
    if before is None or before.status != "True":
        plan.events.append(Event("Normal", c.QUEUED, message))
    plan.condition(c.QUEUED, True, reason, message)
    plan.condition(c.ADMITTED, False, reason, message, only_if_present=True)
    plan.condition(c.RUNNING, False, c.QUEUED, "waiting in its queue", only_if_present=True)
    plan.delete = plan.delete or [(p.name, c.QUEUED) for p in pods if p.active]
    settle_stop(plan, "Evicted", STOP_CAUSES)  # the final reports come in late
    st.phase = "Pending"
    st.admission = None
    st.start_time = st.next_restart_time = None  # time in a queue does not count towards activeDeadlineSeconds
    st.workers = workers(pods, 0)
    return plan


def follow_quota(seen: Queued, job: JobState, plan: Plan) -> str:
    """An admitted elastic job follows the quota: below `nodes` it asks for the rest
    through a growth slice; scaled down on a slice it gives the freed quota back in place.
    Returns why it runs at its size ("" when there is nothing to say)."""
    wl, growth, resolved = seen.workload, seen.growth, job.validation.resolved
    if wl is None or resolved.min_nodes >= resolved.max_nodes:
        return ""  # a fixed-size job runs at the size it was admitted at
    holds, want = (wl.holds if wl.holds is not None else resolved.nodes), resolved.nodes
    if holds < want:
        if growth is None:
            number = seen.slices + 1
            plan.steps.append(CreateSlice(number=number, replaces=wl.name))
            return f"asking Kueue for {want} workers through a Workload slice"
        if growth.requested != want:  # the job's size changed again: asked anew
            plan.steps.append(DeleteWorkload(name=growth.name))
            return f"asking Kueue for {want} workers through a new Workload slice"
        _reason, message = growth.pending or ("Pending", UNEVALUATED)
        return f"asking Kueue for {want} workers through Workload slice {growth.name}, which waits: {message}"
    if growth is not None:  # no longer needed: the job asks for no more than it holds
        plan.steps.append(DeleteWorkload(name=growth.name))
    if want < holds:
        if not wl.elastic:
            return (f"holds quota for {holds} workers while it runs {want}: Kueue cannot shrink a partially "
                    f"admitted Workload in place, so the quota is given back when the job grows into a slice or ends")
        plan.steps.append(ShrinkWorkload(count=want))
    if wl.elastic and wl.count is not None and want < wl.count:
        return (f"scaled to {want} of the {wl.count} workers Kueue admitted: the quota of the other "
                f"{wl.count - want} given back to Kueue")
    return ""


def at_admitted_size(wl: WorkloadView | None, job: JobState) -> JobState:
    """A job Kueue admitted with fewer workers than nodes (partial admission, at least
    minNodes, or a slice shrunk in place) runs at that size."""
    resolved = job.validation.resolved
    holds = wl.holds if wl is not None else None
    if holds is None or holds >= resolved.nodes:
        return job
    smaller = dataclasses.replace(resolved, nodes=holds, world_size=holds * (resolved.nproc_per_node or 1))
    return dataclasses.replace(job, validation=dataclasses.replace(job.validation, resolved=smaller))


def tell_kueue_finished(wl: WorkloadView | None, plan: Plan) -> None:
    """A job that ended marks its Workload Finished: Kueue frees the quota."""
    phase = plan.status.phase
    if wl is None or wl.finished or phase not in TERMINAL_PHASES:
        return
    done = c.get_condition(plan.status.conditions, c.SUCCEEDED if phase == "Succeeded" else c.FAILED)
    plan.steps.append(FinishWorkload(succeeded=phase == "Succeeded",
                                     message=done.message if done is not None else phase))  # type: ignore[arg-type]


def tell_kueue_checkpoint(wl: WorkloadView | None, plan: Plan) -> None:
    """The Workload of a queued job carries its newest committed checkpoint (step and
    time), so that preemption tooling can prefer a victim that just saved (kueue#477)."""
    ck = plan.status.checkpoint
    if wl is None or wl.finished or ck is None or ck.step is None or not ck.time:
        return
    if wl.checkpoint != (str(ck.step), ck.time):
        plan.steps.append(PublishCheckpoint(step=ck.step, time=ck.time))


def tell_kueue_pods_ready(wl: WorkloadView | None, job: JobState, pods: list[PodInfo], plan: Plan) -> None:
    """An admitted job tells Kueue whether all its workers are Ready (or finished), as
    Kueue's own job kinds do: its waitForPodsReady evicts a Workload that never says so."""
    st = plan.status
    if (wl is None or not wl.admitted or wl.evicted is not None or wl.finished
            or st.phase in TERMINAL_PHASES or not job.validation.ok or job.validation.job.spec.suspend):
        return
    desired = st.workers.desired if st.workers is not None else 0
    ready = sum(p.active and p.ready for p in pods) + sum(p.succeeded for p in pods)
    wanted = pods_ready_condition(wl.pods_ready, bool(desired) and ready >= desired)
    if wanted != wl.pods_ready:
        plan.steps.append(SetPodsReady(ready=wanted[0], reason=wanted[1]))
