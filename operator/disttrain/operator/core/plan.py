"""The reconcile decision, as a pure function.

`decide(job, pods, now, ...)` looks at a job (its validation and last status) and what
the operator observed (its own worker pods, the trainer's newest report, child names
taken by others, the API's last refusal) and returns what to do: pods to create or
delete, the new status, the Events to post, when to look again, and whether the job's
TTL has run out. The shell (controller.py) only carries it out.

The status is typed from end to end: the job's last status comes in as a
`DistributedTrainingStatus` (status.read_status), every step sets its typed fields, and
the one serialisation is `writes.status_write`, which turns the change into the patch.
The rules are written down for users in docs/operations.md ("Lifecycle rules").

`_decide` reads as the job's life: validation, then the stages in their own modules:
the integrations' hooks (integration.py: a queue's admission), stopping (suspend and drain, checkpoint first), recovery
(crashes, disruptions, hangs, lost nodes), ends (success, failure, TTL); state.py holds
what a pass reads and the Plan it builds.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any, Mapping

from disttrain.api import conditions as c
from disttrain.api.errors import Absent
from disttrain.api.names import selector, service_name, worker_name
from disttrain.api.report import TrainerReport, newest
from disttrain.api.times import iso, parse_time
from disttrain.api.status_types import DistributedTrainingStatus as Status
from disttrain.api.status_types import Progress
from disttrain.operator.core.backoff import exponential
from disttrain.operator.core.ends import already_finished, fail, succeeded, success
from disttrain.operator.core.eviction import cancelled, in_progress
from disttrain.operator.core.goodput import account
from disttrain.operator.core.nodes import NodeHealth
from disttrain.operator.core.pods import PodInfo
from disttrain.operator.core.recovery import (avoid_bad_nodes, lift_avoided_nodes, lost_workers, note_failures,
                                              recover_failures, replace_lost, restart_hung, stuck_words)
from disttrain.operator.core.state import (ACTIVE_PHASES, TERMINAL_PHASES, Event, JobState, Plan, Policy, Refusal,
                                           creation_refused, set_reported, workers)
from disttrain.operator.core.instrumentation import instrumented
from disttrain.operator.core.status import checkpoint_age, checkpoint_staleness, global_batch, seconds_per_step
from disttrain.operator.core.stopping import after_a_drain, drain, move_off_stragglers, move_off_unhealthy, suspend
from disttrain.render import template_hash


# A pod creation the API refused (admission, quota) is tried again after 2 s, 4 s ... 30 s:
# a quota may free up, a policy may change; the job's other work goes on meanwhile.
REFUSAL_BASE_SECONDS, REFUSAL_MAX_SECONDS = 2.0, 30.0


def refusal_retry_seconds(refusals: int) -> float:
    """When to try again a pod creation refused `refusals` times in a row."""
    return exponential(REFUSAL_BASE_SECONDS, REFUSAL_MAX_SECONDS, refusals)


def decide(job: JobState, pods: list[PodInfo], now: datetime, policy: Policy = Policy(), *,
           report: TrainerReport | None = None, conflicts: dict[str, str] | None = None,
           refusal: Refusal | None = None, nodes: Mapping[str, NodeHealth] | None = None,
           checkpoint_refused: str | None = None) -> Plan:
    """What to do about a job now, and the status to write.

    pods: this job's own workers (owned by its uid); report: the trainer's newest
    /status; conflicts: child name -> the object that holds it without being ours;
    refusal: the API's answer to the last refused pod creation (None once one succeeds);
    nodes: the health of the nodes its workers are on, by name (a node missing is healthy);
    checkpoint_refused: why the trainer did not take the checkpoint request of the stop in
    progress (status.eviction), if it did not."""
    plan = _decide(job, pods, now, policy, report=report, conflicts=conflicts, refusal=refusal, nodes=nodes or {},
                   checkpoint_refused=checkpoint_refused)
    plan.checkpoint_age = checkpoint_age(plan.status.checkpoint, now)
    for joined in job.joined:  # what the integrations' own objects must say now (integration.py)
        joined.tell(job, pods, plan)
    _account_goodput(job, plan, newest(report, *(p.report for p in pods)))
    return plan


def _account_goodput(job: JobState, plan: Plan, report: TrainerReport | None) -> None:
    """The time since the last pass goes to the category of the phase the job was in."""
    old = job.status
    desired = (old.workers.desired if old.workers is not None else None)
    if desired is None:
        desired = plan.status.workers.desired if plan.status.workers is not None else 0
    step_seconds = None
    lost_to = None
    if job.validation.ok:
        spec = job.validation.job.spec
        # A script's samples are its own business: only its measured step time says how long a step took.
        step_seconds = seconds_per_step(report, global_batch(spec, job.validation.resolved)) if spec.trainer.builtin \
            else (report.step_seconds if report is not None else None)
        for joined in job.joined:  # waiting after a stop it did not ask for (a queue's eviction)
            cause = joined.lost_to(job)
            if cause is not None:
                lost_to, desired = cause, job.validation.resolved.nodes
    plan.status.goodput, plan.lost_seconds = account(old.goodput, old.phase, desired or 0, plan.now,
                                                     plan.new_failures, step_seconds, waiting_lost_to=lost_to,
                                                     step=report.step if report is not None else None)


def _decide(job: JobState, pods: list[PodInfo], now: datetime, policy: Policy, *,
            report: TrainerReport | None, conflicts: dict[str, str] | None,
            refusal: Refusal | None, nodes: Mapping[str, NodeHealth], checkpoint_refused: str | None) -> Plan:
    """A job's life in order: validation, the ends already reached, suspension, failures
    noted, the integrations' holds, then a running job's pass (_run)."""
    old = job.status
    plan = Plan(status=_carry_over(old), now=now, generation=job.generation)
    plan.status.observed_generation = job.generation
    plan.status.selector = selector(job.name)
    report = newest(report, *(p.report for p in pods))
    if not job.validation.ok:
        if old.phase in ACTIVE_PHASES and any(p.active for p in pods):
            return _spec_invalid(job, pods, plan, report)
        if all(isinstance(e, Absent) for e in job.validation.errors) and not _ended_for_good(old):
            return _waiting(job, pods, plan)
        return _invalid(job, pods, plan)
    _validated(job, plan)
    plan.condition(c.SPEC_INVALID, False, c.VALID, "the spec is valid again", only_if_present=True)
    spec = job.validation.job.spec
    old_phase = _phase_before(old, plan)
    if old_phase in TERMINAL_PHASES:
        return already_finished(job, pods, plan, old_phase)
    _with_report(plan, report, job)
    if spec.suspend:
        return suspend(job, pods, plan, old_phase, report, checkpoint_refused)
    lost, lost_wake = lost_workers(pods, nodes, now, spec.failure_policy.node_lost_seconds)
    note_failures(plan, pods, lost)
    avoid_bad_nodes(plan, spec.failure_policy.avoid_node_after_failures)
    _resumed(plan, old_phase)
    for joined in job.joined:  # a queue or a gate of an integration holds the job before it runs
        waiting = joined.hold(job, pods, plan, report=report, checkpoint_refused=checkpoint_refused, refusal=refusal,
                              nodes=nodes)
        if waiting is not None:
            return waiting
        job = joined.sized(job)
    return _run(job, pods, plan, policy, old_phase, report=report, conflicts=conflicts or {}, refusal=refusal,
                nodes=nodes, checkpoint_refused=checkpoint_refused, lost=lost, lost_wake=lost_wake)


def _phase_before(old: Status, plan: Plan) -> str | None:
    """The phase this pass starts from: none for a job that failed on its spec and whose
    spec was fixed since (it starts over as a new job)."""
    failed_cond = c.get_condition(old.conditions, c.FAILED)
    if old.phase == "Failed" and failed_cond is not None and failed_cond.reason == c.INVALID_SPEC:
        plan.status.completion_time = plan.status.start_time = None  # every path below sets the phase
        plan.condition(c.FAILED, False, c.VALID, "the spec was fixed")
        return None
    return old.phase


def _resumed(plan: Plan, old_phase: str | None) -> None:
    """Unsuspended: say so, whether the pods had gone or the stop was called off in time."""
    if old_phase == "Suspended":
        plan.events.append(Event("Normal", c.JOB_RESUMED, "resumed: recreating workers; the trainer "
                                 "resumes from the newest checkpoint"))
        plan.condition(c.SUSPENDED, False, c.JOB_RESUMED, "job resumed")
    elif in_progress(plan.status.eviction) and plan.status.eviction.reason == "Suspended":  # type: ignore[union-attr]
        plan.status.eviction = cancelled(plan.status.eviction)  # type: ignore[arg-type]
        plan.condition(c.SUSPENDED, False, c.JOB_RESUMED, "the stop was called off before the pods were deleted")


def _run(job: JobState, pods: list[PodInfo], plan: Plan, policy: Policy, old_phase: str | None, *,
         report: TrainerReport | None, conflicts: dict[str, str], refusal: Refusal | None,
         nodes: Mapping[str, NodeHealth], checkpoint_refused: str | None, lost: Any,
         lost_wake: datetime | None) -> Plan:
    """A job allowed to run: its deadline and success, then recovery (crashes, lost nodes,
    drains, unhealthy nodes, hangs), the workers it should have, its phase and wake-up."""
    spec, now = job.validation.job.spec, plan.now
    start = parse_time(plan.status.start_time)
    deadline = spec.active_deadline_seconds
    if deadline and start and (now - start).total_seconds() > deadline:
        return fail(job, pods, plan, c.DEADLINE_EXCEEDED, f"ran longer than activeDeadlineSeconds ({deadline}s)")
    if succeeded(pods):
        return success(job, pods, plan)
    crashed, failed_plan = recover_failures(job, pods, plan, policy)
    if failed_plan is not None:
        return failed_plan
    replace_lost(pods, plan, lost)
    drained, drain_wake = drain(job, pods, plan, nodes, report, checkpoint_refused)
    if not drained and not lost:
        drained, drain_wake = move_off_unhealthy(job, pods, plan, nodes, policy.node_rules, report, checkpoint_refused)
    if not drained and not lost and not crashed:
        drained, drain_wake = move_off_stragglers(job, pods, plan, report, checkpoint_refused)
    hung, hang_wake = False, None
    if not crashed and not lost and not drained:
        hung, hang_wake, failed_plan = restart_hung(job, pods, plan, report)
        if failed_plan is not None:
            return failed_plan
    _reshape(job, pods, plan)
    _create_missing(job, pods, plan, old_phase, conflicts)
    settle_wake = after_a_drain(plan)
    _name_conflicts(plan, conflicts)
    creation_refused(plan, refusal)
    _set_phase(job, pods, plan, old_phase, crashed, hung)
    instrument_wake = instrumented(plan, report, job)
    plan.wake_at = min((m for m in (_next_wake(plan.status, spec, start), lost_wake, hang_wake, drain_wake,
                                    settle_wake, instrument_wake) if m is not None), default=None)
    return plan


def _reshape(job: JobState, pods: list[PodInfo], plan: Plan) -> None:
    """Remove workers beyond the size; replace workers rendered from an older spec."""
    resolved = job.validation.resolved
    want_hash = template_hash(job.validation.job, resolved)
    doomed = {name for name, _ in plan.delete}
    for pod in pods:
        if pod.terminating or pod.name in doomed:
            continue
        if pod.index is None or pod.index >= resolved.nodes:
            plan.delete.append((pod.name, c.SCALED))
        elif pod.active and pod.template_hash != want_hash:
            plan.delete.append((pod.name, c.SPEC_CHANGED))
    scaled = [n for n, why in plan.delete if why == c.SCALED]
    if scaled:
        plan.events.append(Event("Normal", c.SCALED, f"scaled to {resolved.nodes} nodes: removing "
                                 f"{', '.join(scaled)}"))
    if any(why == c.SPEC_CHANGED for _, why in plan.delete):
        plan.events.append(Event("Normal", c.SPEC_CHANGED, "the worker template changed: replacing "
                                 "workers; training resumes from the newest checkpoint"))


def _create_missing(job: JobState, pods: list[PodInfo], plan: Plan, old_phase: str | None,
                    conflicts: dict[str, str]) -> None:
    """Create every desired worker with no pod at all (a pod being deleted is recreated
    on a later pass, once it is gone: never twice). A name held by someone else's object
    is left alone (NameConflict)."""
    nodes = job.validation.resolved.nodes
    present = {p.name for p in pods} | set(conflicts)
    plan.create = [i for i in range(nodes) if worker_name(job.name, i) not in present]
    if service_name(job.name) in conflicts:
        plan.create = []  # without its Service no worker could find the rendezvous host
    plan.create_service = bool(plan.create)
    if plan.create and not plan.status.start_time:
        plan.status.start_time = plan.stamp
    if plan.create and old_phase == "Running":
        # Workers beyond the last desired count are a scale-up, not pods someone deleted.
        before = (job.status.workers.desired if job.status.workers else None) or nodes
        added = [worker_name(job.name, i) for i in plan.create if i >= before]
        lost = [worker_name(job.name, i) for i in plan.create if i < before]
        if added:
            plan.events.append(Event("Normal", c.SCALED, f"scaled to {nodes} nodes: adding {', '.join(added)}"))
        if lost:
            plan.events.append(Event("Warning", c.WORKER_DELETED,
                                     f"recreating {', '.join(lost)} (deleted outside the operator)"))


def _name_conflicts(plan: Plan, conflicts: dict[str, str]) -> None:
    """NameConflict names every child name taken by an object this job does not own."""
    if conflicts:
        message = ("; ".join(f"{name} is taken by {holder}" for name, holder in sorted(conflicts.items()))
                   + ": it is not owned by this job, so it is left alone; delete it, or rename the job")
    else:
        message = "every child name is free or owned by this job"
    set_reported(plan, c.NAME_CONFLICT, bool(conflicts), c.NAME_TAKEN if conflicts else c.NAMES_FREE, message)


def _with_report(plan: Plan, report: TrainerReport | None, job: JobState) -> None:
    """progress and checkpoint from the trainer's newest report; CheckpointStale while it trains."""
    if report is None:
        return
    st = plan.status
    st.progress = progress_of(report, st.progress, plan.stamp)
    st.checkpoint = report.checkpoint or st.checkpoint
    if st.phase not in ("Running", "Restarting") or report.outcome is not None:
        return
    spec, resolved = job.validation.job.spec, job.validation.resolved
    # storage none: the trainer keeps no checkpoints, so none can be late.
    interval = spec.checkpoint.interval_steps if spec.checkpoint.storage != "none" else 0
    stale, message, _age = checkpoint_staleness(st.checkpoint, interval, st.start_time, plan.now,
                                                seconds_per_step(report, global_batch(spec, resolved)))
    if not stale and c.get_condition(st.conditions, c.CHECKPOINT_STALE) is None:
        return
    plan.condition(c.CHECKPOINT_STALE, stale, c.CHECKPOINT_TOO_OLD if stale else c.CHECKPOINT_FRESH, message)


