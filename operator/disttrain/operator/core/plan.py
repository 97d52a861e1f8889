"""The reconcile decision, as a pure function.

`decide(job, pods, now, ...)` looks at a job (its validation and last status) and what
the operator observed (its own worker pods, the trainer's newest report, child names
taken by others, the API's last refusal) and returns what to do: pods to create or
delete, the new status, the Events to post, when to look again, and whether the job's
TTL has run out. The shell (controller.py) only carries it out.

The status is typed from end to end: the job's last status comes in as a
`DistributedTrainingStatus` (status.read_status), every step sets its typed fields, and
the one serialisation is `status_write`, which turns the change into the patch.
The rules are written down for users in docs/operations.md ("Lifecycle rules").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Mapping

from disttrain.api import conditions as c
from disttrain.api.errors import GuardrailWarning
from disttrain.api.names import selector, service_name, worker_name
from disttrain.api.types import DistributedTrainingStatus as Status
from disttrain.api.types import FailureRecord, Progress, Workers
from disttrain.api.validate import Validation
from disttrain.operator.core.backoff import exponential
from disttrain.operator.core.eviction import cancelled, in_progress, settle, stop
from disttrain.operator.core.goodput import account
from disttrain.integrations.kueue.workload import QUEUE_LABEL, WorkloadView, pods_ready_condition
from disttrain.operator.core.failures import (HUNG, NODE_DRAIN, add_failure, avoiding, lift_avoidance, nodes_to_avoid,
                                              price_stop, queue_stop_cause, record_failures, steps_lost, stop_record)
from disttrain.operator.core.nodes import NodeHealth
from disttrain.operator.core.pods import PodInfo
from disttrain.render import template_hash
from disttrain.api.report import TrainerReport, newest
from disttrain.operator.core.status import (checkpoint_age, checkpoint_staleness, global_batch, seconds_per_step,
                                            status_json)
from disttrain.api.times import iso, parse_time

# Subsets of api.types.Phase: a job that holds (or waits for) workers; one whose workers
# train, so its trainer is polled and its checkpoint ages; one that has ended.
ACTIVE_PHASES = ("Pending", "Running", "Restarting")
TRAINING_PHASES = ("Running", "Restarting")
TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class Policy:
    """Operator-wide knobs (settings.py reads them from the environment)."""

    backoff_base_seconds: float = 10.0
    backoff_max_seconds: float = 300.0


@dataclass(frozen=True, slots=True)
class JobState:
    """What decide() needs to know about the DistributedTraining object itself."""

    name: str
    namespace: str
    generation: int | None
    status: Status
    validation: Validation
    queue: str | None = None  # the Kueue LocalQueue it asks for (None: Kueue is not involved)
    workload: WorkloadView | None = None  # its Workload, once made
    queue_ignored: str | None = None  # the LocalQueue it names while this operator runs without Kueue
    cluster_queue: str | None = None  # the ClusterQueue its LocalQueue feeds (None: not known)


@dataclass(frozen=True, slots=True)
class Refusal:
    """The API refused to create a pod (403 admission/quota, 422 invalid): its answer."""

    pod: str
    code: int
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(slots=True)
class Plan:
    status: Status
    now: datetime
    generation: int | None = None  # the spec generation the conditions describe
    create: list[int] = field(default_factory=list)
    delete: list[tuple[str, str]] = field(default_factory=list)  # (pod name, reason)
    create_service: bool = False
    events: list[Event] = field(default_factory=list)
    delete_job: bool = False
    # For metrics: what happened in this pass.
    new_warnings: list[GuardrailWarning] = field(default_factory=list)
    restarted: int = 0
    failed_reason: str | None = None
    became_running: bool = False
    checkpoint_age: float | None = None  # seconds since the newest checkpoint was made
    new_failures: list[FailureRecord] = field(default_factory=list)  # added to status.failures now
    lost_seconds: dict[str, float] = field(default_factory=dict)  # worker-seconds lost in this pass, by cause
    # Checkpoint-then-evict (eviction.py): ask the trainer for a checkpoint and a hold of
    # this many seconds, waiting up to the second number for it (None: do not ask).
    ask_checkpoint: tuple[int, float] | None = None
    # Kueue (integrations/kueue/workload.py): make the job's Workload; delete it (an older spec's, while it
    # waits); give its quota back after an eviction; mark it Finished (succeeded?, why);
    # set its spec.active (a suspend deactivates it); set its PodsReady (status, reason).
    create_workload: bool = False
    delete_workload: bool = False
    release_workload: bool = False
    finish_workload: tuple[bool, str] | None = None
    workload_active: bool | None = None
    workload_pods_ready: tuple[bool, str] | None = None
    # When to look again even if nothing happens (a back-off ends, a deadline or TTL runs out).
    wake_at: datetime | None = None

    @property
    def stamp(self) -> str:
        """This pass's moment as status writes it."""
        return iso(self.now)

    def condition(self, type_: str, value: bool, reason: str, message: str, *,
                  only_if_present: bool = False) -> None:
        """Set a condition of the new status; with only_if_present a False condition is
        added only if it existed."""
        conds = self.status.conditions or []
        if only_if_present and not value and c.get_condition(conds, type_) is None:
            return
        self.status.conditions = c.set_condition(conds, type_, value, reason, message, self.generation, self.stamp)


