"""What disttrain.train.Session costs a loop of the user's own, per step.

    python bench/session_overhead.py [--nproc 2] [--chunks 12] [--chunk-steps 10] [--width 1024]

Launches itself under torchrun (gloo on CPU, OMP_NUM_THREADS=1 per process) and trains one
DDP MLP whose step takes about 50 ms on one core (--width sizes it), alternating chunks of
`--chunk-steps` steps:
  bare     the loop alone
  session  the same loop calling session.step(step, loss=loss) after every step, with the
           session on as in a pod (its /status server on local rank 0, a control token)
Chunks alternate so machine load hits both alike; the overhead is the median of the
per-chunk-pair ratios. The goal (issue 51): under 1 %.
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
               PYTHONPATH=os.pathsep.join([str(ROOT / "operator"), str(ROOT / "trainer"),
                                           os.environ.get("PYTHONPATH", "")]))
    with tempfile.TemporaryDirectory() as tmp:
        env |= {"DISTTRAIN_JOB_NAME": "bench", "DISTTRAIN_METRICS_PORT": str(free_port()),
                "DISTTRAIN_CONTROL_TOKEN": "bench", "DISTTRAIN_TERMINATION_LOG": os.path.join(tmp, "report")}
        cmd = [torchrun, "--standalone", f"--nproc-per-node={args.nproc}", __file__, "--worker",
               f"--chunks={args.chunks}", f"--chunk-steps={args.chunk_steps}", f"--width={args.width}"]
        return subprocess.call(cmd, env=env)


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(args: argparse.Namespace) -> None:
    import logging

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from disttrain.train import Session

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    logging.getLogger("disttrain_trainer").setLevel(logging.WARNING)
    torch.manual_seed(0)
    w = args.width
    model = DDP(nn.Sequential(nn.Linear(w, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(), nn.Linear(w, 1)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, y = torch.randn(256, w), torch.randn(256, 1)

    def train_step() -> torch.Tensor:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    for _ in range(5):  # warm-up
        train_step()
    total = 2 * args.chunks * args.chunk_steps
    bare: list[float] = []
    ours: list[float] = []
    step = 0
    with Session(total_steps=total, samples_per_step=256 * dist.get_world_size()) as session:
        for _ in range(args.chunks):
            for timed, report in ((bare, False), (ours, True)):
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(args.chunk_steps):
                    loss = train_step()
                    step += 1
                    if report:
                        session.step(step, loss=loss)
                timed.append((time.perf_counter() - t0) / args.chunk_steps)
    if rank == 0:
        ratios = [o / b for b, o in zip(bare, ours, strict=True)]
        print(f"{'variant':<10}{'ms/step (median)':>18}")
        print(f"{'bare':<10}{1000 * statistics.median(bare):>18.2f}")
        print(f"{'session':<10}{1000 * statistics.median(ours):>18.2f}")
        print(f"session / bare: x{statistics.median(ratios):.4f} (median of {len(ratios)} chunk pairs; "
              f"goal under x1.01)")
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=12)
    parser.add_argument("--chunk-steps", type=int, default=10)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return 0
    return launch(args)


if __name__ == "__main__":
    raise SystemExit(main())
