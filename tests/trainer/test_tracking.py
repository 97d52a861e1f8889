"""Experiment tracking (tracking.py) against the real trackers: an MLflow tracking server
started here (the `mlflow` package's own server, a SQLite backend store) and TensorBoard's
own event-file reader. Two ranks train the CNN docs/training-api.md shows, as shown."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from dt_helpers import Agent, base_env, doc_file, free_port, script_env, stop_agents

MLFLOW = str(Path(sys.executable).with_name("mlflow"))


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[str]:
    """`mlflow server` on loopback. A watcher in its process group ends the group when this
    test process is gone, so even a killed run leaves no server behind."""
    port, store = free_port(), tmp_path / "mlflow"
    store.mkdir()
    serve = (f"{MLFLOW} server --backend-store-uri sqlite:///{store}/mlflow.db --artifacts-destination {store}/artifacts "
             f"--host 127.0.0.1 --port {port} --workers 1 & "
             f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 1; done; kill -- -$$")
    log = (tmp_path / "mlflow.log").open("wb")
    proc = subprocess.Popen(["bash", "-c", serve], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env=base_env())
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not start:\n{(tmp_path / 'mlflow.log').read_text()[-3000:]}",
                            pytrace=False)
            time.sleep(0.5)
        yield uri
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        proc.wait(timeout=60)
        log.close()


@pytest.mark.dist
@pytest.mark.slow
def test_rank_0_logs_one_run_to_a_real_mlflow_server_and_tensorboard(tmp_path: Path, mlflow_server: str) -> None:
    """Two ranks, one run: the job's settings and the script's own as params, the loss at
    each log step, the eval loss, the final checkpoint's place and the outcome in MLflow,
    tagged with the job's uid; the same scalars in TensorBoard's event files, read back with
    TensorBoard's reader; nothing from rank 1."""
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    script, ck, tb = doc_file("training-api.md", "train_cnn.py", tmp_path), tmp_path / "ck", tmp_path / "tb"
    env = script_env(node=0, rdzv_port=free_port(), nnodes="1:1", nproc=2, metrics_port=free_port(), ckpt_dir=str(ck),
                     interval=10, rdzv_id="uid-1234")
    env |= {"MLFLOW_TRACKING_URI": mlflow_server, "MLFLOW_EXPERIMENT_NAME": "cnn", "TENSORBOARD_LOG_DIR": str(tb),
            "DISTTRAIN_TERMINATION_LOG": str(tmp_path / "report")}
    agent = Agent(env, tmp_path / "agent.log", [str(script), "--steps", "30", "--batch", "8"])
    try:
        rc = agent.wait(timeout=300)
    finally:
        stop_agents([agent])
    assert rc == 0, agent.output()[-4000:]
    report = json.loads((tmp_path / "report").read_text())
    assert (report["outcome"], report["checkpoint"]["path"]) == ("Finished", str(ck / "step-00000030"))

    client = MlflowClient(mlflow_server)
    (experiment,) = [e for e in client.search_experiments() if e.name == "cnn"]
    (run,) = client.search_runs([experiment.experiment_id])  # one run: rank 1 logs nothing
    assert run.info.status == "FINISHED" and run.info.run_name.startswith("t-")
    assert {k: run.data.tags[k] for k in ("disttrain.job", "disttrain.job_uid", "disttrain.outcome",
                                          "disttrain.checkpoint")} == {
        "disttrain.job": "t", "disttrain.job_uid": "uid-1234", "disttrain.outcome": "Finished",
        "disttrain.checkpoint": str(ck / "step-00000030")}
    params = run.data.params
    assert (params["train.steps"], params["data.batch_size"], params["world_size"], params["global_batch"],
            params["strategy"], params["steps"], params["batch"]) == ("30", "8", "2", "16", "ddp", "30", "8")
    assert "metrics.control_token" not in params and "model.name" not in params
    loss = client.get_metric_history(run.info.run_id, "loss")
    assert [m.step for m in loss] == [10, 20, 30] and all(m.value > 0 for m in loss)
    assert [m.step for m in client.get_metric_history(run.info.run_id, "samples_per_second")] == [10, 20, 30]
    (evaluation,) = client.get_metric_history(run.info.run_id, "eval_loss")
    assert evaluation.step == 30 and evaluation.value == pytest.approx(report["evalLoss"], rel=1e-5)
    (accuracy,) = client.get_metric_history(run.info.run_id, "eval_accuracy")  # the script's named metric
    assert accuracy.step == 30 and accuracy.value == pytest.approx(report["evalMetrics"]["accuracy"], rel=1e-5)

    (run_dir,) = list(tb.iterdir())  # one run: rank 1 writes nothing
    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [10, 20, 30]
    assert [e.value for e in events.Scalars("train/loss")] == pytest.approx([m.value for m in loss], rel=1e-5)
    assert [e.step for e in events.Scalars("eval/loss")] == [30]
    assert [e.value for e in events.Scalars("eval/accuracy")] == pytest.approx([accuracy.value], rel=1e-5)
    saved = events.Tensors("disttrain/checkpoint/text_summary")  # each checkpoint once, not once per step
    assert [(e.step, e.tensor_proto.string_val[0].decode()) for e in saved] == [
        (step, str(ck / f"step-{step:08d}")) for step in (10, 20, 30)]


def test_an_unreachable_tracking_server_is_a_warning_and_training_goes_on(tmp_path: Path) -> None:
    """In one process: MLFLOW_TRACKING_URI names a port nobody serves; the run trains to the
    end and the log says why nothing went to MLflow."""
    import torch
    from torch import nn

    from disttrain.train import Config, Data, run_training
    from disttrain_trainer.config import MetricsConfig

    class Pairs(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 32

        def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.full((2,), float(i)), torch.tensor(float(i))

    warnings: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warnings.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("disttrain_trainer").addHandler(handler)
    saved = dict(os.environ)  # mlflow.set_tracking_uri sets MLFLOW_TRACKING_URI in this process's environment
    os.environ.update(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT="5")
    cfg = Config()
    cfg.train.steps, cfg.data.batch_size, cfg.eval.fraction = 2, 4, 0.0
    cfg.metrics = MetricsConfig(mlflow_tracking_uri=f"http://127.0.0.1:{free_port()}")
    try:
        result = run_training(lambda: nn.Linear(2, 1), Data(train=Pairs()), cfg,
                              loss_fn=lambda out, y: nn.functional.mse_loss(out.squeeze(-1), y))
    finally:
        logging.getLogger("disttrain_trainer").removeHandler(handler)
        os.environ.clear()
        os.environ.update(saved)
    assert result.step == 2 and result.exit_code == 0
    assert any(w.startswith("MLflow at http://127.0.0.1:") and "no MLflow logging" in w for w in warnings), warnings