def backoff_seconds(restarts: int, policy: Policy) -> float:
    """Exponential back-off before the (restarts+1)-th recreation: 10s, 20s, 40s ... 5 min."""
    return exponential(policy.backoff_base_seconds, policy.backoff_max_seconds, restarts + 1)


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
    _finish_workload(job, plan)
    _workload_pods_ready(job, pods, plan)
    _account_goodput(job, plan, newest(report, *(p.report for p in pods)))
    return plan


def _account_goodput(job: JobState, plan: Plan, report: TrainerReport | None) -> None:
    """The time since the last pass goes to the category of the phase the job was in."""
    old = job.status
    desired = (old.workers.desired if old.workers is not None else None)
    if desired is None:
        desired = plan.status.workers.desired if plan.status.workers is not None else 0
    step = None
    lost_to = None
    if job.validation.ok:
        step = seconds_per_step(report, global_batch(job.validation.job.spec, job.validation.resolved))
        evicted = c.get_condition(old.conditions, c.EVICTED)
        if job.queue is not None and old.phase == "Pending" and evicted is not None and evicted.status == "True":
            # Back in the queue after Kueue evicted it: its workers' time is lost to that.
            lost_to, desired = queue_stop_cause(evicted.reason or ""), job.validation.resolved.nodes
    plan.status.goodput, plan.lost_seconds = account(old.goodput, old.phase, desired or 0, plan.now,
                                                     plan.new_failures, step, waiting_lost_to=lost_to)


