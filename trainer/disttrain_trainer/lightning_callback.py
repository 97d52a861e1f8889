"""A PyTorch Lightning `Callback` that reports through the session (session.py):
`Trainer(..., callbacks=[DisttrainCallback()])`.

Every optimizer step (`trainer.global_step` moving in `on_train_batch_end`) is a
`Session.step` with the step's loss, the logged `val_loss` is the evaluation, and every
checkpoint Lightning writes is the job's checkpoint. When the operator asks for a
checkpoint, the callback writes one with `trainer.save_checkpoint` (on every rank, as
Lightning wants) as the ModelCheckpoint's own last checkpoint (`last.ckpt` in its folder,
named as it names it, and its `last_model_path`), else as `last.ckpt` in the job's
checkpoint storage: what `trainer.fit(..., ckpt_path="last")` and a resume from `last.ckpt`
by name both find, and what the ModelCheckpoint's next save of its last replaces. Every rank then holds until the pods go. SIGTERM saves the same way and stops the
trainer (the session's handler stands in for Lightning's while it trains). Outside a
disttrain pod it does nothing.

It subclasses `lightning.pytorch.Callback`, or `pytorch_lightning.Callback` where only the
older package is installed: Lightning accepts only its own package's callbacks.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import torch

try:
    from lightning import __version__ as _version
    from lightning.pytorch import Callback, LightningModule, Trainer
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.utilities.data import extract_batch_size
    FRAMEWORK = "lightning"
except ImportError:  # the older package name
    from pytorch_lightning import Callback, LightningModule, Trainer  # type: ignore[no-redef]
    from pytorch_lightning import __version__ as _version  # type: ignore[no-redef]
    from pytorch_lightning.callbacks import ModelCheckpoint  # type: ignore[no-redef]
    from pytorch_lightning.utilities.data import extract_batch_size  # type: ignore[no-redef]
    FRAMEWORK = "pytorch-lightning"

from disttrain.api.pod_contract import CHECKPOINT_DIR
from disttrain_trainer.metrics import eval_metrics
from disttrain_trainer.session import Session

log = logging.getLogger("disttrain_trainer")

# The requested checkpoint's name without a ModelCheckpoint (ModelCheckpoint.CHECKPOINT_NAME_LAST's default).
LAST = "last.ckpt"
# The metric logged with self.log(...) that counts as the evaluation loss.
EVAL_METRIC = "val_loss"
# The others logged under this prefix (val_acc, val/f1, valid_auc) are the evaluation's named metrics.
EVAL_PREFIX = "val"


class DisttrainCallback(Callback):
    def __init__(self, eval_metric: str = EVAL_METRIC, env: Mapping[str, str] | None = None,
                 framework: str = "", eval_prefix: str = EVAL_PREFIX) -> None:
        self.eval_metric = eval_metric
        self.eval_prefix = eval_prefix
        self.framework = framework or f"{FRAMEWORK} {_version}"
        self.env = os.environ if env is None else env
        self.session: Session | None = None
        self._seen = 0
        self._saved: int | None = None  # the step of a checkpoint Lightning wrote, not yet reported
        self._target = ""  # the folder requested checkpoints go to ("": none, requests are declined)
        self._written = ""  # the last requested checkpoint written, when nothing of Lightning's keeps it

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else trainer.estimated_stepping_batches
        self._target = self._where(trainer)
        if not self._target:
            log.warning("no ModelCheckpoint folder and no checkpoint storage (spec.checkpoint): the operator's "
                        "checkpoint requests are declined, and the job is stopped with SIGTERM alone")
        self.session = Session(total_steps=int(total), log_every=max(1, trainer.log_every_n_steps),
                               checkpoints=bool(self._target), framework=self.framework, env=self.env).__enter__()
        self._seen = trainer.global_step
        if trainer.ckpt_path:  # resumed: fit(..., ckpt_path=...)
            self.session.checkpointed(trainer.global_step, str(trainer.ckpt_path))

    # The batch's forward pass and loss, up to the backward: its compute time (timing.py).
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if self.session is not None and self.session.metrics is not None:
            self.session.metrics.timer.begin()

    def on_before_backward(self, trainer: Trainer, pl_module: LightningModule, loss: Any) -> None:
        if self.session is not None and self.session.metrics is not None:
            self.session.metrics.timer.end()

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        self._saved = int(checkpoint.get("global_step", trainer.global_step))  # written right after this hook

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self.session is None or trainer.global_step == self._seen:
            return  # accumulating gradients: no optimizer step yet
        self._seen = step = trainer.global_step
        self._report_saved(trainer)
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        samples = extract_batch_size(batch) * trainer.world_size * trainer.accumulate_grad_batches
        action = self.session.step(step, loss=loss, samples=samples)
        if action.checkpoint and self._target:
            path = self._save_last(trainer)
            self._saved = None
            self.session.checkpointed(step, path)  # holds when asked
        if action.stop or self.session.stopping:
            trainer.should_stop = True

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.session is None or trainer.sanity_checking:
            return
        logged = trainer.callback_metrics
        named = eval_metrics({k: v for k, v in logged.items()
                              if k.startswith(self.eval_prefix) and k != self.eval_metric}, strict=False)
        value = logged.get(self.eval_metric)
        if value is not None or named:
            self.session.evaluated(trainer.global_step, value, named)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.session is not None:
            self._report_saved(trainer)
            session, self.session = self.session, None
            if self._written and not session.stopping:  # finished: a mid-run last would resume a re-run there
                trainer.strategy.remove_checkpoint(self._written)
            session.end()  # after a stop, the process ends here

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if self.session is not None:  # no outcome: the operator reads the crash
            self.session.__exit__(type(exception), exception, exception.__traceback__)
            self.session = None

    def _report_saved(self, trainer: Trainer) -> None:
        """A checkpoint a ModelCheckpoint wrote since the last step is the job's newest."""
        if self._saved is None or self.session is None:
            return
        cb = trainer.checkpoint_callback
        path = (cb.last_model_path or cb.best_model_path) if isinstance(cb, ModelCheckpoint) else ""
        self.session.checkpointed(self._saved, path or self._target)
        self._saved = None

    def _where(self, trainer: Trainer) -> str:
        cb = trainer.checkpoint_callback
        folder = cb.dirpath if isinstance(cb, ModelCheckpoint) and cb.dirpath else ""
        return str(folder or self.env.get(CHECKPOINT_DIR.env, ""))

    def _save_last(self, trainer: Trainer) -> str:
        """Write the requested checkpoint as the last one, on every rank (Lightning writes
        on rank 0 and waits); its path."""
        cb = trainer.checkpoint_callback
        if isinstance(cb, ModelCheckpoint) and cb.dirpath:
            metrics = {"epoch": torch.tensor(trainer.current_epoch), "step": torch.tensor(trainer.global_step),
                       **trainer.callback_metrics}
            path = cb.format_checkpoint_name(metrics, cb.CHECKPOINT_NAME_LAST)
            cb.last_model_path = path  # its own last (saved in its state): no "last-v1" beside it after a resume
            self._written = "" if cb.save_last else path
        else:
            path = self._written = os.path.join(self._target, LAST)
        trainer.save_checkpoint(path)
        return path
