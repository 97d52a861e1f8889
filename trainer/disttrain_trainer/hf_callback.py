"""A Hugging Face Transformers `TrainerCallback` that reports through the session
(session.py): `Trainer(..., callbacks=[DisttrainCallback()])`.

Events map onto the session: every optimizer step (`on_step_end`) is a `Session.step`,
the loss Transformers logs (already averaged over the processes) is the reported loss,
`eval_loss` is the evaluation (with `compute_metrics`' metrics as its named metrics), and
every checkpoint Transformers saves (`on_save`, the `checkpoint-<step>` folder under
`output_dir`) is the job's checkpoint. When the operator
asks for a checkpoint, the callback sets `control.should_save`, so Transformers saves with
its own `_save_checkpoint` (and `trainer.train(resume_from_checkpoint=True)` resumes from
it); every rank then holds in `on_save` until the pods go. SIGTERM saves and stops the same
way. Outside a disttrain pod it does nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import transformers
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from disttrain_trainer.instrument.hooks import accelerate_on_cpu
from disttrain_trainer.metrics import eval_metrics
from disttrain_trainer.session import Session

log = logging.getLogger("disttrain_trainer")

# Imported before the script builds its TrainingArguments (Accelerate reads it then).
accelerate_on_cpu()

# Transformers' checkpoint folder prefix (transformers.trainer_utils.PREFIX_CHECKPOINT_DIR).
CHECKPOINT_PREFIX = "checkpoint"
# Trainer.evaluate's metric_key_prefix, and what it reports besides compute_metrics' names.
EVAL_PREFIX = "eval_"
NOT_METRICS = frozenset({"eval_loss", "eval_runtime", "eval_samples_per_second", "eval_steps_per_second",
                         "eval_model_preparation_time", "eval_jit_compilation_time"})


class DisttrainCallback(TrainerCallback):
    def __init__(self, env: Mapping[str, str] | None = None, framework: str = "") -> None:
        self.env = env
        self.framework = framework or f"transformers {transformers.__version__}"
        self.session: Session | None = None
        self._hooks: list[Any] = []

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       **kwargs: Any) -> None:
        steps_log = args.logging_strategy == "steps" and args.logging_steps >= 1
        self.session = Session(
            total_steps=state.max_steps,
            samples_per_step=args.per_device_train_batch_size * args.world_size * args.gradient_accumulation_steps,
            log_every=int(args.logging_steps) if steps_log else 10, framework=self.framework,
            env=self.env).__enter__()
        if self.session.enabled and args.world_size != self.session.world_size:
            log.warning("Transformers trains as a world of %d while the job runs %d processes: each trains on its "
                        "own, not data-parallel (on CPUs, set ACCELERATE_USE_CPU=true in spec.env, or pass "
                        "--use_cpu true; disttrain sets it for a CPU job unless the job sets it otherwise)",
                        args.world_size, self.session.world_size)
        model = kwargs.get("model")
        if self.session.metrics is not None and model is not None:  # its training forward passes: compute time
            timer = self.session.metrics.timer
            self._hooks = [model.register_forward_pre_hook(lambda module, _a: timer.begin() if module.training else None),
                           model.register_forward_hook(lambda module, _a, _out: timer.end())]
        resumed = _folder(args, state.global_step)
        if state.global_step > 0 and os.path.isdir(resumed):  # trainer.train(resume_from_checkpoint=...)
            self.session.checkpointed(state.global_step, resumed)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> None:
        if self.session is None:
            return
        action = self.session.step(state.global_step)
        if action.checkpoint:
            control.should_save = True  # Transformers saves right after this step, then on_save
        if action.stop:
            control.should_training_stop = True

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, float] | None = None, **kwargs: Any) -> None:
        if self.session is not None and logs and "loss" in logs:
            self.session.logged(state.global_step, logs["loss"], grad_norm=logs.get("grad_norm"))

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    metrics: dict[str, float] | None = None, **kwargs: Any) -> None:
        if self.session is None or not metrics:
            return
        # compute_metrics' names, without the "eval_" Transformers puts before them; its own
        # timings and the epoch are no evaluation metric.
        named = eval_metrics({k.removeprefix(EVAL_PREFIX): v for k, v in metrics.items()
                              if k.startswith(EVAL_PREFIX) and k not in NOT_METRICS}, strict=False)
        if "eval_loss" in metrics or named:
            self.session.evaluated(state.global_step, metrics.get("eval_loss"), named)

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                **kwargs: Any) -> None:
        if self.session is None:
            return
        self.session.checkpointed(state.global_step, _folder(args, state.global_step))  # holds when asked
        if self.session.stopping:
            control.should_training_stop = True

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        session, self.session = self.session, None
        if session is not None:
            session.end()  # after a stop, the process ends here


def _folder(args: TrainingArguments, step: int) -> str:
    return os.path.join(args.output_dir, f"{CHECKPOINT_PREFIX}-{step}")
