"""What a synchronous checkpoint save does to the training steps that follow it.

    python bench/checkpoint_slowdown.py [--steps 60] [--interval 4] [--log-every 2] [--runs 3]

One process, the built-in trainer on gpt-nano (a world of one, CPU), logging windows of
`--log-every` steps and a real DCP save every `--interval` steps. The trainer leaves the
save's own seconds out of the window it falls in (tests/trainer/test_metrics.py pins that
exactly on a fake clock); this bench measures, on this machine, whether the steps right
after a save are slower all the same (page cache, allocator): the ratio of the median
samples/s of the windows that follow a save to that of the other windows, both as the
trainer reports them and timed naively (save included), side by side in one run.
Timings live here, never in tests: a busy machine moves them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "trainer"), str(ROOT / "operator")]


class Recorder:
    def __init__(self) -> None:
        self.steps: list[tuple[float, object]] = []
        self.saves: dict[int, float] = {}

    def step(self, m) -> None:
        self.steps.append((time.perf_counter(), m))

    def checkpoint(self, info) -> None:
        if info.save_seconds:
            self.saves[info.step] = info.blocked_seconds

    def eval(self, step, loss, metrics) -> None:
        pass

    def close(self) -> None:
        pass


def one_run(args: argparse.Namespace, workdir: str) -> tuple[list[float], list[float], list[float], list[float]]:
    from disttrain_trainer import loop
    from disttrain_trainer.__main__ import build
    from disttrain_trainer.config import (CheckpointConfig, Config, DataConfig, EvalConfig, ModelConfig,
                                          ParallelConfig, TrainConfig)
    from disttrain_trainer.context import RunContext

    cfg = Config(model=ModelConfig(name="gpt-nano"), data=DataConfig(dataset="text", batch_size=4, seq_len=16, seed=7),
                 parallel=ParallelConfig(strategy="none", precision="32"),
                 train=TrainConfig(steps=args.steps, learning_rate=3e-3, log_every=args.log_every, warmup_steps=2,
                                   seed=11),
                 checkpoint=CheckpointConfig(dir=workdir, interval_steps=args.interval, keep=100),
                 eval=EvalConfig())
    rec = Recorder()
    with RunContext.open(cfg.parallel, env={}) as ctx:
        c = build(cfg, ctx)
        c.metrics.sinks.append(rec)
        try:
            loop.run(c, ctx, cfg.train)
        finally:
            c.metrics.close()
    windows = {m.step: (t, m) for t, m in rec.steps if m.loss is not None}
    after = {s + args.log_every for s in rec.saves}
    reported_after, reported_other, naive_after, naive_other = [], [], [], []
    for step, (stamp, m) in windows.items():
        if step <= args.log_every or step - args.log_every not in windows:
            continue  # the first window holds start-up
        naive = args.log_every * cfg.data.batch_size / (stamp - windows[step - args.log_every][0])
        (reported_after if step in after else reported_other).append(m.samples_per_second)
        (naive_after if step in after else naive_other).append(naive)
    return reported_after, reported_other, naive_after, naive_other


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--interval", type=int, default=4)
    parser.add_argument("--log-every", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    rows = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="disttrain-bench-ckpt-") as workdir:
            ra, ro, na, no = one_run(args, workdir)
        rows.append((statistics.median(ra) / statistics.median(ro), statistics.median(na) / statistics.median(no)))
        print(f"run {run + 1}: windows after a save {len(ra)}, others {len(ro)}; samples/s after/others: "
              f"reported {rows[-1][0]:.3f}, naive (save included) {rows[-1][1]:.3f}")
    print(f"median over {args.runs} runs: reported {statistics.median(r[0] for r in rows):.3f}, "
          f"naive {statistics.median(r[1] for r in rows):.3f} "
          "(1.0: the steps after a save run as fast as the others)")


if __name__ == "__main__":
    main()
