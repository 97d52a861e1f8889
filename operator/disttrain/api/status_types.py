"""The DistributedTraining's status, typed: what the operator writes and every reader
(`kubectl explain`, the CLI, the client) reads; one schema source with api/types.py (the
spec), which api/schema.py turns into the CRD's status schema and docs/api.md."""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Literal, get_args

from disttrain.api.meta import spec_field

Phase = Literal["Pending", "Running", "Restarting", "Suspended", "Succeeded", "Failed"]
# Every condition type the operator writes, the one list (api/conditions.py names each from
# it, CONDITION): the job's life, trouble it cannot fix alone, and Kueue's admission.
CONDITION_TYPES = ("Validated", "Running", "Restarting", "Suspended", "Succeeded", "Failed", "CheckpointStale",
                   "NameConflict", "PodCreationForbidden", "SpecInvalid", "Queued", "Admitted", "Evicted",
                   "Instrumented", "Straggler")


def named(values: tuple[str, ...]) -> SimpleNamespace:
    """CamelCase values by their UPPER_SNAKE names (OOMKilled: OOM_KILLED, PodsReadyTimeout:
    PODS_READY_TIMEOUT): a constant that names a value of a list is read from the list, so
    the value is spelled once, and a name that is not there fails at import."""
    return SimpleNamespace(**{re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", value).upper(): value
                              for value in values})


CONDITION = named(CONDITION_TYPES)


@dataclass(kw_only=True, slots=True)
class Condition:
    """A metav1.Condition."""

    type: str | None = spec_field(f"type: {', '.join(CONDITION_TYPES[:-1])} or {CONDITION_TYPES[-1]}.",
                                  max_length=316, required=True)
    status: Literal["True", "False", "Unknown"] | None = spec_field("status: True, False or Unknown.",
                                                                    required=True)
    reason: str | None = spec_field("reason: a CamelCase reason, also used for Events.",
                                    max_length=1024)
    message: str | None = spec_field("message: what happened and, for problems, how to fix it.",
                                     max_length=32768)
    last_transition_time: str | None = spec_field(
        "lastTransitionTime: when status last changed (RFC 3339).")
    observed_generation: int | None = spec_field(
        "observedGeneration: the spec generation this condition describes.")


@dataclass(kw_only=True, slots=True)
class Resolved:
    """resolved: the topology the operator derived from the spec."""

    strategy: str | None = spec_field("strategy: auto, ddp or fsdp after guardrails.")
    nodes: int | None = spec_field("nodes: desired workers.")
    min_nodes: int | None = spec_field("minNodes: elastic lower bound.")
    max_nodes: int | None = spec_field("maxNodes: elastic upper bound.")
    nproc_per_node: int | None = spec_field("nprocPerNode: processes per worker.")
    world_size: int | None = spec_field("worldSize: nodes x nprocPerNode.")
    precision: str | None = spec_field("precision: after guardrails.")
    image: str | None = spec_field(
        "image: the workers' image: spec.image, else the operator's trainer image when the job "
        "was first seen (an operator upgrade never changes a job's image).")
    instrument_image: str | None = spec_field(
        "instrumentImage: the image instrument: auto copies disttrain's package from, chosen the "
        "same way.")


@dataclass(kw_only=True, slots=True)
class Workers:
    """workers: worker pod counts."""

    desired: int | None = spec_field("desired: workers the job wants now.")
    active: int | None = spec_field("active: pods pending or running.")
    running: int | None = spec_field(
        "running: pods running (phase Running), as the Running condition counts them; their "
        "processes are the world size training runs at.")
    ready: int | None = spec_field("ready: running pods whose trainer is ready.")
    succeeded: int | None = spec_field("succeeded: pods that exited 0.")
    failed: int | None = spec_field("failed: pods that failed.")


@dataclass(kw_only=True, slots=True)
class Progress:
    """progress: what the trainer reports on /status."""

    step: int | None = spec_field("step: optimizer steps done.")
    total_steps: int | None = spec_field("totalSteps: steps the job will run.")
    loss: float | None = spec_field("loss: training loss at the last logged step.")
    samples_per_second: float | None = spec_field("samplesPerSecond: global throughput.")
    step_seconds: float | None = spec_field(
        "stepSeconds: the mean optimizer step over the trainer's last logging window, checkpoint "
        "and evaluation time left out: what the ETA counts in.")
    eval_loss: float | None = spec_field(
        "evalLoss: loss on the held-out split (builtin.evalFraction) at evalStep.")
    eval_metrics: dict[str, float] | None = spec_field(
        "evalMetrics: the named metrics of the same evaluation that your own code reports "
        "(disttrain.train: Session.evaluated(step, loss, accuracy=...), the Transformers and "
        "Lightning callbacks, run_training's eval_metrics), at most 16; what a sweep's "
        "objective.metric may name.")
    eval_step: int | None = spec_field("evalStep: the step evalLoss and evalMetrics were measured at.")
    percent_complete: str | None = spec_field("percentComplete: step / totalSteps, e.g. 45%.")
    last_step_time: str | None = spec_field(
        "lastStepTime: when step last advanced (RFC 3339): the trainer's own time of that step, kept "
        "between the step the operator saw before and the moment it saw this one. How long a job has "
        "been stalled, and what failurePolicy.hangSeconds is measured from.")


