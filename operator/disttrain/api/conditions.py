"""Condition types, reasons and the metav1.Condition helpers.

Reasons are CamelCase constants shared by conditions, Events and metric labels.
`lastTransitionTime` moves only when a condition's status flips.
"""

from __future__ import annotations

from disttrain.api.reasons import *  # noqa: F403  (guardrail warning reasons)
from disttrain.api.status_types import CONDITION, Condition

# Condition types, named from status_types.CONDITION_TYPES (the CRD's list; spelled there once)
VALIDATED = CONDITION.VALIDATED
RUNNING = CONDITION.RUNNING
RESTARTING = CONDITION.RESTARTING
SUSPENDED = CONDITION.SUSPENDED
SUCCEEDED = CONDITION.SUCCEEDED
FAILED = CONDITION.FAILED
CHECKPOINT_STALE = CONDITION.CHECKPOINT_STALE
# Trouble the operator cannot fix alone (docs/operations.md): said on the job, not only in Events.
NAME_CONFLICT = CONDITION.NAME_CONFLICT                    # a child's name is taken by an object we do not own
POD_CREATION_FORBIDDEN = CONDITION.POD_CREATION_FORBIDDEN  # admission, quota or validation refused a pod
SPEC_INVALID = CONDITION.SPEC_INVALID                      # a running job's spec stopped validating
# Kueue (integrations/kueue/workload.py): the job waits in its LocalQueue, was admitted, was evicted.
QUEUED = CONDITION.QUEUED
ADMITTED = CONDITION.ADMITTED
EVICTED = CONDITION.EVICTED
# trainer.instrument: auto (operator/core/instrumentation.py): was a Trainer found to report from?
INSTRUMENTED = CONDITION.INSTRUMENTED
# failurePolicy.stragglers (operator/core/stragglers.py): a worker computes slower than its peers.
STRAGGLER = CONDITION.STRAGGLER

# Reasons
VALID = "Valid"
VALID_WITH_WARNINGS = "ValidWithWarnings"
INVALID_SPEC = "InvalidSpec"
# Events: a job resolved against a training template (operator/template_watch.py); one it keeps deleted.
TEMPLATE_RESOLVED = "TemplateResolved"
TEMPLATE_DELETED = "TemplateDeleted"
TEMPLATE_NOT_FOUND = "TemplateNotFound"  # Running=False: a Pending job waits for the template it names
PODS_PENDING = "PodsPending"
PODS_RUNNING = "PodsRunning"
WORKER_FAILED = "WorkerFailed"
WORKER_DISRUPTED = "WorkerDisrupted"
WORKER_DELETED = "WorkerDeleted"
WORKERS_RECREATED = "WorkersRecreated"
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
DEADLINE_EXCEEDED = "DeadlineExceeded"
JOB_SUSPENDED = "JobSuspended"
JOB_RESUMED = "JobResumed"
CHECKPOINT_BEFORE_STOP = "CheckpointBeforeStop"  # asked for a checkpoint now; the pods go once it is written
JOB_SUCCEEDED = "JobSucceeded"
SPEC_CHANGED = "SpecChanged"
SCALED = "Scaled"
CHECKPOINT_TOO_OLD = "CheckpointTooOld"
CHECKPOINT_FRESH = "CheckpointFresh"
TTL_EXPIRED = "TTLExpired"
NODE_AVOIDED = "NodeAvoided"            # the job failed on a node often enough: new workers avoid it
NODE_AVOIDANCE_LIFTED = "NodeAvoidanceLifted"  # a worker fit nowhere else: the job avoids no node any more
HUNG = "Hung"                          # no step for failurePolicy.hangSeconds: every worker restarted
NODE_DRAINED = "NodeDrained"            # a worker's node was cordoned: workers moved, checkpoint first
NODE_UNHEALTHY = "NodeUnhealthy"        # a worker's Ready node reports a problem: workers moved off it, checkpoint first
SLOW_WORKER = "SlowWorker"              # Straggler: which worker, on which node, how much slower
NO_STRAGGLER = "NoStraggler"
STRAGGLER_REPLACED = "StragglerReplaced"  # its workers were moved off the straggler's node, checkpoint first
NODE_LOST = "NodeLost"                  # a worker's node stopped being Ready: force-deleted, recreated elsewhere
UNSCHEDULABLE = "Unschedulable"        # the scheduler cannot place a worker (its message follows)
IMAGE_PULL_BACK_OFF = "ImagePullBackOff"  # a worker cannot pull its image (the kubelet's message follows)
CONTAINER_CONFIG_ERROR = "ContainerConfigError"  # a worker waits for a Secret/ConfigMap it refers to
NAME_TAKEN = "ChildNameTaken"          # NameConflict: which object holds which name
NAMES_FREE = "ChildNamesFree"
CREATION_REFUSED = "CreationRefused"   # PodCreationForbidden, when the API gave no reason
CREATION_ALLOWED = "CreationAllowed"
QUEUE_IGNORED = "QueueIgnored"          # the Kueue label on a job of an operator that runs without Kueue
TOPOLOGY_UNPLACED = "TopologyUnplaced"  # scheduling.topology, where nothing places by topology (no Kueue queue)
GANG_NOT_SERVED = "GangNotServed"      # Running=False: the cluster serves no PodGroup kube-scheduler gang-schedules
GANG_SCHEDULING = "GangScheduling"      # the Event that names the PodGroup and the scheduler that places a gang
WORKLOAD_CREATED = "WorkloadCreated"    # Queued: the Workload is made, Kueue has not looked at it yet
QUOTA_RESERVED = "QuotaReserved"        # Admitted: Kueue reserved quota in a ClusterQueue
WORKLOAD_FINISHED = "WorkloadFinished"  # the job ended: its Workload frees the quota
WORKER_INTERRUPTED = "WorkerInterrupted"  # ended on a signal before finishing: a disruption
CALLBACK_ATTACHED = "CallbackAttached"  # Instrumented: the trainer reports from the framework it names
NO_TRAINER_FOUND = "NoTrainerFound"     # Instrumented False: no report after the start-up allowance

MESSAGE_LIMIT = 1024


CONDITION_STATUS = {True: "True", False: "False"}


def set_condition(conditions: list[Condition], type_: str, status: bool, reason: str,
                  message: str, generation: int | None, now: str) -> list[Condition]:
    """A new list with `type_` set; the transition time is kept unless status flips.
    `status` is a bool: anything else (None for "unknown") is a bug, refused here."""
    value = CONDITION_STATUS[status]
    out, found = [], False
    for cond in conditions:
        if cond.type != type_:
            out.append(cond)
            continue
        found = True
        moved = cond.status != value
        out.append(_condition(type_, value, reason, message, generation,
                              now if moved else cond.last_transition_time or now))
    if not found:
        out.append(_condition(type_, value, reason, message, generation, now))
    return out


def get_condition(conditions: list[Condition] | None, type_: str) -> Condition | None:
    return next((c for c in conditions or [] if c.type == type_), None)


def _condition(type_: str, status: str, reason: str, message: str, generation: int | None,
               when: str) -> Condition:
    return Condition(type=type_, status=status, reason=reason, message=cap(message),  # type: ignore[arg-type]
                     last_transition_time=when, observed_generation=generation)


def cap(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """One line, capped: Events and conditions are read in `kubectl get`/`describe`."""
    line = " ".join(message.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