def progress_of(report: TrainerReport, old: Progress | None, stamp: str) -> Progress | None:
    """status.progress from the report; lastStepTime moves only when the step does."""
    new = report.progress()
    if new is None:
        return old
    before = old.last_step_time if old is not None else None
    moved = new.step is not None and (old is None or old.step != new.step)
    new.last_step_time = stepped_at(report, before, stamp) if moved else before
    return new


def stepped_at(report: TrainerReport, before: str | None, stamp: str) -> str:
    """When the step seen now was made: the trainer's own time of its report (it writes one
    at every step), kept after the step seen before and no later than now, so a pod whose
    clock is off moves it no further than the operator's own view. The poll that sees a
    step comes up to progressSeconds after it: taken at its word, a hang is found sooner
    (bench/recovery.py)."""
    said, low, high = parse_time(report.last_update_time), parse_time(before), parse_time(stamp)
    if said is None or high is None:
        return stamp
    return iso(min(high, max(said, low) if low is not None else said))


def _next_wake(status: Status, spec: Any, start: datetime | None) -> datetime | None:
    """The earliest moment a decision changes with no event: a back-off ends, the deadline."""
    moments = [parse_time(status.next_restart_time)]
    if spec.active_deadline_seconds and start:
        moments.append(start + timedelta(seconds=spec.active_deadline_seconds, milliseconds=500))
    present = [m for m in moments if m is not None]
    return min(present) if present else None


