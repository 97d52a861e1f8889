"""The framework adapters' own decisions, each pinned (issue 68): where a requested
checkpoint goes for each framework configuration, which framework versions instrument: auto
accepts, and how a framework's metric names map onto the report. The real frameworks'
objects, no training: the end-to-end runs are in test_framework_callbacks.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from transformers import TrainingArguments

from disttrain_trainer import hf_callback, lightning_callback
from disttrain_trainer.instrument import hooks


class Recorder:
    """Stands in for the Session: what the adapter reported."""

    def __init__(self) -> None:
        self.evaluations: list[tuple[int, Any, dict[str, float]]] = []

    def evaluated(self, step: int, loss: Any, named: dict[str, float]) -> None:
        self.evaluations.append((step, None if loss is None else float(loss), dict(named)))


def lightning_trainer(tmp_path: Path, checkpoint: ModelCheckpoint | None) -> L.Trainer:
    return L.Trainer(default_root_dir=str(tmp_path), logger=False, enable_progress_bar=False,
                     enable_checkpointing=checkpoint is not None, callbacks=[checkpoint] if checkpoint else [])


@pytest.mark.parametrize("config, env, folder", [
    ("a ModelCheckpoint with a folder", {}, "mine"),
    ("a ModelCheckpoint with a folder, and the job's storage", {"DISTTRAIN_CHECKPOINT_DIR": "/ck"}, "mine"),
    ("no ModelCheckpoint, the job's storage", {"DISTTRAIN_CHECKPOINT_DIR": "/ck"}, "/ck"),
    ("neither: requests declined", {}, ""),
])
def test_where_lightning_puts_a_requested_checkpoint(tmp_path: Path, config: str, env: dict, folder: str) -> None:
    mine = str(tmp_path / "mine")
    trainer = lightning_trainer(tmp_path, ModelCheckpoint(dirpath=mine) if folder == "mine" else None)
    callback = lightning_callback.DisttrainCallback(env=env)
    assert callback._where(trainer) == (mine if folder == "mine" else folder), config


@pytest.mark.parametrize("last_name, expected", [("last", "last.ckpt"), ("{epoch}-last", "epoch=3-last.ckpt")])
def test_a_requested_lightning_checkpoint_is_the_model_checkpoints_own_last(tmp_path: Path, last_name: str,
                                                                               expected: str) -> None:
    """Named as the ModelCheckpoint names its last (ckpt_path="last" and a resume from
    last.ckpt by name find it) and kept as its last_model_path (no last-v1 beside it)."""
    checkpoint = ModelCheckpoint(dirpath=str(tmp_path / "mine"), save_last=True)
    checkpoint.CHECKPOINT_NAME_LAST = last_name
    trainer = lightning_trainer(tmp_path, checkpoint)
    trainer.fit_loop.epoch_progress.current.completed = 3  # what current_epoch reads
    saved: list[str] = []
    trainer.save_checkpoint = saved.append  # type: ignore[method-assign]
    path = lightning_callback.DisttrainCallback()._save_last(trainer)
    assert path == str(tmp_path / "mine" / expected) == saved[0] == checkpoint.last_model_path


def test_without_a_model_checkpoint_the_request_is_last_ckpt_in_the_jobs_storage(tmp_path: Path) -> None:
    trainer = lightning_trainer(tmp_path, None)
    callback = lightning_callback.DisttrainCallback(env={"DISTTRAIN_CHECKPOINT_DIR": str(tmp_path / "ck")})
    callback._target = callback._where(trainer)
    saved: list[str] = []
    trainer.save_checkpoint = saved.append  # type: ignore[method-assign]
    assert callback._save_last(trainer) == str(tmp_path / "ck" / "last.ckpt") == saved[0]


def test_transformers_saves_a_requested_checkpoint_as_its_own_checkpoint_folder(tmp_path: Path) -> None:
    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[], use_cpu=True)
    assert hf_callback._folder(args, 565) == str(tmp_path / "out" / "checkpoint-565")


@pytest.mark.parametrize("package, version, accepted", [
    ("transformers", "4.39.9", False), ("transformers", "4.40.0", True), ("transformers", "5.24.0", True),
    ("lightning", "1.9.5", False), ("lightning", "2.0.0", True),
    ("pytorch-lightning", "1.9.5", False), ("pytorch-lightning", "2.6.6", True),
])
def test_which_framework_versions_instrument_auto_attaches_to(package: str, version: str, accepted: bool) -> None:
    (framework,) = [f for f in hooks.FRAMEWORKS if f.name == package]
    assert (hooks._parts(version) >= framework.minimum) is accepted


def test_transformers_metric_names_onto_the_report() -> None:
    """eval_loss is the loss; compute_metrics' names lose Transformers' eval_ prefix; its
    timings and the epoch are no evaluation metric."""
    callback = hf_callback.DisttrainCallback()
    callback.session = Recorder()  # type: ignore[assignment]
    state = type("State", (), {"global_step": 50})()
    callback.on_evaluate(None, state, None, metrics={  # type: ignore[arg-type]
        "eval_loss": 2.5, "eval_accuracy": 0.75, "eval_f1": 0.5, "eval_runtime": 1.0,
        "eval_samples_per_second": 9.0, "eval_steps_per_second": 3.0, "epoch": 0.2})
    assert callback.session.evaluations == [(50, 2.5, {"accuracy": 0.75, "f1": 0.5})]  # type: ignore[attr-defined]


def test_lightning_metric_names_onto_the_report(tmp_path: Path) -> None:
    """val_loss (or the metric named) is the loss; what else is logged under the val prefix
    is a named metric, as logged; a training metric is none."""
    trainer = lightning_trainer(tmp_path, None)
    trainer.callback_metrics.update({"val_loss": torch.tensor(1.5), "val_acc": torch.tensor(0.5),
                                     "val/f1": torch.tensor(0.25), "train_loss": torch.tensor(3.0)})
    callback = lightning_callback.DisttrainCallback()
    callback.session = Recorder()  # type: ignore[assignment]
    callback.on_validation_end(trainer, None)  # type: ignore[arg-type]
    assert callback.session.evaluations == [(0, 1.5, {"val_acc": 0.5, "val/f1": 0.25})]  # type: ignore[attr-defined]
