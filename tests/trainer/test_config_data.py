"""Config from the pod contract's env, guardrails, and the elastic-safe loader. In-process."""

from __future__ import annotations

import pytest
import torch

from disttrain_trainer.config import (
    DDP_SINGLE_DEVICE, Config, ParallelConfig, resolve_parallel,
)
from disttrain_trainer.data import ShardedLoader, SyntheticDataset, TextDataset


def test_from_env_reads_the_pod_contract() -> None:
    cfg = Config.from_env({
        "DISTTRAIN_STRATEGY": "fsdp", "DISTTRAIN_MESH_FSDP": "0", "DISTTRAIN_MESH_TP": "0",
        "DISTTRAIN_PRECISION": "bf16-mixed", "DISTTRAIN_ACCUMULATE_GRAD_BATCHES": "4",
        "DISTTRAIN_MODEL": "mlp", "DISTTRAIN_DATASET": "synthetic-classification", "DISTTRAIN_STEPS": "7",
        "DISTTRAIN_BATCH_SIZE": "3", "DISTTRAIN_LEARNING_RATE": "0.01", "DISTTRAIN_SEED": "9",
        "DISTTRAIN_CHECKPOINT_DIR": "/ck", "DISTTRAIN_CHECKPOINT_INTERVAL_STEPS": "5",
        "DISTTRAIN_CHECKPOINT_KEEP": "2", "DISTTRAIN_CHECKPOINT_ASYNC": "true", "DISTTRAIN_METRICS_PORT": "9400",
        "DISTTRAIN_JOB_NAME": "j", "DISTTRAIN_NAMESPACE": "ns", "DISTTRAIN_POD_NAME": "j-worker-0",
        "RANK": "3",  # torchrun's variables belong to RunContext, not to Config
    })
    assert cfg.parallel.strategy == "fsdp" and cfg.parallel.precision == "bf16-mixed"
    assert cfg.train.accumulate_grad_batches == 4 and cfg.train.steps == 7 and cfg.train.seed == 9
    assert cfg.data.batch_size == 3 and cfg.data.dataset == "synthetic-classification"
    assert cfg.checkpoint.dir == "/ck" and cfg.checkpoint.async_save and cfg.checkpoint.keep == 2
    assert (cfg.metrics.port, cfg.metrics.job, cfg.metrics.pod) == (9400, "j", "j-worker-0")
    assert Config.from_env({}).parallel.strategy == "auto"
    assert Config.from_env({"DISTTRAIN_STRATEGY": "fsdp_native"}).parallel.strategy == "fsdp"


@pytest.mark.parametrize("env, message", [
    ({"DISTTRAIN_STRATEGY": "zero3"}, "strategy='zero3' is not one of"),
    ({"DISTTRAIN_BATCH_SIZE": "x"}, "DISTTRAIN_BATCH_SIZE='x' is not an integer"),
    ({"DISTTRAIN_MESH_FSDP": "2"}, "set both degrees or neither"),
    ({"DISTTRAIN_MODEL": "mlp"}, "cannot train on dataset 'text'"),
    ({"DISTTRAIN_ACCUMULATE_GRAD_BATCHES": "0"}, "must be >= 1"),
])
def test_invalid_env_fails_at_start_up(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Config.from_env(env)


def test_guardrails() -> None:
    r = resolve_parallel(ParallelConfig(strategy="ddp"), world_size=1, visible_gpus=0)
    assert r.strategy == "none" and r.warnings == (DDP_SINGLE_DEVICE,)
    r = resolve_parallel(ParallelConfig(strategy="auto", gpus_per_node=8), world_size=2, visible_gpus=2)
    assert r.strategy == "ddp" and r.device_type == "cuda" and "clamping to 2" in r.warnings[0]
    r = resolve_parallel(ParallelConfig(gpus_per_node=1, precision="16-mixed"), world_size=1, visible_gpus=0)
    assert r.device_type == "cpu" and r.precision == "32" and len(r.warnings) == 2
    with pytest.raises(ValueError, match="must equal the world size 4"):
        resolve_parallel(ParallelConfig(mesh_fsdp=2, mesh_tp=3), world_size=4, visible_gpus=0)
    assert resolve_parallel(ParallelConfig(mesh_fsdp=2, mesh_tp=2), world_size=4, visible_gpus=0).strategy == "fsdp_tp"


def _loaders(dp: int, *, batch: int, accumulate: int = 1) -> list[ShardedLoader]:
    ds = SyntheticDataset("synthetic-regression", seed=1)
    return [ShardedLoader(ds, batch_size=batch, accumulate=accumulate, dp_rank=r, dp_size=dp, seed=3,
                          device=torch.device("cpu")) for r in range(dp)]


def _rows(loaders: list[ShardedLoader]) -> set[tuple[float, ...]]:
    rows = set()
    for loader in loaders:
        for x, _ in loader.next_step():
            rows |= {tuple(r.tolist()) for r in x}
    return rows


def test_ranks_split_the_global_batch_and_resume_at_another_world_size() -> None:
    single = _loaders(1, batch=8)[0]
    expected = [_rows([single]) for _ in range(3)]
    two = _loaders(2, batch=2, accumulate=2)  # the same global batch of 8
    assert _rows(two) == expected[0]
    state = two[0].state_dict()
    assert state == two[1].state_dict() == {"epoch": 0, "pos": 8}
    four = _loaders(4, batch=2)  # resumed on 4 ranks: continues at sample 8
    for loader in four:
        loader.load_state_dict(state)
    assert _rows(four) == expected[1]


def test_each_epoch_reshuffles_and_drops_the_ragged_tail() -> None:
    ds = TextDataset(seq_len=64)
    loader = ShardedLoader(ds, batch_size=len(ds) // 2 - 1, accumulate=1, dp_rank=0, dp_size=1, seed=0,
                           device=torch.device("cpu"))
    first = [loader.next_step()[0][0] for _ in range(2)]
    assert loader.epoch == 0
    second = loader.next_step()[0][0]
    assert loader.epoch == 1 and loader.pos == loader.global_batch
    assert not torch.equal(first[0], second)
    x, y = ds.get(torch.tensor([0]))
    assert torch.equal(x[0, 1:], y[0, :-1])  # next-byte targets


def test_the_registries_build_every_model_on_every_dataset_the_pod_contract_names() -> None:
    """The names live in the pod contract (the API's enums and Config's choices read them);
    the trainer's registries (models/, data/) must build each of them."""
    from disttrain.api.pod_contract import MODEL_DATASETS
    from disttrain_trainer.data import CLASSES, IN_FEATURES, VOCAB_SIZE, build_dataset
    from disttrain_trainer.models import model_spec

    for model, datasets in MODEL_DATASETS.items():
        for dataset in datasets:
            spec = model_spec(model, dataset=dataset, vocab_size=VOCAB_SIZE, in_features=IN_FEATURES, classes=CLASSES)
            with torch.device("meta"):
                assert isinstance(spec.build(), torch.nn.Module)
            assert len(build_dataset(dataset, seq_len=spec.context, seed=0)) > 0
