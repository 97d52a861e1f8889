"""The DistributedTraining API (`disttrain.dev/v1alpha1`) as typed dataclasses.

Every field's description, default and bounds live here and nowhere else: the CRD
(`disttrain crd`), `kubectl explain`, the offline validator and the defaulter all read
them. Attribute names are snake_case; the Kubernetes names are their camelCase.
Unset fields are None until `api.defaults` fills them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from disttrain.api.k8s import AFFINITY, ENV_VAR_SOURCE, POD_SPEC, TOLERATION
from disttrain.api.meta import DNS1123_SUBDOMAIN, RESOURCE_NAME, spec_field
from disttrain.api.pod_contract import BUILTIN

GROUP = "disttrain.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "DistributedTraining"
PLURAL = "distributedtrainings"
SINGULAR = "distributedtraining"
SHORT_NAMES = ["dt", "dtrain"]

DEFAULT_IMAGE = "ghcr.io/disttrain/trainer:0.1.0"
MAX_NODES = 1024
MAX_GPUS_PER_NODE = 64
# Processes per worker pod: one per GPU, or per CPU core group on CPU nodes.
MAX_NPROC_PER_NODE = 128
MAX_NODES_REASON = ("each worker is a pod the operator watches and a rendezvous member; "
                    "1024 nodes is beyond what one c10d store serves well")

Strategy = Literal["auto", "ddp", "fsdp", "fsdp_native"]
Precision = Literal["bf16-mixed", "16-mixed", "32"]
Model = Literal["gpt-nano", "gpt-small", "mlp"]
Dataset = Literal["text", "synthetic-regression", "synthetic-classification"]
CleanPodPolicy = Literal["All", "Running", "None"]
PullPolicy = Literal["Always", "IfNotPresent", "Never"]
RendezvousBackend = Literal["c10d"]
CheckpointStorageMode = Literal["auto", "none"]
Phase = Literal["Pending", "Running", "Restarting", "Suspended", "Succeeded", "Failed"]
# Every condition type the operator writes (api/conditions.py names each; a test keeps the
# two equal): the job's life, trouble it cannot fix alone, and Kueue's admission.
CONDITION_TYPES = ("Validated", "Running", "Restarting", "Suspended", "Succeeded", "Failed", "CheckpointStale",
                   "NameConflict", "PodCreationForbidden", "SpecInvalid", "Queued", "Admitted", "Evicted",
                   "Instrumented")

# A Kubernetes quantity or count: 4, "500m", "16Gi".
IntOrString = int | str


@dataclass(kw_only=True, slots=True)
class BuiltinTrainer:
    """builtin: the trainer shipped in the image (python -m disttrain_trainer)."""

    model: Model | None = spec_field(
        "model: the built-in model. gpt-nano (~1M parameters) and gpt-small (~20M) are "
        "GPT-style language models; mlp is a small multilayer perceptron.",
        default=BUILTIN["model"].default, immutable_while_running=True)
    dataset: Dataset | None = spec_field(
        "dataset: the built-in data, nothing is downloaded. text is a character-level "
        "corpus shipped in the image (for gpt-*); synthetic-regression and "
        "synthetic-classification are generated from the seed (for mlp). "
        "Defaults to text for gpt-* and synthetic-regression for mlp.")
    steps: int | None = spec_field(
        "steps: optimizer steps in total; the job succeeds when every rank reaches it.",
        default=BUILTIN["steps"].default, minimum=1, maximum=100_000_000,
        maximum_reason="a bound on runaway jobs: 1e8 steps is months of training at 10 steps/s")
    batch_size: int | None = spec_field(
        "batchSize: micro-batch per data-parallel rank. Global batch per optimizer step "
        "= batchSize x data-parallel degree x accumulateGradBatches.",
        default=BUILTIN["batch_size"].default, minimum=1, maximum=65536,
        maximum_reason="a micro-batch is per process and must fit in one device's memory")
    learning_rate: float | None = spec_field(
        "learningRate: peak learning rate of AdamW (cosine schedule with warm-up).",
        default=BUILTIN["learning_rate"].default, minimum=0, exclusive_minimum=True, maximum=10)
    seed: int | None = spec_field(
        "seed: seeds weights, data order and dropout; the same seed gives the same run (0 is a "
        "seed like any other).",
        default=BUILTIN["seed"].default, minimum=0, maximum=2**31 - 1)
    eval_fraction: float | None = spec_field(
        "evalFraction: share of the dataset held out as a contiguous block, never trained "
        "on, to measure status.progress.evalLoss. 0 turns evaluation off.",
        default=BUILTIN["eval_fraction"].default, minimum=0, maximum=0.5)
    eval_fold: int | None = spec_field(
        "evalFold: which block of size evalFraction is held out, counted from the start "
        "of the dataset: 0 .. 1/evalFraction - 1. For k-fold cross-validation run k jobs "
        "with evalFraction 1/k and evalFold 0 .. k-1.",
        default=BUILTIN["eval_fold"].default, minimum=0, maximum=1000)
    eval_interval_steps: int | None = spec_field(
        "evalIntervalSteps: evaluate every N steps as well as after the last one; 0 = "
        "only after the last step.",
        default=BUILTIN["eval_interval_steps"].default, minimum=0, maximum=100_000_000)


@dataclass(kw_only=True, slots=True)
class TrainerSpec:
    """trainer: what each worker runs under torchrun. Exactly one of builtin or command."""

    builtin: BuiltinTrainer | None = spec_field(
        "builtin: run the trainer shipped in the image. Mutually exclusive with command.")
    command: list[str] | None = spec_field(
        "command: your own training script as torchrun takes it, e.g. "
        "[\"/workspace/train.py\"] or [\"--module\", \"mypkg.train\"]. The pod runs "
        "`torchrun <command> <args>`; do not start it with python or torchrun.",
        max_items=64, max_length=4096)
    args: list[str] | None = spec_field(
        "args: arguments appended after command. Only with command.",
        max_items=256, max_length=4096)
    instrument: Instrument | None = spec_field(
        "instrument: auto gives your own code disttrain.train's reporting without a change to it or "
        "to your image: an init container copies disttrain's package from instrumentImage into the "
        "pod, and a start-up hook attaches its callback to every Transformers (4.40 or newer) or "
        "Lightning (2.0 or newer) Trainer your code builds: progress, hang detection, "
        "checkpoint-then-evict (docs/training-api.md). none (unset) runs your command as it is. Only "
        "with command.")
    instrument_image: str | None = spec_field(
        "instrumentImage: the image instrument: auto copies disttrain's package from: any image that "
        "holds it, such as the trainer image (the default: the operator's trainer image, as for an "
        "unset spec.image) or one built from it. Only with instrument: auto.", max_length=1024)


# The same values, in the same order, as CheckpointStorageMode: typing caches equal Literals
# as one object (their order ignored), so the other order would make docs/api.md depend
# on which annotation was read first.
Instrument = Literal["auto", "none"]


@dataclass(kw_only=True, slots=True)
class EnvVar:
    """An environment variable for every worker container (Kubernetes EnvVar)."""

    name: str | None = spec_field(
        "name: the variable's name. PET_*, DISTTRAIN_*, TORCHELASTIC_* and the names "
        "torchrun sets (RANK, WORLD_SIZE, MASTER_ADDR, ...) are reserved.",
        required=True, max_length=256, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$",
        pattern_hint="letters, digits, '_', '-', '.', not starting with a digit")
    value: str | None = spec_field("value: the variable's value.", max_length=32768)
    value_from: dict[str, Any] | None = spec_field(
        "valueFrom: a Kubernetes EnvVarSource (secretKeyRef, configMapKeyRef, fieldRef, "
        "resourceFieldRef).", free_form=True, k8s=ENV_VAR_SOURCE)


@dataclass(kw_only=True, slots=True)
class Resources:
    """resources: cpu and memory per node (per worker pod). GPUs come from gpusPerNode."""

    requests: dict[str, IntOrString] | None = spec_field(
        "requests: e.g. {cpu: 8, memory: 64Gi}. Set GPUs with gpusPerNode, not here.",
        max_items=16)
    limits: dict[str, IntOrString] | None = spec_field(
        "limits: e.g. {memory: 64Gi}. Set GPUs with gpusPerNode, not here.", max_items=16)


@dataclass(kw_only=True, slots=True)
class Mesh:
    """mesh: a 2-D FSDP x tensor-parallel device mesh; fsdp * tp must equal the world size."""

    fsdp: int | None = spec_field(
        "fsdp: size of the data-parallel (FSDP-sharded) dimension.",
        required=True, minimum=1, maximum=MAX_NODES * MAX_NPROC_PER_NODE,
        maximum_reason="the largest world size: maxNodes x nprocPerNode")
    tp: int | None = spec_field(
        "tp: size of the tensor-parallel dimension; keep it within one node "
        "(it should divide nprocPerNode).", required=True, minimum=1, maximum=MAX_NPROC_PER_NODE,
        maximum_reason="tensor parallelism stays within one node")


@dataclass(kw_only=True, slots=True)
class Rendezvous:
    """rendezvous: how torchrun agents find each other (torch.distributed.elastic)."""

    backend: RendezvousBackend | None = spec_field(
        "backend: rendezvous backend. c10d: a TCP store hosted by worker 0's agent.",
        default="c10d")
    port: int | None = spec_field(
        "port: TCP port of the c10d store on worker 0.", default=29400, minimum=1,
        maximum=65535)
    join_timeout_seconds: int | None = spec_field(
        "joinTimeoutSeconds: how long agents wait for minNodes to join before failing.",
        default=600, minimum=1, maximum=86400)
    last_call_timeout_seconds: int | None = spec_field(
        "lastCallTimeoutSeconds: after minNodes joined, how long to wait for more "
        "(up to maxNodes) before starting.", default=30, minimum=1, maximum=3600)


@dataclass(kw_only=True, slots=True)
class FailurePolicy:
    """failurePolicy: how the operator tells a failure the pods themselves do not report."""

    node_lost_seconds: int | None = spec_field(
        "nodeLostSeconds: how long a worker's node may be NotReady, Unknown or tainted "
        "unreachable/not-ready before the worker is force-deleted and recreated on another node "
        "(a disruption: backoffLimit is not spent); 0 replaces it as soon as the node is seen lost. "
        "Kubernetes itself waits 300 s before it evicts.",
        default=30, minimum=0, maximum=3600)
    avoid_node_after_failures: int | None = spec_field(
        "avoidNodeAfterFailures: after this many failures of this job on one node (ExitCode, "
        "OOMKilled, NodeLost or Hung entries of status.failures), new workers of the job avoid "
        "that node (a required node affinity); never so many that a worker cannot be placed: "
        "then the job stops avoiding. A node its workers were moved off as unhealthy (NodeUnhealthy) "
        "is avoided at once. 0 never avoids a node.", default=2, minimum=0, maximum=16)
    hang_seconds: int | None = spec_field(
        "hangSeconds: restart every worker (reason Hung, counted against backoffLimit) when the "
        "running trainer has completed no step for this long, as its /status reports it. Unset: "
        "max(10 x the trainer's step time, 300) for the built-in trainer and for your own code "
        "once it reports steps (disttrain.train); off for a script that reports none. 0 turns it off. Until its first step after a start, restart or "
        "resume the trainer gets at least 300 s (loading a checkpoint is no hang).",
        minimum=0, maximum=86400)


# An S3 URL: a bucket name as S3 allows (3-63 of a-z 0-9 . -), then an optional prefix.
S3_URI = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s]*)?$"


@dataclass(kw_only=True, slots=True)
class SecretRef:
    """A Secret in the job's namespace."""

    name: str | None = spec_field(
        "name: the Secret's name.", required=True, max_length=253, pattern=DNS1123_SUBDOMAIN,
        pattern_hint="a Secret name (lowercase letters, digits, '-', '.')")


