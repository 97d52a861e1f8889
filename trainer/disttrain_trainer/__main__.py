"""`python -m disttrain_trainer` (under torchrun): config -> RunContext -> components -> loop."""

from __future__ import annotations


import torch
from torch.distributed.elastic.multiprocessing.errors import record

from disttrain_trainer import loop
from disttrain_trainer.checkpoint import CheckpointManager, ModelOptimState, SchedulerState, TrainState
from disttrain_trainer.config import Config
from disttrain_trainer.context import RunContext
from disttrain_trainer.data import CLASSES, IN_FEATURES, VOCAB_SIZE, ShardedLoader, build_dataset, holdout
from disttrain_trainer.evaluate import Evaluator
from disttrain_trainer.faults import HangHook
from disttrain_trainer.flops import peak_flops
from disttrain_trainer.metrics import build_metrics
from disttrain_trainer.models import model_spec
from disttrain_trainer.parallelize import parallelize


# Evaluation keeps no activations for a backward pass: 4 training micro-batches fit.
EVAL_BATCH_FACTOR = 4


def build(cfg: Config, ctx: RunContext) -> loop.Components:
    spec = model_spec(cfg.model.name, dataset=cfg.data.dataset, vocab_size=VOCAB_SIZE,
                      in_features=IN_FEATURES, classes=CLASSES)
    with torch.device("meta"):
        model = spec.build()
    dataset, held_out = holdout(
        build_dataset(cfg.data.dataset, seq_len=cfg.data.seq_len or spec.context, seed=cfg.data.seed),
        fraction=cfg.eval.fraction, fold=cfg.eval.fold,
    )
    flops_per_token = model.flops_per_token(dataset.tokens_per_sample)  # type: ignore[operator]
    model = parallelize(model, ctx, seed=cfg.train.seed)
    loader = ShardedLoader(
        dataset, batch_size=cfg.data.batch_size, accumulate=cfg.train.accumulate_grad_batches,
        dp_rank=ctx.dp_rank, dp_size=ctx.dp_size, seed=cfg.data.seed, device=ctx.device,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.learning_rate,
                                  weight_decay=cfg.train.weight_decay, foreach=True)
    scheduler = loop.build_scheduler(optimizer, cfg.train)
    state = TrainState()
    states = {"model_optim": ModelOptimState(model, optimizer), "scheduler": SchedulerState(scheduler),
              "dataloader": loader, "train_state": state}
    scaler = None
    if ctx.resolved.precision == "16-mixed":  # CUDA in practice (resolve_parallel falls back on CPU)
        if ctx.resolved.strategy in ("fsdp", "fsdp_tp"):
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
            scaler = ShardedGradScaler(device=ctx.device.type)
        else:
            scaler = torch.amp.GradScaler(ctx.device.type)
        states["scaler"] = scaler  # type: ignore[assignment]
    return loop.Components(
        model=model, optimizer=optimizer, scheduler=scheduler, loader=loader, loss_fn=spec.loss_fn,
        state=state, scaler=scaler,
        evaluator=None if held_out is None else Evaluator(
            cfg=cfg.eval, dataset=held_out, loss_fn=spec.loss_fn, batch_size=EVAL_BATCH_FACTOR * cfg.data.batch_size,
            dp_rank=ctx.dp_rank, dp_size=ctx.dp_size, world_size=ctx.world_size, device=ctx.device),
        checkpoint=CheckpointManager(cfg.checkpoint, ctx, states),  # type: ignore[arg-type]
        hang=HangHook(at_step=cfg.test_hang_at_step, rank=cfg.test_hang_rank, marker_dir=cfg.checkpoint.dir),
        metrics=build_metrics(
            cfg.metrics, is_local_rank0=ctx.is_local_rank0, is_rank0=ctx.is_rank0,
            restarts=ctx.restart_count, total_steps=cfg.train.steps, world_size=ctx.world_size,
            samples_per_step=loader.samples_per_step, tokens_per_sample=dataset.tokens_per_sample,
            flops_per_token=flops_per_token, peak_flops=peak_flops(device_name(ctx.device), ctx.resolved.precision),
            checkpoint_request=ctx.stops.request,
        ),
    )


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else ""


# Exit status of a run stopped on a signal before its last step (EX_TEMPFAIL): never 0,
# so neither torchrun nor the operator can take an interrupted run for a finished one.
EXIT_INTERRUPTED = 75


@record
def main() -> int:
    cfg = Config.from_env()
    with RunContext.open(cfg.parallel) as ctx:
        components = build(cfg, ctx)
        try:
            result = loop.run(components, ctx, cfg.train)
        finally:
            components.metrics.close()
    return EXIT_INTERRUPTED if result.preempted else 0


if __name__ == "__main__":
    raise SystemExit(main())
