"""The pod contract (docs/pod-contract.md) as data, read by every side of it: the API's
defaults for the built-in trainer, the renderer that sets its variables, the trainer that
reads them (trainer/disttrain_trainer/config.py), and both ends of the `/status` report
(the trainer's StatusSink writes it, api/report.py reads it). Stated once here, so the
sides cannot drift apart again (the trainer once trained 200 steps where the API said
100). Standard library only: the trainer image imports it without the operator's stack."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PREFIX = "DISTTRAIN_"


@dataclass(frozen=True)
class Setting:
    env: str  # the variable
    default: Any  # the API's default and what the trainer assumes when the variable is unset
    always: bool = True  # False: set only away from its default (a new variable in the pod
    # template changes its hash, and an upgraded operator would replace every running worker)

    @property
    def name(self) -> str:
        """The variable without PREFIX, as the trainer's reader names it."""
        return self.env.removeprefix(PREFIX)


# spec.trainer.builtin's fields (the API model's names) -> their variable and default.
BUILTIN: dict[str, Setting] = {
    "model": Setting("DISTTRAIN_MODEL", "gpt-nano"),
    "steps": Setting("DISTTRAIN_STEPS", 100),
    "batch_size": Setting("DISTTRAIN_BATCH_SIZE", 8),
    "learning_rate": Setting("DISTTRAIN_LEARNING_RATE", 0.0003),
    "seed": Setting("DISTTRAIN_SEED", 1234),
    "eval_fraction": Setting("DISTTRAIN_EVAL_FRACTION", 0.1, always=False),
    "eval_fold": Setting("DISTTRAIN_EVAL_FOLD", 0, always=False),
    "eval_interval_steps": Setting("DISTTRAIN_EVAL_INTERVAL_STEPS", 0, always=False),
}

# The keys of the `/status` document (and of the termination message) a trainer writes:
# the built-in trainer and disttrain.train's session write them, the operator reads
# them (api/report.py), docs/pod-contract.md describes each.
STATUS_KEYS: tuple[str, ...] = (
    "step", "totalSteps", "loss", "gradNorm", "samplesPerSecond", "tokensPerSecond", "stepSeconds",
    "flopsPerToken", "mfu", "worldSize", "checkpoint", "checkpointSaveSeconds", "checkpointBlockedSeconds",
    "lastUpdateTime", "outcome", "evalLoss", "evalStep", "evalMetrics", "evalHistory", "heldAtStep", "framework",
    "workerTimes",
)

# workerTimes: the newest report windows' compute and step time per worker, oldest first,
# [[windowEndStep, [[workerIndex, computeSeconds, stepSeconds], ...]], ...]; the trainer keeps
# this many windows and failurePolicy.stragglerWindows may ask for at most as many.
WORKER_TIMES_WINDOWS = 8
