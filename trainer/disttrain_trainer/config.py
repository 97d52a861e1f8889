"""Typed configuration of the trainer's components.

`Config.from_env()` is the only place that reads the `DISTTRAIN_*` variables of the pod
contract (docs/pod-contract.md). Everything else receives these dataclasses.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import disttrain.api.pod_contract as pc
from disttrain.api.pod_contract import DDP_SINGLE_DEVICE, MODEL_DATASETS, Setting
from disttrain.api.pod_contract import Dataset as DatasetName
from disttrain.api.pod_contract import Model as ModelName

Strategy = Literal["auto", "none", "ddp", "fsdp"]
Precision = Literal["bf16-mixed", "16-mixed", "32"]

# Guardrail messages, worded like the operator's validator so users see one story (the one
# both sides give, DDP_SINGLE_DEVICE, is the pod contract's).
DEVICES_CLAMPED = (
    "{requested} devices per node requested but only {visible} visible, clamping to {visible}"
)
FP16_ON_CPU = "16-mixed needs a CUDA device for its gradient scaler, falling back to 32 on CPU"


def _check_choice(name: str, value: str, literal: object) -> None:
    allowed = get_args(literal)
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(allowed)}")


@dataclass(frozen=True, slots=True)
class _Env:
    """Reads a setting's variable; an empty value is its default; a bad one says which variable."""

    env: Mapping[str, str]

    def get(self, setting: Setting) -> Any:
        value = self.env.get(setting.env, "")
        return value if value != "" else setting.default

    def num(self, setting: Setting, cast: type = int, what: str = "an integer") -> Any:
        raw = str(self.get(setting))
        try:
            return cast(raw)
        except ValueError:
            raise ValueError(f"{setting.env}={raw!r} is not {what}") from None

    def real(self, setting: Setting) -> float:
        return self.num(setting, float, "a number")

    def flag(self, setting: Setting) -> bool:
        raw = str(self.get(setting)).lower()
        if raw not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(f"{setting.env}={raw!r} is not true/false")
        return raw in ("true", "1", "yes")


@dataclass(kw_only=True, slots=True)
class ModelConfig:
    name: ModelName = pc.MODEL.default
    """name: the built-in model: gpt-nano (~1M params), gpt-small (~20M) or mlp."""

    def __post_init__(self) -> None:
        _check_choice("model", self.name, ModelName)


@dataclass(kw_only=True, slots=True)
class DataConfig:
    dataset: DatasetName = pc.DATASET.default
    """dataset: built-in dataset; nothing is downloaded."""
    batch_size: int = pc.BATCH_SIZE.default
    """batch_size: micro-batch per data-parallel rank (samples)."""
    seq_len: int = 0
    """seq_len: tokens per sample for the text dataset; 0 = the model's context length."""
    seed: int = pc.SEED.default
    """seed: shuffling seed; every epoch reshuffles with seed + epoch."""

    def __post_init__(self) -> None:
        _check_choice("dataset", self.dataset, DatasetName)
        if self.batch_size < 1:
            raise ValueError(f"batch_size={self.batch_size} must be >= 1")
        if self.seq_len < 0:
            raise ValueError(f"seq_len={self.seq_len} must be >= 0")


@dataclass(kw_only=True, slots=True)
class ParallelConfig:
    strategy: Strategy = pc.STRATEGY.default
    """strategy: auto (DDP when world > 1, else single device), none, ddp or fsdp (FSDP2)."""
    mesh_fsdp: int = pc.MESH_FSDP.default
    """mesh_fsdp: data-parallel (FSDP) degree of a 2-D mesh; 0 = no mesh."""
    mesh_tp: int = pc.MESH_TP.default
    """mesh_tp: tensor-parallel degree of a 2-D mesh; 0 = no mesh."""
    precision: Precision = pc.PRECISION.default
    """precision: bf16-mixed, 16-mixed (gradient scaler, CUDA only) or 32."""
    gpus_per_node: int = pc.GPUS_PER_NODE.default
    """gpus_per_node: GPUs requested per node; 0 = CPU with gloo."""

    def __post_init__(self) -> None:
        if self.strategy == "fsdp_native":  # type: ignore[comparison-overlap]
            self.strategy = "fsdp"
        _check_choice("strategy", self.strategy, Strategy)
        _check_choice("precision", self.precision, Precision)
        if (self.mesh_fsdp == 0) != (self.mesh_tp == 0):
            raise ValueError(
                f"mesh fsdp={self.mesh_fsdp} tp={self.mesh_tp}: set both degrees or neither"
            )
        if self.mesh_fsdp < 0 or self.mesh_tp < 0:
            raise ValueError("mesh degrees must be >= 0")
        if self.gpus_per_node < 0:
            raise ValueError(f"gpus_per_node={self.gpus_per_node} must be >= 0")

    @property
    def has_mesh(self) -> bool:
        return self.mesh_fsdp > 0