@dataclass(kw_only=True, slots=True)
class Checkpoint:
    """checkpoint: sharded torch.distributed.checkpoint saves; the trainer resumes from
    the newest complete one by itself."""

    path: str | None = spec_field(
        "path: directory inside the pod where step directories are written.",
        default="/checkpoints", max_length=1024, pattern=r"^/.*$",
        pattern_hint="an absolute path such as /checkpoints")
    interval_steps: int | None = spec_field(
        "intervalSteps: save every N optimizer steps; 0 saves only on SIGTERM and at the end.",
        default=100, minimum=0, maximum=100_000_000)
    keep: int | None = spec_field(
        "keep: how many newest complete checkpoints to keep.", default=3, minimum=1,
        maximum=1000)
    async_: bool | None = spec_field(
        "async: save in the background so training does not stall (uses host memory for "
        "a copy of the state).", default=False, json_name="async")
    claim_name: str | None = spec_field(
        "claimName: a PersistentVolumeClaim (ReadWriteMany for several nodes) mounted at "
        "path. A job that can have more than one pod (maxNodes > 1) and runs the built-in "
        "trainer needs it or uri: only storage every worker reaches can be resumed from. A "
        "single-pod job with neither keeps checkpoints in the pod's emptyDir, lost when the "
        "pod is recreated.", max_length=253, pattern=DNS1123_SUBDOMAIN,
        pattern_hint="a PersistentVolumeClaim name (lowercase letters, digits, '-')")
    uri: str | None = spec_field(
        "uri: an object-store prefix to write checkpoints under instead of a volume: "
        "s3://<bucket>/<prefix> (AWS S3, or an S3-compatible store named by endpoint). "
        "Every worker writes its shards there directly, so a job on several nodes needs no "
        "ReadWriteMany volume. The bucket must exist; give each job a prefix of its own. "
        "Instead of claimName.", max_length=1024, pattern=S3_URI,
        pattern_hint="s3://<bucket>/<prefix>, the bucket 3-63 lowercase letters, digits, '.' or '-' (the "
                     "trainer image speaks S3 only: for Google Cloud Storage use its S3 API, endpoint "
                     "https://storage.googleapis.com)")
    secret_ref: SecretRef | None = spec_field(
        "secretRef: the Secret in the job's namespace with the store's credentials under the "
        "keys AWS SDKs read: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and optionally "
        "AWS_SESSION_TOKEN. They reach the trainer as environment variables of those names "
        "(the operator never reads the Secret) and never appear in status, events or logs. "
        "Unset: whatever identity the node gives the pod. Only with uri.")
    endpoint: str | None = spec_field(
        "endpoint: the URL of an S3-compatible store (MinIO, Ceph RGW, GCS's XML API, ...), "
        "set in the trainer as AWS_ENDPOINT_URL_S3 and reached with path-style requests; "
        "unset = AWS S3. Only with uri.", max_length=1024, pattern=r"^https?://[^/\s?#]+(/[^\s?#]*)?$",
        pattern_hint="http(s)://<host>[:<port>]")
    storage: CheckpointStorageMode | None = spec_field(
        "storage: auto (checkpoints go to uri, else claimName, else the pod's own emptyDir) or "
        "none: the job keeps no checkpoints (no volume, no DISTTRAIN_CHECKPOINT_DIR; the "
        "built-in trainer then restarts from step 0 after any failure). Say none for a job "
        "of your own command that checkpoints elsewhere or not at all.", default="auto")
    evict_grace_seconds: int | None = spec_field(
        "evictGraceSeconds: before the operator stops a running job on purpose (suspend), it "
        "asks the trainer for a checkpoint of the current step (POST /checkpoint, "
        "docs/pod-contract.md) and waits up to this long for it before deleting the pods, "
        "which then still get SIGTERM and their termination grace period (180 s) for an "
        "emergency checkpoint. At most 170, the pods' own SIGTERM budget; 0 skips the request.",
        default=60, minimum=0, maximum=170)