def _decide(job: JobState, pods: list[PodInfo], now: datetime, policy: Policy, *,
            report: TrainerReport | None, conflicts: dict[str, str] | None,
            refusal: Refusal | None, nodes: Mapping[str, NodeHealth], checkpoint_refused: str | None) -> Plan:
    old = job.status
    plan = Plan(status=_carry_over(old), now=now, generation=job.generation)
    plan.status.observed_generation = job.generation
    plan.status.selector = selector(job.name)
    report = newest(report, *(p.report for p in pods))
    if not job.validation.ok:
        if old.phase in ACTIVE_PHASES and any(p.active for p in pods):
            return _spec_invalid(job, pods, plan, report)
        return _invalid(job, pods, plan)
    _validated(job, plan)
    if job.queue_ignored:
        plan.events.append(Event("Warning", c.QUEUE_IGNORED, f"the label {QUEUE_LABEL}={job.queue_ignored} is "
                                 "ignored: this operator runs without Kueue (DISTTRAIN_KUEUE, the chart's "
                                 "kueue.enabled), so the job starts without waiting for quota"))
    plan.condition(c.SPEC_INVALID, False, c.VALID, "the spec is valid again", only_if_present=True)
    spec = job.validation.job.spec
    old_phase = old.phase
    failed_cond = c.get_condition(old.conditions, c.FAILED)
    if old_phase == "Failed" and failed_cond is not None and failed_cond.reason == c.INVALID_SPEC:
        # The spec was fixed: start over as a new job.
        old_phase = None
        plan.status.completion_time = plan.status.start_time = None  # every path below sets the phase
        plan.condition(c.FAILED, False, c.VALID, "the spec was fixed")
    if old_phase in TERMINAL_PHASES:
        return _finished(job, pods, plan, old_phase)
    _with_report(plan, report, job)
    if spec.suspend:
        return _suspend(job, pods, plan, old_phase, report, checkpoint_refused)
    lost, lost_wake = lost_workers(pods, nodes, now, spec.failure_policy.node_lost_seconds)
    _record_failures(plan, pods, lost)
    _avoid_bad_nodes(plan, spec.failure_policy.avoid_node_after_failures)
    if old_phase == "Suspended":
        plan.events.append(Event("Normal", c.JOB_RESUMED, "resumed: recreating workers; the trainer "
                                 "resumes from the newest checkpoint"))
        plan.condition(c.SUSPENDED, False, c.JOB_RESUMED, "job resumed")
    elif in_progress(plan.status.eviction) and plan.status.eviction.reason == "Suspended":  # type: ignore[union-attr]
        plan.status.eviction = cancelled(plan.status.eviction)  # type: ignore[arg-type]
        plan.condition(c.SUSPENDED, False, c.JOB_RESUMED, "the stop was called off before the pods were deleted")
    if job.queue is not None:
        waiting = _queued(job, pods, plan, report, checkpoint_refused, refusal)
        if waiting is not None:
            return waiting
        job = _at_admitted_size(job)

    start = parse_time(plan.status.start_time)
    deadline = spec.active_deadline_seconds
    if deadline and start and (now - start).total_seconds() > deadline:
        return _fail(job, pods, plan, c.DEADLINE_EXCEEDED, f"ran longer than activeDeadlineSeconds ({deadline}s)")
    if _succeeded(pods):
        return _success(job, pods, plan)

    crashed, failed_plan = _recover_failures(job, pods, plan, policy)
    if failed_plan is not None:
        return failed_plan
    _replace_lost(pods, plan, lost)
    drained, drain_wake = _drain(job, pods, plan, nodes, report, checkpoint_refused)
    hung, hang_wake = False, None
    if not crashed and not lost and not drained:
        hung, hang_wake, failed_plan = _restart_hung(job, pods, plan, report)
        if failed_plan is not None:
            return failed_plan
    _reshape(job, pods, plan)
    _create_missing(job, pods, plan, old_phase, conflicts or {})
    settle_wake = _after_a_drain(plan)
    _name_conflicts(plan, conflicts or {})
    _creation_refused(plan, refusal)
    _set_phase(job, pods, plan, old_phase, crashed, hung)
    plan.wake_at = min((m for m in (_next_wake(plan.status, spec, start), lost_wake, hang_wake, drain_wake,
                                    settle_wake) if m is not None), default=None)
    return plan


# ---- steps of decide ----------------------------------------------------------------


