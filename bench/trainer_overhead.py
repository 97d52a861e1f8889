"""Trainer overhead vs bare PyTorch loops, and async vs sync checkpoint stall.

    python bench/trainer_overhead.py [--nproc 2] [--steps 30] [--rounds 3] [--model gpt-nano]

Launches itself under torchrun (gloo on CPU, OMP_NUM_THREADS=1 per process, the same for
every variant) and, in one run, interleaves rounds of:
  bare DDP     a tutorial DDP loop: forward, loss, backward, clip, AdamW, LR schedule
  ours DDP     disttrain_trainer's loop.run (strategy ddp) on the same model and data
  bare FSDP2   the same bare loop with fully_shard per block + root
  ours FSDP2   loop.run (strategy fsdp)
Each variant's step time is the median over rounds of (wall time of `steps` steps) / steps.
Then the checkpoint stall: loop.run with a save every few steps, synchronous vs
dcp.async_save, minus the same run without saves, per save.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def launch(args: argparse.Namespace) -> int:
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", TORCH_CPP_LOG_LEVEL="ERROR",
               PYTHONPATH=os.pathsep.join([str(ROOT / "trainer"), os.environ.get("PYTHONPATH", "")]))
    cmd = [torchrun, "--standalone", f"--nproc-per-node={args.nproc}", __file__, "--worker",
           f"--steps={args.steps}", f"--rounds={args.rounds}", f"--model={args.model}", f"--batch={args.batch}"]
    return subprocess.call(cmd, env=env)


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    from disttrain_trainer import loop
    from disttrain_trainer.__main__ import build
    from disttrain_trainer.config import CheckpointConfig, Config, DataConfig, ModelConfig, ParallelConfig, TrainConfig
    from disttrain_trainer.context import RunContext
    from disttrain_trainer.data import CLASSES, IN_FEATURES, VOCAB_SIZE, build_dataset
    from disttrain_trainer.models import model_spec

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    logging_off()
    spec = model_spec(args.model, dataset="text", vocab_size=VOCAB_SIZE, in_features=IN_FEATURES, classes=CLASSES)
    dataset = build_dataset("text", seq_len=spec.context, seed=1)
    warmup = 5

    def config(strategy: str, steps: int, ckpt: str = "", interval: int = 0, async_save: bool = False) -> Config:
        return Config(model=ModelConfig(name=args.model), data=DataConfig(batch_size=args.batch, seed=1),  # type: ignore[arg-type]
                      parallel=ParallelConfig(strategy=strategy),  # type: ignore[arg-type]
                      train=TrainConfig(steps=steps, learning_rate=1e-3, log_every=10),
                      checkpoint=CheckpointConfig(dir=ckpt, interval_steps=interval, keep=2, async_save=async_save))

    def bare(strategy: str) -> float:
        torch.manual_seed(0)
        model = spec.build()
        if strategy == "ddp":
            model = DDP(model)
        else:
            for block in model.blocks:  # type: ignore[union-attr]
                fully_shard(block)
            fully_shard(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        g = torch.Generator().manual_seed(1)
        perm = torch.randperm(len(dataset), generator=g)

        def step(i: int) -> None:
            idx = perm[(i * world + rank) * args.batch:(i * world + rank + 1) * args.batch]
            x, y = dataset.get(idx)
            loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)

        for i in range(warmup):
            step(i)
        dist.barrier()
        t0 = time.perf_counter()
        for i in range(warmup, warmup + args.steps):
            step(i)
        dist.barrier()
        return (time.perf_counter() - t0) / args.steps

    def ours(strategy: str, ckpt: str = "", interval: int = 0, async_save: bool = False) -> tuple[float, list[float]]:
        cfg = config(strategy, warmup, ckpt, interval, async_save)
        with RunContext.open(cfg.parallel) as ctx:
            c = build(cfg, ctx)
            loop.run(c, ctx, cfg.train)  # warm-up steps
            cfg.train.steps = warmup + args.steps
            blocked: list[float] = []
            if ckpt:  # record how long each save blocked the loop
                save = c.checkpoint.save
                c.checkpoint.save = lambda step, **kw: blocked.append(save(step, **kw)) or blocked[-1]  # type: ignore[method-assign]
            # The clock stops at the last step, before the final save/flush of loop.run.
            last = [0.0]
            record = c.metrics.record_step
            c.metrics.record_step = lambda *a: (last.__setitem__(0, time.perf_counter()), record(*a))[1]  # type: ignore[method-assign]
            dist.barrier()
            t0 = time.perf_counter()
            loop.run(c, ctx, cfg.train)
            dist.barrier()
            c.metrics.close()
            elapsed = torch.tensor([last[0] - t0])
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
            return float(elapsed) / args.steps, blocked

    times: dict[str, list[float]] = {k: [] for k in ("bare DDP", "ours DDP", "bare FSDP2", "ours FSDP2")}
    for _ in range(args.rounds):
        times["bare DDP"].append(bare("ddp"))
        times["ours DDP"].append(ours("ddp")[0])
        times["bare FSDP2"].append(bare("fsdp"))
        times["ours FSDP2"].append(ours("fsdp")[0])
    med = {k: statistics.median(v) for k, v in times.items()}

    interval = max(2, args.steps // 4)  # saves inside the window, none on its last step
    stall: dict[str, tuple[float, float, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        shared = [tmp]
        dist.broadcast_object_list(shared, src=0)
        base = statistics.median(ours("ddp")[0] for _ in range(2))
        for mode in ("sync", "async"):
            extra, blocked_all = [], []
            for r in range(2):
                d = os.path.join(shared[0], f"{mode}{r}")
                per_step, blocked = ours("ddp", d, interval, mode == "async")
                saves = max(1, len(blocked))
                extra.append((per_step - base) * args.steps / saves)
                blocked_all += blocked
            stall[mode] = (statistics.median(extra), statistics.median(blocked_all), len(blocked_all))
        dist.barrier()

    if rank == 0:
        print(f"\ndisttrain trainer overhead: {args.model}, {world} processes x 1 thread, gloo/CPU, "
              f"batch {args.batch}/rank, {args.steps} steps x {args.rounds} interleaved rounds (medians)")
        for k, v in med.items():
            print(f"  {k:<11} {1000 * v:8.2f} ms/step")
        for name in ("DDP", "FSDP2"):
            paired = statistics.median(o / b for o, b in zip(times[f"ours {name}"], times[f"bare {name}"]))
            print(f"  ratio ours/bare {name:<5} = {med[f'ours {name}'] / med[f'bare {name}']:.3f} "
                  f"(ratio of medians), {paired:.3f} (median of per-round ratios)   target <= 1.05")
        print(f"checkpoint stall per save (DDP, save every {interval} steps, "
              f"{base * 1000:.2f} ms/step without saves):")
        for mode, (e2e, blocked, n) in stall.items():
            print(f"  {mode:<5}  blocked in save() {1000 * blocked:8.1f} ms   extra wall time {1000 * e2e:8.1f} ms   ({n} saves)")
        print(f"  ratio async/sync: blocked {stall['async'][1] / stall['sync'][1]:.3f}, "
              f"extra wall time {stall['async'][0] / max(stall['sync'][0], 1e-9):.3f}")
    dist.destroy_process_group()


def logging_off() -> None:
    import logging
    logging.getLogger("disttrain_trainer").disabled = True


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--model", default="gpt-nano", choices=["gpt-nano", "gpt-small"])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return 0
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
