"""Evaluation on the held-out split: the split is disjoint, contiguous and seed-free; the
loss is the true mean over the split (checked against a direct computation); it is the
same at world size 1 and under FSDP on two gloo processes, including a rank with nothing
left to score in the last batch; and it reaches /status and the termination message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dt_helpers import assert_losses_close, run_inprocess, run_torchrun, tiny_config
from disttrain_trainer.data import SYNTHETIC_SAMPLES, build_dataset, holdout
from disttrain_trainer.models import model_spec
from disttrain.api.report import parse_report

# 6 held-out samples: evaluated 4 x batch 2 = 8 per rank, rank 1 gets none of them.
FRACTION = 6.2 / SYNTHETIC_SAMPLES


def test_holdout_is_disjoint_contiguous_and_k_fold_covers_everything() -> None:
    data = build_dataset("synthetic-regression", seq_len=0, seed=3)
    seen = []
    for fold in range(4):
        train, held = holdout(data, fraction=0.25, fold=fold)
        assert held is not None and len(held) == len(data) // 4 and len(train) == len(data) - len(held)
        assert set(train.indices.tolist()).isdisjoint(held.indices.tolist())
        assert held.indices.tolist() == list(range(fold * len(held), (fold + 1) * len(held)))
        seen += held.indices.tolist()
        x, y = held.get(torch.tensor([0, 1]))
        torch.testing.assert_close(x, data.x[fold * len(held):fold * len(held) + 2])
    assert sorted(seen) == list(range(len(data)))
    assert holdout(data, fraction=0.0, fold=0) == (data, None)
    with pytest.raises(ValueError, match="eval fold 3 of size 5461 is past the dataset's 16384 samples"):
        holdout(data, fraction=1 / 3, fold=3)


def _config(strategy: str = "none", batch: int = 4):
    return tiny_config(steps=4, batch=batch, strategy=strategy, model="mlp", dataset="synthetic-regression",
                       eval_fraction=FRACTION, eval_interval=2)


def test_eval_loss_is_the_mean_over_the_held_out_split() -> None:
    run = run_inprocess(_config())
    assert sorted(run.result.eval_losses) == [2, 4]
    cfg = _config()
    spec = model_spec("mlp", dataset="synthetic-regression", vocab_size=0, in_features=32, classes=8)
    model = spec.build()
    model.load_state_dict(run.params)
    _, held = holdout(build_dataset("synthetic-regression", seq_len=0, seed=cfg.data.seed),
                      fraction=FRACTION, fold=0)
    assert held is not None and len(held) == 6
    with torch.no_grad():
        x, y = held.get(torch.arange(len(held)))
        direct = float(spec.loss_fn(model(x), y))
    assert run.result.eval_losses[4] == pytest.approx(direct, rel=1e-5)


@pytest.mark.dist
def test_fsdp_on_two_processes_scores_like_one(tmp_path: Path) -> None:
    single = run_inprocess(_config())
    fsdp = run_torchrun(_config(strategy="fsdp", batch=2), 2, tmp_path)
    assert_losses_close(fsdp.result.eval_losses, single.result.eval_losses)


def test_eval_loss_reaches_status_and_the_termination_message(tmp_path: Path) -> None:
    cfg = _config()
    cfg.metrics.termination_log = str(tmp_path / "termination-log")
    run = run_inprocess(cfg)
    doc = json.loads((tmp_path / "termination-log").read_text())
    assert doc["evalStep"] == 4 and doc["evalLoss"] == pytest.approx(run.result.eval_losses[4], abs=1e-6)
    report = parse_report(doc)
    assert report is not None and report.progress().eval_loss == doc["evalLoss"]
    assert report.progress().eval_step == 4
    assert [e.step for e in report.eval_history] == [2, 4]  # every evaluation, for a sweep's pruner
