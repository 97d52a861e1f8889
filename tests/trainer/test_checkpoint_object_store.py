"""Checkpoints in object storage (checkpoint dir = s3://bucket/prefix), against a real S3
server (versitygw on loopback, tests/conftest.py `s3_server`): the same guarantees as on a
filesystem. A step is visible only once its commit marker is written, after every shard and
DCP's .metadata; a save cut short leaves nothing a reader sees; deletes unlist first; keep-K
and async saves work; a checkpoint written by 2 ranks resumes at 4."""

from __future__ import annotations

import json

import pytest

from dt_helpers import assert_losses_close, assert_params_close, run_inprocess, run_torchrun, tiny_config
from disttrain_trainer.storage import ObjectStorage, open_storage


def names(url: str) -> list[str]:
    """Every entry under the prefix, as the store lists it (not through ObjectStorage)."""
    storage = ObjectStorage(url)
    try:
        return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in storage.fs.ls(storage.root, detail=False))
    except FileNotFoundError:
        return []


def markers(url: str) -> list[str]:
    return [n for n in names(url) if n.endswith(".commit")]


def folders(url: str, step: int) -> list[str]:
    return [n for n in names(url) if n.startswith(f"step-{step:08d}-")]


def drop_step(url: str, step: int) -> None:
    """As if the run had stopped before `step` was committed."""
    ObjectStorage(url).delete(step)


def test_a_url_is_an_object_store_and_a_path_a_filesystem(s3_bucket: str, tmp_path) -> None:  # noqa: ANN001
    assert type(open_storage(f"{s3_bucket}/run", create=True)).__name__ == "ObjectStorage"
    assert type(open_storage(str(tmp_path), create=True)).__name__ == "LocalStorage"


def test_only_a_committed_step_is_listed_and_a_delete_unlists_first(s3_bucket: str) -> None:
    url = f"{s3_bucket}/unit"
    storage = ObjectStorage(url)
    staging = storage.staging(5, "abc123")
    storage.fs.pipe(f"{staging.split('://', 1)[1]}/.metadata", b"shards written, no marker yet")
    assert storage.list() == [], "a save without its marker is never listed"
    location = storage.commit(5, staging, {"step": 5, "worldSize": 2, "time": 1700000000.5})
    assert storage.list() == [5] and location == staging == storage.location(5)
    assert storage.committed_time(5) == 1700000000.5
    marker = json.loads(storage.fs.cat(f"{storage.root}/step-00000005.commit"))
    assert marker == {"step": 5, "worldSize": 2, "time": 1700000000.5, "folder": "step-00000005-abc123"}

    # The same step saved again by a later incarnation: the marker moves, the old data goes.
    again = storage.staging(5, "def456")
    storage.fs.pipe(f"{again.split('://', 1)[1]}/.metadata", b"second save")
    storage.commit(5, again, {"step": 5, "worldSize": 2, "time": 1700000001.0})
    assert storage.location(5) == again and folders(url, 5) == ["step-00000005-def456"]

    # A delete cut short after the marker is gone leaves data no reader sees; the next
    # start's discard removes it, and a torn save with it.
    storage.fs.rm(f"{storage.root}/step-00000005.commit")
    torn = storage.staging(7, "0ddba11")
    storage.fs.pipe(f"{torn.split('://', 1)[1]}/__0_0.distcp", b"rank 0 shard")
    assert storage.list() == []
    storage.discard_leftovers()
    assert names(url) == []


@pytest.mark.dist
def test_a_save_to_object_storage_resumes_with_exact_parameters(s3_bucket: str, tmp_path) -> None:  # noqa: ANN001
    """Two ranks (DDP) save every 3 steps; stopped after step 3 was committed, the next
    start resumes there and ends on the uninterrupted run's parameters."""
    url = f"{s3_bucket}/roundtrip"
    straight = run_inprocess(tiny_config(steps=6))
    cfg = tiny_config(steps=6, batch=2, strategy="ddp", ckpt_dir=url, interval=3, keep=5)
    first = run_torchrun(cfg, 2, tmp_path / "a")
    assert markers(url) == ["step-00000003.commit", "step-00000006.commit"]
    assert ObjectStorage(url).location(6).startswith(f"{url}/step-00000006-")
    drop_step(url, 6)
    resumed = run_torchrun(cfg, 2, tmp_path / "b")
    assert resumed.result.resumed_from == 3
    assert sorted(resumed.result.losses) == [4, 5, 6]
    assert_losses_close(resumed.result.losses, {s: straight.result.losses[s] for s in (4, 5, 6)})
    assert_params_close(resumed.params, straight.params)
    assert_params_close(resumed.params, first.params, rtol=0, atol=0)


