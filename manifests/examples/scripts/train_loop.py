"""A training loop of your own that reports to disttrain (docs/training-api.md)."""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from disttrain.train import Session

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=2000)
parser.add_argument("--batch", type=int, default=32)
args = parser.parse_args()
EVAL_EVERY = 50
# Where and how often to save, as the job's spec.checkpoint says (docs/pod-contract.md).
CHECKPOINTS = os.environ.get("DISTTRAIN_CHECKPOINT_DIR", "")  # empty: no checkpoints
SAVE_EVERY = int(os.environ.get("DISTTRAIN_CHECKPOINT_INTERVAL_STEPS") or 0)  # 0: on request and at the end


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's data for this rank: the same again after a resume."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(args.batch, 16, generator=g)
    return x, x.sum(dim=1, keepdim=True)


def save(step: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> str:
    """Rank 0 writes the (replicated) state; a rename makes it complete at once."""
    path = os.path.join(CHECKPOINTS, f"step-{step:08d}.pt")
    if dist.get_rank() == 0:
        state = {"step": step, "model": model.module.state_dict(), "optimizer": optimizer.state_dict()}
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
    dist.barrier()  # every rank returns once it is complete
    return path


def newest() -> str | None:
    if not CHECKPOINTS or not os.path.isdir(CHECKPOINTS):
        return None
    done = sorted(f for f in os.listdir(CHECKPOINTS) if f.startswith("step-") and f.endswith(".pt"))
    return os.path.join(CHECKPOINTS, done[-1]) if done else None


def main() -> None:
    dist.init_process_group("gloo")  # torchrun set RANK, WORLD_SIZE, MASTER_ADDR, ...
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if rank == 0 and CHECKPOINTS:
        os.makedirs(CHECKPOINTS, exist_ok=True)
    first = 1
    with Session(total_steps=args.steps, samples_per_step=args.batch * world) as session:
        if (saved := newest()) is not None:
            state = torch.load(saved, weights_only=True)
            model.module.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            first = state["step"] + 1
            session.checkpointed(state["step"], saved)
            print(f"resuming at step {state['step']}", flush=True)
        for step in range(first, args.steps + 1):
            x, y = batch(step, rank)
            with session.compute():  # no collective in here: how a slow worker is told apart
                loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            action = session.step(step, loss=loss)
            if step % EVAL_EVERY == 0:
                with torch.no_grad():
                    x, y = batch(0, 10_000 + rank)  # held out: never trained on
                    session.evaluated(step, nn.functional.mse_loss(model(x), y))
            periodic = SAVE_EVERY and step % SAVE_EVERY == 0
            if CHECKPOINTS and (action.checkpoint or periodic or step == args.steps):
                session.checkpointed(step, save(step, model, optimizer))
            if session.stopping:
                break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