@dataclass(kw_only=True, slots=True)
class TrainConfig:
    steps: int = pc.STEPS.default
    """steps: optimizer steps in total (across restarts)."""
    learning_rate: float = pc.LEARNING_RATE.default
    """learning_rate: peak AdamW learning rate."""
    warmup_steps: int = 0
    """warmup_steps: linear warm-up steps; 0 = min(10, steps // 10)."""
    weight_decay: float = 0.0
    """weight_decay: AdamW decoupled weight decay."""
    accumulate_grad_batches: int = pc.ACCUMULATE_GRAD_BATCHES.default
    """accumulate_grad_batches: micro-batches per optimizer step."""
    grad_clip: float = 1.0
    """grad_clip: max global gradient L2 norm; 0 = no clipping."""
    log_every: int = 10
    """log_every: steps between loss all-reduces / log lines (the last step always logs)."""
    seed: int = pc.SEED.default
    """seed: parameter-initialisation seed; identical for every strategy."""

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ValueError(f"steps={self.steps} must be >= 0")
        if self.accumulate_grad_batches < 1:
            raise ValueError(
                f"accumulate_grad_batches={self.accumulate_grad_batches} must be >= 1"
            )
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate={self.learning_rate} must be > 0")
        if self.log_every < 1:
            raise ValueError(f"log_every={self.log_every} must be >= 1")
        if self.grad_clip < 0:
            raise ValueError(f"grad_clip={self.grad_clip} must be >= 0")

    @property
    def effective_warmup(self) -> int:
        return self.warmup_steps or min(10, self.steps // 10)


@dataclass(kw_only=True, slots=True)
class CheckpointConfig:
    dir: str = pc.CHECKPOINT_DIR.default
    """dir: folder of step directories; empty = checkpointing off."""
    interval_steps: int = pc.CHECKPOINT_INTERVAL_STEPS.default
    """interval_steps: save every N steps; 0 = only on SIGTERM and at the end."""
    keep: int = pc.CHECKPOINT_KEEP.default
    """keep: newest N complete checkpoints kept; older ones are deleted."""
    async_save: bool = pc.CHECKPOINT_ASYNC.default
    """async_save: write in the background (dcp.async_save) while training continues."""

    def __post_init__(self) -> None:
        if self.interval_steps < 0:
            raise ValueError(f"checkpoint interval_steps={self.interval_steps} must be >= 0")
        if self.keep < 1:
            raise ValueError(f"checkpoint keep={self.keep} must be >= 1")

    @property
    def enabled(self) -> bool:
        return bool(self.dir)


@dataclass(kw_only=True, slots=True)
class EvalConfig:
    fraction: float = pc.EVAL_FRACTION.default
    """fraction: share of the dataset held out for evaluation (a contiguous block, never
    trained on); 0 = no evaluation."""
    fold: int = pc.EVAL_FOLD.default
    """fold: which block is held out, 0 .. 1/fraction - 1 (k-fold: fraction 1/k, fold i)."""
    interval_steps: int = pc.EVAL_INTERVAL_STEPS.default
    """interval_steps: evaluate every N steps as well as at the end; 0 = only at the end."""

    def __post_init__(self) -> None:
        if not 0 <= self.fraction <= 0.5:
            raise ValueError(f"eval fraction={self.fraction} must be within 0..0.5")
        if self.interval_steps < 0:
            raise ValueError(f"eval interval_steps={self.interval_steps} must be >= 0")
        if self.fold < 0 or (self.fraction > 0 and self.fold >= self.folds):
            raise ValueError(f"eval fold={self.fold} must be within 0..{max(0, self.folds - 1)} "
                             f"for fraction {self.fraction}")

    @property
    def enabled(self) -> bool:
        return self.fraction > 0

    @property
    def folds(self) -> int:
        """How many disjoint held-out blocks of this size the data has."""
        return int(1 / self.fraction + 1e-9) if self.fraction > 0 else 0


@dataclass(kw_only=True, slots=True)
class MetricsConfig:
    port: int = pc.METRICS_PORT.default
    """port: HTTP port of /metrics, /healthz, /status on local rank 0; 0 = off."""
    job: str = pc.JOB_NAME.default
    """job: the DistributedTraining's name (metric label)."""
    namespace: str = pc.NAMESPACE.default
    """namespace: its namespace (metric label)."""
    pod: str = pc.POD_NAME.default
    """pod: this pod's name (metric label)."""
    termination_log: str = pc.TERMINATION_LOG.default
    """termination_log: file for the final report (the container's terminationMessagePath,
    read by the operator when the pod ends); empty = none."""
    control_token: str = pc.CONTROL_TOKEN.default
    """control_token: the bearer token of POST /checkpoint (the operator's
    checkpoint-then-evict request); empty = no /checkpoint."""
    job_uid: str = ""
    """job_uid: the job's uid (torchrun's rendezvous id, PET_RDZV_ID): ties a job's tracking runs together."""
    mlflow_tracking_uri: str = ""
    """mlflow_tracking_uri: MLflow's own MLFLOW_TRACKING_URI; rank 0 logs a run there (tracking.py)."""
    mlflow_experiment: str = ""
    """mlflow_experiment: MLflow's own MLFLOW_EXPERIMENT_NAME; empty = the job's namespace."""
    tensorboard_dir: str = ""
    """tensorboard_dir: TENSORBOARD_LOG_DIR; rank 0 writes a run's event files under it."""

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"metrics port={self.port} must be within 0..65535")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> MetricsConfig:
        """The report's settings of the pod contract: the same for the built-in trainer and
        for a script of the user's (session.py)."""
        e = _Env(os.environ if env is None else env)
        return cls(
            port=e.num(pc.METRICS_PORT),
            job=e.get(pc.JOB_NAME),
            namespace=e.get(pc.NAMESPACE),
            pod=e.get(pc.POD_NAME),
            termination_log=e.get(pc.TERMINATION_LOG),
            control_token=e.get(pc.CONTROL_TOKEN),
            # The trackers' own variables, which a job sets in spec.env (DISTTRAIN_* is the operator's).
            job_uid=e.env.get("PET_RDZV_ID", ""),
            mlflow_tracking_uri=e.env.get("MLFLOW_TRACKING_URI", ""),
            mlflow_experiment=e.env.get("MLFLOW_EXPERIMENT_NAME", ""),
            tensorboard_dir=e.env.get("TENSORBOARD_LOG_DIR", ""),
        )


