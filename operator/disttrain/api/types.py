"""The DistributedTraining API (`disttrain.dev/v1alpha1`) as typed dataclasses.

Every field's description, default and bounds live here and nowhere else: the CRD
(`disttrain crd`), `kubectl explain`, the offline validator and the defaulter all read
them. Attribute names are snake_case; the Kubernetes names are their camelCase.
Unset fields are None until `api.defaults` fills them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from disttrain.api.k8s import ENV_VAR_SOURCE, POD_SPEC
from disttrain.api.limits import MAX_GPUS_PER_NODE, MAX_NODES, MAX_NODES_REASON, MAX_NPROC_PER_NODE
from disttrain.api.meta import DNS1123_SUBDOMAIN, RESOURCE_NAME, spec_field
# Where and on what the workers run: the parts of the spec the placement integrations read.
from disttrain.api.placement import LABEL_KEY, ComputeDomain, ComputeDomainChannels, Devices, Gang, Scheduling, Topology

__all__ = ["MAX_GPUS_PER_NODE", "MAX_NODES", "MAX_NODES_REASON", "MAX_NPROC_PER_NODE", "LABEL_KEY", "ComputeDomain",
           "ComputeDomainChannels", "Devices", "Gang", "Scheduling", "Topology"]
from disttrain.api.pod_contract import BUILTIN, CHECKPOINT_KEEP, WORKER_TIMES_WINDOWS, Dataset, Model

GROUP = "disttrain.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "DistributedTraining"
PLURAL = "distributedtrainings"
SINGULAR = "distributedtraining"
SHORT_NAMES = ["dt", "dtrain"]

DEFAULT_IMAGE = "ghcr.io/disttrain/trainer:0.1.0"

Strategy = Literal["auto", "ddp", "fsdp", "fsdp_native"]
Precision = Literal["bf16-mixed", "16-mixed", "32"]
CleanPodPolicy = Literal["All", "Running", "None"]
PullPolicy = Literal["Always", "IfNotPresent", "Never"]
RendezvousBackend = Literal["c10d"]
CheckpointStorageMode = Literal["auto", "none"]

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
StragglerAction = Literal["Report", "Replace", "Off"]
TemplateKind = Literal["ClusterTrainingTemplate", "TrainingTemplate"]


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
    stragglers: StragglerAction | None = spec_field(
        "stragglers: what a straggler gets, a worker whose compute time per step stays over "
        "stragglerRatio x the other workers' median for stragglerWindows report windows in a row "
        "(the trainer reports it: the built-in trainer, and your own code through disttrain.train). "
        "Report: the Straggler condition, an Event and a metric name the worker, its node and the "
        "ratio. Replace: also move the workers off its node, checkpoint first (a failure entry with "
        "cause Straggler, which spends no backoffLimit; the node is then avoided). Off: not watched.",
        default="Report")
    straggler_ratio: float | None = spec_field(
        "stragglerRatio: how many times the other workers' median compute time per step a "
        "worker's must exceed to count as slow in a window.", default=1.3, minimum=1.05, maximum=100)
    straggler_windows: int | None = spec_field(
        "stragglerWindows: how many report windows in a row (each builtin.logEvery steps, or "
        "your Session's log_every) a worker must be slow to be a straggler: one slow window is "
        "often a data-loader hiccup or a checkpoint.", default=5, minimum=1,
        maximum=WORKER_TIMES_WINDOWS)


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
        "keep: how many newest complete checkpoints to keep.", default=CHECKPOINT_KEEP.default, minimum=1,
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
class TemplateRef:
    """templateRef: the training template the job is resolved against (docs/platform.md)."""

    kind: TemplateKind | None = spec_field(
        "kind: ClusterTrainingTemplate (the cluster's) or TrainingTemplate (the job's namespace's).",
        default="ClusterTrainingTemplate")
    name: str | None = spec_field(
        "name: the template's name.", required=True, max_length=253, pattern=DNS1123_SUBDOMAIN,
        pattern_hint="a template's name (lowercase letters, digits, '-' and '.')")


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
    devices: Devices | None = spec_field(
        "devices: the workers' GPUs as DRA devices (a DeviceClass, a count, selectors) instead of "
        "gpusPerNode; set one of the two.", immutable_while_running=True)
    compute_domain: ComputeDomain | None = spec_field(
        "computeDomain: multi-node NVLink between the workers through NVIDIA's ComputeDomain "
        "(its DRA driver): the job owns one, and each worker claims its channel.", immutable_while_running=True)
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
    template_ref: TemplateRef | None = spec_field(
        "templateRef: a training template whose settings the job takes: its defaults < the job's own "
        "spec < its enforced settings (docs/platform.md). Unset: the namespace's TrainingTemplate "
        "named default, if there is one. The job keeps what it was resolved against (status.template) "
        "for its whole life: editing or deleting the template changes no job that already runs.",
        immutable_while_running=True)

    @property
    def gpus(self) -> int:
        """GPUs per worker, however they are asked for: DRA devices or the extended resource."""
        if self.devices is not None and self.devices.count:
            return self.devices.count
        return self.gpus_per_node or 0


# ---- status -------------------------------------------------------------------------


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
