"""Stopping a job without losing steps: a suspend, a drained node and an unhealthy one ask
the trainer for a checkpoint first (checkpoint-then-evict, eviction.py) and delete the pods
once it is written, or once the trainer cannot answer.

An integration that stops a job (a queue's eviction) does it through three functions of
this module and nothing else of the core's stops: `stop_first`, `settle_stop` once the
pods went, and `gone`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Collection, Mapping

from disttrain.api import conditions as c
from disttrain.api.report import TrainerReport
from disttrain.api.times import parse_time
from disttrain.operator.core import stragglers
from disttrain.operator.core.eviction import cancelled, in_progress, settle, stop
from disttrain.operator.core.failures import NODE_DRAIN, NODE_UNHEALTHY, add_failure, price_stop, stop_record
from disttrain.operator.core.nodes import NodeHealth, NodeRules
from disttrain.operator.core.pods import PodInfo
from disttrain.operator.core.state import Event, JobState, Plan, workers


def suspend(job: JobState, pods: list[PodInfo], plan: Plan, old_phase: str | None,
            report: TrainerReport | None, refused: str | None) -> Plan:
    """Stop the job, checkpoint first (eviction.py): ask, wait, then delete the pods."""
    st = plan.status
    if not stop_first(job, pods, plan, "Suspended", c.JOB_SUSPENDED, stopped=old_phase == "Suspended",
                      report=report, refused=refused):
        message = st.eviction.message if st.eviction is not None else ""
        plan.condition(c.SUSPENDED, False, c.CHECKPOINT_BEFORE_STOP, message or "")
        return plan
    if old_phase != "Suspended":
        why = f"{st.eviction.message}; " if st.eviction is not None and st.eviction.message else ""
        plan.events.append(Event("Normal", c.JOB_SUSPENDED, f"suspended: {why}worker pods deleted; set "
                                 "spec.suspend: false to resume from the newest checkpoint"))
    st.phase = "Suspended"
    # Suspended time does not count towards activeDeadlineSeconds (as for batch/v1 Jobs).
    st.start_time = st.next_restart_time = None
    plan.condition(c.SUSPENDED, True, c.JOB_SUSPENDED, "spec.suspend is true")
    plan.condition(c.RUNNING, False, c.JOB_SUSPENDED, "suspended", only_if_present=True)
    st.workers = workers(pods, 0)
    for joined in job.joined:  # e.g. a queue's quota given back (integration.py)
        joined.suspended(job, pods, plan)
    return plan


def stop_first(job: JobState, pods: list[PodInfo], plan: Plan, reason: str, why: str, *, stopped: bool,
               report: TrainerReport | None, refused: str | None,
               record: list[tuple[str, str, str | None]] | None = None, doing: str | None = None) -> bool:
    """A stop on purpose, checkpoint first (eviction.py): ask the trainer, wait, then delete
    the pods (`why` is the deletion's reason). False while the trainer checkpoints: the
    job keeps its phase meanwhile, the plan asks and wakes when the grace runs out. True
    once the pods go (or are gone); status.eviction then says what the job resumes from.
    `record`: (cause, message, node) of a stop the job did not ask for, one history entry
    each, added when the pods go; `doing`: what the stop is, in the Event's words."""
    st = plan.status
    grace = job.validation.job.spec.checkpoint.evict_grace_seconds or 0
    running = (any(p.active and p.ready for p in pods) and report is not None and report.outcome is None)
    step = stop(st.eviction, reason, stopped=stopped, report=report, trainer_running=running,
                grace=grace, refused=refused, now=plan.now)
    if not step.delete:
        st.eviction = step.eviction
        plan.ask_checkpoint = (step.ask_hold or 0, step.wait_seconds)
        plan.wake_at = step.wake_at
        if step.began:
            message = step.eviction.message if step.eviction is not None else ""
            doing = doing or {"Suspended": "suspending", "NodeUnhealthy": "a worker's node is unhealthy",
                              "Straggler": "a worker is a straggler"}.get(reason, "a worker's node is cordoned")
            plan.events.append(Event("Normal", c.CHECKPOINT_BEFORE_STOP, f"{doing}: {message}"))
        return False
    before = st.eviction
    st.eviction = settle(step.eviction, st.checkpoint, st.progress)
    if record and st.eviction is not None and st.eviction.stop_time is not None and (
            before is None or before.stop_time != st.eviction.stop_time):
        for cause, message, node in record:
            entry = stop_record(cause, message, st.eviction, node)
            st.failures = add_failure(st.failures, entry)
            plan.new_failures.append(entry)
    already = {name for name, _ in plan.delete}
    plan.delete += [(p.name, why) for p in pods if not p.terminating and p.name not in already]
    return True


def settle_stop(plan: Plan, reason: str, causes: Collection[str]) -> None:
    """After a stop for `reason` (as stop_first was asked) whose pods went: status.eviction
    settles (the pods' final reports come in late) and the history entry the stop recorded
    (one of `causes`) is priced again."""
    st = plan.status
    if st.eviction is not None and st.eviction.reason == reason and not in_progress(st.eviction):
        st.eviction = settle(st.eviction, st.checkpoint, st.progress)
        st.failures = price_stop(st.failures, st.eviction, causes)


def draining_workers(pods: list[PodInfo], nodes: Mapping[str, NodeHealth]) -> list[PodInfo]:
    """Workers on a node that is cordoned (a drain begins) and still works."""
    out = []
    for pod in pods:
        node = nodes.get(pod.node) if pod.node else None
        if pod.active and node is not None and node.cordoned and node.lost_since() is None:
            out.append(pod)
    return out


# A move's stop reason -> the reason of its pods' deletion and of its Event.
MOVE_REASONS = {"NodeDrain": c.NODE_DRAINED, "NodeUnhealthy": c.NODE_UNHEALTHY, "Straggler": c.STRAGGLER_REPLACED}


def move(job: JobState, pods: list[PodInfo], plan: Plan, moving: list[PodInfo], reason: str, *,
         report: TrainerReport | None, refused: str | None, record: list[tuple[str, str, str | None]],
         at_once: bool = False) -> tuple[bool, datetime | None, str | None]:
    """Move every worker off the nodes of `moving`, checkpoint first: every worker goes (a
    partial world would only rendezvous again) and is recreated on the nodes left, as a
    disruption: backoffLimit is not spent. A move begun for `reason` whose nodes are fine
    again before the pods go is called off. `at_once`: the move happens even with
    evictGraceSeconds 0 (nothing else would move the job). (moving?, when the checkpoint's
    grace runs out, the eviction's message once the pods went.)"""
    st = plan.status
    if not moving or not (at_once or job.validation.job.spec.checkpoint.evict_grace_seconds):
        cancel_move(plan, reason)
        return False, None, None
    deleted = MOVE_REASONS[reason]
    if not stop_first(job, pods, plan, reason, deleted, stopped=False, report=report, refused=refused, record=record):
        return True, plan.wake_at, None
    return True, None, st.eviction.message if st.eviction is not None else ""


def cancel_move(plan: Plan, reason: str) -> None:
    """The node is usable again (uncordoned, healthy) before the pods went: call it off."""
    st = plan.status
    if in_progress(st.eviction) and st.eviction.reason == reason:  # type: ignore[union-attr]
        st.eviction = cancelled(st.eviction)  # type: ignore[arg-type]


def drain(job: JobState, pods: list[PodInfo], plan: Plan, nodes: Mapping[str, NodeHealth],
          report: TrainerReport | None, refused: str | None) -> tuple[bool, datetime | None]:
    """A worker's node is cordoned: the job moves checkpoint first (move). The job's
    PodDisruptionBudget holds the drain's evictions back meanwhile. (draining?, when the
    checkpoint's grace runs out.)"""
    draining = draining_workers(pods, nodes)
    where = ", ".join(sorted({p.node for p in draining if p.node}))
    moving, wake, message = move(job, pods, plan, draining, "NodeDrain", report=report, refused=refused, record=[
        (NODE_DRAIN, f"node {where} was cordoned: the workers moved, checkpoint first", None)])
    if message is not None:
        plan.events.append(Event("Normal", c.NODE_DRAINED, f"node {where} is cordoned: {message}; recreating the "
                                 "workers on other nodes (does not count against backoffLimit)"))
    return moving, wake


def unhealthy_nodes(job: JobState, pods: list[PodInfo], nodes: Mapping[str, NodeHealth],
                    rules: NodeRules) -> dict[str, str]:
    """The nodes of the job's workers that are Ready (not lost) but unhealthy, with why."""
    spec = job.validation.job.spec
    given: dict[str, int] = {}
    for pod in pods:
        if pod.active and pod.node:
            given[pod.node] = given.get(pod.node, 0) + (spec.gpus_per_node or 0)
    out = {}
    for name, gpus in sorted(given.items()):
        node = nodes.get(name)
        if node is not None and node.lost_since() is None:
            why = node.unhealthy(rules, spec.gpu_resource_name, gpus)
            if why is not None:
                out[name] = why
    for joined in job.joined:  # what an integration finds wrong there for this job (a tainted device)
        for name, why in joined.unhealthy(job, pods).items():
            node = nodes.get(name)
            if node is None or node.lost_since() is None:
                out[name] = f"{out[name]}; {why}" if name in out else why
    return out


def move_off_unhealthy(job: JobState, pods: list[PodInfo], plan: Plan, nodes: Mapping[str, NodeHealth],
                       rules: NodeRules, report: TrainerReport | None,
                       refused: str | None) -> tuple[bool, datetime | None]:
    """A worker's node is Ready but unhealthy (nodes.NodeRules): the job moves off it,
    checkpoint first while the trainer still answers, at once when it does not or when
    evictGraceSeconds is 0. Each node gets a history entry (NodeUnhealthy, which spends no
    backoffLimit) and is avoided by the new workers (avoid_bad_nodes)."""
    sick = unhealthy_nodes(job, pods, nodes, rules)
    if sick and not (in_progress(plan.status.eviction) and plan.status.eviction.reason == "NodeUnhealthy"):  # type: ignore[union-attr]
        for name, why in sick.items():
            plan.events.append(Event("Warning", c.NODE_UNHEALTHY, f"node {name} is unhealthy: {why}; moving the "
                                     "workers off it, checkpoint first"))
    record = [(NODE_UNHEALTHY, f"node {name} was unhealthy: {why}", name) for name, why in sick.items()]
    return _move_off(job, pods, plan, set(sick), "NodeUnhealthy", record, report, refused, "on other nodes")


def move_off_stragglers(job: JobState, pods: list[PodInfo], plan: Plan, report: TrainerReport | None,
                        refused: str | None) -> tuple[bool, datetime | None]:
    """The Straggler condition (stragglers.watch); with failurePolicy.stragglers Replace the
    job moves off the straggler's node, checkpoint first, as off an unhealthy one: a history
    entry (Straggler, no backoffLimit spent) and the node avoided."""
    found = stragglers.watch(job, pods, plan, report)
    policy = job.validation.job.spec.failure_policy
    record = stragglers.record(found, policy.straggler_ratio or 0, policy.straggler_windows or 0)
    return _move_off(job, pods, plan, {pod.node for _, pod in found if pod.node}, "Straggler", record, report,
                     refused, "on other nodes, away from the straggler's")


def _move_off(job: JobState, pods: list[PodInfo], plan: Plan, nodes: set[str], reason: str,
              record: list[tuple[str, str, str | None]], report: TrainerReport | None, refused: str | None,
              where: str) -> tuple[bool, datetime | None]:
    """Move every worker off `nodes` (move, even with evictGraceSeconds 0), and say so once
    the pods went, with the deletion's reason."""
    moving = [p for p in pods if p.active and p.node in nodes]
    moved, wake, message = move(job, pods, plan, moving, reason, report=report, refused=refused,
                                record=record, at_once=True)
    if message is not None:
        plan.events.append(Event("Normal", MOVE_REASONS[reason], f"{message}; recreating the workers {where} "
                                 "(does not count against backoffLimit)"))
    return moved, wake


# Workers moved off a cordoned node are recreated this long after they were deleted.
# `kubectl drain` (and the cluster autoscaler) retry a refused eviction every 5 s, by pod
# name: a replacement of the same name created sooner would be the one they evict next.
# Later, their retry finds no pod of that name and the drain completes.
DRAIN_SETTLE_SECONDS = 12.0


def after_a_drain(plan: Plan) -> datetime | None:
    """Hold back the creations of a move off a cordoned node until the drain has seen the
    workers gone; returns when they may go ahead."""
    ev = plan.status.eviction
    moved = parse_time(ev.stop_time) if ev is not None and ev.reason == "NodeDrain" else None
    if not plan.create or moved is None:
        return None
    due = moved + timedelta(seconds=DRAIN_SETTLE_SECONDS)
    if plan.now >= due:
        return None
    plan.create = []
    plan.create_service = False
    return due


def gone(pods: list[PodInfo]) -> bool:
    """No worker runs or is still ending: its resources are free."""
    return not any(p.active or p.terminating for p in pods)
