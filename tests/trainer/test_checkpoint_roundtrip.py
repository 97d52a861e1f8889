"""What a checkpoint carries, in-process: the trainer's own Statefuls (model + optimizer,
LR scheduler, step and RNG) saved through CheckpointManager with real
torch.distributed.checkpoint and loaded into fresh objects, compared exactly; and the
disttrain.json that marks a committed step (docs/trainer.md).

The resume tests under torchrun prove the same end to end, but in subprocesses that
mutation testing cannot map to these functions (issue 14).
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import torch
from torch import nn

from disttrain_trainer import checkpoint, loop
from disttrain_trainer.checkpoint import CheckpointManager, ModelOptimState, SchedulerState, TrainState
from disttrain_trainer.config import CheckpointConfig, TrainConfig


def ctx(rank0: bool = True):
    return SimpleNamespace(is_rank0=rank0, world_size=1, checkpoint_group=None, barrier=lambda: None)


def components(seed: int):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = loop.build_scheduler(optimizer, TrainConfig(steps=20, warmup_steps=5))
    state = TrainState()
    states = {"model_optim": ModelOptimState(model, optimizer), "scheduler": SchedulerState(scheduler),
              "train_state": state}
    return model, optimizer, scheduler, state, states


def train(model, optimizer, scheduler, state, steps: int) -> None:
    for _ in range(steps):
        loss = model(torch.randn(3, 4)).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
        state.step += 1


def snapshot(model, optimizer, scheduler, state):
    return {"params": [p.detach().clone() for p in model.parameters()],
            "optim": [{k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()}
                      for s in optimizer.state.values()],
            "lrs": [g["lr"] for g in optimizer.param_groups],
            "last_lr": scheduler.get_last_lr(), "last_epoch": scheduler.last_epoch,
            "step_count": scheduler.state_dict()["_step_count"], "step": state.step,
            "rng": torch.get_rng_state()}


def same(a, b) -> None:
    assert all(torch.equal(x, y) for x, y in zip(a["params"], b["params"], strict=True))
    assert len(a["optim"]) == len(b["optim"]) > 0
    for x, y in zip(a["optim"], b["optim"]):
        assert x.keys() == y.keys()
        assert all(torch.equal(x[k], y[k]) if torch.is_tensor(x[k]) else x[k] == y[k] for k in x)
    for key in ("lrs", "last_lr", "last_epoch", "step_count", "step"):
        assert a[key] == b[key], key
    assert torch.equal(a["rng"], b["rng"])


def test_a_checkpoint_restores_model_optimizer_scheduler_step_and_rng_exactly(tmp_path):
    cfg = CheckpointConfig(dir=str(tmp_path), interval_steps=3, async_save=False)
    model, optimizer, scheduler, state, states = components(seed=1)
    train(model, optimizer, scheduler, state, 7)
    saver = CheckpointManager(cfg, ctx(), states)
    saver.save(7)
    saved = snapshot(model, optimizer, scheduler, state)
    train(model, optimizer, scheduler, state, 2)  # what the restart loses, and redoes
    went_on = snapshot(model, optimizer, scheduler, state)

    fresh = components(seed=2)  # other weights, a new optimizer and a scheduler at step 0
    assert not torch.equal(next(fresh[0].parameters()), saved["params"][0])
    loader = CheckpointManager(cfg, ctx(), fresh[4])
    assert loader.load() is True and loader.latest.step == 7
    same(snapshot(*fresh[:4]), saved)
    # and training goes on from there exactly as it did before the restart
    train(*fresh[:4], 2)
    same(snapshot(*fresh[:4]), went_on)


def test_a_committed_step_records_its_step_world_size_and_time(tmp_path):
    cfg = CheckpointConfig(dir=str(tmp_path), async_save=False)
    *_, states = components(seed=1)
    before = time.time()
    manager = CheckpointManager(cfg, ctx(), states)
    manager.save(4)
    meta = json.loads((tmp_path / "step-00000004" / "disttrain.json").read_text())
    assert meta.keys() == {"step", "worldSize", "time"}
    assert meta["step"] == 4 and meta["worldSize"] == 1
    assert before <= meta["time"] <= time.time()
    assert manager.latest.path == str(tmp_path / "step-00000004")
    assert before <= manager.latest.time <= time.time()  # what status.checkpoint.time shows
    assert 0 < manager.latest.save_seconds < 600  # seconds since the save began


def test_a_rank_other_than_0_knows_where_the_step_it_saved_lives_without_committing_it(tmp_path):
    cfg = CheckpointConfig(dir=str(tmp_path), async_save=False)
    staging = tmp_path / ".tmp-step-00000004-ab"
    staging.mkdir()
    manager = CheckpointManager(cfg, ctx(rank0=False), {})
    manager._commit(4, str(staging), 0.5, 0.0)
    assert manager.latest.step == 4 and manager.latest.path == str(tmp_path / "step-00000004")
    assert staging.is_dir() and not (tmp_path / "step-00000004").exists()  # rank 0 renames it


def test_an_async_save_is_committed_by_wait_with_what_it_blocked_and_what_it_took(tmp_path):
    cfg = CheckpointConfig(dir=str(tmp_path), async_save=True)
    *_, states = components(seed=1)
    manager = CheckpointManager(cfg, ctx(), states)
    blocked = manager.save(5)
    assert manager.latest is None  # still in flight: nothing committed yet
    manager.wait()
    manager.poll()  # nothing left in flight: a no-op
    assert manager.latest.step == 5 and manager.latest.path == str(tmp_path / "step-00000005")
    assert manager.latest.blocked_seconds == blocked
    assert 0 < blocked <= manager.latest.save_seconds < 600  # seconds since the save began
    started = time.perf_counter()
    synced = manager.save(6, force_sync=True)  # the last step and the signal path: committed on return
    elapsed = time.perf_counter() - started
    assert manager.latest.step == 6 and manager.latest.blocked_seconds == synced
    assert manager.latest.save_seconds <= synced <= elapsed  # blocked for all of it, the barrier included


def test_a_checkpoint_of_step_0_is_resumed_from(tmp_path):
    """An emergency save before the first step finished is a real checkpoint too."""
    cfg = CheckpointConfig(dir=str(tmp_path), async_save=False)
    *_, states = components(seed=1)
    CheckpointManager(cfg, ctx(), states).save(0)
    *_, fresh = components(seed=2)
    loader = CheckpointManager(cfg, ctx(), fresh)
    step_dir = tmp_path / "step-00000000"
    assert loader.latest.step == 0 and loader.latest.time == step_dir.stat().st_mtime
    assert loader.load() is True
    assert (loader.latest.step, loader.latest.path, loader.latest.time) == (0, str(step_dir), step_dir.stat().st_mtime)


def test_finishing_on_a_signal_leaves_old_deletes_to_the_next_start(tmp_path, monkeypatch):
    cfg = CheckpointConfig(dir=str(tmp_path), async_save=False)
    manager = CheckpointManager(cfg, ctx(), {})
    waited, said = [], []
    monkeypatch.setattr(manager.purger, "drain", lambda timeout: waited.append(timeout) or False)
    monkeypatch.setattr(checkpoint, "log", SimpleNamespace(info=lambda msg, *args: said.append(msg % args)))
    manager.finish(hand_off=True)
    manager.finish()
    assert waited == [0, None]  # the grace period belongs to the emergency save
    assert said == ["old checkpoints still being deleted: left to the next start"] * 2
    monkeypatch.setattr(manager.purger, "drain", lambda timeout: True)
    manager.finish()
    assert len(said) == 2
