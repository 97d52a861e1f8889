"""Weak and strong scaling of the built-in trainer, DDP and FSDP2, against the seed targets.

    python bench/scaling.py [--worlds 1,2] [--strategies ddp,fsdp] [--batch 8] [--steps 20]
                            [--warmup 5] [--rounds 2] [--model gpt-nano] [--csv FILE]

weak    fixed batch per process (--batch), world 1 -> 2 -> N: efficiency = t(1) / t(N),
        the step time of the smallest world over that of world N (ideal: constant).
strong  fixed global batch (--batch x the largest world), split over the processes:
        efficiency = n0 t(n0) / (N t(N)) for the smallest world n0 (ideal: t falls as 1/N).
Targets (the project's seed plan): weak > 90 %, strong > 80 %.

Every run is the trainer itself (`build` + `loop.run`, the code a pod runs): one torchrun
per world size times each of its configurations in turn, in the same processes, warm-up
steps first, then the timed steps between two barriers (slowest rank). The whole set is
repeated --rounds times in alternating order and each configuration's median is used, so
load that comes and goes hits every world size alike.
On a machine without CUDA: gloo, one thread per process (OMP_NUM_THREADS=1). With CUDA
(or --device cuda): nccl, one GPU per process, bf16-mixed unless --precision says
otherwise; the world sizes are arguments, e.g. `--worlds 1,2,4,8` on an 8-GPU node.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"weak": 0.90, "strong": 0.80}
NAMES = {"ddp": "DDP", "fsdp": "FSDP2"}


@dataclass(frozen=True, slots=True)
class RunKey:
    strategy: str
    world: int
    batch: int  # per process


def plan(worlds: list[int], strategies: list[str], batch: int) -> dict[str, list[tuple[str, RunKey]]]:
    """Per strategy: (kind, run) rows; weak and strong share the runs they have in common."""
    top = max(worlds)
    rows: dict[str, list[tuple[str, RunKey]]] = {}
    for strategy in strategies:
        rows[strategy] = [("weak", RunKey(strategy, w, batch)) for w in worlds]
        rows[strategy] += [("strong", RunKey(strategy, w, batch * top // w)) for w in worlds]
    return rows


def efficiency(kind: str, base: tuple[RunKey, float], run: tuple[RunKey, float]) -> float:
    (k0, t0), (k, t) = base, run
    if kind == "weak":
        return t0 / t
    return (k0.world * t0) / (k.world * t)


def launch(world: int, keys: list[RunKey], args: argparse.Namespace, out: Path) -> dict[RunKey, float]:
    """One torchrun of `world` processes timing the trainer on each of `keys` in turn;
    seconds per step (slowest rank) of each."""
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    env = dict(os.environ, PYTHONWARNINGS="ignore", TORCH_CPP_LOG_LEVEL="ERROR",
               PYTHONPATH=os.pathsep.join([str(ROOT / "trainer"), os.environ.get("PYTHONPATH", "")]))
    if args.device == "cpu":
        env["OMP_NUM_THREADS"] = "1"
    runs = ",".join(f"{k.strategy}:{k.batch}" for k in keys)
    cmd = [torchrun, "--standalone", f"--nproc-per-node={world}", __file__, "--worker", f"--runs={runs}",
           f"--steps={args.steps}", f"--warmup={args.warmup}", f"--model={args.model}", f"--device={args.device}",
           f"--precision={args.precision}", f"--out={out}"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"world {world} ({runs}) failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    measured = json.loads(out.read_text())
    return {k: measured[f"{k.strategy}:{k.batch}"] for k in keys}


def worker(args: argparse.Namespace) -> None:
    import logging
    import time

    import torch
    import torch.distributed as dist

    from disttrain_trainer import loop
    from disttrain_trainer.__main__ import build
    from disttrain_trainer.config import Config, DataConfig, ModelConfig, ParallelConfig, TrainConfig
    from disttrain_trainer.context import RunContext

    logging.getLogger("disttrain_trainer").disabled = True
    if args.device == "cpu":
        torch.set_num_threads(1)
    # One process group for every run of this world size: RunContext joins it as it is.
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    measured: dict[str, float] = {}
    for run in args.runs.split(","):
        strategy, batch = run.split(":")
        cfg = Config(model=ModelConfig(name=args.model), data=DataConfig(batch_size=int(batch), seed=1),  # type: ignore[arg-type]
                     parallel=ParallelConfig(strategy=strategy, precision=args.precision,  # type: ignore[arg-type]
                                             # one GPU per process: as many per node as processes
                                             gpus_per_node=int(os.environ["LOCAL_WORLD_SIZE"]) if args.device == "cuda" else 0),
                     train=TrainConfig(steps=args.warmup, learning_rate=1e-3, log_every=10))
        with RunContext.open(cfg.parallel) as ctx:
            c = build(cfg, ctx)
            loop.run(c, ctx, cfg.train)  # warm-up: allocations, FSDP lazy init, caches
            cfg.train.steps = args.warmup + args.steps
            ctx.barrier()
            if ctx.device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            loop.run(c, ctx, cfg.train)
            if ctx.device.type == "cuda":
                torch.cuda.synchronize()
            elapsed = torch.tensor([time.perf_counter() - t0], device=ctx.device)
            if ctx.world_size > 1:
                dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
            c.metrics.close()
            measured[run] = float(elapsed) / args.steps
    if dist.get_rank() == 0:
        Path(args.out).write_text(json.dumps(measured))
    dist.destroy_process_group()


def measure(args: argparse.Namespace) -> int:
    worlds = sorted({int(w) for w in args.worlds.split(",")})
    strategies = args.strategies.split(",")
    for s in strategies:
        if s not in NAMES:
            sys.exit(f"--strategies: {s!r} is not one of {', '.join(NAMES)}")
    if worlds[0] < 1:
        sys.exit(f"--worlds: {args.worlds!r} must be positive integers, e.g. 1,2,4")
    top = max(worlds)
    if any(args.batch * top % w for w in worlds):
        sys.exit(f"--worlds {args.worlds} with --batch {args.batch}: the strong-scaling global batch "
                 f"{args.batch * top} must divide by every world size; pick a --batch that makes it so")
    rows = plan(worlds, strategies, args.batch)
    runs = sorted({key for keyed in rows.values() for _, key in keyed}, key=lambda k: (k.world, k.strategy, k.batch))
    times: dict[RunKey, list[float]] = {k: [] for k in runs}
    args.load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = worlds if r % 2 == 0 else worlds[::-1]
            for world in order:
                keys = [k for k in runs if k.world == world]
                keys = keys if r % 2 == 0 else keys[::-1]
                print(f"round {r + 1}/{args.rounds}: world {world}: "
                      + ", ".join(f"{NAMES[k.strategy]} batch {k.batch}" for k in keys), file=sys.stderr, flush=True)
                for key, t in launch(world, keys, args, Path(tmp) / f"{r}-{world}.json").items():
                    times[key].append(t)
    args.load.append(os.getloadavg()[0])
    median = {k: statistics.median(v) for k, v in times.items()}
    report(args, worlds, rows, median)
    return 0


def report(args: argparse.Namespace, worlds: list[int], rows: dict[str, list[tuple[str, RunKey]]],
           median: dict[RunKey, float]) -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    where = (f"{args.device}/nccl, 1 GPU per process" if args.device == "cuda"
             else f"cpu/gloo, 1 thread per process, {cores} cores visible")
    print(f"\nscaling of the built-in trainer: {args.model}, {where}, precision {args.precision}; "
          f"{args.steps} timed steps after {args.warmup} warm-up, median of {args.rounds} rounds")
    print(f"{'strategy':<8} {'kind':<6} {'world':>5} {'batch/proc':>10} {'global':>6} {'ms/step':>9} "
          f"{'samples/s':>10} {'efficiency':>10}  target")
    table = []
    for strategy, keyed in rows.items():
        for kind, key in keyed:
            base = next(k for knd, k in keyed if knd == kind and k.world == worlds[0])
            t = median[key]
            eff = efficiency(kind, (base, median[base]), (key, t))
            target = TARGETS[kind]
            verdict = "" if key.world == worlds[0] else f"> {100 * target:.0f} % {'met' if eff > target else 'MISSED'}"
            sps = key.batch * key.world / t
            print(f"{NAMES[strategy]:<8} {kind:<6} {key.world:>5} {key.batch:>10} {key.batch * key.world:>6} "
                  f"{1000 * t:>9.2f} {sps:>10.1f} {100 * eff:>9.1f}%  {verdict}")
            table.append({"strategy": strategy, "kind": kind, "world": key.world, "batch_per_process": key.batch,
                          "global_batch": key.batch * key.world, "seconds_per_step": t, "samples_per_second": sps,
                          "efficiency": eff, "target": target})
    if args.device == "cpu":
        print(f"load average (1 min) {args.load[0]:.1f} at the start, {args.load[-1]:.1f} at the end, on {cores} cores")
        if max(worlds) > (cores or 1) or max(args.load) > (cores or 1) / 2:
            print(f"note: {max(worlds)} processes on {cores} cores with other work running: the larger worlds "
                  "measure CPU contention as much as the trainer's communication")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(table[0]))
            writer.writeheader()
            writer.writerows(table)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worlds", default="1,2", help="world sizes, comma-separated (default 1,2)")
    p.add_argument("--strategies", default="ddp,fsdp", help="ddp and/or fsdp (default both)")
    p.add_argument("--batch", type=int, default=8, help="per-process batch of weak scaling (default 8)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per run (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    p.add_argument("--rounds", type=int, default=2, help="repetitions, medians reported (default 2)")
    p.add_argument("--model", default="gpt-nano", choices=["gpt-nano", "gpt-small"])
    p.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda if available")
    p.add_argument("--precision", choices=["32", "bf16-mixed", "16-mixed"], default=None,
                   help="default: bf16-mixed on cuda, 32 on cpu")
    p.add_argument("--csv", default="", help="also write the table to this CSV file")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default="", help=argparse.SUPPRESS)
    p.add_argument("--runs", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.device is None:
        import torch
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.precision is None:
        args.precision = "bf16-mixed" if args.device == "cuda" else "32"
    for name in ("batch", "steps", "rounds"):
        if getattr(args, name) < 1:
            sys.exit(f"--{name}={getattr(args, name)} must be >= 1")
    if args.worker:
        worker(args)
        return 0
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
