"""`run_training`: the built-in trainer's loop for your own model and data (public as
`disttrain.train.run_training`; docs/training-api.md, "Your model and data").

    result = run_training(lambda: Net(), Data(train=my_dataset), loss_fn=F.cross_entropy)
    raise SystemExit(result.exit_code)

You hand a model (or a builder), map-style datasets and a loss; it applies the job's
strategy (DDP, FSDP2, FSDP x TP), precision, gradient accumulation and clipping, reads
batches through the stateful sampler that resumes at the next unseen sample at any world
size (data.ShardedLoader), evaluates, saves and resumes DCP checkpoints (local or object
storage, keep-K, async), reports `/status`, answers `POST /checkpoint`, and stops on
SIGTERM with the `Interrupted` report. The built-in trainer (`__main__`) is its caller:
there is one loop (loop.py).

The model is built (or taken) once per rank:
- an `nn.Module`: used as it is; every rank starts from rank 0's weights;
- a builder (a function of no arguments): called on every rank under the seed
  (`train.seed`), so every rank builds the same weights. A builder may build on the
  meta device (`with torch.device("meta")`) when the model can fill its own weights
  through `init_tensor(name, shape, generator)` as the built-in models do: the weights
  are then allocated only after sharding, and are the same for every strategy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

from disttrain_trainer import loop
from disttrain_trainer.checkpoint import CheckpointManager, ModelOptimState, SchedulerState, TrainState
from disttrain_trainer.config import Config
from disttrain_trainer.context import RunContext
from disttrain_trainer.data import MapStyle, ShardedLoader, SyntheticDataset, TextDataset, holdout
from disttrain_trainer.evaluate import Evaluator, MetricsFn
from disttrain_trainer.faults import HangHook
from disttrain_trainer.flops import peak_flops
from disttrain_trainer.models import LossFn
from disttrain_trainer.parallelize import parallelize
from disttrain_trainer.session import run_metrics
from disttrain_trainer.timing import ComputeTimer
from disttrain_trainer.tracking import flat_params

log = logging.getLogger("disttrain_trainer")

# Evaluation keeps no activations for a backward pass: 4 training micro-batches fit.
EVAL_BATCH_FACTOR = 4

# A checkpoint keeps a scheduler's step count (checkpoint.SchedulerState); these keep more.
UNRESUMABLE_SCHEDULERS = (torch.optim.lr_scheduler.SequentialLR, torch.optim.lr_scheduler.ChainedScheduler,
                          torch.optim.lr_scheduler.ReduceLROnPlateau)

# The datasets the loader reads a batch at a time as they are (the rest go through MapStyle).
_BATCHED = (TextDataset, SyntheticDataset, MapStyle)

ModelOrBuilder = nn.Module | Callable[[], nn.Module]
OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
SchedulerFactory = Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler]


@dataclass(kw_only=True)
class Data:
    """What to train and evaluate on."""

    train: Any
    """A map-style dataset (`__len__`, `__getitem__`: a `torch.utils.data.Dataset`, a Hugging
    Face `datasets.Dataset`), or a DataLoader over one: its dataset, `collate_fn` and
    `batch_size` are used, and its sampler gives way to disttrain's, which every rank
    shares and which resumes at the next unseen sample at any world size."""
    eval: Any = None
    """The same for evaluation; None: hold out `eval.fraction` of `train` (block `eval.fold`,
    or the fold a `disttrain sweep` with kfold gives the job)."""
    collate: Callable[[list[Any]], Any] | None = None
    """Samples -> (inputs, targets); torch's default_collate unless given. Inputs that are a
    mapping are passed to the model as keyword arguments."""
    tokens_per_sample: int = 1
    """Tokens in one sample (a sequence length), for tokens/s; 1 for anything else."""


def run_training(model: ModelOrBuilder, data: Data, cfg: Config | None = None, context: RunContext | None = None,
                 *, loss_fn: LossFn, optimizer: OptimizerFactory | None = None,
                 scheduler: SchedulerFactory | None = None, params: Mapping[str, Any] | None = None,
                 eval_metrics: MetricsFn | None = None) -> loop.Result:
    """Train to `cfg.train.steps` (resuming from the newest checkpoint) on every rank.

    cfg: None reads the job's settings (`Config.from_env()`, docs/pod-contract.md); change
    what your script decides (`cfg.train.steps = ...`) before the call. context: the
    process group and device (`RunContext.open(cfg.parallel)`); None opens and closes one.
    loss_fn(output, targets): the mean loss over the batch. optimizer(params): AdamW with
    `train.learning_rate` and `train.weight_decay` unless given. scheduler(optimizer):
    linear warm-up then cosine decay unless given. params: your own settings, logged with
    the job's to MLflow or TensorBoard when the job names one. eval_metrics(output, targets):
    named metrics of an evaluation batch, {name: the batch's mean}, averaged over the held-out
    samples like the loss (status.progress.evalMetrics, what a sweep may score). Returns the loop's Result; its
    `exit_code` is what the process should exit with (75 when stopped before the end)."""
    cfg = Config.from_env() if cfg is None else cfg
    if context is None:
        with RunContext.open(cfg.parallel) as ctx:
            return run_training(model, data, cfg, ctx, loss_fn=loss_fn, optimizer=optimizer, scheduler=scheduler,
                                params=params, eval_metrics=eval_metrics)
    components = build(model, data, cfg, context, loss_fn=loss_fn, optimizer=optimizer, scheduler=scheduler,
                       params=params, eval_metrics=eval_metrics)
    try:
        return loop.run(components, context, cfg.train)
    finally:
        components.metrics.close()


def build(model: ModelOrBuilder, data: Data, cfg: Config, ctx: RunContext, *, loss_fn: LossFn,
          optimizer: OptimizerFactory | None = None, scheduler: SchedulerFactory | None = None,
          params: Mapping[str, Any] | None = None, eval_metrics: MetricsFn | None = None) -> loop.Components:
    """The loop's parts for this rank (what run_training runs; tests and benches swap parts)."""
    if not callable(loss_fn):
        raise TypeError(f"loss_fn: {loss_fn!r} is not callable; pass a function (output, targets) -> mean loss")
    if eval_metrics is not None and not callable(eval_metrics):
        raise TypeError(f"eval_metrics: {eval_metrics!r} is not callable; pass a function (output, targets) -> "
                        "{name: the batch's mean}, or leave it out")
    module = materialize(model, seed=cfg.train.seed)
    train, batch_size = as_dataset(data.train, data, "train")
    batch_size = batch_size or cfg.data.batch_size
    if data.eval is not None:
        held_out: Any = as_dataset(data.eval, data, "eval")[0]
    else:
        train, held_out = holdout(train, fraction=cfg.eval.fraction, fold=cfg.eval.fold)
    flops = getattr(module, "flops_per_token", None)
    flops_per_token = float(flops(train.tokens_per_sample)) if callable(flops) else 0.0  # 0: MFU unknown
    module = parallelize(module, ctx, seed=cfg.train.seed)
    loader = ShardedLoader(
        train, batch_size=batch_size, accumulate=cfg.train.accumulate_grad_batches,
        dp_rank=ctx.dp_rank, dp_size=ctx.dp_size, seed=cfg.data.seed, device=ctx.device,
    )
    optim, sched = _optimizer(module, cfg, optimizer, scheduler)
    state = TrainState()
    states: dict[str, Any] = {"model_optim": ModelOptimState(module, optim), "scheduler": SchedulerState(sched),
                              "dataloader": loader, "train_state": state}
    scaler = _grad_scaler(ctx)
    if scaler is not None:
        states["scaler"] = scaler
    return loop.Components(
        model=module, optimizer=optim, scheduler=sched, loader=loader, loss_fn=loss_fn, state=state, scaler=scaler,
        evaluator=None if held_out is None else Evaluator(
            cfg=cfg.eval, dataset=held_out, loss_fn=loss_fn, batch_size=EVAL_BATCH_FACTOR * batch_size,
            dp_rank=ctx.dp_rank, dp_size=ctx.dp_size, world_size=ctx.world_size, device=ctx.device,
            metrics_fn=eval_metrics),
        checkpoint=CheckpointManager(cfg.checkpoint, ctx, states),
        hang=HangHook(at_step=cfg.test_hang_at_step, rank=cfg.test_hang_rank, marker_dir=cfg.checkpoint.dir),
        metrics=run_metrics(
            cfg.metrics, ctx.launch, total_steps=cfg.train.steps, samples_per_step=loader.samples_per_step,
            tokens_per_sample=train.tokens_per_sample, flops_per_token=flops_per_token,
            peak_flops=peak_flops(device_name(ctx.device), ctx.resolved.precision) if flops_per_token else None,
            request=ctx.stops.request, params=run_params(cfg, ctx, loader.samples_per_step) | dict(params or {}),
            timer=ComputeTimer(ctx.device, stretch=cfg.test_slow_factor if ctx.rank == cfg.test_slow_rank else 1.0),
        ),
    )


def _optimizer(module: nn.Module, cfg: Config, optimizer: OptimizerFactory | None, scheduler: SchedulerFactory | None
               ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """The optimizer and scheduler given, or AdamW and warm-up + cosine; one a checkpoint
    cannot restore is refused."""
    optim = optimizer(module.parameters()) if optimizer is not None else torch.optim.AdamW(
        module.parameters(), lr=cfg.train.learning_rate, weight_decay=cfg.train.weight_decay, foreach=True)
    sched = scheduler(optim) if scheduler is not None else loop.build_scheduler(optim, cfg.train)
    if isinstance(sched, UNRESUMABLE_SCHEDULERS):
        raise TypeError(
            f"scheduler: {type(sched).__name__} keeps state a checkpoint does not restore (its inner schedulers, "
            "or a metric), so a resumed run would use another learning rate; pass one scheduler whose place is "
            "its step count (LambdaLR, CosineAnnealingLR, OneCycleLR, ...), e.g. a LambdaLR that composes yours")
    return optim, sched


def _grad_scaler(ctx: RunContext) -> Any:
    """fp16's loss scaler (sharded under FSDP); None in any other precision."""
    if ctx.resolved.precision != "16-mixed":  # CUDA in practice (resolve_parallel falls back on CPU)
        return None
    if ctx.resolved.strategy in ("fsdp", "fsdp_tp"):
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
        return ShardedGradScaler(device=ctx.device.type)
    return torch.amp.GradScaler(ctx.device.type)


def run_params(cfg: Config, ctx: RunContext, samples_per_step: int) -> dict[str, Any]:
    """What a tracker records of the run: the settings that shape training (not the
    report's, which hold the control token), and the strategy as resolved here."""
    params = {k: v for k, v in flat_params(cfg).items()
              if not k.startswith(("metrics.", "test_", "model.", "data.dataset", "data.seq_len"))}
    return params | {"world_size": ctx.world_size, "strategy": ctx.resolved.strategy,
                     "precision": ctx.resolved.precision, "global_batch": samples_per_step}


def materialize(model: ModelOrBuilder, *, seed: int) -> nn.Module:
    """The model for this rank: as given, or built under the seed (see the module doc)."""
    if isinstance(model, nn.Module):
        module = model
    elif callable(model):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            module = model()
        if not isinstance(module, nn.Module):
            raise TypeError(f"model: the builder returned {type(module).__name__}, not a torch.nn.Module")
    else:
        raise TypeError(f"model: {type(model).__name__} is neither a torch.nn.Module nor a function that builds one")
    on_meta = any(t.is_meta for t in (*module.parameters(), *module.buffers()))
    if on_meta and not callable(getattr(module, "init_tensor", None)):
        raise ValueError(
            f"model: {type(module).__name__} was built on the meta device but has no "
            "init_tensor(name, shape, generator) to fill its weights after sharding; build it on the CPU "
            "(drop the torch.device('meta') block) or give it init_tensor as the built-in models do")
    return module


def as_dataset(source: Any, data: Data, which: str) -> tuple[Any, int | None]:
    """(a dataset the loader reads a batch at a time, the batch size a DataLoader names)."""
    if isinstance(source, _BATCHED):
        return source, None
    batch_size = None
    collate = data.collate
    if isinstance(source, DataLoader):
        if isinstance(source.dataset, IterableDataset):
            raise TypeError(f"data.{which}: the DataLoader reads an IterableDataset, which cannot resume at a "
                            "sample or be split over ranks by index; pass a map-style dataset")
        if source.batch_size is None:
            raise TypeError(f"data.{which}: the DataLoader has batch_size=None (a batch_sampler or unbatched); "
                            "pass the dataset itself, and set the micro-batch in cfg.data.batch_size")
        batch_size, collate = source.batch_size, collate or source.collate_fn
        source = source.dataset
    if isinstance(source, IterableDataset):
        raise TypeError(f"data.{which}: {type(source).__name__} is an IterableDataset, which cannot resume at a "
                        "sample or be split over ranks by index; pass a map-style dataset")
    dataset = MapStyle(source, collate=collate, tokens_per_sample=data.tokens_per_sample, name=f"data.{which}")
    if len(dataset) == 0:
        raise ValueError(f"data.{which}: the dataset is empty")
    dataset.get(torch.zeros(1, dtype=torch.long))  # its shape is checked before anything starts
    return dataset, batch_size


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else ""
