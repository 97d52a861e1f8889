"""Trainer overhead vs bare PyTorch loops, and async vs sync checkpoint stall.

    python bench/trainer_overhead.py [--nproc 2] [--steps 30] [--rounds 3] [--model gpt-nano]

Launches itself under torchrun (gloo on CPU, OMP_NUM_THREADS=1 per process, the same for
every variant) and, in one run, compares:
  bare DDP     a tutorial DDP loop: forward, loss, backward, clip, AdamW, LR schedule
  ours DDP     disttrain_trainer's loop.run (strategy ddp) on the same model and data
  bare FSDP2   the same bare loop with fully_shard per block + root
  ours FSDP2   loop.run (strategy fsdp)
Bare and ours run in the same processes, alternating chunks of 5 steps (rounds x steps
steps each), so machine load hits both alike; the ratio is the median of the per-chunk-pair
ratios.
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

    def bare_loop(strategy: str):  # type: ignore[no-untyped-def]
        """A tutorial loop on the same model and data; returns step(i)."""
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
        perm = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(1))

        def step(i: int) -> None:
            i %= len(dataset) // (world * args.batch)
            idx = perm[(i * world + rank) * args.batch:(i * world + rank + 1) * args.batch]
            x, y = dataset.get(idx)
            loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)

        return step

    def overhead(strategy: str) -> tuple[float, float, float]:
        """Alternate chunks of `chunk` steps of the bare loop and of ours, in the same
        processes, so both see the same machine load; (bare s/step, ours s/step, median
        of the per-pair ratios)."""
        chunk = 5
        cfg = config(strategy, warmup)
        with RunContext.open(cfg.parallel) as ctx:
            c = build(cfg, ctx)
            loop.run(c, ctx, cfg.train)  # our warm-up
            bare_step = bare_loop(strategy)
            for i in range(warmup):
                bare_step(i)
            bare_t, ours_t, n = [], [], warmup
            for r in range(args.rounds * args.steps // chunk):
                for which in (("bare", "ours") if r % 2 == 0 else ("ours", "bare")):
                    dist.barrier()
                    t0 = time.perf_counter()
                    if which == "bare":
                        for i in range(n, n + chunk):
                            bare_step(i)
                    else:
                        cfg.train.steps += chunk
                        loop.run(c, ctx, cfg.train)
                    dist.barrier()
                    (bare_t if which == "bare" else ours_t).append((time.perf_counter() - t0) / chunk)
                n += chunk
            c.metrics.close()
        ratio = statistics.median(o / b for o, b in zip(ours_t, bare_t, strict=True))
        return statistics.median(bare_t), statistics.median(ours_t), ratio

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

    results = {"DDP": overhead("ddp"), "FSDP2": overhead("fsdp")}

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
              f"batch {args.batch}/rank; bare and ours alternate in chunks of 5 steps in the same "
              f"processes, {args.rounds * args.steps} steps each (medians)")
        for name, (bare_s, ours_s, ratio) in results.items():
            print(f"  {name:<5}  bare {1000 * bare_s:8.2f} ms/step   ours {1000 * ours_s:8.2f} ms/step   "
                  f"ratio ours/bare {ratio:.3f}  (target <= 1.05)")
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
    p.add_argument("--rounds", type=int, default=4)
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