def _set_phase(job: JobState, pods: list[PodInfo], plan: Plan, old_phase: str | None,
               crashed: list[PodInfo], hung: bool = False) -> None:
    resolved = job.validation.resolved
    doomed = {name for name, _ in plan.delete}
    live = [p for p in pods if p.active and p.name not in doomed]
    running = [p for p in live if p.phase == "Running"]
    # crashed covers the back-off wait and the restart round alike (the crashed pods are
    # still there); disrupted pods are recreated in this very pass.
    disrupted = any(why in (c.WORKER_DISRUPTED, c.NODE_LOST, c.NODE_DRAINED, c.NODE_UNHEALTHY)
                    for _, why in plan.delete)
    if crashed or disrupted or hung or (old_phase == "Restarting" and len(running) < resolved.nodes):
        phase = "Restarting"
    elif running and len(running) >= resolved.min_nodes:
        phase = "Running"
    else:
        phase = "Pending"
    st = plan.status
    st.phase = phase
    st.workers = workers(pods, resolved.nodes, running=len(running))  # the count the Running condition says
    why = c.HUNG if hung else _restart_reason(st, crashed, disrupted)
    stuck = [p for p in live if p.unschedulable or p.image_pull or p.config_error]
    if phase != "Running":
        lift_avoided_nodes(plan, stuck)
    if phase != "Running" and stuck:
        # "Why is it Pending?" answered on the job itself, in the scheduler's or kubelet's words.
        reason, message = stuck_words(stuck[0])
        before = c.get_condition(st.conditions, c.RUNNING)
        if before is None or before.reason != reason or before.message != c.cap(message):
            plan.events.append(Event("Warning", reason, message))
        plan.condition(c.RUNNING, False, reason, message)
    else:
        # A False Running condition appears only once the job has run (only_if_present).
        plan.condition(c.RUNNING, phase == "Running",
                       c.PODS_RUNNING if phase == "Running" else (why if phase == "Restarting" else c.PODS_PENDING),
                       f"{len(running)} of {resolved.nodes} workers running (minNodes {resolved.min_nodes})",
                       only_if_present=True)
    if phase == "Restarting" or c.get_condition(st.conditions, c.RESTARTING):
        limit = job.validation.job.spec.backoff_limit
        if phase != "Restarting":
            message = f"workers running again; {st.restarts} of backoffLimit {limit} restarts used"
        elif why == c.WORKER_DISRUPTED:
            message = (f"recreating disrupted workers; disruptions do not count against backoffLimit "
                       f"({st.restarts} of {limit} restarts used)")
        else:
            message = f"restart {st.restarts} of backoffLimit {limit}"
        if st.next_restart_time:
            message += f"; next recreation at {st.next_restart_time}"
        plan.condition(c.RESTARTING, phase == "Restarting", why if phase == "Restarting" else c.PODS_RUNNING,
                       message)
    plan.became_running = phase == "Running" and old_phase != "Running"