@dataclass(kw_only=True, slots=True)
class Gang:
    """gang: all-or-nothing placement of the workers through a PodGroup."""

    schedule_timeout_seconds: int | None = spec_field(
        "scheduleTimeoutSeconds: how long the gang scheduler lets the first workers wait for "
        "the rest (minNodes in all) before it releases them and tries the gang again later "
        "(the coscheduling PodGroup's scheduleTimeoutSeconds).", default=60, minimum=1, maximum=86400)


@dataclass(kw_only=True, slots=True)
class Scheduling:
    """scheduling: where worker pods may run."""

    scheduler_name: str | None = spec_field(
        "schedulerName: a custom scheduler (e.g. volcano, or a gang scheduler).",
        max_length=253)
    priority_class_name: str | None = spec_field(
        "priorityClassName: PriorityClass of the worker pods.", max_length=253)
    node_selector: dict[str, str] | None = spec_field(
        "nodeSelector: node labels every worker pod requires.", max_items=64)
    tolerations: list[dict[str, Any]] | None = spec_field(
        "tolerations: Kubernetes tolerations of the worker pods (e.g. for GPU taints).",
        max_items=64, free_form=True, k8s=TOLERATION)
    affinity: dict[str, Any] | None = spec_field(
        "affinity: Kubernetes affinity of the worker pods.", free_form=True, k8s=AFFINITY)
    gang: Gang | None = spec_field(
        "gang: place the workers all or nothing, so that no worker holds GPUs while another "
        "cannot be placed. The operator creates a PodGroup owned by the job (minMember = "
        "minNodes): scheduling.x-k8s.io for the coscheduling plugin of scheduler-plugins, or "
        "scheduling.volcano.sh when schedulerName is volcano, and puts every worker in it. "
        "Needs schedulerName: the scheduler that reads PodGroups.")


