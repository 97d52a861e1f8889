"""The trainer's Config reads exactly the DISTTRAIN_* env the operator renders (the pod
contract), with the same defaults as the dataclasses, and its guardrails say what they did.
In-process, no torch.distributed."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from disttrain.api import load_job
from disttrain.render import render_pod
from disttrain_trainer.config import (
    DEVICES_CLAMPED, FP16_ON_CPU, CheckpointConfig, Config, DataConfig, EvalConfig, MetricsConfig, ParallelConfig,
    TrainConfig, resolve_parallel,
)


class Recording(Mapping):
    """An environment that remembers which names were read."""

    def __init__(self, values: dict[str, str]):
        self.values, self.read = values, set()

    def __getitem__(self, key):
        self.read.add(key)
        return self.values[key]

    def get(self, key, default=None):
        self.read.add(key)
        return self.values.get(key, default)

    def __iter__(self):
        return iter(self.values)

    def __len__(self):
        return len(self.values)


def rendered_env(**spec) -> dict[str, str]:
    doc = {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
           "metadata": {"name": "gpt", "namespace": "team-a"}, "spec": spec}
    job, resolved, _ = load_job(doc)
    env = render_pod(job, resolved, 1)["spec"]["containers"][0]["env"]
    out = {e["name"]: e["value"] for e in env if "value" in e}
    out["DISTTRAIN_POD_NAME"] = "gpt-worker-1"  # fieldRefs, filled in by the kubelet
    out["DISTTRAIN_CONTROL_TOKEN"] = "uid-of-gpt-worker-1"
    return out


SPEC = dict(nodes=2, gpusPerNode=4, mesh={"fsdp": 4, "tp": 2}, precision="bf16-mixed", accumulateGradBatches=3,
            trainer={"builtin": {"model": "mlp", "dataset": "synthetic-classification", "steps": 77,
                                 "batchSize": 5, "learningRate": 0.02, "seed": 11,
                                 "evalFraction": 0.25, "evalFold": 3, "evalIntervalSteps": 7}},
            checkpoint={"path": "/ck", "intervalSteps": 9, "keep": 4, "async": True, "claimName": "c"},
            metrics={"port": 9500})


def test_config_from_the_rendered_pod_env_is_the_spec():
    env = Recording(rendered_env(**SPEC))
    cfg = Config.from_env(env)
    assert cfg == Config(
        model=cfg.model.__class__(name="mlp"),
        data=DataConfig(dataset="synthetic-classification", batch_size=5, seed=11),
        parallel=ParallelConfig(strategy="fsdp", mesh_fsdp=4, mesh_tp=2, precision="bf16-mixed", gpus_per_node=4),
        train=TrainConfig(steps=77, learning_rate=0.02, accumulate_grad_batches=3, seed=11),
        checkpoint=CheckpointConfig(dir="/ck", interval_steps=9, keep=4, async_save=True),
        metrics=MetricsConfig(port=9500, job="gpt", namespace="team-a", pod="gpt-worker-1",
                              termination_log="/dev/termination-log", control_token="uid-of-gpt-worker-1",
                              job_uid="gpt"),  # the rendezvous id: the job's uid (its name here: no uid)
        eval=EvalConfig(fraction=0.25, fold=3, interval_steps=7),
    )
    rendered = {k for k in env.values if k.startswith("DISTTRAIN_")}
    # Besides them: the test hooks (faults.py), which the operator never sets; the trackers'
    # own variables, which a job's spec.env sets; the rendezvous id torchrun reads too.
    others = {"DT_TEST_HANG_AT_STEP", "DT_TEST_HANG_RANK", "DT_TEST_SLOW_RANK", "DT_TEST_SLOW_FACTOR", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME",
              "TENSORBOARD_LOG_DIR", "PET_RDZV_ID"}
    assert env.read - others == rendered, "the trainer reads exactly the DISTTRAIN_* names the operator sets"
    assert env.values["PET_RDZV_ID"] == "gpt"


def test_a_script_swept_with_kfold_holds_out_the_fold_the_sweep_gives():
    """disttrain sweep gives a script's job SWEEP_FOLD of SWEEP_FOLDS (sweep/space.py), and
    run_training holds out that block; the built-in's own evalFraction wins where set."""
    assert Config.from_env({"SWEEP_FOLD": "1", "SWEEP_FOLDS": "4"}).eval == EvalConfig(fraction=0.25, fold=1)
    assert Config.from_env({"SWEEP_FOLD": "1", "SWEEP_FOLDS": "4", "DISTTRAIN_EVAL_FRACTION": "0.2",
                            "DISTTRAIN_EVAL_FOLD": "2"}).eval == EvalConfig(fraction=0.2, fold=2)


