"""The checkpoint manager's decisions, in-process and without a process group:
which directories count, when to save, what is purged, what a fresh start finds."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from disttrain_trainer.checkpoint import CheckpointInfo, CheckpointManager, complete_checkpoints, step_dir_name
from disttrain_trainer.config import CheckpointConfig


def ctx(rank0: bool = True):
    return SimpleNamespace(is_rank0=rank0, world_size=1, checkpoint_group=None, barrier=lambda: None)


def committed(root: Path, step: int, metadata: bool = True) -> Path:
    path = root / step_dir_name(step)
    path.mkdir(parents=True)
    if metadata:
        (path / ".metadata").write_text("x")
    return path


def test_step_directories_sort_by_number():
    assert step_dir_name(7) == "step-00000007"
    assert step_dir_name(12345678) == "step-12345678"


def test_only_committed_step_directories_count_oldest_first(tmp_path):
    for step in (30, 5, 100):
        committed(tmp_path, step)
    committed(tmp_path, 200, metadata=False)  # rank 0 died before .metadata
    (tmp_path / ".tmp-step-00000300-abcd").mkdir()
    (tmp_path / "step-9").mkdir()  # not our name
    (tmp_path / "step-00000400").write_text("a file, not a directory")
    assert [s for s, _ in complete_checkpoints(tmp_path)] == [5, 30, 100]
    assert complete_checkpoints(tmp_path / "missing") == []


def test_start_removes_incomplete_saves_and_finds_the_newest(tmp_path):
    committed(tmp_path, 10)
    committed(tmp_path, 20)
    (tmp_path / ".tmp-step-00000030-x").mkdir()
    manager = CheckpointManager(CheckpointConfig(dir=str(tmp_path), interval_steps=5), ctx(), {})
    assert not (tmp_path / ".tmp-step-00000030-x").exists()
    assert manager.latest.step == 20 and manager.latest.path == str(tmp_path / "step-00000020")


def test_only_rank_0_removes_incomplete_saves(tmp_path):
    (tmp_path / ".tmp-step-00000030-x").mkdir()
    CheckpointManager(CheckpointConfig(dir=str(tmp_path)), ctx(rank0=False), {})
    assert (tmp_path / ".tmp-step-00000030-x").exists()


def test_disabled_manager_neither_saves_nor_loads(tmp_path):
    manager = CheckpointManager(CheckpointConfig(dir="", interval_steps=1), ctx(), {})
    assert not manager.enabled and not manager.should_save(1)
    assert manager.load() is False and manager.save(1) == 0.0
    assert manager.latest is None


def test_empty_directory_loads_nothing(tmp_path):
    manager = CheckpointManager(CheckpointConfig(dir=str(tmp_path / "new")), ctx(), {})
    assert (tmp_path / "new").is_dir() and manager.load() is False and manager.latest is None


@pytest.mark.parametrize("interval,saves", [(0, []), (1, [1, 2, 3, 4, 5, 6]), (3, [3, 6]), (4, [4])])
def test_should_save_every_interval_steps(tmp_path, interval, saves):
    manager = CheckpointManager(CheckpointConfig(dir=str(tmp_path), interval_steps=interval), ctx(), {})
    assert [s for s in range(1, 7) if manager.should_save(s)] == saves


def test_saving_the_step_already_saved_is_a_no_op(tmp_path):
    committed(tmp_path, 8)
    manager = CheckpointManager(CheckpointConfig(dir=str(tmp_path)), ctx(), {})
    assert manager.save(8) == 0.0
    assert sorted(os.listdir(tmp_path)) == ["step-00000008"]


@pytest.mark.parametrize("keep", [1, 2, 3, 5])
def test_purge_keeps_the_newest_k(tmp_path, keep):
    for step in (1, 2, 3, 4):
        committed(tmp_path, step)
    manager = CheckpointManager(CheckpointConfig(dir=str(tmp_path), keep=keep), ctx(), {})
    manager.purger.purge()
    assert manager.purger.drain(timeout=30)
    assert [s for s, _ in complete_checkpoints(tmp_path)] == [1, 2, 3, 4][-keep:]


def test_commit_renames_the_save_into_place_and_purges(tmp_path):
    committed(tmp_path, 1)
    committed(tmp_path, 2)
    manager = CheckpointManager(CheckpointConfig(dir=str(tmp_path), keep=2), ctx(), {})
    tmp = tmp_path / ".tmp-step-00000003-ab"  # a save that finished after the start
    tmp.mkdir()
    (tmp / ".metadata").write_text("x")
    manager._commit(3, str(tmp), 1.5, 0.25)
    manager.finish()  # the purge runs in the background: wait for it
    assert [s for s, _ in complete_checkpoints(tmp_path)] == [2, 3]
    assert (tmp_path / "step-00000003" / "disttrain.json").is_file()
    assert manager.latest.step == 3 and manager.latest.save_seconds == 1.5 and manager.latest.blocked_seconds == 0.25


def test_checkpoint_status_is_rfc3339_utc_whatever_the_local_zone(monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        info = CheckpointInfo(step=4, path="/c/step-00000004", time=0.0)
        assert info.as_status() == {"step": 4, "time": "1970-01-01T00:00:00Z", "path": "/c/step-00000004"}
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize("kwargs", [{"interval_steps": -1}, {"keep": 0}])
def test_checkpoint_config_rejects_impossible_values(kwargs):
    with pytest.raises(ValueError):
        CheckpointConfig(**kwargs)


def test_checkpoint_config_accepts_the_edges():
    assert CheckpointConfig(interval_steps=0, keep=1).keep == 1
    assert CheckpointConfig(dir="/c").enabled and not CheckpointConfig().enabled
