"""Recovery: crashed and disrupted workers (backoffLimit and its back-off), hung trainers,
workers on lost nodes, and the nodes a job avoids after failures there.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Mapping

from disttrain.api import conditions as c
from disttrain.api.report import TrainerReport
from disttrain.api.times import iso, parse_time
from disttrain.api.status_types import DistributedTrainingStatus as Status
from disttrain.api.status_types import FailureRecord
from disttrain.operator.core.backoff import exponential
from disttrain.operator.core.ends import fail
from disttrain.operator.core.failures import (HUNG, MOVED_OFF, NODE_UNHEALTHY, add_failure, avoiding, lift_avoidance,
                                              nodes_to_avoid, record_failures, steps_lost)
from disttrain.operator.core.nodes import NodeHealth
from disttrain.operator.core.pods import PodInfo
from disttrain.operator.core.state import Event, JobState, Plan, Policy


def backoff_seconds(restarts: int, policy: Policy) -> float:
    """Exponential back-off before the (restarts+1)-th recreation: 10s, 20s, 40s ... 5 min."""
    return exponential(policy.backoff_base_seconds, policy.backoff_max_seconds, restarts + 1)


def recover_failures(job: JobState, pods: list[PodInfo], plan: Plan,
                     policy: Policy) -> tuple[list[PodInfo], Plan | None]:
    """Disruptions are recreated at once; crashes after a back-off, within backoffLimit.
    Returns the crashed pods, and the final plan when the job has failed."""
    spec = job.validation.job.spec
    st = plan.status
    failed = [p for p in pods if p.ended_early and not p.terminating]
    for pod in failed:
        if pod.disrupted:
            plan.delete.append((pod.name, c.WORKER_DISRUPTED))
            why = ("stopped on a signal before the last step, after a checkpoint"
                   if pod.report is not None and not pod.report.finished
                   else f"{pod.reason or 'disrupted'} by the cluster")
            plan.events.append(Event("Warning", c.WORKER_DISRUPTED,
                                     f"{pod.name} was {why}; recreating it (does not count against backoffLimit)"))
    crashed = [p for p in failed if not p.disrupted]
    if not crashed:
        st.next_restart_time = None
        return crashed, None
    restarts = st.restarts  # _carry_over sets it
    due = parse_time(st.next_restart_time)
    what = "; ".join(p.describe_failure() for p in crashed)
    if due is None:
        if restarts >= spec.backoff_limit:
            return crashed, fail(job, pods, plan, c.BACKOFF_LIMIT_EXCEEDED,
                                 f"{what}; backoffLimit {spec.backoff_limit} reached after {restarts} restarts")
        delay = backoff_seconds(restarts, policy)
        st.next_restart_time = iso(plan.now + timedelta(seconds=delay))
        plan.events.append(Event("Warning", c.WORKER_FAILED,
                                 f"{what}; recreating in {delay:.0f}s (restart {restarts + 1} "
                                 f"of backoffLimit {spec.backoff_limit})"))
    elif plan.now >= due:
        st.restarts = restarts + 1
        st.next_restart_time = None
        plan.restarted = 1
        doomed = crashed
        if any(p.index == 0 for p in crashed):
            # Worker 0 hosted the c10d store: the other agents cannot rendezvous
            # without it and would fail one by one. Restart them all in this round.
            already = {name for name, _ in plan.delete}
            doomed = [p for p in pods if not p.terminating and p.name not in already]
        for pod in doomed:
            plan.delete.append((pod.name, c.WORKER_FAILED))
        plan.events.append(Event("Normal", c.WORKERS_RECREATED,
                                 f"recreating {', '.join(p.name for p in doomed)} "
                                 f"(restart {restarts + 1} of {spec.backoff_limit})"))
    return crashed, None


def hang_seconds(spec: Any, report: TrainerReport | None) -> float | None:
    """How long a running trainer may complete no step (None: not watched). Set: that (0 is
    off). Unset: max(10 x step time, 300 s) for the built-in trainer, and for a script of
    the user's once it reports its step time (disttrain.train.Session); a script that
    reports none is not watched."""
    chosen = spec.failure_policy.hang_seconds
    if chosen is not None:
        return float(chosen) or None
    step = report.step_seconds if report is not None else None
    if spec.trainer.builtin is None and not step:
        return None
    return max(HANG_STEPS * step, HANG_MIN_SECONDS) if step else HANG_MIN_SECONDS


HANG_STEPS, HANG_MIN_SECONDS = 10, 300.0


# A trainer that has completed no step since it last became Running (a start, a restart, a
# resume: imports, rendezvous, a checkpoint to load, on a busy node) is hung only after this.
STARTING_SECONDS = 300.0


def stalled_since(status: Status) -> datetime | None:
    """Since when no step was seen while the job runs: the later of the last step and the
    moment it last became Running (a restart or a resume starts the clock again)."""
    running = c.get_condition(status.conditions, c.RUNNING)
    if status.phase != "Running" or running is None or running.status != "True" or status.progress is None:
        return None
    moments = [parse_time(status.progress.last_step_time), parse_time(running.last_transition_time)]
    known = [m for m in moments if m is not None]
    return max(known) if known else None


def stepped_since_running(status: Status) -> bool:
    """The trainer completed a step since the job last became Running."""
    running = c.get_condition(status.conditions, c.RUNNING)
    stepped = parse_time(status.progress.last_step_time) if status.progress is not None else None
    became = parse_time(running.last_transition_time) if running is not None else None
    return stepped is not None and (became is None or stepped > became)


def restart_hung(job: JobState, pods: list[PodInfo], plan: Plan,
                 report: TrainerReport | None) -> tuple[bool, datetime | None, Plan | None]:
    """A running trainer that completed no step for hangSeconds (a rank stuck in a
    collective, a deadlocked loader) is restarted: every worker goes, the round counts
    against backoffLimit. (hung, when to look again, the final plan if it failed)."""
    spec, st = job.validation.job.spec, plan.status
    limit = hang_seconds(spec, report)
    since = stalled_since(st)  # this pass's progress (the step may just have moved), the last phase
    if limit is None or since is None or (report is not None and report.outcome is not None):
        return False, None, None
    if not stepped_since_running(st):
        limit = max(limit, STARTING_SECONDS)  # still starting: loading a checkpoint is no hang
    due = since + timedelta(seconds=limit)
    if plan.now < due:
        return False, due, None
    live = sorted((p for p in pods if not p.terminating), key=lambda p: (p.index is None, p.index or 0))
    step = st.progress.step if st.progress is not None else None
    what = (f"no step completed for {(plan.now - since).total_seconds():.0f}s (step {step} since "
            f"{iso(since)}; failurePolicy.hangSeconds {limit:.0f})")
    first = live[0] if live else None
    resumed, lost = steps_lost(st.progress, st.checkpoint)
    entry = FailureRecord(time=plan.stamp, cause=HUNG, node=(first.node or None) if first else None,
                          pod=first.name if first else None, pod_uid=first.uid if first else None,
                          message=what, resumed_from_step=resumed, steps_lost=lost)
    st.failures = add_failure(st.failures, entry)
    plan.new_failures.append(entry)
    if st.restarts >= spec.backoff_limit:
        return True, None, fail(job, pods, plan, c.BACKOFF_LIMIT_EXCEEDED,
                                f"{what}; backoffLimit {spec.backoff_limit} reached after {st.restarts} restarts")
    st.restarts += 1
    plan.restarted = 1
    doomed = {name for name, _ in plan.delete}
    plan.delete.extend((p.name, c.HUNG) for p in live if p.name not in doomed)
    plan.events.append(Event("Warning", c.HUNG, f"{what}: restarting every worker (restart {st.restarts} of "
                             f"backoffLimit {spec.backoff_limit}); the trainer resumes from the newest checkpoint"))
    return True, None, None


def note_failures(plan: Plan, pods: list[PodInfo], lost: dict[str, NodeHealth]) -> None:
    """status.failures gains an entry for each worker that ended early, cannot start, or
    whose node is lost, priced with the newest progress and checkpoint (so run after
    _with_report)."""
    st = plan.status
    st.failures, plan.new_failures = record_failures(st.failures or (), pods, plan.stamp, st.progress, st.checkpoint,
                                                     lost=lost)
    st.failures = st.failures or None


def avoid_bad_nodes(plan: Plan, threshold: int) -> None:
    """A node where the job failed `threshold` times is avoided by its new workers."""
    st = plan.status
    avoided, new = nodes_to_avoid(st.failures or (), st.avoided_nodes or (), threshold, plan.stamp)
    st.avoided_nodes = avoided or None
    moved = {f.node: f.cause for f in st.failures or () if f.cause in MOVED_OFF}
    for entry in new:
        why = (f"node {entry.node} was {'unhealthy' if moved[entry.node] == NODE_UNHEALTHY else 'a straggler'}: "
               "the workers were moved off it" if entry.node in moved else
               f"node {entry.node} was the place of {entry.failures} failures of this job")
        plan.events.append(Event("Warning", c.NODE_AVOIDED, f"{why}: its new workers avoid it (failurePolicy."
                                 f"avoidNodeAfterFailures {threshold})"))


def stuck_words(pod: PodInfo) -> tuple[str, str]:
    """The Running condition's reason and message for a worker that cannot start."""
    if pod.unschedulable:
        return c.UNSCHEDULABLE, f"{pod.name} cannot be scheduled: {pod.unschedulable}"
    if pod.image_pull:
        return (c.IMAGE_PULL_BACK_OFF, f"{pod.name} cannot pull its image: {pod.image_pull}; "
                "check spec.image and the pull secrets (podTemplate.spec.imagePullSecrets)")
    return (c.CONTAINER_CONFIG_ERROR, f"{pod.name} cannot start: {pod.config_error}; create it in the job's "
            "namespace (spec.checkpoint.secretRef, or a Secret or ConfigMap spec.env names): the kubelet retries")