@dataclass(kw_only=True, slots=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    """model: which built-in model."""
    data: DataConfig = field(default_factory=DataConfig)
    """data: dataset and micro-batch."""
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    """parallel: strategy, mesh, precision, devices."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """train: optimisation loop."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """checkpoint: DCP checkpoints."""
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    """metrics: Prometheus / status server."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """eval: held-out split and evaluation schedule."""
    test_hang_at_step: int = 0
    """test_hang_at_step: test hook (faults.py): a rank hangs inside this step, once; 0: never."""
    test_hang_rank: int = 1
    """test_hang_rank: test hook: the global rank that hangs."""
    test_slow_rank: int = -1
    """test_slow_rank: test hook (faults.py): this global rank computes slower; -1: none."""
    test_slow_factor: float = 2.0
    """test_slow_factor: test hook: how many times slower that rank's compute is."""

    def __post_init__(self) -> None:
        allowed = MODEL_DATASETS[self.model.name]
        if self.data.dataset not in allowed:
            raise ValueError(
                f"model {self.model.name!r} cannot train on dataset {self.data.dataset!r}; "
                f"use {' or '.join(allowed)}"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Config:
        """Build the configuration from the pod contract's DISTTRAIN_* variables."""
        e = _Env(os.environ if env is None else env)
        get, num, flag = e.get, e.num, e.flag

        seed = num(pc.SEED)
        return cls(
            model=ModelConfig(name=get(pc.MODEL)),
            data=DataConfig(dataset=get(pc.DATASET), batch_size=num(pc.BATCH_SIZE), seed=seed),
            parallel=ParallelConfig(
                strategy=get(pc.STRATEGY),
                mesh_fsdp=num(pc.MESH_FSDP),
                mesh_tp=num(pc.MESH_TP),
                precision=get(pc.PRECISION),
                gpus_per_node=num(pc.GPUS_PER_NODE),
            ),
            train=TrainConfig(
                steps=num(pc.STEPS),
                learning_rate=e.real(pc.LEARNING_RATE),
                accumulate_grad_batches=num(pc.ACCUMULATE_GRAD_BATCHES),
                seed=seed,
            ),
            checkpoint=CheckpointConfig(
                dir=get(pc.CHECKPOINT_DIR),
                interval_steps=num(pc.CHECKPOINT_INTERVAL_STEPS),
                keep=num(pc.CHECKPOINT_KEEP),
                async_save=flag(pc.CHECKPOINT_ASYNC),
            ),
            metrics=MetricsConfig.from_env(e.env),
            eval=_eval_config(e),
            # Test hooks, named outside DISTTRAIN_* so that a job's spec.env can set them.
            test_hang_at_step=hook_number(e.env, "DT_TEST_HANG_AT_STEP", 0),
            test_hang_rank=hook_number(e.env, "DT_TEST_HANG_RANK", 1),
            test_slow_rank=hook_number(e.env, "DT_TEST_SLOW_RANK", -1),
            test_slow_factor=slow_factor(e.env.get("DT_TEST_SLOW_FACTOR", "") or "2"),
        )


def hook_number(env: Mapping[str, str], name: str, default: int) -> int:
    """A DT_TEST_* hook's number (faults.py)."""
    raw = env.get(name, "") or str(default)
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def slow_stretch(env: Mapping[str, str], rank: int) -> float:
    """The slow-rank test hook for this rank: how many times slower its compute runs (1: not
    slowed), for a Session, which reads no Config."""
    if hook_number(env, "DT_TEST_SLOW_RANK", -1) != rank:
        return 1.0
    return slow_factor(env.get("DT_TEST_SLOW_FACTOR", "") or "2")


def slow_factor(raw: str) -> float:
    """DT_TEST_SLOW_FACTOR (faults.py): a number from 1 to 100."""
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not 1 <= value <= 100:
        raise ValueError(f"DT_TEST_SLOW_FACTOR={raw!r} is not a number from 1 to 100 (how many times slower the "
                         "DT_TEST_SLOW_RANK rank computes)")
    return value


def _eval_config(e: _Env) -> EvalConfig:
    """The built-in trainer's split (DISTTRAIN_EVAL_*); a `disttrain sweep` with kfold gives
    a script's job the fold as SWEEP_FOLD of SWEEP_FOLDS instead (sweep/space.py), which
    run_training honours the same way: block SWEEP_FOLD of size 1/SWEEP_FOLDS held out."""
    interval = e.num(pc.EVAL_INTERVAL_STEPS)
    if not e.env.get(pc.EVAL_FRACTION.env) and e.env.get("SWEEP_FOLDS"):
        raw = (e.env.get("SWEEP_FOLD", ""), e.env["SWEEP_FOLDS"])
        try:
            fold, folds = int(raw[0]), int(raw[1])
        except ValueError:
            fold = folds = -1
        if not (folds >= 2 and 0 <= fold < folds):
            raise ValueError(f"SWEEP_FOLD={raw[0]!r} of SWEEP_FOLDS={raw[1]!r}: want integers with SWEEP_FOLDS >= 2 "
                             "and 0 <= SWEEP_FOLD < SWEEP_FOLDS (disttrain sweep sets them; do not set them yourself)")
        return EvalConfig(fraction=1 / folds, fold=fold, interval_steps=interval)
    return EvalConfig(fraction=e.real(pc.EVAL_FRACTION), fold=e.num(pc.EVAL_FOLD), interval_steps=interval)


@dataclass(kw_only=True, slots=True, frozen=True)
class Resolved:
    """What the parallel config means on the devices this process actually has."""

    strategy: Literal["none", "ddp", "fsdp", "fsdp_tp"]
    device_type: Literal["cpu", "cuda"]
    precision: Precision
    warnings: tuple[str, ...] = ()


def resolve_parallel(cfg: ParallelConfig, *, world_size: int, visible_gpus: int) -> Resolved:
    """Apply the guardrails: auto, DDP on one device, too many GPUs, fp16 on CPU. Pure."""
    warnings: list[str] = []
    gpus = cfg.gpus_per_node
    if gpus > visible_gpus:
        warnings.append(DEVICES_CLAMPED.format(requested=gpus, visible=visible_gpus))
        gpus = visible_gpus
    device_type: Literal["cpu", "cuda"] = "cuda" if gpus > 0 else "cpu"
    precision = cfg.precision
    if precision == "16-mixed" and device_type == "cpu":
        warnings.append(FP16_ON_CPU)
        precision = "32"
    strategy: Literal["none", "ddp", "fsdp", "fsdp_tp"]
    if cfg.has_mesh:
        if cfg.mesh_fsdp * cfg.mesh_tp != world_size:
            raise ValueError(
                f"mesh fsdp={cfg.mesh_fsdp} x tp={cfg.mesh_tp} = {cfg.mesh_fsdp * cfg.mesh_tp} "
                f"must equal the world size {world_size}"
            )
        strategy = "fsdp_tp"
    elif cfg.strategy == "ddp" and world_size == 1:
        warnings.append(DDP_SINGLE_DEVICE)
        strategy = "none"
    elif cfg.strategy == "auto":
        strategy = "ddp" if world_size > 1 else "none"
    else:
        strategy = cfg.strategy  # none | ddp | fsdp
    return Resolved(
        strategy=strategy, device_type=device_type, precision=precision, warnings=tuple(warnings)
    )