FailureCause = Literal["NodeLost", "Evicted", "Preempted", "OOMKilled", "ExitCode", "Hung",
                       "ImagePullBackOff", "Unschedulable", "PodsReadyTimeout", "QueueEvicted", "NodeDrain",
                       "NodeUnhealthy", "Straggler"]
# Each cause by its constant's name (operator/core/failures.py's, an integration's `causes`).
CAUSE = named(get_args(FailureCause))


@dataclass(kw_only=True, slots=True)
class FailureRecord:
    """An entry of failures: one worker pod that ended before the job finished, or could
    not start; or a stop of the whole job that it did not ask for (no pod, no rank)."""

    time: str | None = spec_field("time: when it happened (the container's finish time, else "
                                  "when the operator saw it; RFC 3339).")
    cause: FailureCause | None = spec_field(
        "cause: NodeLost (the node went away or was shut down), Evicted (node pressure, the "
        "Eviction API, the kubelet), Preempted (a higher-priority pod took its place), "
        "OOMKilled (the container exceeded its memory limit), ExitCode (the trainer exited "
        "with an error), Hung (no step for failurePolicy.hangSeconds), ImagePullBackOff (the "
        "image cannot be pulled), Unschedulable (no node fits the pod). Stops of the whole job, "
        "which spend no backoffLimit: Preempted also when Kueue preempted it for another "
        "workload, PodsReadyTimeout (Kueue's waitForPodsReady: its workers were not all Ready "
        "in time), QueueEvicted (Kueue evicted it for another reason: a stopped queue, a "
        "deactivated Workload), NodeDrain (a worker's node was cordoned: it moved, checkpoint "
        "first), NodeUnhealthy (a worker's node stayed Ready but reported a health problem: a "
        "condition or taint the operator watches, or fewer GPUs than its workers were given; "
        "it moved, checkpoint first, and the node is avoided), Straggler (failurePolicy.stragglers "
        "Replace: a worker computed slower than its peers for stragglerWindows windows: the workers "
        "moved off its node, checkpoint first, and the node is avoided).")
    node: str | None = spec_field("node: the node the pod ran on (empty if it never got one).",
                                  max_length=253)
    pod: str | None = spec_field("pod: the worker pod's name.", max_length=253)
    pod_uid: str | None = spec_field("podUID: the pod's uid, so each ended pod is recorded once.",
                                     max_length=64, json_name="podUID")
    rank: int | None = spec_field("rank: the worker's index (the pod NAME-worker-RANK).")
    exit_code: int | None = spec_field("exitCode: the trainer container's exit code, if it exited.")
    message: str | None = spec_field(
        "message: the last line of the container's termination message (its error), or the "
        "cluster's words (eviction, scheduler, image pull).", max_length=1024)
    resumed_from_step: int | None = spec_field(
        "resumedFromStep: the step of the newest checkpoint when it happened: where training "
        "starts again (0: from the beginning). Unset where the step is not known.")
    steps_lost: int | None = spec_field(
        "stepsLost: steps done since that checkpoint, which are done again. 0 when a "
        "checkpoint was taken at the step it stopped on.")


StopReason = Literal["Suspended", "Evicted", "NodeDrain", "NodeUnhealthy", "Straggler"]
Handshake = Literal["Requested", "Checkpointed", "TimedOut", "NotSupported", "NotRunning", "Off", "Cancelled"]


