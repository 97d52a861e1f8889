"""The reporting session: what the built-in trainer tells the operator, for a loop you
write yourself (docs/training-api.md, "A loop of your own").

    with Session(total_steps=1000, samples_per_step=global_batch) as session:
        for step in range(first, 1001):
            loss = train_one_step()
            action = session.step(step, loss=loss)
            if action.checkpoint:          # the operator asked, or SIGTERM came
                session.checkpointed(step, save(step))   # every rank; holds when asked
            if session.stopping:
                break

It serves the pod contract's `/status`, `/metrics` and `POST /checkpoint` from local rank 0
of each pod (docs/pod-contract.md) through the same sinks as the built-in trainer, agrees
on stops across ranks with the same check (drain.StopAgreement), and writes the final
report with its outcome when the block ends. Outside a disttrain pod (a notebook, a
laptop: no DISTTRAIN_JOB_NAME) it does nothing and every step says carry on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any

import torch
import torch.distributed as dist

from disttrain.api.pod_contract import JOB_NAME
from disttrain_trainer import timing
from disttrain_trainer.checkpoint import CheckpointInfo
from disttrain_trainer.config import MetricsConfig, slow_stretch
from disttrain_trainer.context import Launch
from disttrain_trainer.drain import EXIT_INTERRUPTED, CheckpointRequest, Stop, StopAgreement
from disttrain_trainer.metrics import FINISHED, INTERRUPTED, Metrics, StepMetrics, build_metrics, eval_metrics

log = logging.getLogger("disttrain_trainer")

# A session is on in a pod the operator (or `disttrain run --local`) made.
IN_A_POD = JOB_NAME.env


@dataclass(frozen=True, slots=True)
class Action:
    """What every rank does after this step; the same on every rank at the same step."""

    checkpoint: bool = False
    """Save a checkpoint of this step now, then call `Session.checkpointed(step, where)`."""
    stop: bool = False
    """SIGTERM came: the pod is going. Save (checkpoint is also set), then leave the loop."""

    def __bool__(self) -> bool:
        return self.checkpoint or self.stop


CARRY_ON = Action()


def run_metrics(cfg: MetricsConfig, launch: Launch, *, total_steps: int, samples_per_step: int,
                tokens_per_sample: int, flops_per_token: float, peak_flops: float | None,
                request: CheckpointRequest | None, params: Mapping[str, Any], timer: timing.ComputeTimer) -> Metrics:
    """The report's sinks for one rank of a run, the built-in trainer's and a Session's alike."""
    return build_metrics(
        cfg, is_local_rank0=launch.local_rank == 0, is_rank0=launch.rank == 0, restarts=launch.restart_count,
        total_steps=total_steps, world_size=launch.world_size, samples_per_step=samples_per_step,
        tokens_per_sample=tokens_per_sample, flops_per_token=flops_per_token, peak_flops=peak_flops,
        checkpoint_request=request, params=params, timer=timer)


