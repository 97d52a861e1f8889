"""Test entry point run under torchrun: the trainer's own components, plus a dump of the
final full parameters and logged losses for the parity and resharding tests.

Env (test-only): TEST_CONFIG (pickled Config), TEST_OUT (result file, written by rank 0),
TEST_KILL_AT_SAVE_STEP / TEST_KILL_RANK (SIGKILL that rank after it wrote its shards of
that step's checkpoint, before the save is committed).
"""

from __future__ import annotations

import os
import pickle
import signal
import sys

import torch
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from disttrain_trainer import loop
from disttrain_trainer.__main__ import build
from disttrain_trainer.context import RunContext


def _arm_kill(step: int, rank: int) -> None:
    original = FileSystemWriter.write_data

    def write_data(self, plan, planner):  # type: ignore[no-untyped-def]
        fut = original(self, plan, planner)
        fut.wait()
        if f"step-{step:08d}" in str(self.path) and int(os.environ["RANK"]) == rank:
            print(f"TEST: killing rank {rank} mid-save of step {step}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return fut

    FileSystemWriter.write_data = write_data  # type: ignore[method-assign]


def run(cfg, env=None):  # type: ignore[no-untyped-def]
    with RunContext.open(cfg.parallel, env=env) as ctx:
        c = build(cfg, ctx)
        try:
            result = loop.run(c, ctx, cfg.train)
        finally:
            c.metrics.close()
        params = get_model_state_dict(c.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return ctx.rank, result, {k: v.clone() for k, v in params.items()}


def main() -> None:
    with open(os.environ["TEST_CONFIG"], "rb") as f:
        cfg = pickle.load(f)
    if "TEST_KILL_AT_SAVE_STEP" in os.environ:
        _arm_kill(int(os.environ["TEST_KILL_AT_SAVE_STEP"]), int(os.environ.get("TEST_KILL_RANK", "1")))
    rank, result, params = run(cfg)
    if rank == 0:
        torch.save({"result": result, "params": params}, os.environ["TEST_OUT"])


if __name__ == "__main__":
    main()
