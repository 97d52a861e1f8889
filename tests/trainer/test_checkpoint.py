"""DCP checkpoints: atomic commit, keep-K, async == sync, kill -9 mid-save, resharding."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dt_helpers import assert_losses_close, assert_params_close, run_inprocess, run_torchrun, tiny_config
from disttrain_trainer.checkpoint import complete_checkpoints


def steps_in(root: Path) -> list[int]:
    return [s for s, _ in complete_checkpoints(root)]


def test_no_checkpoint_means_fresh_start_and_keep_newest_k(tmp_path: Path) -> None:
    run = run_inprocess(tiny_config(steps=6, ckpt_dir=str(tmp_path), interval=2, keep=2))
    assert run.result.resumed_from is None
    assert steps_in(tmp_path) == [4, 6]
    assert not list(tmp_path.glob(".tmp-*"))
    # Nothing left to do: a restart loads step 6 and trains zero steps.
    again = run_inprocess(tiny_config(steps=6, ckpt_dir=str(tmp_path), interval=2, keep=2))
    assert again.result.resumed_from == 6 and again.result.losses == {}
    assert_params_close(again.params, run.params, rtol=0, atol=0)


@pytest.mark.parametrize("keep,kept", [(1, [8]), (4, [2, 4, 6, 8]), (5, [2, 4, 6, 8])])
def test_keep_holds_the_newest_keep_checkpoints_and_deletes_none_while_there_are_fewer(
        tmp_path: Path, keep: int, kept: list[int]) -> None:
    """checkpoint.keep at its minimum, at exactly as many as the run writes, and above it."""
    run_inprocess(tiny_config(steps=8, ckpt_dir=str(tmp_path), interval=2, keep=keep))
    assert steps_in(tmp_path) == kept


def test_resume_continues_exactly(tmp_path: Path) -> None:
    straight = run_inprocess(tiny_config(steps=6))
    run_inprocess(tiny_config(steps=6, ckpt_dir=str(tmp_path), interval=3, keep=5))
    shutil.rmtree(tmp_path / "step-00000006")  # as if we had crashed after step 3..5
    resumed = run_inprocess(tiny_config(steps=6, ckpt_dir=str(tmp_path), interval=3))
    assert resumed.result.resumed_from == 3
    assert_losses_close(resumed.result.losses, {s: straight.result.losses[s] for s in (4, 5, 6)}, rtol=1e-6)
    assert_params_close(resumed.params, straight.params, rtol=0, atol=0)


def test_async_checkpoint_is_a_consistent_snapshot(tmp_path: Path) -> None:
    straight = run_inprocess(tiny_config(steps=6))
    ck = tmp_path / "async"
    run = run_inprocess(tiny_config(steps=6, ckpt_dir=str(ck), interval=2, keep=5, async_save=True))
    assert steps_in(ck) == [2, 4, 6]
    assert_params_close(run.params, straight.params, rtol=0, atol=0)
    # Training kept updating the parameters while step 4 was written in the background:
    # resuming from it must still reproduce the uninterrupted run bit for bit.
    shutil.rmtree(ck / "step-00000006")
    resumed = run_inprocess(tiny_config(steps=6, ckpt_dir=str(ck), interval=2, async_save=True))
    assert resumed.result.resumed_from == 4
    assert_params_close(resumed.params, straight.params, rtol=0, atol=0)


@pytest.mark.dist
def test_kill9_mid_save_resumes_from_previous_complete_checkpoint(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    cfg = tiny_config(steps=6, batch=2, strategy="ddp", ckpt_dir=str(ck), interval=2)
    crashed = run_torchrun(cfg, 2, tmp_path / "a", expect_ok=False,
                           extra_env={"TEST_KILL_AT_SAVE_STEP": "4", "TEST_KILL_RANK": "1"})
    assert crashed.rc != 0
    assert "killing rank 1 mid-save of step 4" in crashed.output
    assert steps_in(ck) == [2]
    partial = list(ck.glob(".tmp-step-00000004-*"))
    assert partial and any(partial[0].iterdir()), "rank shards of the torn save are on disk"
    assert not (partial[0] / ".metadata").exists()
    # The next start ignores (and removes) the torn save and resumes from step 2.
    resumed = run_torchrun(cfg, 2, tmp_path / "b")
    assert resumed.result.resumed_from == 2
    assert sorted(resumed.result.losses) == [3, 4, 5, 6]
    assert steps_in(ck) == [2, 4, 6] and not list(ck.glob(".tmp-*"))
    straight = run_inprocess(tiny_config(steps=6, batch=4))
    assert_losses_close(resumed.result.losses, {s: straight.result.losses[s] for s in (3, 4, 5, 6)})
    assert_params_close(resumed.params, straight.params)


@pytest.mark.dist
@pytest.mark.slow
def test_resume_at_another_world_size_gives_the_same_model(tmp_path: Path) -> None:
    """2 ranks (FSDP2, sharded) -> 1 rank, and 1 rank -> 2 ranks (FSDP2): DCP reshards.
    The per-rank batch is chosen so the global batch stays 4, hence the same trajectory."""
    ref_dir, two_dir = tmp_path / "ref", tmp_path / "two"
    straight = run_inprocess(tiny_config(steps=6, batch=4, ckpt_dir=str(ref_dir), interval=4))
    run_torchrun(tiny_config(steps=6, batch=2, strategy="fsdp", ckpt_dir=str(two_dir), interval=4), 2, tmp_path / "a")
    for d in (ref_dir, two_dir):  # keep step 4 only: as if both had been stopped there
        shutil.rmtree(d / "step-00000006")
    ref4 = run_inprocess(tiny_config(steps=4, batch=4, ckpt_dir=str(ref_dir)))

    # 2 -> 1: the model saved in shards by two ranks loads whole into one.
    loaded = run_inprocess(tiny_config(steps=4, batch=4, ckpt_dir=str(two_dir)))
    assert loaded.result.resumed_from == 4
    assert_params_close(loaded.params, ref4.params)
    cont = run_inprocess(tiny_config(steps=6, batch=4, ckpt_dir=str(two_dir)))
    assert_losses_close(cont.result.losses, {5: straight.result.losses[5], 6: straight.result.losses[6]})
    assert_params_close(cont.params, straight.params)

    # 1 -> 2: the single-rank checkpoint is sharded over two FSDP2 ranks on load.
    cont2 = run_torchrun(tiny_config(steps=6, batch=2, strategy="fsdp", ckpt_dir=str(ref_dir)), 2, tmp_path / "b")
    assert cont2.result.resumed_from == 4
    assert_losses_close(cont2.result.losses, {5: straight.result.losses[5], 6: straight.result.losses[6]})
    assert_params_close(cont2.params, straight.params)
