"""The public training API (disttrain.train.run_training): the built-in trainer's loop for
a model and data of the user's own, under real torchrun agents configured only through
the pod contract's env. The CNN test runs the script docs/training-api.md shows, as shown;
a wrapper around it records which samples each rank reads."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset

from dt_helpers import (_descendants, delete_held_pods, doc_file, get_status, post_checkpoint, script_pods,
                        stop_agents, wait_for_step)
from disttrain.train import Config, Data, run_training

# Runs a script after wrapping the loader's reads: one line per batch read, per rank and attempt.
RECORDER = '''
import os, runpy, sys
from disttrain_trainer.data import MapStyle
read = MapStyle.get
name = "samples-%s-%s-%s" % (os.environ["RECORD_TAG"], os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"])
out = open(os.path.join(os.environ["RECORD_DIR"], name), "a")
def get(self, idx):
    out.write(" ".join(map(str, idx.tolist())) + "\\n")
    out.flush()
    return read(self, idx)
MapStyle.get = get
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''
SAMPLES, HELD_OUT = 4096, 409  # the doc's dataset; Config's default eval fraction 0.1 holds out 0..408
BATCH = 8


def reads(tmp: Path, tag: str, attempt: int, rank: int) -> list[list[int]]:
    """The training batches one rank read, in order (a held-out batch is all below HELD_OUT;
    a line cut by a kill -9 is dropped)."""
    text = (tmp / f"samples-{tag}-{attempt}-{rank}").read_text()
    lines = text.splitlines()[:None if text.endswith("\n") else -1]
    batches = [[int(i) for i in line.split()] for line in lines]
    return [b for b in batches if min(b) >= HELD_OUT]


@pytest.mark.dist
@pytest.mark.slow
def test_the_documented_cnn_holds_on_request_and_resumes_on_one_rank_at_the_next_unseen_sample(tmp_path: Path) -> None:
    """Two pods run docs/training-api.md's CNN through run_training: /status shows its step,
    loss and eval loss; POST /checkpoint holds both at one step with a committed DCP
    checkpoint of it, and SIGTERM ends them Interrupted there. One pod then resumes from it
    at the next unseen sample; kill -9 of its rank after a periodic save is restarted by
    torchrun, reads the same samples again from that save, and finishes at the step count."""
    script, ck = doc_file("training-api.md", "train_cnn.py", tmp_path), tmp_path / "ck"
    wrapper = tmp_path / "record.py"
    wrapper.write_text(RECORDER)
    record = {"RECORD_DIR": str(tmp_path), "RECORD_TAG": "a"}
    agents, ports = script_pods(tmp_path, [str(wrapper), str(script), "--steps", "100000", "--batch", str(BATCH)],
                                ck, "a", extra_env=record)
    try:
        status = wait_for_step(ports[0], 10, timeout=240, agents=agents, with_loss=True)
        assert status["totalSteps"] == 100_000 and status["samplesPerSecond"] > 0
        code, doc = post_checkpoint(ports[1], "holdSeconds=300&waitSeconds=120")
        assert code == 200, doc
        held = doc["heldAtStep"]
        assert doc["checkpoint"]["step"] == held and doc["checkpoint"]["path"] == str(ck / f"step-{held:08d}")
        assert (ck / f"step-{held:08d}" / ".metadata").is_file()
    except BaseException:
        stop_agents(agents)
        raise
    delete_held_pods(agents, ports, held, tmp_path, "a")
    first = [reads(tmp_path, "a", 0, rank) for rank in (0, 1)]
    assert [len(f) for f in first] == [held, held]

    total = held + 60
    stuck = held + 45  # the rank stops inside this step (the test hook, faults.py), to be killed there
    agents, ports = script_pods(tmp_path, [str(wrapper), str(script), "--steps", str(total), "--batch", str(BATCH)],
                                ck, "b", nodes=1, interval=20, max_restarts=2,
                                extra_env=record | {"RECORD_TAG": "b", "DT_TEST_HANG_AT_STEP": str(stuck),
                                                    "DT_TEST_HANG_RANK": "0"})
    try:
        status = wait_for_step(ports[0], stuck - 1, timeout=240, agents=agents)
        time.sleep(1)
        assert get_status(ports[0])["step"] == stuck - 1
        worker = [p for p in _descendants(agents[0].proc.pid) if "train_cnn.py" in _cmdline(p)]
        os.kill(worker[-1], signal.SIGKILL)  # torchrun restarts its worker group
        rc = agents[0].wait(timeout=300)
    finally:
        stop_agents(agents)
    log = agents[0].output()
    assert rc == 0, log[-4000:]
    resumed = [int(m) for m in re.findall(r"resuming at step (\d+) of", log)]
    assert resumed[0] == held and len(resumed) == 2 and resumed[1] > held and resumed[1] % 20 == 0, resumed
    again = resumed[1]
    report = json.loads((tmp_path / "report0-b").read_text())
    assert (report["outcome"], report["step"], report["checkpoint"]["step"]) == ("Finished", total, total)
    assert report["evalStep"] == total and 0 < report["evalLoss"] < 1.0986  # below chance (ln 3): it learnt
    assert 1 / 3 < report["evalMetrics"]["accuracy"] <= 1  # eval_metrics, averaged like the loss

    before, after = reads(tmp_path, "b", 0, 0), reads(tmp_path, "b", 1, 0)
    assert len(after) == total - again and len(before) == stuck - 1 - held
    replayed = before[again - held:]
    assert replayed == after[:len(replayed)]  # the restart read what the killed attempt read after the save
    by_step = [a + b for a, b in zip(*first, strict=True)] + before[:again - held] + after
    assert [len(b) for b in by_step] == [2 * BATCH] * held + [BATCH] * (total - held)
    seen = [i for b in by_step for i in b]
    # Two ranks then one: each step read the next unseen samples, so no sample comes twice
    # within an epoch. How far the two ranks got before the hold took effect depends on the
    # machine (a busy one ran past an epoch): the epoch's whole two-rank steps are checked
    # (the sampler pads an odd epoch with a repeat at its end).
    epoch = seen[:(SAMPLES - HELD_OUT) // (2 * BATCH) * (2 * BATCH)]
    assert len(set(epoch)) == len(epoch)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


GPT2_SCRIPT = '''
import os
import sys

import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel

from disttrain.train import Config, Data, run_training


class Counting(torch.utils.data.Dataset):
    """Sequences that count up modulo 64 from a start of their own: (inputs, next tokens)."""

    def __len__(self):
        return 512

    def __getitem__(self, i):
        start = int(torch.randint(0, 64, (1,), generator=torch.Generator().manual_seed(i)))
        seq = (start + torch.arange(17)) % 64
        return {"input_ids": seq[:-1]}, seq[1:]


def lm_loss(output, targets):
    return nn.functional.cross_entropy(output.logits.flatten(0, 1).float(), targets.flatten())


config = GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2)
cfg = Config.from_env()
cfg.train.steps, cfg.data.batch_size, cfg.train.learning_rate = int(sys.argv[1]), 4, 1e-2
cfg.train.log_every = 1
result = run_training(lambda: GPT2LMHeadModel(config), Data(train=Counting(), tokens_per_sample=16), cfg,
                      loss_fn=lm_loss)
logged = sorted(result.losses)
if os.environ["RANK"] == "0":
    print(f"losses {result.losses[logged[0]]:.4f} {result.losses[logged[-1]]:.4f}", flush=True)
raise SystemExit(result.exit_code)
'''


@pytest.mark.dist
@pytest.mark.slow
def test_a_transformers_gpt2_from_a_config_trains_with_fsdp2_and_resumes(tmp_path: Path) -> None:
    """A Hugging Face GPT-2 built from a config (keyword inputs, a ModelOutput, tied
    embeddings) through run_training with FSDP2 on two ranks: it learns, saves a sharded
    DCP checkpoint at its last step, and a longer run resumes from it to the end."""
    script, ck = tmp_path / "train_gpt2.py", tmp_path / "ck"
    script.write_text(GPT2_SCRIPT)
    for tag, steps in (("a", 30), ("b", 40)):
        agents, _ = script_pods(tmp_path, [str(script), str(steps)], ck, tag, nodes=1, nproc=2, strategy="fsdp")
        try:
            rc = agents[0].wait(timeout=300)
        finally:
            stop_agents(agents)
        log = agents[0].output()
        assert rc == 0, log[-4000:]
        report = json.loads((tmp_path / f"report0-{tag}").read_text())
        assert (report["outcome"], report["step"], report["checkpoint"]["step"]) == ("Finished", steps, steps)
        assert report["evalLoss"] is not None
    assert "resuming at step 30 of 40" in log
    assert sorted(os.listdir(ck)) == ["step-00000030", "step-00000040"]
    first_a, last_a = map(float, re.search(r"losses (\S+) (\S+)", (tmp_path / "agent0-a.log").read_text()).groups())
    first_b, _ = map(float, re.search(r"losses (\S+) (\S+)", log).groups())
    assert last_a < 0.5 * first_a, (first_a, last_a)  # ln 64 = 4.16 at the start; the counting is learnt
    assert first_b < 0.5 * first_a, (first_a, first_b)  # the resumed run starts from the learnt weights


# --- bad input: the message names the field, the value and the fix; nothing starts ----------

class _Pairs(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.full((4,), float(i)), torch.tensor(float(i))


class _Stream(IterableDataset):
    def __iter__(self):  # type: ignore[no-untyped-def]
        yield torch.zeros(4), torch.zeros(())


def _mse(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(out.squeeze(-1), y)


def _tiny() -> Config:
    cfg = Config()
    cfg.train.steps, cfg.data.batch_size, cfg.eval.fraction, cfg.train.log_every = 3, 4, 0.0, 1
    return cfg


@pytest.mark.parametrize(("model", "data", "message"), [
    (lambda: "not a model", Data(train=_Pairs()), "model: the builder returned str, not a torch.nn.Module"),
    (42, Data(train=_Pairs()), "model: int is neither a torch.nn.Module nor a function that builds one"),
    (lambda: nn.Linear(4, 1, device="meta"), Data(train=_Pairs()),
     "model: Linear was built on the meta device but has no init_tensor(name, shape, generator)"),
    (lambda: nn.Linear(4, 1), Data(train=_Stream()), "data.train: _Stream is an IterableDataset"),
    (lambda: nn.Linear(4, 1), Data(train=DataLoader(_Stream(), batch_size=2)),
     "data.train: the DataLoader reads an IterableDataset"),
    (lambda: nn.Linear(4, 1), Data(train=[1, 2, 3]), "data.train: a batch must be (inputs, targets), got Tensor"),
])
def test_a_model_or_data_it_cannot_train_is_refused_naming_the_field_and_the_fix(model, data, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises((TypeError, ValueError)) as caught:
        run_training(model, data, _tiny(), loss_fn=_mse)
    assert message in str(caught.value)


def test_a_dataloader_gives_its_dataset_batch_size_and_collate_and_the_run_is_reproducible() -> None:
    """In one process: a DataLoader's batch size and collate_fn are used (its sampler is
    not), the user's optimizer factory is used, and two runs agree to the bit."""
    used: list[int] = []

    def collate(samples):  # type: ignore[no-untyped-def]
        used.append(len(samples))
        return torch.stack([x for x, _ in samples]), torch.stack([y for _, y in samples])

    def once() -> list[float]:
        loader = DataLoader(_Pairs(), batch_size=6, shuffle=True, collate_fn=collate)
        result = run_training(lambda: nn.Linear(4, 1), Data(train=loader), _tiny(), loss_fn=_mse,
                              optimizer=lambda params: torch.optim.SGD(params, lr=1e-4))
        assert result.step == 3 and result.exit_code == 0
        return [result.losses[s] for s in (1, 2, 3)]

    assert once() == once()
    assert [n for n in used if n != 1] == [6] * 6  # 1: the first sample, read to check its shape


def test_a_scheduler_whose_state_a_checkpoint_cannot_restore_is_refused_with_the_fix() -> None:
    def chained(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
        warm = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=2)
        cool = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=2)
        return torch.optim.lr_scheduler.SequentialLR(optimizer, [warm, cool], milestones=[2])

    with pytest.raises(TypeError, match=r"^scheduler: SequentialLR keeps state a checkpoint does not restore .*"
                                        r"pass one scheduler whose place is its step count"):
        run_training(lambda: nn.Linear(4, 1), Data(train=_Pairs()), _tiny(), loss_fn=_mse, scheduler=chained)


def test_fsdp_shards_the_outermost_module_lists_members_one_by_one() -> None:
    """A transformer's layers are the units; a ModuleList inside a layer (heads, experts)
    goes with its layer, never sharded on its own as well."""
    from disttrain_trainer.parallelize import fsdp_units

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.experts = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Linear(2, 2)
            self.layers = nn.ModuleList([Layer(), Layer(), Layer()])
            self.heads = nn.ModuleList([nn.Linear(2, 1)])

    net = Net()
    assert fsdp_units(net) == [*net.layers, *net.heads]