@dataclass(kw_only=True, slots=True)
class Eviction:
    """eviction: the job's latest stop on purpose and the checkpoint-then-evict handshake
    before it (docs/operations.md)."""

    reason: StopReason | None = spec_field(
        "reason: Suspended (spec.suspend); Evicted (Kueue evicted the job's Workload: a "
        "preemption, a deactivation, a stopped queue; the message says which); NodeDrain (a "
        "worker's node was cordoned: the workers were moved to other nodes); NodeUnhealthy (a "
        "worker's node reported a health problem while Ready: the workers were moved off it); Straggler "
        "(a worker computed slower than its peers: the workers were moved off its node).")
    request_time: str | None = spec_field("requestTime: when the operator decided to stop the job (RFC 3339).")
    step: int | None = spec_field(
        "step: the step the trainer stopped and checkpointed at on request (handshake Checkpointed); "
        "before it answers, or when it never does, the last step the operator had seen when it asked.")
    handshake: Handshake | None = spec_field(
        "handshake: Requested (the operator waits for the checkpoint), Checkpointed (the trainer "
        "checkpointed the current step and held: nothing is lost), TimedOut (no checkpoint within "
        "evictGraceSeconds: the pods were deleted and saved on SIGTERM), NotSupported (the trainer "
        "does not serve POST /checkpoint, e.g. a script of your own: SIGTERM only), NotRunning (no "
        "trainer was running yet: nothing to save), Off (evictGraceSeconds is 0), Cancelled "
        "(suspend was set back to false before the pods were deleted).")
    stop_time: str | None = spec_field("stopTime: when the worker pods were deleted (RFC 3339).")
    resume_from_step: int | None = spec_field(
        "resumeFromStep: the step of the newest checkpoint: where training starts again.")
    steps_lost: int | None = spec_field(
        "stepsLost: steps done since that checkpoint, which are done again (0 when the "
        "handshake completed, or when the SIGTERM checkpoint caught the last step).")
    message: str | None = spec_field("message: what happened, in words.", max_length=1024)


@dataclass(kw_only=True, slots=True)
class PlacedDomain:
    """An entry of admission.topology.domains: one domain of the level the job asked for."""

    name: str | None = spec_field("name: the domain's value of that node label (? where it is not known).",
                                  max_length=253)
    workers: int | None = spec_field("workers: the workers Kueue placed in it.")


TOPOLOGY_DOMAINS_SHOWN = 16  # a job spread wider says how many, not each


@dataclass(kw_only=True, slots=True)
class TopologyPlacement:
    """topology: where Kueue's Topology-Aware Scheduling placed the workers."""

    level: str | None = spec_field("level: the node label the job asked to stay within (required, preferred "
                                   "or sliceRequired).", max_length=63)
    domain_count: int | None = spec_field("domainCount: the domains of that level the workers are in (1: all "
                                          "together).")
    domains: list[PlacedDomain] | None = spec_field(
        f"domains: those domains, the first {TOPOLOGY_DOMAINS_SHOWN}, in Kueue's order (workers by index fill "
        "them in turn).", max_items=TOPOLOGY_DOMAINS_SHOWN)
    hosts: int | None = spec_field("hosts: the nodes Kueue assigned (when its Topology goes down to "
                                   "kubernetes.io/hostname).")


@dataclass(kw_only=True, slots=True)
class Admission:
    """admission: the size Kueue admitted the job at, what it asks for, and why it runs at
    that size (only for a job in a Kueue queue, while admitted)."""

    cluster_queue: str | None = spec_field("clusterQueue: the ClusterQueue that admitted it.", max_length=253)
    workload: str | None = spec_field("workload: the Workload (or Workload slice) it runs on.", max_length=253)
    nodes: int | None = spec_field("nodes: the workers its admission holds quota for.")
    requested_nodes: int | None = spec_field(
        "requestedNodes: the workers it asks Kueue for (spec.nodes); more than nodes while a "
        "growth slice waits for quota.")
    growth_workload: str | None = spec_field(
        "growthWorkload: the Workload slice that asks for requestedNodes and waits for quota.", max_length=253)
    message: str | None = spec_field("message: why it runs at this size, in Kueue's words where it has some.",
                                     max_length=1024)
    topology: TopologyPlacement | None = spec_field(
        "topology: the domains Kueue's Topology-Aware Scheduling placed the workers in.")


@dataclass(kw_only=True, slots=True)
class AvoidedNode:
    """An entry of avoidedNodes: a node this job's new workers stay away from."""

    node: str | None = spec_field("node: the node's name.", max_length=253)
    time: str | None = spec_field("time: when the job began avoiding it (RFC 3339).")
    failures: int | None = spec_field("failures: the job's failures there that made it avoid the node.")
    lifted_time: str | None = spec_field(
        "liftedTime: when the job stopped avoiding it because a worker could be placed nowhere "
        "else (it is not avoided again).")
    message: str | None = spec_field("message: why it stopped avoiding.", max_length=1024)