def test_empty_env_gives_the_dataclass_defaults(monkeypatch):
    assert Config.from_env({}) == Config()
    for name in list(__import__("os").environ):
        if name.startswith("DISTTRAIN_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("DISTTRAIN_STEPS", "12")
    assert Config.from_env().train.steps == 12  # no argument: the process environment


@pytest.mark.parametrize("raw,expected", [("true", True), ("1", True), ("yes", True), ("TRUE", True),
                                          ("false", False), ("0", False), ("no", False), ("", False)])
def test_boolean_env(raw, expected):
    assert Config.from_env({"DISTTRAIN_CHECKPOINT_ASYNC": raw}).checkpoint.async_save is expected


@pytest.mark.parametrize("make,message", [
    (lambda: ParallelConfig(strategy="zero"), r"strategy='zero' is not one of auto, none, ddp, fsdp"),
    (lambda: ParallelConfig(precision="8"), r"precision='8' is not one of bf16-mixed, 16-mixed, 32"),
    (lambda: ParallelConfig(mesh_fsdp=-1, mesh_tp=-1), r"mesh degrees must be >= 0"),
    (lambda: ParallelConfig(gpus_per_node=-1), r"gpus_per_node=-1 must be >= 0"),
    (lambda: DataConfig(batch_size=0), r"batch_size=0 must be >= 1"),
    (lambda: DataConfig(seq_len=-1), r"seq_len=-1 must be >= 0"),
    (lambda: TrainConfig(steps=-1), r"steps=-1 must be >= 0"),
    (lambda: TrainConfig(learning_rate=0), r"learning_rate=0 must be > 0"),
    (lambda: TrainConfig(log_every=0), r"log_every=0 must be >= 1"),
    (lambda: TrainConfig(grad_clip=-0.5), r"grad_clip=-0.5 must be >= 0"),
    (lambda: CheckpointConfig(interval_steps=-1), r"checkpoint interval_steps=-1 must be >= 0"),
    (lambda: CheckpointConfig(keep=0), r"checkpoint keep=0 must be >= 1"),
    (lambda: EvalConfig(fraction=0.6), r"eval fraction=0.6 must be within 0..0.5"),
    (lambda: EvalConfig(interval_steps=-1), r"eval interval_steps=-1 must be >= 0"),
    (lambda: EvalConfig(fraction=0.25, fold=4), r"eval fold=4 must be within 0..3 for fraction 0.25"),
    (lambda: EvalConfig(fraction=0, fold=-1), r"eval fold=-1 must be within 0..0 for fraction 0"),
    (lambda: Config.from_env({"DISTTRAIN_EVAL_FRACTION": "a tenth"}), r"DISTTRAIN_EVAL_FRACTION='a tenth' is not a number"),
    (lambda: Config.from_env({"SWEEP_FOLDS": "x"}),
     r"SWEEP_FOLD='' of SWEEP_FOLDS='x': want integers with SWEEP_FOLDS >= 2 and 0 <= SWEEP_FOLD < SWEEP_FOLDS "
     r"\(disttrain sweep sets them; do not set them yourself\)"),
    (lambda: Config.from_env({"SWEEP_FOLD": "3", "SWEEP_FOLDS": "3"}),
     r"SWEEP_FOLD='3' of SWEEP_FOLDS='3': want integers with SWEEP_FOLDS >= 2 and 0 <= SWEEP_FOLD < SWEEP_FOLDS "
     r"\(disttrain sweep sets them; do not set them yourself\)"),
    (lambda: MetricsConfig(port=65536), r"metrics port=65536 must be within 0..65535"),
    (lambda: MetricsConfig(port=-1), r"metrics port=-1 must be within 0..65535"),
    (lambda: Config(data=DataConfig(dataset="text"), model=Config().model.__class__(name="mlp")),
     r"model 'mlp' cannot train on dataset 'text'; use synthetic-regression or synthetic-classification"),
    (lambda: Config.from_env({"DISTTRAIN_CHECKPOINT_ASYNC": "maybe"}), r"DISTTRAIN_CHECKPOINT_ASYNC='maybe' is not true/false"),
])
def test_impossible_values_fail_with_their_message(make, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        make()


def test_the_edges_are_allowed():
    assert TrainConfig(steps=0, log_every=1, grad_clip=0).steps == 0
    assert MetricsConfig(port=65535).port == 65535 and MetricsConfig(port=0).port == 0
    assert DataConfig(batch_size=1, seq_len=0).batch_size == 1
    assert ParallelConfig(strategy="fsdp_native").strategy == "fsdp"
    assert TrainConfig(steps=100).effective_warmup == 10 and TrainConfig(steps=55).effective_warmup == 5
    assert TrainConfig(steps=100, warmup_steps=3).effective_warmup == 3
    assert EvalConfig(fraction=0.5, fold=1).folds == 2 and not EvalConfig(fraction=0).enabled


@pytest.mark.parametrize("strategy,world,expected", [
    ("auto", 1, "none"), ("auto", 2, "ddp"), ("none", 4, "none"), ("ddp", 2, "ddp"), ("fsdp", 1, "fsdp"),
    ("fsdp", 3, "fsdp"),
])
def test_strategy_resolution(strategy, world, expected):
    r = resolve_parallel(ParallelConfig(strategy=strategy), world_size=world, visible_gpus=0)
    assert r.strategy == expected and r.warnings == () and r.device_type == "cpu"


def test_one_visible_gpu_is_cuda_and_clamping_says_so():
    assert resolve_parallel(ParallelConfig(gpus_per_node=1), world_size=1, visible_gpus=1).device_type == "cuda"
    r = resolve_parallel(ParallelConfig(gpus_per_node=8), world_size=1, visible_gpus=2)
    assert r.warnings == (DEVICES_CLAMPED.format(requested=8, visible=2),)
    assert r.warnings[0] == "8 devices per node requested but only 2 visible, clamping to 2"
    r = resolve_parallel(ParallelConfig(precision="16-mixed"), world_size=1, visible_gpus=0)
    assert r.warnings == (FP16_ON_CPU,) and r.precision == "32"
    assert resolve_parallel(ParallelConfig(gpus_per_node=1, precision="16-mixed"), world_size=1,
                            visible_gpus=1).precision == "16-mixed"


def test_a_mesh_off_the_world_size_names_both():
    with pytest.raises(ValueError, match=r"^mesh fsdp=2 x tp=3 = 6 must equal the world size 4$"):
        resolve_parallel(ParallelConfig(mesh_fsdp=2, mesh_tp=3), world_size=4, visible_gpus=0)


@pytest.mark.parametrize("make,message", [
    (lambda: Config().model.__class__(name="gpt-huge"), r"model='gpt-huge' is not one of gpt-nano, gpt-small, mlp"),
    (lambda: DataConfig(dataset="imagenet"),
     r"dataset='imagenet' is not one of text, synthetic-regression, synthetic-classification"),
    (lambda: ParallelConfig(mesh_fsdp=-1, mesh_tp=2), r"mesh degrees must be >= 0"),
    (lambda: ParallelConfig(mesh_fsdp=2, mesh_tp=-1), r"mesh degrees must be >= 0"),
])
def test_each_choice_names_itself(make, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        make()


def test_other_ranks_log_only_warnings_and_the_lines_meant_for_every_node():
    import logging

    from disttrain_trainer.context import EVERY_NODE, _RankFilter

    def record(level: int, **extra: bool) -> logging.LogRecord:
        r = logging.LogRecord("disttrain_trainer", level, __file__, 1, "m", (), None)
        r.__dict__.update(extra)
        return r

    rank1, rank0 = _RankFilter(1), _RankFilter(0)
    assert not rank1.filter(record(logging.INFO))
    assert rank1.filter(record(logging.WARNING))
    assert rank1.filter(record(logging.INFO, **{EVERY_NODE: True}))
    assert rank0.filter(record(logging.INFO))