class Session:
    """One training run's report to the operator; use it as a context manager, once. The
    built-in trainer's loop drives one too (`Session.driven`): the report, the stop check,
    the hold and SIGTERM exist here only."""

    def __init__(self, *, total_steps: int, samples_per_step: float = 0, tokens_per_sample: float = 0,
                 flops_per_token: float = 0.0, log_every: int = 10, checkpoints: bool = True,
                 framework: str = "", env: Mapping[str, str] | None = None) -> None:
        """total_steps: optimizer steps of the whole run (for progress and the ETA).
        samples_per_step: the global batch (samples over all ranks per optimizer step), used
        when `step()` is given no `samples`. tokens_per_sample: for tokens/s. log_every:
        steps between the loss averages over ranks (and the log line); the last step
        always logs. checkpoints: False when your loop cannot save on request; the
        operator then stops the job with SIGTERM (`handshake: NotSupported`). framework: what
        reports, for the report's `framework` ("transformers 5.24.0"; the callbacks set it)."""
        if total_steps < 0 or log_every < 1:
            raise ValueError(f"Session(total_steps={total_steps}, log_every={log_every}): "
                             "total_steps must be >= 0 and log_every >= 1")
        env = os.environ if env is None else env
        launch = Launch.from_env(env)
        stops = StopAgreement(rank=launch.rank, world_size=launch.world_size)
        metrics = None
        if env.get(IN_A_POD):
            timer = timing.ComputeTimer(torch.device("cuda") if torch.cuda.is_available() else None,
                                        stretch=slow_stretch(env, launch.rank))
            metrics = run_metrics(
                MetricsConfig.from_env(env), launch, total_steps=total_steps, samples_per_step=int(samples_per_step),
                tokens_per_sample=int(tokens_per_sample), flops_per_token=flops_per_token, peak_flops=None,
                request=stops.request if checkpoints else None, timer=timer,
                params={"total_steps": total_steps, "samples_per_step": samples_per_step,
                        "world_size": launch.world_size, "framework": framework or "disttrain.train.Session"})
            if framework:
                metrics.record_framework(framework)
        self._attach(metrics, stops, launch, total_steps=total_steps, log_every=log_every, first_step=0,
                     owns_parts=True)

    @classmethod
    def driven(cls, metrics: Metrics, stops: StopAgreement, launch: Launch, *, total_steps: int, log_every: int,
               first_step: int, on_loss: Callable[[int, float], None]) -> Session:
        """The built-in loop's session over the parts it built from the job's Config and its
        RunContext (which owns the SIGTERM handler and the stop check's group). `on_loss`
        gets each log step's mean loss over the ranks once it is known."""
        session = cls.__new__(cls)
        session._attach(metrics, stops, launch, total_steps=total_steps, log_every=log_every,
                        first_step=first_step, owns_parts=False)
        session._on_loss = on_loss
        return session

    def _attach(self, metrics: Metrics | None, stops: StopAgreement, launch: Launch, *, total_steps: int,
                log_every: int, first_step: int, owns_parts: bool) -> None:
        self.enabled = metrics is not None
        self.metrics = metrics
        self.stops = stops
        self.total_steps = total_steps
        self.log_every = log_every
        self.rank, self.world_size, self.worker = launch.rank, launch.world_size, launch.worker
        self.last_step = first_step
        self._owns_parts = owns_parts  # its metrics and SIGTERM handler (a driven session's are the loop's)
        self._on_loss: Callable[[int, float], None] | None = None
        self._stopping = False
        self._asked_at: int | None = None  # a requested checkpoint of this step is awaited
        self._joined = self.world_size == 1 or stops.group is not None
        self._pending_loss: tuple[dist.Work, torch.Tensor, StepMetrics, int | None] | None = None
        self._last: StepMetrics | None = None  # the newest step's metrics
        self._exit = contextlib.ExitStack()

    # ---- the block ---------------------------------------------------------------------
    def __enter__(self) -> Session:
        if self.enabled and self._owns_parts:
            self._exit.enter_context(self.stops.on_sigterm())
        if self.metrics is not None:
            self.metrics.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        """A crash leaves no outcome (the operator sees the exit) and waits on no collective
        (a peer may be gone); otherwise the report says Interrupted after a stop, Finished
        after the loop ended on its own."""
        if not self.enabled:
            return
        try:
            if kind is None:
                if self._joined:
                    self._publish_loss()
                    self.stops.drain()
                assert self.metrics is not None
                self.metrics.finish(INTERRUPTED if self._stopping else FINISHED, self.last_step)
        finally:
            if self.metrics is not None and self._owns_parts:
                self.metrics.close()
            self._exit.close()

    def end(self) -> None:
        """Close the session for a framework's training that just ended; after a stop, end
        the process too, with EXIT_INTERRUPTED (docs/pod-contract.md): the script's code
        after `train()`/`fit()` (an export, an upload of the "final" model) is for a run
        that finished, not for one the pod's deletion cut short. The process group goes
        first, as an exiting process with a live gloo group may abort instead."""
        stopped = self.enabled and self._stopping
        self.__exit__(None, None, None)
        if not stopped:
            return
        log.warning("stopped before the last step: exiting %d before the code after training runs",
                    EXIT_INTERRUPTED)
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        raise SystemExit(EXIT_INTERRUPTED)

    # ---- what the loop tells -----------------------------------------------------------
    def compute(self) -> contextlib.AbstractContextManager[None]:
        """Wrap the part of your step no collective runs in (the forward pass and the loss;
        under DDP the optimizer step too): the operator compares this time across workers to
        find a straggler (failurePolicy.stragglers). On CUDA it times the current stream."""
        return self.metrics.timer.section() if self.metrics is not None else contextlib.nullcontext()

    @property
    def stopping(self) -> bool:
        """SIGTERM came (agreed by every rank, or during a hold): leave the loop."""
        return self._stopping

    def step(self, step: int, *, loss: float | torch.Tensor | None = None, samples: float | None = None,
             tokens: float | None = None, grad_norm: float | None = None) -> Action:
        """Call on every rank after every optimizer step, with the step just completed.
        `loss` is read (a tensor synchronised) only on log steps, where it is averaged over
        the ranks that gave one; `samples` and `tokens` are this step's, over all ranks."""
        if not self.enabled:
            return CARRY_ON
        self._join()
        if self._asked_at is not None:  # the last Action asked for a checkpoint this rank never reported
            log.warning("the operator asked for a checkpoint at step %d, and the loop went on without "
                        "calling Session.checkpointed() on this rank: the request is dropped, and the job "
                        "will be stopped with SIGTERM", self._asked_at)
            self.stops.acted()
            self._asked_at = None
        self._publish_loss()
        self.last_step = step
        logs = step % self.log_every == 0 or step == self.total_steps
        assert self.metrics is not None
        if logs and self.world_size > 1:  # averaged on the way: published at the next call
            self._last = self.metrics.record_step(step, None, grad_norm, samples=samples, tokens=tokens, close=True)
            self._start_mean(loss, self._last)
            if step == self.total_steps:
                self._publish_loss()
        else:
            mean = None if loss is None or not logs else float(loss)
            self._last = self.metrics.record_step(step, mean, grad_norm, samples=samples, tokens=tokens, close=logs)
            if mean is not None and self._on_loss is not None:
                self._on_loss(step, mean)
        if step == self.total_steps:  # training is done: a stop now loses nothing, the run Finished
            return CARRY_ON
        stop = self.stops.requested()
        if stop is Stop.SIGNAL:
            self._stopping = True
            log.warning("stopping on SIGTERM at step %d: checkpoint it, then leave the loop", step)
            return Action(checkpoint=True, stop=True)
        if stop is Stop.CHECKPOINT:
            self._asked_at = step
            return Action(checkpoint=True)
        return CARRY_ON

    def logged(self, step: int, loss: float, grad_norm: float | None = None) -> None:
        """A loss your framework already averaged over the ranks and logged at `step`
        (what the Transformers and Lightning callbacks report): published as it is."""
        if self.metrics is not None and self._last is not None:
            self.metrics.publish(replace(self._last, step=max(step, self._last.step), loss=float(loss),
                                         grad_norm=self._last.grad_norm if grad_norm is None else float(grad_norm)))

    def evaluated(self, step: int, loss: float | torch.Tensor | None = None,
                  metrics: Mapping[str, Any] | None = None, **named: Any) -> None:
        """An evaluation at `step` (rank 0's is reported): its loss (status.progress.evalLoss)
        and any named metrics, `accuracy=0.91` or `metrics={"val/f1": 0.8}`
        (status.progress.evalMetrics). Either can be what `disttrain sweep` scores. A name
        the report cannot carry or a value that is no number is a ValueError, in a pod or
        not, so a notebook finds it first."""
        values = eval_metrics({**(metrics or {}), **named}, strict=True)
        if loss is None and not values:
            raise ValueError("Session.evaluated: give the loss, a named metric, or both "
                             "(e.g. session.evaluated(step, loss, accuracy=acc))")
        if self.metrics is not None:
            self.metrics.record_eval(step, None if loss is None else float(loss), values)

    def checkpointed(self, step: int, where: str) -> None:
        """A checkpoint of `step` is complete at `where` (your own save, or the one you
        resumed from): status.checkpoint. Call it on every rank. After an Action that asked
        for it, every rank then holds here until the pod's SIGTERM (`stopping` turns True)
        or the hold the operator named runs out (training goes on)."""
        self.saved(step, CheckpointInfo(step=step, path=where, time=time.time()))

    def saved(self, step: int, info: CheckpointInfo | None) -> None:
        """`checkpointed` with the save's own record (the built-in trainer's checkpoint
        manager keeps one); None: nothing was written (no checkpoint storage)."""
        if self.metrics is None:
            return
        self.metrics.record_checkpoint(info)
        if self._asked_at != step:
            return
        self._asked_at = None
        if self.world_size > 1:  # held means saved on every rank (rank 0 may write last)
            dist.barrier(group=self.stops.group)
        self.stops.acted()
        hold = self.stops.agreed_hold_seconds
        log.warning("checkpoint of step %d %s on the operator's request; holding up to %ds for the stop", step,
                    "written" if info is not None else "skipped (checkpointing is off)", hold)
        self.metrics.record_held(step)
        try:
            if self.stops.hold(hold):
                self._stopping = True
            else:
                log.warning("no stop came within %ds of the requested checkpoint: training on from step %d",
                            hold, step)
        finally:
            self.metrics.record_held(None)

    # ---- across ranks ------------------------------------------------------------------
    def _join(self) -> None:
        """The stop check's CPU group, made at the first step, when every rank is here."""
        if self._joined:
            return
        if not dist.is_initialized():
            raise RuntimeError(
                f"disttrain Session: WORLD_SIZE={self.world_size} but torch.distributed is not initialised at "
                "the first step(): call torch.distributed.init_process_group() before training (Transformers "
                "and Lightning do it for you), or open the session after it")
        self.stops.group = dist.new_group(backend="gloo")
        self._joined = True

    def _start_mean(self, loss: float | torch.Tensor | None, m: StepMetrics) -> None:
        """Average the loss over the ranks that gave one, without waiting for it: a
        synchronous collective here would hold every rank to the slowest one's pace."""
        given = loss is not None
        window = self.metrics.last_window if self.metrics is not None else None
        pair = torch.tensor([float(loss) if given else 0.0, 1.0 if given else 0.0,
                             *timing.row(self.world_size, self.rank, self.worker, window)], dtype=torch.float64)
        work = dist.all_reduce(pair, group=self.stops.group, async_op=True)  # the workers' times ride along
        self._pending_loss = (work, pair, m, window[0] if window is not None else None)

    def _publish_loss(self) -> None:
        if self._pending_loss is None:
            return
        work, pair, m, window_step = self._pending_loss
        self._pending_loss = None
        work.wait()
        total, count, *table = pair.tolist()
        if count and self.metrics is not None:  # a NaN loss stays NaN (reported as null)
            self.metrics.publish(replace(m, loss=total / count))
            if self._on_loss is not None:
                self._on_loss(m.step, total / count)
        if window_step is not None and self.metrics is not None:
            self.metrics.record_worker_times(window_step, timing.per_worker(table))