def lift_avoided_nodes(plan: Plan, stuck: list[PodInfo]) -> None:
    """A worker that fits on no node while the job avoids some: the job stops avoiding
    them (a job never avoids so many nodes that it cannot run) and recreates the stuck
    workers without the avoidance."""
    st = plan.status
    away = avoiding(st.avoided_nodes)
    unschedulable = [p for p in stuck if p.unschedulable]
    if not away or not unschedulable:
        return
    why = f"{unschedulable[0].name} cannot be scheduled while avoiding {', '.join(away)}: {unschedulable[0].unschedulable}"
    st.avoided_nodes = lift_avoidance(st.avoided_nodes or (), plan.stamp, why)
    plan.events.append(Event("Warning", c.NODE_AVOIDANCE_LIFTED, f"{why}; avoiding no node any more: recreating "
                             f"{', '.join(p.name for p in unschedulable)}"))
    plan.delete.extend((p.name, c.NODE_AVOIDANCE_LIFTED) for p in unschedulable)


def lost_workers(pods: list[PodInfo], nodes: Mapping[str, NodeHealth], now: datetime,
                 after_seconds: int) -> tuple[dict[str, NodeHealth], datetime | None]:
    """(pod name -> its node, for the workers whose node has been lost for `after_seconds`;
    the moment the next one's time is up). Pods that ended are left to the usual rules;
    pods being deleted are included: with no kubelet to confirm, they would stay forever."""
    due: dict[str, NodeHealth] = {}
    wake: datetime | None = None
    for pod in pods:
        node = nodes.get(pod.node) if pod.node else None
        since = node.lost_since() if node is not None else None
        if since is None or pod.phase in ("Succeeded", "Failed"):
            continue
        at = since + timedelta(seconds=after_seconds)
        if now >= at:
            due[pod.name] = node
        elif wake is None or at < wake:
            wake = at
    return due, wake


def replace_lost(pods: list[PodInfo], plan: Plan, lost: dict[str, NodeHealth]) -> None:
    """Force-delete the workers of lost nodes (the only case where force is right: no
    kubelet is left to stop them), so they are recreated elsewhere at once; a disruption,
    so backoffLimit is not spent."""
    doomed = {name for name, _ in plan.delete}
    for pod in pods:
        node = lost.get(pod.name)
        if node is None:
            continue
        if pod.name in doomed:  # a restart round deletes it already: make that deletion forced
            plan.delete = [(n, c.NODE_LOST if n == pod.name else why) for n, why in plan.delete]
        else:
            plan.delete.append((pod.name, c.NODE_LOST))
        if not pod.terminating:
            plan.events.append(Event("Warning", c.NODE_LOST, f"{node.describe()}: force-deleting {pod.name} so that "
                                     "it is recreated on another node (does not count against backoffLimit)"))
