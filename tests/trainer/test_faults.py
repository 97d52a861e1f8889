"""The trainer's test hooks (faults.py): the hang hook stops exactly one rank in exactly
one step, once per checkpoint folder, until SIGTERM; and the hooks come from the pod env
under names a job's spec.env may set."""

from __future__ import annotations

import threading

import pytest
from disttrain_trainer.config import Config
from disttrain_trainer.faults import HANG_MARKER, HangHook, HungByTest


def test_the_hook_hangs_the_one_rank_in_the_one_step_until_stopped(tmp_path):
    hook = HangHook(at_step=5, rank=1, marker_dir=str(tmp_path))
    stop = threading.Event()
    hook.before_step(5, 0, stop)  # another rank: no hang
    hook.before_step(4, 1, stop)  # another step: no hang
    assert not (tmp_path / HANG_MARKER).exists()
    outcome: list[BaseException] = []

    def hang() -> None:
        try:
            hook.before_step(5, 1, stop)
        except HungByTest as exc:
            outcome.append(exc)

    thread = threading.Thread(target=hang)
    thread.start()
    thread.join(timeout=2.5)
    assert thread.is_alive() and (tmp_path / HANG_MARKER).exists()  # hanging, and it says so on disk
    stop.set()  # SIGTERM
    thread.join(timeout=10)
    assert not thread.is_alive() and "stopped while hanging in step 5" in str(outcome[0])
    # Once per folder: the restarted job passes the same step.
    hook.before_step(5, 1, threading.Event())


def test_off_by_default_and_read_from_names_spec_env_may_set():
    assert HangHook().at_step == 0
    cfg = Config.from_env({"DT_TEST_HANG_AT_STEP": "12", "DT_TEST_HANG_RANK": "0"})
    assert (cfg.test_hang_at_step, cfg.test_hang_rank) == (12, 0)
    assert (Config.from_env({}).test_hang_at_step, Config.from_env({}).test_hang_rank) == (0, 1)
    with pytest.raises(ValueError, match="DT_TEST_HANG_AT_STEP='soon' is not an integer"):
        Config.from_env({"DT_TEST_HANG_AT_STEP": "soon"})


def test_the_slow_rank_hook_is_off_by_default_and_refuses_a_factor_it_cannot_use():
    assert (Config.from_env({}).test_slow_rank, Config.from_env({}).test_slow_factor) == (-1, 2.0)
    cfg = Config.from_env({"DT_TEST_SLOW_RANK": "1", "DT_TEST_SLOW_FACTOR": "3.5"})
    assert (cfg.test_slow_rank, cfg.test_slow_factor) == (1, 3.5)
    for bad in ("0.5", "fast", "1000"):
        with pytest.raises(ValueError, match=f"DT_TEST_SLOW_FACTOR='{bad}' is not a number from 1 to 100"):
            Config.from_env({"DT_TEST_SLOW_FACTOR": bad})