@dataclass(kw_only=True, slots=True)
class PodMetadata:
    """metadata: labels and annotations added to every worker pod."""

    labels: dict[str, str] | None = spec_field(
        "labels: extra pod labels; disttrain.dev/* and app.kubernetes.io/* keys are "
        "reserved.", max_items=64)
    annotations: dict[str, str] | None = spec_field(
        "annotations: extra pod annotations.", max_items=64)


@dataclass(kw_only=True, slots=True)
class PodTemplate:
    """podTemplate: merged into every worker pod after disttrain's own settings."""

    metadata: PodMetadata | None = spec_field("metadata: labels and annotations.")
    spec: dict[str, Any] | None = spec_field(
        "spec: a partial PodSpec merged into each worker pod: maps are merged, the "
        "trainer container (name trainer) is merged by name, other containers, volumes "
        "and lists are appended; a null is no setting (it removes nothing disttrain sets). "
        "Fields disttrain owns (command, PET_* env, restartPolicy, hostname, subdomain) cannot be overridden. Fields that leave the container's "
        "sandbox are refused unless the operator's pod policy allows them "
        "(docs/security.md). `kubectl explain pod.spec` documents the fields below this level.",
        free_form=True, k8s=POD_SPEC, k8s_partial=True, k8s_description_depth=1)


