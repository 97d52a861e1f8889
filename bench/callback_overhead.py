"""What disttrain.train's Transformers and Lightning callbacks cost a step of the framework's
own loop.

    python bench/callback_overhead.py [--rounds 6] [--chunk-steps 30] [--width 1024]

In one process (OMP_NUM_THREADS=1), an MLP whose step takes about 50 ms on one core
(--width sizes it) trains in each framework's Trainer, alternating chunks of
`--chunk-steps` steps:
  bare      the Trainer alone
  callback  the same Trainer with DisttrainCallback, the session on as in a pod (its
            /status server, a control token)
A chunk's step time is the median gap between consecutive ends of a step (measured by a
last callback, so it includes every other callback's work); the first steps of each chunk
are warm-up and not counted. Chunks alternate so machine load hits both alike; the
overhead is the median of the per-chunk-pair ratios. The goal (issue 51): under 1 %.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "trainer"), str(ROOT / "operator")]

import torch  # noqa: E402
from torch import nn  # noqa: E402

WARMUP = 5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pod_env(tmp: str) -> dict[str, str]:
    """What a disttrain pod gives the session (docs/pod-contract.md)."""
    return {"DISTTRAIN_JOB_NAME": "bench", "DISTTRAIN_NAMESPACE": "bench", "DISTTRAIN_POD_NAME": "bench-worker-0",
            "DISTTRAIN_METRICS_PORT": str(free_port()), "DISTTRAIN_CONTROL_TOKEN": "bench-token",
            "DISTTRAIN_TERMINATION_LOG": os.path.join(tmp, "report")}


def mlp(width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))


class Data(torch.utils.data.Dataset):
    def __init__(self, width: int, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, width, generator=g), torch.randn(n, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> Any:
        return self.x[i], self.y[i]


def step_times(ends: list[float]) -> float:
    gaps = [b - a for a, b in zip(ends[WARMUP:], ends[WARMUP + 1:])]
    return statistics.median(gaps)


def transformers_chunk(args: argparse.Namespace, with_callback: bool, tmp: str) -> float:
    from transformers import Trainer, TrainerCallback, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    from disttrain.train.hf import DisttrainCallback

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = mlp(args.width)

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"loss": nn.functional.mse_loss(self.net(x).squeeze(-1), labels)}

    ends: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, *a: Any, **k: Any) -> None:
            ends.append(time.perf_counter())

    def collate(samples: list[Any]) -> dict[str, torch.Tensor]:
        return {"x": torch.stack([s[0] for s in samples]), "labels": torch.stack([s[1] for s in samples])}

    training = TrainingArguments(output_dir=os.path.join(tmp, "hf"), max_steps=args.chunk_steps,
                                 per_device_train_batch_size=args.batch, logging_steps=10, save_strategy="no",
                                 report_to="none", use_cpu=True, disable_tqdm=True, dataloader_num_workers=0)
    callbacks = [DisttrainCallback(env=pod_env(tmp))] if with_callback else []
    torch.manual_seed(0)
    trainer = Trainer(model=Model(), args=training, train_dataset=Data(args.width, args.batch * args.chunk_steps),
                      data_collator=collate, callbacks=[*callbacks, Clock()])
    trainer.remove_callback(PrinterCallback)  # its per-log print is not what is measured
    trainer.train()
    return step_times(ends)


def lightning_chunk(args: argparse.Namespace, with_callback: bool, tmp: str) -> float:
    import lightning as L

    from disttrain.train.lightning import DisttrainCallback

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = mlp(args.width)

        def training_step(self, batch: Any, index: int) -> torch.Tensor:
            x, y = batch
            loss = nn.functional.mse_loss(self.net(x).squeeze(-1), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    ends: list[float] = []

    class Clock(L.Callback):
        def on_train_batch_end(self, *a: Any, **k: Any) -> None:
            ends.append(time.perf_counter())

    callbacks = [DisttrainCallback(env=pod_env(tmp))] if with_callback else []
    loader = torch.utils.data.DataLoader(Data(args.width, args.batch * args.chunk_steps), batch_size=args.batch)
    torch.manual_seed(0)
    trainer = L.Trainer(max_steps=args.chunk_steps, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        log_every_n_steps=10, callbacks=[*callbacks, Clock()], default_root_dir=tmp)
    trainer.fit(Module(), loader)
    return step_times(ends)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6, help="chunk pairs per framework")
    parser.add_argument("--chunk-steps", type=int, default=30)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    torch.set_num_threads(1)
    import logging
    import warnings
    logging.disable(logging.WARNING)  # the frameworks' notes about CPU training
    warnings.filterwarnings("ignore")
    print(f"{'framework':<13}{'bare ms/step':>14}{'callback ms/step':>18}{'callback/bare':>15}")
    for name, chunk in (("transformers", transformers_chunk), ("lightning", lightning_chunk)):
        bare, cb, ratios = [], [], []
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.rounds):
                b, c = chunk(args, False, tmp), chunk(args, True, tmp)
                bare.append(b)
                cb.append(c)
                ratios.append(c / b)
        print(f"{name:<13}{1000 * statistics.median(bare):>14.2f}{1000 * statistics.median(cb):>18.2f}"
              f"{statistics.median(ratios):>14.4f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