def _restart_reason(status: Status, crashed: list[PodInfo], disrupted: bool) -> str:
    """Why the job restarts: a crash (spends backoffLimit), else a disruption; while the
    recreated workers come back, the reason the round started with."""
    if crashed:
        return c.WORKER_FAILED
    if disrupted:
        return c.WORKER_DISRUPTED
    before = c.get_condition(status.conditions, c.RESTARTING)
    return before.reason if before is not None and before.reason in (c.WORKER_DISRUPTED, c.HUNG) else c.WORKER_FAILED


def _validated(job: JobState, plan: Plan) -> None:
    warnings = job.validation.warnings
    plan.status.resolved = job.validation.resolved
    if job.template is not None and job.template is not job.status.template:
        kept = job.template
        plan.events.append(Event("Normal", c.TEMPLATE_RESOLVED, f"resolved against {kept.kind} {kept.name} "
                                 f"(generation {kept.generation}); the job keeps it as status.template"))
    plan.status.template = job.template
    plan.status.warnings = [str(w) for w in warnings]
    message = "; ".join(str(w) for w in warnings) or "spec is valid"
    before = c.get_condition(job.status.conditions, c.VALIDATED)
    if before is None or before.message != c.cap(message) or before.status != "True":
        plan.new_warnings = list(warnings)
        plan.events.extend(Event("Warning", w.reason, str(w)) for w in warnings)
    plan.condition(c.VALIDATED, True, c.VALID_WITH_WARNINGS if warnings else c.VALID, message)