@dataclass(kw_only=True, slots=True)
class Metrics:
    """metrics: the trainer's Prometheus endpoint on every worker."""

    port: int | None = spec_field(
        "port: serves /metrics, /healthz and /status on local rank 0 of each worker.",
        default=9400, minimum=1, maximum=65535)


@dataclass(kw_only=True, slots=True)
class DistributedTrainingSpec:
    """spec: the desired training job."""

    image: str | None = spec_field(
        "image: container image holding torch and the trainer (or your script). Unset: the "
        "operator's trainer image (the chart's trainerImage; " + DEFAULT_IMAGE + " unless your "
        "platform set another), kept in status.resolved.image for the job's life.",
        max_length=1024, immutable_while_running=True)
    image_pull_policy: PullPolicy | None = spec_field(
        "imagePullPolicy: Always, IfNotPresent or Never.", default="IfNotPresent")
    trainer: TrainerSpec | None = spec_field(
        "trainer: builtin (the shipped trainer) or command (your script under torchrun). "
        "Unset runs the built-in trainer with its defaults (gpt-nano on the text corpus, "
        "100 steps), and the Validated condition says so.", immutable_while_running=True)
    env: list[EnvVar] | None = spec_field(
        "env: environment variables for every worker container.", max_items=256,
        list_map_keys=("name",), immutable_while_running=True)
    resources: Resources | None = spec_field(
        "resources: cpu and memory requests and limits per node.",
        immutable_while_running=True)
    strategy: Strategy | None = spec_field(
        "strategy: auto (DDP when there is more than one process, else a single process), "
        "ddp, fsdp (FSDP2, fully_shard per block) or fsdp_native (alias of fsdp). "
        "Unset means auto.", immutable_while_running=True)
    mesh: Mesh | None = spec_field(
        "mesh: 2-D FSDP x tensor parallel; needs a fixed size (minNodes = nodes = maxNodes).",
        immutable_while_running=True)
    precision: Precision | None = spec_field(
        "precision: bf16-mixed, 16-mixed (CUDA only, with a gradient scaler) or 32. "
        "Unset means bf16-mixed on GPUs and 32 on CPU.", immutable_while_running=True)
    accumulate_grad_batches: int | None = spec_field(
        "accumulateGradBatches: micro-batches per optimizer step.", default=1, minimum=1,
        maximum=4096, maximum_reason="more micro-batches per step only slows the step; raise "
        "batchSize or the world size instead", immutable_while_running=True)
    nodes: int | None = spec_field(
        "nodes: desired number of worker pods (one torchrun agent each). Changing it "
        "(also through kubectl scale) adds or removes workers within minNodes..maxNodes.",
        default=1, minimum=1, maximum=MAX_NODES, maximum_reason=MAX_NODES_REASON)
    min_nodes: int | None = spec_field(
        "minNodes: fewest workers training may continue with (torchrun --nnodes=min:max). "
        "Defaults to nodes.", minimum=1, maximum=MAX_NODES, maximum_reason=MAX_NODES_REASON,
        immutable_while_running=True)
    max_nodes: int | None = spec_field(
        "maxNodes: most workers the job may grow to. Defaults to nodes.", minimum=1,
        maximum=MAX_NODES, maximum_reason=MAX_NODES_REASON, immutable_while_running=True)
    gpus_per_node: int | None = spec_field(
        "gpusPerNode: GPUs requested by each worker pod; 0 trains on CPU with gloo.",
        default=0, minimum=0, maximum=MAX_GPUS_PER_NODE,
        maximum_reason="no machine has more GPUs; the count is per worker pod, not per job",
        immutable_while_running=True)
    gpu_resource_name: str | None = spec_field(
        "gpuResourceName: the extended resource that counts GPUs.", default="nvidia.com/gpu",
        max_length=253, pattern=RESOURCE_NAME, pattern_hint="e.g. nvidia.com/gpu or amd.com/gpu",
        immutable_while_running=True)
    nproc_per_node: IntOrString | None = spec_field(
        "nprocPerNode: processes per worker pod, an integer >= 1 or auto "
        "(= gpusPerNode, or 1 on CPU).", default="auto", immutable_while_running=True)
    rendezvous: Rendezvous | None = spec_field(
        "rendezvous: torchrun rendezvous settings.", default={},
        immutable_while_running=True)
    max_restarts: int | None = spec_field(
        "maxRestarts: how often torchrun restarts the workers inside a pod (after a "
        "worker crash or a membership change) before the pod fails; 0: the first crash fails "
        "the pod.", default=3,
        minimum=0, maximum=1000, immutable_while_running=True)
    backoff_limit: int | None = spec_field(
        "backoffLimit: how often the operator recreates failed worker pods before the "
        "job fails; 0: the first failed pod fails the job. Evicted or preempted pods do not "
        "count.", default=6, minimum=0,
        maximum=1000)
    checkpoint: Checkpoint | None = spec_field(
        "checkpoint: sharded checkpoints and automatic resume.", default={},
        immutable_while_running=True)
    failure_policy: FailurePolicy | None = spec_field(
        "failurePolicy: when a lost node counts as a failure.", default={})
    suspend: bool | None = spec_field(
        "suspend: true deletes the worker pods and keeps the job; "
        "false resumes it from the newest checkpoint.", default=False)
    active_deadline_seconds: int | None = spec_field(
        "activeDeadlineSeconds: fail the job after this long running (suspended time "
        "does not count).", minimum=1, maximum=2**31 - 1)
    ttl_seconds_after_finished: int | None = spec_field(
        "ttlSecondsAfterFinished: delete the job (and its pods) this long after it "
        "succeeded or failed; 0 deletes it as soon as it finishes. Unset: kept.", minimum=0, maximum=2**31 - 1)
    clean_pod_policy: CleanPodPolicy | None = spec_field(
        "cleanPodPolicy: which pods to delete when the job finishes: All, Running "
        "(pods still running; keeps finished ones for their logs) or None.",
        default="Running")
    scheduling: Scheduling | None = spec_field(
        "scheduling: scheduler, priority, node selection.", immutable_while_running=True)
    pod_template: PodTemplate | None = spec_field(
        "podTemplate: metadata and a partial pod spec merged into every worker pod.",
        immutable_while_running=True)
    metrics: Metrics | None = spec_field(
        "metrics: the trainer's metrics endpoint.", default={},
        immutable_while_running=True)


