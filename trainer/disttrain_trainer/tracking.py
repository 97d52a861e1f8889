"""Experiment tracking from rank 0: MLflow and TensorBoard, two more sinks of metrics.py
(docs/training-api.md, "Experiment tracking").

On when the job's environment names them: `MLFLOW_TRACKING_URI` (MLflow's own variable,
with `MLFLOW_EXPERIMENT_NAME`; the experiment defaults to the job's namespace) and
`TENSORBOARD_LOG_DIR`. Every way in reports through build_metrics, so the built-in trainer,
run_training, the session and the callbacks all log the same way. Each start of training
(a job attempt) is one run, tagged with the job's uid so a job's attempts are found
together. Only global rank 0 logs. Neither package is needed otherwise: a missing package,
an unreachable server or a failed write is a warning in the log, never the end of training.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from disttrain_trainer.checkpoint import CheckpointInfo
from disttrain_trainer.config import MetricsConfig

log = logging.getLogger("disttrain_trainer")

# The run's status in MLflow for each outcome of the report (a crash ends the run FAILED).
MLFLOW_STATUS = {"Finished": "FINISHED", "Interrupted": "KILLED"}


@dataclass(frozen=True, slots=True)
class RunInfo:
    """Who logs: the job, its uid, this attempt."""

    job: str
    namespace: str
    job_uid: str
    pod: str
    restarts: int
    started: float

    @property
    def name(self) -> str:
        """One run per attempt: the job's name, when it started, torchrun's restart count."""
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(self.started))
        return f"{self.job or 'local'}-{stamp}-r{self.restarts}"

    @property
    def tags(self) -> dict[str, str]:
        return {"disttrain.job": self.job, "disttrain.namespace": self.namespace, "disttrain.job_uid": self.job_uid,
                "disttrain.pod": self.pod, "disttrain.restarts": str(self.restarts)}


def step_scalars(m: Any) -> dict[str, float]:
    """A log step's metrics under the names both trackers use."""
    values = {"loss": m.loss, "grad_norm": m.grad_norm, "samples_per_second": m.samples_per_second,
              "tokens_per_second": m.tokens_per_second, "step_seconds": m.step_seconds, "mfu": m.mfu}
    return {k: float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))}


def eval_scalars(loss: float | None, metrics: Mapping[str, float]) -> dict[str, float]:
    """An evaluation under the names both trackers use: `loss` and each named metric as
    named (MLflow prefixes them `eval_`, TensorBoard `eval/`, as Transformers' own do)."""
    values = {"loss": loss, **metrics}
    return {k: float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))}


def _checkpoint_tags(step: int, path: str) -> dict[str, str]:
    return {"disttrain.checkpoint": path, "disttrain.checkpoint_step": str(step)}


