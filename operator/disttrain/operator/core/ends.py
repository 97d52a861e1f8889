"""How a job ends: success (the success contract of docs/operations.md), failure, and what
a finished job keeps: the pods cleanPodPolicy leaves, and its TTL.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from disttrain.api import conditions as c
from disttrain.api.times import parse_time
from disttrain.operator.core.pods import PodInfo
from disttrain.operator.core.state import Event, JobState, Plan, workers


def succeeded(pods: list[PodInfo]) -> bool:
    """A worker finished, and no other crashed, unless the finished one's own report proves
    every step was done (a crash at teardown then changes nothing). A user's script that
    exits 0 beside a crashed peer is not proof: the crash is recovered like any other."""
    finished = [p for p in pods if p.finished]
    crashed = [p for p in pods if p.ended_early and not p.disrupted]
    return bool(finished) and (not crashed or any(p.report is not None for p in finished))


def success(job: JobState, pods: list[PodInfo], plan: Plan) -> Plan:
    """A worker finished (docs/pod-contract.md): torchrun agents finish together, so training
    reached its end. Wait for the others to exit; failures after a success restart nothing.
    The final progress and checkpoint are the finished pod's own termination report: decide
    already took them from the newest report, where a final one wins a tie (report.newest)."""
    resolved = job.validation.resolved
    active = [p for p in pods if p.active]
    winner = next(p for p in pods if p.finished).name
    st = plan.status
    if active:
        st.phase = "Running"
        st.workers = workers(pods, resolved.nodes)
        plan.condition(c.RUNNING, True, c.PODS_RUNNING, f"training finished ({winner} exited 0); waiting for "
                       f"{', '.join(p.name for p in active)} to exit")
        return plan
    st.phase = "Succeeded"
    st.completion_time = plan.stamp
    st.next_restart_time = None
    plan.condition(c.SUCCEEDED, True, c.JOB_SUCCEEDED, f"training finished ({winner} exited 0)")
    for type_ in (c.RUNNING, c.RESTARTING, c.CHECKPOINT_STALE):
        plan.condition(type_, False, c.JOB_SUCCEEDED, "training finished", only_if_present=True)
    st.workers = workers(pods, 0)
    plan.events.append(Event("Normal", c.JOB_SUCCEEDED, f"training finished ({winner} exited 0)"))
    plan.delete = clean_pods(pods, job.validation.job.spec.clean_pod_policy)
    plan.wake_at = _ttl_due(job, plan.now)
    return plan


def fail(job: JobState, pods: list[PodInfo], plan: Plan, reason: str, message: str) -> Plan:
    st = plan.status
    st.phase = "Failed"
    st.completion_time = plan.stamp
    st.next_restart_time = None
    plan.condition(c.FAILED, True, reason, message)
    plan.condition(c.RUNNING, False, reason, message, only_if_present=True)
    plan.condition(c.RESTARTING, False, reason, message, only_if_present=True)
    st.workers = workers(pods, 0)
    plan.failed_reason = reason
    plan.events.append(Event("Warning", reason, message))
    plan.delete = clean_pods(pods, job.validation.job.spec.clean_pod_policy)
    plan.wake_at = _ttl_due(job, plan.now)
    return plan


def already_finished(job: JobState, pods: list[PodInfo], plan: Plan, phase: str) -> Plan:
    spec = job.validation.job.spec
    plan.status.phase = phase
    plan.status.workers = workers(pods, 0)
    plan.delete = clean_pods(pods, spec.clean_pod_policy)
    done = parse_time(plan.status.completion_time)
    ttl = spec.ttl_seconds_after_finished
    if ttl is not None and done is not None:
        if (plan.now - done).total_seconds() >= ttl:
            plan.delete_job = True
            plan.events.append(Event("Normal", c.TTL_EXPIRED, f"deleting the job {ttl}s after it finished"))
        else:
            plan.wake_at = done + timedelta(seconds=ttl, milliseconds=500)
    return plan


def _ttl_due(job: JobState, done: datetime) -> datetime | None:
    """When a job that finished at `done` is due for TTL deletion (None: kept)."""
    ttl = job.validation.job.spec.ttl_seconds_after_finished
    # completionTime is written in whole seconds: wake just after the stamp's TTL runs out.
    return None if ttl is None else done.replace(microsecond=0) + timedelta(seconds=ttl, milliseconds=500)


def clean_pods(pods: list[PodInfo], policy: str) -> list[tuple[str, str]]:
    """cleanPodPolicy when the job is finished: All, Running (active pods) or None."""
    if policy == "All":
        return [(p.name, "CleanPodPolicy") for p in pods if not p.terminating]
    if policy == "Running":
        return [(p.name, "CleanPodPolicy") for p in pods if p.active]
    return []
