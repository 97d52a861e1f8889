"""Admission through Kueue: a queued job waits for its Workload's admission, runs at the
admitted size, stops when Kueue evicts it, and tells Kueue when its pods are ready and
when it ended (integrations/kueue/workload.py is the Workload side).
"""

from __future__ import annotations

import dataclasses

from disttrain.api import conditions as c
from disttrain.api.report import TrainerReport
from disttrain.integrations.kueue.workload import pods_ready_condition
from disttrain.operator.core.eviction import in_progress, settle
from disttrain.operator.core.failures import price_stop, queue_stop_cause
from disttrain.operator.core.pods import PodInfo
from disttrain.operator.core.state import TERMINAL_PHASES, Event, JobState, Plan, Refusal, creation_refused, workers
from disttrain.operator.core.stopping import gone, stop_first
from disttrain.render import template_hash


UNEVALUATED = ("not evaluated by Kueue yet (a StrictFIFO ClusterQueue evaluates only its head: a job behind "
               "one that does not fit waits without Kueue's words)")


def queued(job: JobState, pods: list[PodInfo], plan: Plan, report: TrainerReport | None,
           refused: str | None, refusal: Refusal | None) -> Plan | None:
    """A job in a Kueue queue runs only while its Workload is admitted. Returns the plan
    when it may not run now (it waits, or is being evicted); None when it is admitted and
    the rest of decide applies, at the admitted size."""
    wl, st = job.workload, plan.status
    queue = f"{job.queue} (ClusterQueue {job.cluster_queue})" if job.cluster_queue else job.queue
    if wl is None or (not wl.quota_reserved and wl.template != template_hash(job.validation.job,
                                                                              job.validation.resolved)):
        # No Workload yet, or one of an older spec while it waits: (re)made, and Kueue looks again.
        plan.create_workload, plan.delete_workload = wl is None, wl is not None
        if refusal is not None:  # the Workload could not be made: said, and tried again
            creation_refused(plan, refusal)
        return _waiting(job, pods, plan, c.WORKLOAD_CREATED,
                        f"waiting for Kueue in LocalQueue {queue}: its Workload was just made")
    plan.workload_active = True if not wl.active else None  # resumed after a suspend
    evicting = c.get_condition(st.conditions, c.EVICTED)
    if wl.evicted is not None and (wl.quota_reserved or not gone(pods)):
        reason, message = wl.evicted
        stopped = (evicting is not None and evicting.status == "True" and st.eviction is not None
                   and st.eviction.reason == "Evicted" and st.eviction.stop_time is not None)
        if not stop_first(job, pods, plan, "Evicted", c.EVICTED, stopped=stopped, report=report, refused=refused,
                          record=[(queue_stop_cause(reason), f"evicted by Kueue ({reason}): {message}", None)]):
            plan.condition(c.EVICTED, True, reason, f"{message}; {st.eviction.message if st.eviction else ''}")
            return plan
        plan.release_workload = wl.quota_reserved and gone(pods)
        plan.condition(c.EVICTED, True, reason, message)
        return _waiting(job, pods, plan, reason, f"evicted by Kueue ({reason}: {message}); waiting in LocalQueue "
                        f"{queue} to be admitted again, to resume from the newest checkpoint")
    if not wl.admitted:
        # No word from Kueue yet. A StrictFIFO ClusterQueue evaluates its head only: the
        # Workloads behind a head that does not fit get no condition at all, Kueue's own
        # batch Jobs' as ours (seen on Kueue v0.19.2: docs/operations.md, "Kueue").
        reason, message = wl.pending or ("Pending", UNEVALUATED)
        return _waiting(job, pods, plan, reason, f"waiting in LocalQueue {queue}: {message}")
    resolved = job.validation.resolved
    size = (f"{wl.count} of {resolved.nodes} workers (minNodes {resolved.min_nodes})"
            if wl.count is not None and wl.count < resolved.nodes else f"{resolved.nodes} workers")
    before = c.get_condition(st.conditions, c.ADMITTED)
    plan.condition(c.ADMITTED, True, c.QUOTA_RESERVED, f"admitted by ClusterQueue {wl.cluster_queue}: {size}")
    if before is None or before.status != "True":
        plan.events.append(Event("Normal", c.ADMITTED, f"admitted by ClusterQueue {wl.cluster_queue}: {size}"))
    plan.condition(c.QUEUED, False, c.ADMITTED, f"admitted by ClusterQueue {wl.cluster_queue}", only_if_present=True)
    plan.condition(c.EVICTED, False, c.ADMITTED, "admitted again", only_if_present=True)
    return None


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
    if st.eviction is not None and st.eviction.reason == "Evicted" and not in_progress(st.eviction):
        st.eviction = settle(st.eviction, st.checkpoint, st.progress)  # the final reports come in late
        st.failures = price_stop(st.failures, st.eviction)
    st.phase = "Pending"
    st.start_time = st.next_restart_time = None  # time in a queue does not count towards activeDeadlineSeconds
    st.workers = workers(pods, 0)
    return plan


def at_admitted_size(job: JobState) -> JobState:
    """An elastic job Kueue admitted with fewer workers than nodes (partial admission, at
    least minNodes) runs at that size."""
    wl, resolved = job.workload, job.validation.resolved
    if wl is None or wl.count is None or wl.count >= resolved.nodes:
        return job
    smaller = dataclasses.replace(resolved, nodes=wl.count, world_size=wl.count * (resolved.nproc_per_node or 1))
    return dataclasses.replace(job, validation=dataclasses.replace(job.validation, resolved=smaller))


def tell_kueue_finished(job: JobState, plan: Plan) -> None:
    """A job that ended marks its Workload Finished: Kueue frees the quota."""
    wl = job.workload
    phase = plan.status.phase
    if job.queue is None or wl is None or wl.finished or phase not in TERMINAL_PHASES:
        return
    done = c.get_condition(plan.status.conditions, c.SUCCEEDED if phase == "Succeeded" else c.FAILED)
    plan.finish_workload = (phase == "Succeeded", done.message if done is not None else phase)


def tell_kueue_checkpoint(job: JobState, plan: Plan) -> None:
    """The Workload of a queued job carries its newest committed checkpoint (step and
    time), so that preemption tooling can prefer a victim that just saved (kueue#477)."""
    wl, ck = job.workload, plan.status.checkpoint
    if job.queue is None or wl is None or wl.finished or ck is None or ck.step is None or not ck.time:
        return
    if wl.checkpoint != (str(ck.step), ck.time):
        plan.workload_checkpoint = (ck.step, ck.time)


def tell_kueue_pods_ready(job: JobState, pods: list[PodInfo], plan: Plan) -> None:
    """An admitted job tells Kueue whether all its workers are Ready (or finished), as
    Kueue's own job kinds do: its waitForPodsReady evicts a Workload that never says so."""
    wl, st = job.workload, plan.status
    if (job.queue is None or wl is None or not wl.admitted or wl.evicted is not None or wl.finished
            or st.phase in TERMINAL_PHASES or not job.validation.ok or job.validation.job.spec.suspend):
        return
    desired = st.workers.desired if st.workers is not None else 0
    ready = sum(p.active and p.ready for p in pods) + sum(p.succeeded for p in pods)
    wanted = pods_ready_condition(wl.pods_ready, bool(desired) and ready >= desired)
    plan.workload_pods_ready = wanted if wanted != wl.pods_ready else None
