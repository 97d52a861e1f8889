"""The training loop. It knows nothing about Kubernetes, env vars or paths."""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP

from disttrain_trainer import parallelize
from disttrain_trainer.checkpoint import CheckpointManager, TrainState
from disttrain_trainer.config import TrainConfig
from disttrain_trainer.context import RunContext
from disttrain_trainer.data import ShardedLoader
from disttrain_trainer.evaluate import Evaluator
from disttrain_trainer.faults import HangHook
from disttrain_trainer.metrics import Metrics
from disttrain_trainer.models import LossFn, forward
from disttrain_trainer.drain import EXIT_INTERRUPTED
from disttrain_trainer.session import Action, Session

log = logging.getLogger("disttrain_trainer")


@dataclass(kw_only=True)
class Components:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    loader: ShardedLoader
    loss_fn: LossFn
    state: TrainState
    checkpoint: CheckpointManager
    metrics: Metrics
    scaler: torch.amp.GradScaler | None = None
    evaluator: Evaluator | None = None
    hang: HangHook = field(default_factory=HangHook)  # a test hook; off unless asked for


@dataclass(kw_only=True)
class Result:
    step: int
    resumed_from: int | None
    preempted: bool = False
    losses: dict[int, float] = field(default_factory=dict)
    """Data-parallel mean loss at each log step."""
    eval_losses: dict[int, float] = field(default_factory=dict)
    eval_metrics: dict[int, dict[str, float]] = field(default_factory=dict)  # run_training's eval_metrics
    """Held-out loss at each evaluation step."""

    @property
    def exit_code(self) -> int:
        """What the process exits with: 0 when it trained to the end, EXIT_INTERRUPTED
        when a stop came first."""
        return EXIT_INTERRUPTED if self.preempted else 0


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    warmup, total = cfg.effective_warmup, max(1, cfg.steps)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def should_log(step: int, cfg: TrainConfig) -> bool:
    return step % cfg.log_every == 0 or step == cfg.steps


def run(c: Components, ctx: RunContext, cfg: TrainConfig) -> Result:
    """Train to `cfg.steps`, driving the run's Session (session.py) as a user's loop does:
    the report, the stop check, the hold and SIGTERM are the session's."""
    resumed = c.checkpoint.load()
    result = Result(step=c.state.step, resumed_from=c.state.step if resumed else None)
    c.metrics.record_checkpoint(c.checkpoint.latest)
    if resumed:
        log.info("resuming at step %d of %d", c.state.step, cfg.steps)
    session = Session.driven(c.metrics, ctx.stops, ctx.launch, total_steps=cfg.steps, log_every=cfg.log_every,
                             first_step=c.state.step, on_loss=result.losses.__setitem__)
    autocast = parallelize.autocast(ctx)
    with session:
        while c.state.step < cfg.steps:
            logging_step = should_log(c.state.step + 1, cfg)
            c.hang.before_step(c.state.step + 1, ctx.rank, ctx.stops.signal)
            loss, norm = train_step(c, ctx, cfg, autocast, want_norm=logging_step)
            c.state.step += 1
            step = c.state.step
            action = session.step(step, loss=loss if logging_step else None,
                                  grad_norm=None if norm is None or not logging_step else float(norm))
            if c.evaluator is not None and c.evaluator.due(step) and step < cfg.steps:
                _evaluate(c, autocast, result)
            with c.metrics.paused():  # checkpoint work is reported on its own, not as step time
                if c.checkpoint.should_save(step):
                    c.checkpoint.save(step)
                c.checkpoint.poll()
                c.metrics.record_checkpoint(c.checkpoint.latest)
            if action and _checkpoint_asked(c, session, action):
                result.preempted = True
                break
        else:
            if c.evaluator is not None:
                _evaluate(c, autocast, result)
            c.checkpoint.save(c.state.step)  # the final state (no-op if just saved)
        c.checkpoint.finish(hand_off=result.preempted)
        c.metrics.record_checkpoint(c.checkpoint.latest)
        result.step = c.state.step
    return result