class _Guarded:
    """A tracker whose first failure turns it off with one warning."""

    what = ""
    broken = False

    def _try(self, action: str, call: Any, *args: Any, **kwargs: Any) -> None:
        if self.broken:
            return
        try:
            call(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001  (the tracker's trouble must never stop training)
            self.broken = True
            log.warning("%s: %s failed (%s: %s); no more %s logging for this run", self.what, action,
                        type(exc).__name__, exc, self.what)


class MlflowSink(_Guarded):
    what = "MLflow"

    def __init__(self, mlflow: Any, run: RunInfo, experiment: str, params: Mapping[str, Any]) -> None:
        self.mlflow = mlflow
        self._last: tuple[int, float] | None = None
        self._saved: tuple[int, str] | None = None
        self._closed = False
        active = mlflow.active_run()
        self.owned = active is None  # a run the script started itself is logged into, and left to it
        if self.owned:
            mlflow.set_experiment(experiment)
            self.run = mlflow.start_run(run_name=run.name, tags=run.tags)
            atexit.register(self._at_exit)  # after mlflow's own: runs first, so a crash ends the run FAILED
        else:
            self.run = active
            self._try("tagging the run", mlflow.set_tags, run.tags, synchronous=False)
        self._try("logging the params", mlflow.log_params, {k: str(v) for k, v in params.items()}, synchronous=False)
        log.info("MLflow: run %s (%s) at %s", self.run.info.run_name, self.run.info.run_id, mlflow.get_tracking_uri())

    def step(self, m: Any) -> None:
        if m.loss is None or self._last == (m.step, m.loss):  # log steps only; a republished one once
            return
        self._last = (m.step, m.loss)
        self._try("logging step metrics", self.mlflow.log_metrics, step_scalars(m), step=m.step, synchronous=False)

    def eval(self, step: int, loss: float | None, metrics: Mapping[str, float]) -> None:
        values = eval_scalars(loss, metrics)
        if values:
            self._try("logging the evaluation", self.mlflow.log_metrics,
                      {f"eval_{k}": v for k, v in values.items()}, step=step, synchronous=False)

    def checkpoint(self, info: CheckpointInfo) -> None:
        if self._saved == (info.step, info.path):  # the loop repeats the newest one every step
            return
        self._saved = (info.step, info.path)
        self._try("logging the checkpoint", self.mlflow.set_tags, _checkpoint_tags(info.step, info.path),
                  synchronous=False)

    def finish(self, outcome: str, step: int, total_steps: int, world_size: int) -> None:
        self._status = MLFLOW_STATUS.get(outcome, "FINISHED")
        self._try("logging the outcome", self.mlflow.set_tag, "disttrain.outcome", outcome, synchronous=False)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        status = getattr(self, "_status", "FAILED")  # closed without an outcome: training raised
        self.broken = False  # end the run even after a failed write
        self._try("flushing", self.mlflow.flush_async_logging)
        if self._saved is not None:  # async writes of one tag may land out of order: the newest wins last
            self._try("logging the checkpoint", self.mlflow.set_tags, _checkpoint_tags(*self._saved))
        if self.owned:
            self.broken = False
            self._try("ending the run", self.mlflow.end_run, status=status)

    def _at_exit(self) -> None:
        """The process ends without close(): a framework's Trainer raised past its callbacks."""
        self.close()


class TensorBoardSink(_Guarded):
    what = "TensorBoard"

    def __init__(self, writer_class: Any, log_dir: str, run: RunInfo, params: Mapping[str, Any]) -> None:
        self.path = os.path.join(log_dir, run.name)
        self.writer = writer_class(self.path)
        self._last: tuple[int, float] | None = None
        self._saved: tuple[int, str] | None = None
        rows = "\n".join(f"| {k} | {v} |" for k, v in {**run.tags, **params}.items())
        self._try("writing the params", self.writer.add_text, "disttrain/params",
                  "| name | value |\n| --- | --- |\n" + rows, 0)
        atexit.register(self.close)  # a crash past the callbacks still flushes what was written
        log.info("TensorBoard: writing run %s", self.path)

    def step(self, m: Any) -> None:
        if m.loss is None or self._last == (m.step, m.loss):
            return
        self._last = (m.step, m.loss)
        for name, value in step_scalars(m).items():
            self._try("writing a scalar", self.writer.add_scalar, f"train/{name}", value, m.step)

    def eval(self, step: int, loss: float | None, metrics: Mapping[str, float]) -> None:
        for name, value in eval_scalars(loss, metrics).items():
            self._try("writing the evaluation", self.writer.add_scalar, f"eval/{name}", value, step)

    def checkpoint(self, info: CheckpointInfo) -> None:
        if self._saved == (info.step, info.path):  # the loop repeats the newest one every step
            return
        self._saved = (info.step, info.path)
        self._try("writing the checkpoint", self.writer.add_text, "disttrain/checkpoint", info.path, info.step)

    def finish(self, outcome: str, step: int, total_steps: int, world_size: int) -> None:
        self._try("writing the outcome", self.writer.add_text, "disttrain/outcome", outcome, step)

    def close(self) -> None:
        self.broken = False
        self._try("closing", self.writer.close)


def tracking_sinks(cfg: MetricsConfig, *, is_rank0: bool, restarts: int, params: Mapping[str, Any]) -> list[Any]:
    """The trackers the job's environment names, on global rank 0 only."""
    if not is_rank0 or not (cfg.mlflow_tracking_uri or cfg.tensorboard_dir):
        return []
    run = RunInfo(job=cfg.job, namespace=cfg.namespace, job_uid=cfg.job_uid, pod=cfg.pod, restarts=restarts,
                  started=time.time())
    sinks: list[Any] = []
    if cfg.mlflow_tracking_uri:
        try:
            import mlflow
        except ImportError:
            log.warning("MLFLOW_TRACKING_URI is set but mlflow is not installed in this image: no MLflow "
                        "logging (pip install mlflow-skinny)")
        else:
            try:
                mlflow.set_tracking_uri(cfg.mlflow_tracking_uri)
                sinks.append(MlflowSink(mlflow, run, cfg.mlflow_experiment or cfg.namespace or "disttrain", params))
            except Exception as exc:  # noqa: BLE001  (an unreachable server must not stop training)
                log.warning("MLflow at %s: could not start a run (%s: %s); no MLflow logging",
                            cfg.mlflow_tracking_uri, type(exc).__name__, exc)
    if cfg.tensorboard_dir:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            log.warning("TENSORBOARD_LOG_DIR is set but tensorboard is not installed in this image: no "
                        "TensorBoard logging (pip install tensorboard)")
        else:
            try:
                sinks.append(TensorBoardSink(SummaryWriter, cfg.tensorboard_dir, run, params))
            except Exception as exc:  # noqa: BLE001
                log.warning("TensorBoard at %s: could not open the run (%s: %s); no TensorBoard logging",
                            cfg.tensorboard_dir, type(exc).__name__, exc)
    return sinks


def flat_params(obj: Any, prefix: str = "") -> dict[str, Any]:
    """A config's fields as `section.name` -> value (dataclasses nested), for the run's params."""
    fields = getattr(obj, "__dataclass_fields__", None)
    if fields is None:
        return {prefix.rstrip("."): obj}
    out: dict[str, Any] = {}
    for name in fields:
        out |= flat_params(getattr(obj, name), f"{prefix}{name}.")
    return out