def _invalid(job: JobState, pods: list[PodInfo], plan: Plan) -> Plan:
    message = "; ".join(str(e) for e in job.validation.errors)
    before = c.get_condition(job.status.conditions, c.VALIDATED)
    if before is None or before.message != c.cap(message):
        plan.events.append(Event("Warning", c.INVALID_SPEC, message))
        plan.failed_reason = c.INVALID_SPEC if job.status.phase != "Failed" else None
    plan.condition(c.VALIDATED, False, c.INVALID_SPEC, message)
    plan.condition(c.FAILED, True, c.INVALID_SPEC, message)
    st = plan.status
    st.phase = "Failed"
    st.completion_time = st.completion_time or plan.stamp
    # Nothing runs on a spec we cannot read.
    plan.delete = [(p.name, c.INVALID_SPEC) for p in pods if p.active]
    st.workers = workers(pods, 0)
    return plan


def _ended_for_good(old: Status) -> bool:
    """Succeeded, or Failed for another reason than its spec: nothing starts it again."""
    failed = c.get_condition(old.conditions, c.FAILED)
    return old.phase == "Succeeded" or (old.phase == "Failed" and (failed is None or failed.reason != c.INVALID_SPEC))


def _waiting(job: JobState, pods: list[PodInfo], plan: Plan) -> Plan:
    """A job that names what is not there yet but may be created (its training template)
    waits for it, Pending: `Running=False` says what for (a Warning Event once), and a
    Failed condition an older operator set is lifted. Its arrival queues the job
    (operator/template_watch.py); `Failed` is left for what no change outside the job fixes."""
    message = "; ".join(str(e) for e in job.validation.errors)
    reason = next(e.reason for e in job.validation.errors if isinstance(e, Absent))
    before = c.get_condition(job.status.conditions, c.RUNNING)
    if before is None or before.reason != reason or before.message != c.cap(message):
        plan.events.append(Event("Warning", reason, message))
    plan.condition(c.RUNNING, False, reason, message)
    for type_ in (c.VALIDATED, c.FAILED):
        plan.condition(type_, False, reason, message, only_if_present=True)
    st = plan.status
    st.phase, st.completion_time, st.start_time = "Pending", None, None
    plan.delete = [(p.name, reason) for p in pods if p.active]
    st.workers = workers(pods, 0)
    return plan