@pytest.mark.dist
def test_kill9_of_rank0_mid_save_leaves_no_visible_step(s3_bucket: str, tmp_path) -> None:  # noqa: ANN001
    url = f"{s3_bucket}/kill"
    cfg = tiny_config(steps=6, batch=2, strategy="ddp", ckpt_dir=url, interval=2)
    crashed = run_torchrun(cfg, 2, tmp_path / "a", expect_ok=False,
                           extra_env={"TEST_KILL_AT_SAVE_STEP": "4", "TEST_KILL_RANK": "0"})
    assert crashed.rc != 0
    assert "killing rank 0 mid-save of step 4" in crashed.output
    assert markers(url) == ["step-00000002.commit"]
    assert folders(url, 4), "rank 0's shards of the torn save are in the store"
    assert ObjectStorage(url).list() == [2]

    resumed = run_torchrun(cfg, 2, tmp_path / "b")
    assert resumed.result.resumed_from == 2
    assert sorted(resumed.result.losses) == [3, 4, 5, 6]
    assert ObjectStorage(url).list() == [2, 4, 6]
    # The torn save is gone: one folder per committed step, each the one its marker names.
    storage = ObjectStorage(url)
    assert sorted(n for n in names(url) if not n.endswith(".commit")) == sorted(
        storage.location(s).rsplit("/", 1)[-1] for s in (2, 4, 6))
    straight = run_inprocess(tiny_config(steps=6, batch=4))
    assert_losses_close(resumed.result.losses, {s: straight.result.losses[s] for s in (3, 4, 5, 6)})
    assert_params_close(resumed.params, straight.params)


def test_async_saves_keep_the_newest_k_in_object_storage(s3_bucket: str) -> None:
    url = f"{s3_bucket}/async"
    straight = run_inprocess(tiny_config(steps=8))
    run = run_inprocess(tiny_config(steps=8, ckpt_dir=url, interval=2, keep=2, async_save=True))
    assert ObjectStorage(url).list() == [6, 8]
    assert len(names(url)) == 4, f"two markers and two folders, nothing else: {names(url)}"
    assert_params_close(run.params, straight.params, rtol=0, atol=0)
    # Step 6 was written in the background while training went on: resuming from it
    # reproduces the uninterrupted run bit for bit.
    drop_step(url, 8)
    resumed = run_inprocess(tiny_config(steps=8, ckpt_dir=url, interval=2, keep=2, async_save=True))
    assert resumed.result.resumed_from == 6
    assert_params_close(resumed.params, straight.params, rtol=0, atol=0)


@pytest.mark.dist
@pytest.mark.slow
def test_a_checkpoint_written_by_two_ranks_resumes_at_four(s3_bucket: str, tmp_path) -> None:  # noqa: ANN001
    """FSDP2 over 2 ranks saves step 4; 4 ranks (global batch kept at 4) load it resharded
    from the object store and finish on the uninterrupted trajectory."""
    url = f"{s3_bucket}/reshard"
    straight = run_inprocess(tiny_config(steps=6, batch=4))
    run_torchrun(tiny_config(steps=6, batch=2, strategy="fsdp", ckpt_dir=url, interval=4), 2, tmp_path / "a")
    drop_step(url, 6)
    four = run_torchrun(tiny_config(steps=6, batch=1, strategy="fsdp", ckpt_dir=url, interval=4), 4, tmp_path / "b",
                        timeout=600)
    assert four.result.resumed_from == 4
    assert sorted(four.result.losses) == [5, 6]
    assert_losses_close(four.result.losses, {5: straight.result.losses[5], 6: straight.result.losses[6]})
    assert_params_close(four.params, straight.params)