# ---- status -------------------------------------------------------------------------


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
        "lastStepTime: when the operator last saw step advance (RFC 3339): how long a job has "
        "been stalled, and what failurePolicy.hangSeconds is measured from.")


FailureCause = Literal["NodeLost", "Evicted", "Preempted", "OOMKilled", "ExitCode", "Hung",
                       "ImagePullBackOff", "Unschedulable", "PodsReadyTimeout", "QueueEvicted", "NodeDrain",
                       "NodeUnhealthy"]


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
        "it moved, checkpoint first, and the node is avoided).")
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


StopReason = Literal["Suspended", "Evicted", "NodeDrain", "NodeUnhealthy"]
Handshake = Literal["Requested", "Checkpointed", "TimedOut", "NotSupported", "NotRunning", "Off", "Cancelled"]


@dataclass(kw_only=True, slots=True)
class Eviction:
    """eviction: the job's latest stop on purpose and the checkpoint-then-evict handshake
    before it (docs/operations.md)."""

    reason: StopReason | None = spec_field(
        "reason: Suspended (spec.suspend); Evicted (Kueue evicted the job's Workload: a "
        "preemption, a deactivation, a stopped queue; the message says which); NodeDrain (a "
        "worker's node was cordoned: the workers were moved to other nodes); NodeUnhealthy (a "
        "worker's node reported a health problem while Ready: the workers were moved off it).")
    request_time: str | None = spec_field("requestTime: when the operator decided to stop the job (RFC 3339).")
    step: int | None = spec_field("step: the trainer's step when the operator asked for a checkpoint.")
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

    ratio: float | None = spec_field("ratio: productiveSeconds / all four, 0 to 1.")
    productive_seconds: float | None = spec_field(
        "productiveSeconds: worker-seconds Running whose steps count (the steps done again after a "
        "failure are moved to lostSeconds).")
    lost_seconds: float | None = spec_field(
        "lostSeconds: worker-seconds of steps done again after failures (status.failures' "
        "stepsLost x the step time).")
    restarting_seconds: float | None = spec_field(
        "restartingSeconds: worker-seconds in phase Restarting (pods not all back).")
    waiting_seconds: float | None = spec_field("waitingSeconds: worker-seconds Pending (scheduling, image pulls).")
    update_time: str | None = spec_field("updateTime: when these were last added up (RFC 3339).")


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


# ---- the parsed object --------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class Job:
    """A parsed DistributedTraining: the metadata we use plus the typed spec."""

    name: str
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: DistributedTrainingSpec