def _spec_invalid(job: JobState, pods: list[PodInfo], plan: Plan, report: TrainerReport | None) -> Plan:
    """A running job whose spec stopped validating (an edit the CRD let through, or a
    stricter operator after an upgrade) keeps running as it is: nothing is created or
    deleted until the spec is fixed; SpecInvalid names the fields."""
    message = "; ".join(str(e) for e in job.validation.errors)
    set_reported(plan, c.SPEC_INVALID, True, c.INVALID_SPEC,
                 f"the running workers are kept, nothing new is created until the spec is fixed: {message}")
    plan.condition(c.VALIDATED, False, c.INVALID_SPEC, message)
    st, old = plan.status, job.status
    if report is not None:
        st.progress = progress_of(report, st.progress, plan.stamp)
        st.checkpoint = report.checkpoint or st.checkpoint
    # What the last valid spec resolved to still runs.
    st.resolved, st.warnings = old.resolved, old.warnings
    desired = old.workers.desired if old.workers and old.workers.desired is not None else len(pods)
    st.workers = workers(pods, desired)
    return plan


# Status fields each pass works out anew from the spec and the pods; every other field
# lives across passes (a new field is carried unless it is named here).
RECOMPUTED_STATUS = frozenset({"resolved", "warnings", "workers", "observed_generation", "selector"})


def _carry_over(old: Status) -> Status:
    """What a pass starts from: every field but RECOMPUTED_STATUS. Nested values are never
    changed in place (each step sets a new one), so they are shared, not copied; only the
    list of conditions is, which steps edit."""
    carried = {f.name: getattr(old, f.name) for f in dataclasses.fields(Status) if f.name not in RECOMPUTED_STATUS}
    return Status(**{**carried, "conditions": list(old.conditions) if old.conditions is not None else None,
                     "restarts": old.restarts or 0})