@dataclass(kw_only=True, slots=True)
class Goodput:
    """goodput: where the job's worker-seconds went (seconds x desired workers)."""

    ratio: float | None = spec_field(
        "ratio: productiveSeconds / all four, 0 to 1; unset until the trainer reports a step with "
        "its step time (nothing measured).")
    productive_seconds: float | None = spec_field(
        "productiveSeconds: worker-seconds of the steps that count, each once: the trainer's steps "
        "past the highest step counted, times its step time; unset until the trainer reports a "
        "step with its step time (a script without a status server never does).")
    lost_seconds: float | None = spec_field(
        "lostSeconds: worker-seconds of steps done again after failures (status.failures' "
        "stepsLost x the step time), and of waiting after a queue evicted the job.")
    restarting_seconds: float | None = spec_field(
        "restartingSeconds: worker-seconds that made no new step: phase Restarting, and the time "
        "Running before the first step (imports, rendezvous, loading a checkpoint; all of it while "
        "no step is reported), in checkpoint saves, and in restarts torchrun does inside a pod.")
    waiting_seconds: float | None = spec_field("waitingSeconds: worker-seconds Pending (scheduling, image pulls).")
    step: int | None = spec_field("step: the highest training step counted in productiveSeconds.")
    update_time: str | None = spec_field("updateTime: when these were last added up (RFC 3339).")


@dataclass(kw_only=True, slots=True)
class TemplateStatus:
    """template: the training template the job was resolved against, as it was then: the job
    keeps it for its whole life, whatever becomes of the template."""

    kind: str | None = spec_field("kind: ClusterTrainingTemplate or TrainingTemplate.")
    name: str | None = spec_field("name: the template's name.", max_length=253)
    uid: str | None = spec_field("uid: the template's uid when the job was resolved.", max_length=64)
    generation: int | None = spec_field("generation: the template's generation the job was resolved against.")
    contact: str | None = spec_field("contact: whom the template said to ask.", max_length=1024)
    defaults: dict[str, Any] | None = spec_field("defaults: the template's defaults, as resolved.", free_form=True)
    enforced: dict[str, Any] | None = spec_field("enforced: the template's enforced settings, as resolved.",
                                                 free_form=True)
    resolve_time: str | None = spec_field("resolveTime: when the job was first resolved against it (RFC 3339).")


@dataclass(kw_only=True, slots=True)
class CheckpointStatus:
    """checkpoint: the newest complete checkpoint."""

    step: int | None = spec_field("step: the step it holds.")
    time: str | None = spec_field("time: when it completed (RFC 3339).")
    path: str | None = spec_field("path: its directory inside the pods.")


@dataclass(kw_only=True, slots=True)
class DistributedTrainingStatus:
    """status: observed state, written by the operator."""

    phase: Phase | None = spec_field(
        "phase: Pending, Running, Restarting, Suspended, Succeeded or Failed.")
    conditions: list[Condition] | None = spec_field(
        f"conditions: {', '.join(CONDITION_TYPES)} (docs/operations.md says when each is set; "
        "Validated's reason is ValidWithWarnings when the spec has guardrail warnings).", list_map_keys=("type",), max_items=16)
    resolved: Resolved | None = spec_field("resolved: derived topology.")
    warnings: list[str] | None = spec_field("warnings: guardrail warnings about the spec.",
                                            max_items=64)
    workers: Workers | None = spec_field("workers: worker pod counts.")
    restarts: int | None = spec_field("restarts: worker pods recreated after failures.")
    progress: Progress | None = spec_field("progress: training progress.")
    checkpoint: CheckpointStatus | None = spec_field("checkpoint: newest checkpoint.")
    failures: list[FailureRecord] | None = spec_field(
        "failures: the newest worker failures, oldest first (at most 16): what ended each pod, "
        "where, and what it cost; kept after the Events about them expire.", max_items=16)
    goodput: Goodput | None = spec_field(
        "goodput: the share of the job's worker-seconds that went to steps that count.")
    template: TemplateStatus | None = spec_field(
        "template: the training template the job was resolved against, kept for its whole life.")
    avoided_nodes: list[AvoidedNode] | None = spec_field(
        "avoidedNodes: nodes this job's new workers avoid after failing there "
        "(failurePolicy.avoidNodeAfterFailures); an entry with liftedTime is avoided no more.",
        max_items=16)
    admission: Admission | None = spec_field(
        "admission: for a job in a Kueue queue, the size it was admitted at, what it asks "
        "for and why it runs at that size.")
    eviction: Eviction | None = spec_field(
        "eviction: the latest stop on purpose (suspend): the checkpoint it asked for, the "
        "step training resumes from and the steps that stop lost.")
    next_restart_time: str | None = spec_field(
        "nextRestartTime: when failed workers will be recreated (exponential back-off).")
    start_time: str | None = spec_field("startTime: when the job first had pods.")
    completion_time: str | None = spec_field("completionTime: when it succeeded or failed.")
    observed_generation: int | None = spec_field(
        "observedGeneration: the spec generation the operator last acted on.")
    selector: str | None = spec_field(
        "selector: label selector of the worker pods (for the scale subresource).")
