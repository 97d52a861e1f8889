"""The pod contract (docs/pod-contract.md) as data, read by every side of it: the API's
defaults for the built-in trainer, the renderer that sets its variables, the trainer that
reads them (trainer/disttrain_trainer/config.py), and both ends of the `/status` report
(the trainer's StatusSink writes it, api/report.py reads it). Stated once here, so the
sides cannot drift apart again (the trainer once trained 200 steps where the API said
100). Standard library only: the trainer image imports it without the operator's stack."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

PREFIX = "DISTTRAIN_"


@dataclass(frozen=True)
class Setting:
    env: str  # the variable
    default: Any  # what the trainer assumes when the variable is unset; where the API has the
    # same default (the builtin settings, checkpoint.keep) it reads it from here
    always: bool = True  # False: set only away from its default (a new variable in the pod
    # template changes its hash, and an upgraded operator would replace every running worker)


# The trainer's variables (docs/pod-contract.md, "Trainer"), in the order the pod sets them.
JOB_NAME = Setting("DISTTRAIN_JOB_NAME", "")  # also how code tells it runs in a disttrain pod
NAMESPACE = Setting("DISTTRAIN_NAMESPACE", "")
STRATEGY = Setting("DISTTRAIN_STRATEGY", "auto")
MESH_FSDP = Setting("DISTTRAIN_MESH_FSDP", 0)
MESH_TP = Setting("DISTTRAIN_MESH_TP", 0)
PRECISION = Setting("DISTTRAIN_PRECISION", "32")
ACCUMULATE_GRAD_BATCHES = Setting("DISTTRAIN_ACCUMULATE_GRAD_BATCHES", 1)
GPUS_PER_NODE = Setting("DISTTRAIN_GPUS_PER_NODE", 0)
MODEL = Setting("DISTTRAIN_MODEL", "gpt-nano")
DATASET = Setting("DISTTRAIN_DATASET", "text")  # the API resolves it from the model (dataset_for)
STEPS = Setting("DISTTRAIN_STEPS", 100)
BATCH_SIZE = Setting("DISTTRAIN_BATCH_SIZE", 8)
LEARNING_RATE = Setting("DISTTRAIN_LEARNING_RATE", 0.0003)
SEED = Setting("DISTTRAIN_SEED", 1234)
EVAL_FRACTION = Setting("DISTTRAIN_EVAL_FRACTION", 0.1, always=False)
EVAL_FOLD = Setting("DISTTRAIN_EVAL_FOLD", 0, always=False)
EVAL_INTERVAL_STEPS = Setting("DISTTRAIN_EVAL_INTERVAL_STEPS", 0, always=False)
CHECKPOINT_DIR = Setting("DISTTRAIN_CHECKPOINT_DIR", "")  # empty: no checkpoints
CHECKPOINT_INTERVAL_STEPS = Setting("DISTTRAIN_CHECKPOINT_INTERVAL_STEPS", 0)  # unset: only on SIGTERM and at the end
CHECKPOINT_KEEP = Setting("DISTTRAIN_CHECKPOINT_KEEP", 3)
CHECKPOINT_ASYNC = Setting("DISTTRAIN_CHECKPOINT_ASYNC", False)
METRICS_PORT = Setting("DISTTRAIN_METRICS_PORT", 0)  # unset: no server (the API's default port is 9400)
TERMINATION_LOG = Setting("DISTTRAIN_TERMINATION_LOG", "")
POD_NAME = Setting("DISTTRAIN_POD_NAME", "")  # Downward API: metadata.name
CONTROL_TOKEN = Setting("DISTTRAIN_CONTROL_TOKEN", "")  # Downward API: metadata.uid

# spec.trainer.builtin's fields (the API model's names) -> their variable and default.
# DATASET is not among them: its default depends on the model, so the API resolves it.
BUILTIN: dict[str, Setting] = {
    "model": MODEL, "steps": STEPS, "batch_size": BATCH_SIZE, "learning_rate": LEARNING_RATE, "seed": SEED,
    "eval_fraction": EVAL_FRACTION, "eval_fold": EVAL_FOLD, "eval_interval_steps": EVAL_INTERVAL_STEPS,
}

# The built-in trainer's models, and the datasets each trains on, its default first: the
# API's enums, the trainer's choices, and what its registries (models/, data/) build.
MODEL_DATASETS: dict[str, tuple[str, ...]] = {
    "gpt-nano": ("text",),
    "gpt-small": ("text",),
    "mlp": ("synthetic-regression", "synthetic-classification"),
}
MODELS: tuple[str, ...] = tuple(MODEL_DATASETS)
DATASETS: tuple[str, ...] = tuple(dict.fromkeys(d for names in MODEL_DATASETS.values() for d in names))
Model = Literal[MODELS]  # type: ignore[valid-type]  # Literal["gpt-nano", "gpt-small", "mlp"]
Dataset = Literal[DATASETS]  # type: ignore[valid-type]  # Literal["text", "synthetic-regression", ...]


def dataset_for(model: str | None) -> str:
    """The dataset a model trains on when none is named."""
    return MODEL_DATASETS.get(model, (DATASET.default,))[0]


# A guardrail both sides apply (api/defaults.py to the spec, the trainer to the devices it
# finds), worded once so users see one story.
DDP_SINGLE_DEVICE = "DDP requires multiple devices, falling back to single-device training"



# The keys of the `/status` document (and of the termination message) a trainer writes:
# the built-in trainer and disttrain.train's session write them, the operator reads
# them (api/report.py), docs/pod-contract.md describes each.
class Key:
    """The report's keys, as StatusSink writes them and parse_report reads them."""

    STEP = "step"
    TOTAL_STEPS = "totalSteps"
    LOSS = "loss"
    GRAD_NORM = "gradNorm"
    SAMPLES_PER_SECOND = "samplesPerSecond"
    TOKENS_PER_SECOND = "tokensPerSecond"
    STEP_SECONDS = "stepSeconds"
    FLOPS_PER_TOKEN = "flopsPerToken"
    MFU = "mfu"
    WORLD_SIZE = "worldSize"
    CHECKPOINT = "checkpoint"
    CHECKPOINT_SAVE_SECONDS = "checkpointSaveSeconds"
    CHECKPOINT_BLOCKED_SECONDS = "checkpointBlockedSeconds"
    LAST_UPDATE_TIME = "lastUpdateTime"
    OUTCOME = "outcome"
    EVAL_LOSS = "evalLoss"
    EVAL_STEP = "evalStep"
    EVAL_METRICS = "evalMetrics"
    EVAL_HISTORY = "evalHistory"
    HELD_AT_STEP = "heldAtStep"
    FRAMEWORK = "framework"
    WORKER_TIMES = "workerTimes"


STATUS_KEYS: tuple[str, ...] = tuple(v for k, v in vars(Key).items() if k.isupper())

# The report's `outcome` at the end (None while training).
FINISHED = "Finished"        # every step done: the only outcome that can make a job Succeeded
INTERRUPTED = "Interrupted"  # stopped on a signal (its own or a peer's) after a checkpoint

# A named evaluation metric (accuracy, val_f1, eval/bleu): what the report's evalMetrics
# carries and a sweep's objective.metric may name besides evalLoss. Bounded in count and
# spelling, as everything a pod says.
METRIC_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]{0,63}$")
METRIC_NAME_RULE = "1-64 letters, digits, '_', '.', '/' or '-', starting with a letter or '_'"
MAX_METRICS = 16

# workerTimes: the newest report windows' compute and step time per worker, oldest first,
# [[windowEndStep, [[workerIndex, computeSeconds, stepSeconds], ...]], ...]; the trainer keeps
# this many windows and failurePolicy.stragglerWindows may ask for at most as many.
WORKER_TIMES_WINDOWS = 8
