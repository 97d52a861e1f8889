"""Test entry point run under torchrun: the trainer's own components, plus a dump of the
final full parameters and logged losses for the parity and resharding tests.

Env (test-only): TEST_CONFIG (pickled Config), TEST_OUT (result file, written by rank 0),
TEST_KILL_AT_SAVE_STEP / TEST_KILL_RANK (SIGKILL that rank after it wrote its shards of
that step's checkpoint, before the save is committed), TEST_FORCE_PRECISION (skip the
CPU guardrail that turns 16-mixed into 32, to exercise fp16 FSDP on gloo), TEST_RECORD_PRECISION
(record the dtype and bytes of FSDP's all-gathers and reduce-scatters and the dtype the
first block's weights have in forward).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import signal
import sys
from collections import Counter

import torch
import torch.distributed as dist
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


def _record_comms(record: Counter) -> None:
    """Count bytes per (collective, dtype) of the collectives FSDP2 issues (torch 2.15 calls
    dist.all_gather_single / dist.reduce_scatter_single; the test fails if none is seen)."""
    for name in ("all_gather_single", "reduce_scatter_single"):
        original = getattr(dist, name)

        def wrapped(*args, _original=original, _name=name, **kwargs):  # type: ignore[no-untyped-def]
            tensor = kwargs.get("input", args[1] if len(args) > 1 else None)
            record[(_name, str(tensor.dtype))] += tensor.numel() * tensor.element_size()
            return _original(*args, **kwargs)

        setattr(dist, name, wrapped)


def run(cfg, env=None):  # type: ignore[no-untyped-def]
    env_ = os.environ if env is None else env
    comms: Counter = Counter()
    weight_dtypes: set[str] = set()
    if env_.get("TEST_RECORD_PRECISION"):
        _record_comms(comms)
    with RunContext.open(cfg.parallel, env=env) as ctx:
        if env_.get("TEST_FORCE_PRECISION"):
            ctx.resolved = dataclasses.replace(ctx.resolved, precision=env_["TEST_FORCE_PRECISION"])
        c = build(cfg, ctx)
        if env_.get("TEST_RECORD_PRECISION"):
            c.model.blocks[0].mlp.fc.register_forward_pre_hook(
                lambda m, _: weight_dtypes.add(str(m.weight.dtype)))
        try:
            result = loop.run(c, ctx, cfg.train)
        finally:
            c.metrics.close()
        params = get_model_state_dict(c.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        result.comms = dict(comms)  # type: ignore[attr-defined]
        result.weight_dtypes = sorted(weight_dtypes)  # type: ignore[attr-defined]
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