def _recover_failures(job: JobState, pods: list[PodInfo], plan: Plan,
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
            return crashed, _fail(job, pods, plan, c.BACKOFF_LIMIT_EXCEEDED,
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
    _set_reported(plan, c.NAME_CONFLICT, bool(conflicts), c.NAME_TAKEN if conflicts else c.NAMES_FREE, message)


def _creation_refused(plan: Plan, refusal: Refusal | None) -> None:
    """PodCreationForbidden carries the API's own words (admission, quota, validation)."""
    if refusal is not None:
        message = (f"creating {refusal.pod} was refused ({refusal.code} {refusal.reason}): {refusal.message}")
        _set_reported(plan, c.POD_CREATION_FORBIDDEN, True, refusal.reason or c.CREATION_REFUSED, message)
    else:
        _set_reported(plan, c.POD_CREATION_FORBIDDEN, False, c.CREATION_ALLOWED, "worker pods are being created")


def _set_reported(plan: Plan, type_: str, value: bool, reason: str, message: str) -> None:
    """A trouble condition, with one Warning Event when it first appears or its message
    changes (never one per pass); cleared quietly, and only where it had been set."""
    before = c.get_condition(plan.status.conditions, type_)
    if value and (before is None or before.status != "True" or before.message != c.cap(message)):
        plan.events.append(Event("Warning", reason, message))
    plan.condition(type_, value, reason, message, only_if_present=not value)


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
    new.last_step_time = stamp if moved else before
    return new


def hang_seconds(spec: Any, report: TrainerReport | None) -> float | None:
    """How long a running trainer may complete no step (None: not watched). Set: that (0 is
    off). Unset: the built-in trainer's max(10 x step time, 300 s); a script of the user's
    is not watched (it reports no steps)."""
    chosen = spec.failure_policy.hang_seconds
    if chosen is not None:
        return float(chosen) or None
    if spec.trainer.builtin is None:
        return None
    step = report.step_seconds if report is not None else None
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


def _restart_hung(job: JobState, pods: list[PodInfo], plan: Plan,
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
        return True, None, _fail(job, pods, plan, c.BACKOFF_LIMIT_EXCEEDED,
                                 f"{what}; backoffLimit {spec.backoff_limit} reached after {st.restarts} restarts")
    st.restarts += 1
    plan.restarted = 1
    doomed = {name for name, _ in plan.delete}
    plan.delete.extend((p.name, c.HUNG) for p in live if p.name not in doomed)
    plan.events.append(Event("Warning", c.HUNG, f"{what}: restarting every worker (restart {st.restarts} of "
                             f"backoffLimit {spec.backoff_limit}); the trainer resumes from the newest checkpoint"))
    return True, None, None


def _record_failures(plan: Plan, pods: list[PodInfo], lost: dict[str, NodeHealth]) -> None:
    """status.failures gains an entry for each worker that ended early, cannot start, or
    whose node is lost, priced with the newest progress and checkpoint (so run after
    _with_report)."""
    st = plan.status
    st.failures, plan.new_failures = record_failures(st.failures or (), pods, plan.stamp, st.progress, st.checkpoint,
                                                     lost=lost)
    st.failures = st.failures or None


def _avoid_bad_nodes(plan: Plan, threshold: int) -> None:
    """A node where the job failed `threshold` times is avoided by its new workers."""
    st = plan.status
    avoided, new = nodes_to_avoid(st.failures or (), st.avoided_nodes or (), threshold, plan.stamp)
    st.avoided_nodes = avoided or None
    for entry in new:
        plan.events.append(Event("Warning", c.NODE_AVOIDED, f"node {entry.node} was the place of {entry.failures} "
                                 f"failures of this job: its new workers avoid it (failurePolicy."
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


def _lift_avoidance(plan: Plan, stuck: list[PodInfo]) -> None:
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


def _replace_lost(pods: list[PodInfo], plan: Plan, lost: dict[str, NodeHealth]) -> None:
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


def _next_wake(status: Status, spec: Any, start: datetime | None) -> datetime | None:
    """The earliest moment a decision changes with no event: a back-off ends, the deadline."""
    moments = [parse_time(status.next_restart_time)]
    if spec.active_deadline_seconds and start:
        moments.append(start + timedelta(seconds=spec.active_deadline_seconds, milliseconds=500))
    present = [m for m in moments if m is not None]
    return min(present) if present else None


# ---- outcomes -----------------------------------------------------------------------


def _set_phase(job: JobState, pods: list[PodInfo], plan: Plan, old_phase: str | None,
               crashed: list[PodInfo], hung: bool = False) -> None:
    resolved = job.validation.resolved
    doomed = {name for name, _ in plan.delete}
    live = [p for p in pods if p.active and p.name not in doomed]
    running = [p for p in live if p.phase == "Running"]
    # crashed covers the back-off wait and the restart round alike (the crashed pods are
    # still there); disrupted pods are recreated in this very pass.
    disrupted = any(why in (c.WORKER_DISRUPTED, c.NODE_LOST, c.NODE_DRAINED) for _, why in plan.delete)
    if crashed or disrupted or hung or (old_phase == "Restarting" and len(running) < resolved.nodes):
        phase = "Restarting"
    elif running and len(running) >= resolved.min_nodes:
        phase = "Running"
    else:
        phase = "Pending"
    st = plan.status
    st.phase = phase
    st.workers = workers(pods, resolved.nodes)
    why = c.HUNG if hung else _restart_reason(st, crashed, disrupted)
    stuck = [p for p in live if p.unschedulable or p.image_pull or p.config_error]
    if phase != "Running":
        _lift_avoidance(plan, stuck)
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


def _spec_invalid(job: JobState, pods: list[PodInfo], plan: Plan, report: TrainerReport | None) -> Plan:
    """A running job whose spec stopped validating (an edit the CRD let through, or a
    stricter operator after an upgrade) keeps running as it is: nothing is created or
    deleted until the spec is fixed; SpecInvalid names the fields."""
    message = "; ".join(str(e) for e in job.validation.errors)
    _set_reported(plan, c.SPEC_INVALID, True, c.INVALID_SPEC,
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


def _suspend(job: JobState, pods: list[PodInfo], plan: Plan, old_phase: str | None,
             report: TrainerReport | None, refused: str | None) -> Plan:
    """Stop the job, checkpoint first (eviction.py): ask, wait, then delete the pods."""
    st = plan.status
    if not _stop_first(job, pods, plan, "Suspended", c.JOB_SUSPENDED, stopped=old_phase == "Suspended",
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
    if job.queue is not None and job.workload is not None:
        # Suspended by its user, the job gives its quota back: its Workload is deactivated
        # (Kueue evicts it), and released once no worker is left.
        plan.workload_active = False if job.workload.active else None
        plan.release_workload = job.workload.evicted is not None and job.workload.quota_reserved and _gone(pods)
    return plan


def _stop_first(job: JobState, pods: list[PodInfo], plan: Plan, reason: str, why: str, *, stopped: bool,
                report: TrainerReport | None, refused: str | None, record: tuple[str, str] | None = None) -> bool:
    """A stop on purpose, checkpoint first (eviction.py): ask the trainer, wait, then delete
    the pods (`why` is the deletion's reason). False while the trainer checkpoints: the
    job keeps its phase meanwhile, the plan asks and wakes when the grace runs out. True
    once the pods go (or are gone); status.eviction then says what the job resumes from.
    `record`: (cause, message) of a stop the job did not ask for, added to its history
    when the pods go."""
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
            doing = {"Suspended": "suspending", "Evicted": "evicted by Kueue"}.get(reason, "a worker's node is cordoned")
            plan.events.append(Event("Normal", c.CHECKPOINT_BEFORE_STOP, f"{doing}: {message}"))
        return False
    before = st.eviction
    st.eviction = settle(step.eviction, st.checkpoint, st.progress)
    if record is not None and st.eviction is not None and st.eviction.stop_time is not None and (
            before is None or before.stop_time != st.eviction.stop_time):
        entry = stop_record(*record, st.eviction)
        st.failures = add_failure(st.failures, entry)
        plan.new_failures.append(entry)
    already = {name for name, _ in plan.delete}
    plan.delete += [(p.name, why) for p in pods if not p.terminating and p.name not in already]
    return True


def draining_workers(pods: list[PodInfo], nodes: Mapping[str, NodeHealth]) -> list[PodInfo]:
    """Workers on a node that is cordoned (a drain begins) and still works."""
    out = []
    for pod in pods:
        node = nodes.get(pod.node) if pod.node else None
        if pod.active and node is not None and node.cordoned and node.lost_since() is None:
            out.append(pod)
    return out


def _drain(job: JobState, pods: list[PodInfo], plan: Plan, nodes: Mapping[str, NodeHealth],
           report: TrainerReport | None, refused: str | None) -> tuple[bool, datetime | None]:
    """A worker's node is cordoned: the job moves checkpoint first. Every worker goes (a
    partial world would only rendezvous again) and is recreated on the nodes left, as a
    disruption: backoffLimit is not spent. The job's PodDisruptionBudget holds the drain's
    evictions back meanwhile. (draining?, when the checkpoint's grace runs out.)"""
    st = plan.status
    draining = draining_workers(pods, nodes)
    if not draining or not job.validation.job.spec.checkpoint.evict_grace_seconds:
        if in_progress(st.eviction) and st.eviction.reason == "NodeDrain":  # type: ignore[union-attr]
            st.eviction = cancelled(st.eviction)  # type: ignore[arg-type]  (uncordoned before the pods went)
        return False, None
    where = ", ".join(sorted({p.node for p in draining}))
    if not _stop_first(job, pods, plan, "NodeDrain", c.NODE_DRAINED, stopped=False, report=report, refused=refused,
                       record=(NODE_DRAIN, f"node {where} was cordoned: the workers moved, checkpoint first")):
        return True, plan.wake_at
    message = st.eviction.message if st.eviction is not None else ""
    plan.events.append(Event("Normal", c.NODE_DRAINED, f"node {where} is cordoned: {message}; recreating the "
                             "workers on other nodes (does not count against backoffLimit)"))
    return True, None


# Workers moved off a cordoned node are recreated this long after they were deleted.
# `kubectl drain` (and the cluster autoscaler) retry a refused eviction every 5 s, by pod
# name: a replacement of the same name created sooner would be the one they evict next.
# Later, their retry finds no pod of that name and the drain completes.
DRAIN_SETTLE_SECONDS = 12.0


def _after_a_drain(plan: Plan) -> datetime | None:
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


def _gone(pods: list[PodInfo]) -> bool:
    """No worker runs or is still ending: its resources are free."""
    return not any(p.active or p.terminating for p in pods)


# ---- Kueue (integrations/kueue/workload.py) -----------------------------------------


UNEVALUATED = ("not evaluated by Kueue yet (a StrictFIFO ClusterQueue evaluates only its head: a job behind "
               "one that does not fit waits without Kueue's words)")


def _queued(job: JobState, pods: list[PodInfo], plan: Plan, report: TrainerReport | None,
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
            _creation_refused(plan, refusal)
        return _waiting(job, pods, plan, c.WORKLOAD_CREATED,
                        f"waiting for Kueue in LocalQueue {queue}: its Workload was just made")
    plan.workload_active = True if not wl.active else None  # resumed after a suspend
    evicting = c.get_condition(st.conditions, c.EVICTED)
    if wl.evicted is not None and (wl.quota_reserved or not _gone(pods)):
        reason, message = wl.evicted
        stopped = (evicting is not None and evicting.status == "True" and st.eviction is not None
                   and st.eviction.reason == "Evicted" and st.eviction.stop_time is not None)
        if not _stop_first(job, pods, plan, "Evicted", c.EVICTED, stopped=stopped, report=report, refused=refused,
                           record=(queue_stop_cause(reason), f"evicted by Kueue ({reason}): {message}")):
            plan.condition(c.EVICTED, True, reason, f"{message}; {st.eviction.message if st.eviction else ''}")
            return plan
        plan.release_workload = wl.quota_reserved and _gone(pods)
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


def _at_admitted_size(job: JobState) -> JobState:
    """An elastic job Kueue admitted with fewer workers than nodes (partial admission, at
    least minNodes) runs at that size."""
    wl, resolved = job.workload, job.validation.resolved
    if wl is None or wl.count is None or wl.count >= resolved.nodes:
        return job
    smaller = dataclasses.replace(resolved, nodes=wl.count, world_size=wl.count * (resolved.nproc_per_node or 1))
    return dataclasses.replace(job, validation=dataclasses.replace(job.validation, resolved=smaller))


def _finish_workload(job: JobState, plan: Plan) -> None:
    """A job that ended marks its Workload Finished: Kueue frees the quota."""
    wl = job.workload
    phase = plan.status.phase
    if job.queue is None or wl is None or wl.finished or phase not in TERMINAL_PHASES:
        return
    done = c.get_condition(plan.status.conditions, c.SUCCEEDED if phase == "Succeeded" else c.FAILED)
    plan.finish_workload = (phase == "Succeeded", done.message if done is not None else phase)


def _workload_pods_ready(job: JobState, pods: list[PodInfo], plan: Plan) -> None:
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


def _succeeded(pods: list[PodInfo]) -> bool:
    """A worker finished, and no other crashed, unless the finished one's own report proves
    every step was done (a crash at teardown then changes nothing). A user's script that
    exits 0 beside a crashed peer is not proof: the crash is recovered like any other."""
    finished = [p for p in pods if p.finished]
    crashed = [p for p in pods if p.ended_early and not p.disrupted]
    return bool(finished) and (not crashed or any(p.report is not None for p in finished))


def _success(job: JobState, pods: list[PodInfo], plan: Plan) -> Plan:
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


def _fail(job: JobState, pods: list[PodInfo], plan: Plan, reason: str, message: str) -> Plan:
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


def _finished(job: JobState, pods: list[PodInfo], plan: Plan, phase: str) -> Plan:
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


# ---- helpers ------------------------------------------------------------------------


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


def workers(pods: list[PodInfo], desired: int) -> Workers:
    return Workers(desired=desired, active=sum(p.active for p in pods),
                   ready=sum(p.active and p.ready for p in pods), succeeded=sum(p.succeeded for p in pods),
                   failed=sum(p.failed for p in pods))


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


# A name held by someone else's object is looked at again this often: a squatter sends no
# events (it does not carry our labels), so nothing else would tell us it went.
SQUATTER_RECHECK_SECONDS = 5.0


def look_again_in(*, resync: float, deferred_write: float | None = None, wake: float | None = None,
                  refusal_retry: float | None = None, squatters: bool = False) -> float:
    """Seconds until a job's next pass if no event comes first: the soonest of the resync,
    a deferred status write, the plan's own wake (a back-off's end, a deadline, a TTL), the
    retry of a refused creation, and a recheck of names held by others. Never negative."""
    waits = [resync, deferred_write, wake, refusal_retry, SQUATTER_RECHECK_SECONDS if squatters else None]
    return max(0.0, min(w for w in waits if w is not None))


# Status fields whose change alone may wait for the next write (status_write): the worker
# counters move with every pod event, and a job of 8 pods starting over half a minute
# would otherwise write its status a dozen times. Goodput moves on every pass: it goes out
# with the next write of anything else, never alone.
DEFERRABLE_STATUS = frozenset({"workers", "goodput"})
RIDES_ALONG = frozenset({"goodput"})
COUNTERS_DELAY_SECONDS = 30.0
# While a job is Pending its counters move only because its pods appear and start: the
# write of Running carries them. Why a job waits is a condition (Unschedulable, an image
# pull, a refusal), written at once. A job that waits longer gets them every 5 minutes. At
# 500 jobs starting at once, the 30 s rule cost ~5 status writes a job, each one a write
# token that a pod create then waited for (bench/operator_scale.py).
PENDING_COUNTERS_DELAY_SECONDS = 300.0


def counters_delay(phase: str | None) -> float:
    """How long after the last status write a change of the counters alone may wait."""
    return PENDING_COUNTERS_DELAY_SECONDS if phase == "Pending" else COUNTERS_DELAY_SECONDS


def status_write(old: Status, new: Status, since_last_write: float) -> tuple[dict[str, Any], float | None]:
    """The status patch to send now ({}: nothing), or how many seconds it may wait. A change
    of goodput alone is never sent (it rides along with the next write); a change of the
    worker counters alone waits (counters_delay), and only while the job is active: once it
    is Suspended, Succeeded or Failed its counters go out at once, so the status never shows
    workers a job of that phase cannot have. This is where the typed status is written out."""
    patch = status_patch(status_json(old), status_json(new))
    if patch and set(patch) <= RIDES_ALONG:
        return {}, None
    delay = counters_delay(new.phase)
    if (patch and set(patch) <= DEFERRABLE_STATUS and since_last_write < delay
            and new.phase in ACTIVE_PHASES):
        return {}, delay - since_last_write
    return patch, None


def routine_write(patch: Mapping[str, Any]) -> bool:
    """A status patch of fields that may wait (the worker counters) and nothing else: it
    gives way to the writes that change what a job is (kube.ROUTINE)."""
    return bool(patch) and set(patch) <= DEFERRABLE_STATUS


def status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Only the top-level status fields that changed (None removes a field)."""
    patch = {k: v for k, v in new.items() if old.get(k) != v}
    patch.update({k: None for k in old if k not in new})
    return patch