def _checkpoint_asked(c: Components, session: Session, action: Action) -> bool:
    """The session asked for a checkpoint of this step: SIGTERM came (save, then stop), or
    the operator asked before it stops the job (save, then the session holds). True: stop."""
    step = c.state.step
    c.checkpoint.save(step, force_sync=True)  # no-op after a save of this step
    if not action.stop:
        c.checkpoint.wait()
        session.saved(step, c.checkpoint.latest if c.checkpoint.enabled else None)  # holds
        if not session.stopping:
            return False
    c.metrics.record_checkpoint(c.checkpoint.latest)
    log.warning("stopped on SIGTERM at step %d (%s)", step,
                "checkpoint written" if c.checkpoint.enabled else "checkpointing is off")
    return True


def _evaluate(c: Components, autocast: contextlib.AbstractContextManager, result: Result) -> None:
    assert c.evaluator is not None
    with c.metrics.paused():  # evaluation time is not step time
        loss, named = c.evaluator.evaluate(c.model, autocast)
    result.eval_losses[c.state.step] = loss
    if named:
        result.eval_metrics[c.state.step] = named
    c.metrics.record_eval(c.state.step, loss, named)


def train_step(c: Components, ctx: RunContext, cfg: TrainConfig, autocast: contextlib.AbstractContextManager,
               *, want_norm: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One optimizer step over `accumulate` micro-batches; returns the local mean loss and
    the global gradient norm before clipping (computed when clipping or when `want_norm`)."""
    micro_batches = c.loader.next_step()
    n = len(micro_batches)
    total = torch.zeros((), device=ctx.device)
    timer = c.metrics.timer  # the forward passes and the optimizer step: no collective waits in them under DDP
    for i, (x, y) in enumerate(micro_batches):
        with _grad_sync(c.model, last=i == n - 1):
            with autocast, timer.section():
                loss = c.loss_fn(forward(c.model, x), y) / n
            if c.scaler is not None:
                c.scaler.scale(loss).backward()
            else:
                loss.backward()
        total += loss.detach()
    if c.scaler is not None:
        c.scaler.unscale_(c.optimizer)
    norm = None
    if cfg.grad_clip > 0 or want_norm:
        norm = clip_grad_norm(c.model, cfg.grad_clip)
    with timer.section():
        if c.scaler is not None:
            c.scaler.step(c.optimizer)
            c.scaler.update()
        else:
            c.optimizer.step()
    c.scheduler.step()
    c.optimizer.zero_grad(set_to_none=True)
    return total, norm


@contextlib.contextmanager
def _grad_sync(model: nn.Module, *, last: bool) -> Iterator[None]:
    """Skip gradient communication on all but the last micro-batch."""
    if isinstance(model, DDP) and not last:
        with model.no_sync():
            yield
        return
    if isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(last)
    yield


def clip_grad_norm(model: nn.Module, max_norm: float) -> torch.Tensor:
    """Global L2 norm over plain and DTensor grads on any mesh (FSDP x TP mixes meshes),
    returned before clipping; `max_norm` 0 measures without clipping."""
    params = [p for p in model.parameters() if p.grad is not None]
    grads = [p.grad for p in params]
    plain = [g for g in grads if not isinstance(g, DTensor)]
    dtensors = [g for g in grads if isinstance(g, DTensor)]
    if not dtensors:
        norm = torch.nn.utils.get_total_norm(plain, foreach=True)
        if max_norm > 0:  # takes the parameters, not their grads
            torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm, foreach=True)
        return norm
    locals_ = [g.to_local() for g in dtensors]
    sq = torch.zeros((), device=locals_[0].device, dtype=torch.float32)
    if plain:
        sq = sq + torch.stack(torch._foreach_norm(plain)).float().pow(2).sum()
    groups: dict[tuple[object, ...], list[torch.Tensor]] = {}
    for g, local in zip(dtensors, locals_, strict=True):
        groups.setdefault((g.device_mesh, tuple(g.placements)), []).append(local)
    for (mesh, placements), tensors in groups.items():
        part = torch.stack(torch._foreach_norm(tensors)).float().pow(2).sum()
        for dim, placement in enumerate(placements):  # type: ignore[arg-type]
            if placement.is_shard():  # sum the squares over the shards, not the replicas
                dist.all_reduce(part, group=mesh.get_group(dim))  # type: ignore[attr-defined]
        sq = sq + part
    total = sq.sqrt()
    if max_norm > 0:
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        torch._foreach_mul_(locals_ + plain, coef)
    return total
