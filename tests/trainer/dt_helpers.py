"""Helpers for the trainer tests: in-process runs (a world of one), torchrun launches,
free ports. Everything runs on CPU with gloo and one thread per process."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

import dt_worker as worker  # noqa: E402  (tests/trainer is on sys.path via conftest.py)
from disttrain.local.run import descendants  # noqa: E402
from disttrain.local.ports import free_port  # noqa: E402,F401  (the tests' one port picker)
from disttrain_trainer.config import (  # noqa: E402
    CheckpointConfig, Config, DataConfig, EvalConfig, ModelConfig, ParallelConfig, TrainConfig,
)

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PET_", "DISTTRAIN_", "TORCHELASTIC_", "MLFLOW_", "TENSORBOARD_")) and k not in
           ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([str(ROOT / "operator"), str(ROOT / "trainer"), str(HERE)]),
        PYTHONWARNINGS="ignore",
        TORCH_CPP_LOG_LEVEL="ERROR",
    )
    return env


def tiny_config(*, steps: int = 4, batch: int = 4, accumulate: int = 1, strategy: str = "none",
                mesh: tuple[int, int] = (0, 0), ckpt_dir: str = "", interval: int = 0, keep: int = 3,
                async_save: bool = False, model: str = "gpt-nano", dataset: str = "text",
                lr: float = 3e-3, precision: str = "32", eval_fraction: float = 0.0,
                eval_interval: int = 0) -> Config:
    """A config small enough that a step takes a few ms on one core (no held-out split
    unless asked: the parity tests train on every sample)."""
    return Config(
        model=ModelConfig(name=model),  # type: ignore[arg-type]
        data=DataConfig(dataset=dataset, batch_size=batch, seq_len=16 if dataset == "text" else 0, seed=7),  # type: ignore[arg-type]
        parallel=ParallelConfig(strategy=strategy, mesh_fsdp=mesh[0], mesh_tp=mesh[1], precision=precision),  # type: ignore[arg-type]
        train=TrainConfig(steps=steps, learning_rate=lr, accumulate_grad_batches=accumulate, log_every=1,
                          warmup_steps=2, seed=11),
        checkpoint=CheckpointConfig(dir=ckpt_dir, interval_steps=interval, keep=keep, async_save=async_save),
        eval=EvalConfig(fraction=eval_fraction, interval_steps=eval_interval),
    )


@dataclass
class Run:
    result: Any
    params: dict[str, torch.Tensor]
    rc: int = 0
    output: str = ""


def run_inprocess(cfg: Config) -> Run:
    """Train in this process as a world of one (no torchrun env)."""
    _, result, params = worker.run(cfg, env={})
    return Run(result=result, params=params)


def run_customized(cfg: Config, customize: Callable[[Any, Any], None]) -> Any:
    """Train in this process as a world of one after `customize(components, ctx)` swapped
    or added parts (a recording metrics sink, a storage); returns the loop's Result."""
    from disttrain_trainer import loop
    from disttrain_trainer.__main__ import build
    from disttrain_trainer.context import RunContext

    with RunContext.open(cfg.parallel, env={}) as ctx:
        c = build(cfg, ctx)
        customize(c, ctx)
        try:
            return loop.run(c, ctx, cfg.train)
        finally:
            c.metrics.close()


def run_torchrun(cfg: Config, nproc: int, tmp: Path, *, extra_env: dict[str, str] | None = None,
                 timeout: float = 300, expect_ok: bool = True) -> Run:
    """Train under a real torchrun (standalone c10d rendezvous on loopback)."""
    tmp.mkdir(parents=True, exist_ok=True)
    cfg_path, out = tmp / "config.pkl", tmp / "out.pt"
    cfg_path.write_bytes(pickle.dumps(cfg))
    out.unlink(missing_ok=True)
    env = base_env() | {"TEST_CONFIG": str(cfg_path), "TEST_OUT": str(out)} | (extra_env or {})
    cmd = [TORCHRUN, "--nnodes=1", f"--nproc-per-node={nproc}", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{free_port()}", "--max-restarts=0", str(HERE / "dt_worker.py")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    if expect_ok:
        assert proc.returncode == 0, output[-6000:]
        data = torch.load(out, weights_only=False)
        return Run(result=data["result"], params=data["params"], rc=0, output=output)
    return Run(result=None, params={}, rc=proc.returncode, output=output)


def assert_params_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], *, rtol: float = 1e-4,
                        atol: float = 1e-5, mean_atol: float | None = None) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=rtol, atol=atol, msg=lambda m, k=k: f"{k}: {m}")
        if mean_atol is not None:
            assert (a[k] - b[k]).abs().mean() < mean_atol, k


def assert_losses_close(a: dict[int, float], b: dict[int, float], *, rtol: float = 1e-4) -> None:
    assert a.keys() == b.keys(), (a, b)
    for k in a:
        assert a[k] == pytest.approx(b[k], rel=rtol), (k, a, b)


# --- real agents, configured only through the pod contract's env ---------------------------

def pod_env(*, node: int, rdzv_port: int, nnodes: str = "1:2", nproc: int = 1, job: str = "t",
            metrics_port: int = 0, ckpt_dir: str = "", interval: int = 0, steps: int = 100,
            batch: int = 4, strategy: str = "ddp", max_restarts: int = 3, model: str = "gpt-nano",
            dataset: str = "text", rdzv_id: str = "test") -> dict[str, str]:
    """What the operator's render puts into worker pod `node` (docs/pod-contract.md)."""
    return base_env() | {
        "PET_NNODES": nnodes, "PET_NPROC_PER_NODE": str(nproc), "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": f"127.0.0.1:{rdzv_port}", "PET_RDZV_ID": rdzv_id,
        "PET_MAX_RESTARTS": str(max_restarts), "PET_MONITOR_INTERVAL": "1",
        "PET_RDZV_CONF": f"join_timeout=120,last_call_timeout=2,is_host={'true' if node == 0 else 'false'}",
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        "DISTTRAIN_JOB_NAME": job, "DISTTRAIN_NAMESPACE": "default", "DISTTRAIN_POD_NAME": f"{job}-worker-{node}",
        "DISTTRAIN_STRATEGY": strategy, "DISTTRAIN_MESH_FSDP": "0", "DISTTRAIN_MESH_TP": "0",
        "DISTTRAIN_PRECISION": "32", "DISTTRAIN_ACCUMULATE_GRAD_BATCHES": "1", "DISTTRAIN_GPUS_PER_NODE": "0",
        "DISTTRAIN_MODEL": model, "DISTTRAIN_DATASET": dataset, "DISTTRAIN_STEPS": str(steps),
        "DISTTRAIN_BATCH_SIZE": str(batch), "DISTTRAIN_LEARNING_RATE": "0.001", "DISTTRAIN_SEED": "5",
        "DISTTRAIN_CHECKPOINT_DIR": ckpt_dir, "DISTTRAIN_CHECKPOINT_INTERVAL_STEPS": str(interval),
        "DISTTRAIN_CHECKPOINT_KEEP": "3", "DISTTRAIN_CHECKPOINT_ASYNC": "false",
        "DISTTRAIN_METRICS_PORT": str(metrics_port),
    }


class Agent:
    """One torchrun agent = one "node" (pod), in its own session so it can be killed whole.
    It runs the built-in trainer, or `command` (torchrun's arguments: a script and its args)."""

    def __init__(self, env: dict[str, str], log: Path, command: list[str] | None = None) -> None:
        self.log = log
        self.proc = subprocess.Popen([TORCHRUN, *(command or ["--module", "disttrain_trainer"])], env=env,
                                     stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)

    def kill_node(self) -> None:
        """SIGKILL the agent and every process under it, like a node or pod dying."""
        for pid in reversed(_descendants(self.proc.pid)):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        self.proc.wait()

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def output(self) -> str:
        return self.log.read_text()


RANK0_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \[rank0\] ")


def rank0_story(logs: list[Path]) -> str:
    """Rank 0's lines from every agent's log, in time order. torchrun hands out ranks afresh
    at each rendezvous, so after a node is lost or rejoins, rank 0 (the only rank that logs
    progress) may live on any node: no one node's log tells the whole run."""
    lines = [line for log in logs for line in log.read_text().splitlines(keepends=True) if RANK0_LINE.match(line)]
    return "".join(sorted(lines, key=lambda line: line[:23]))  # stable: same-millisecond lines keep their order


# One /proc walk for the CLI and the tests.
_descendants = descendants


def get_status(port: int) -> dict[str, Any] | None:
    import json
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2) as r:
            return json.loads(r.read())
    except OSError:
        return None


def wait_for_step(port: int, step: int, *, timeout: float, agents: list[Agent] = (),
                  with_loss: bool = False) -> dict[str, Any]:
    """/status once it reached `step` (and, with_loss, once a loss is reported: with several
    ranks a log step's mean loss is published at the next step, after the step itself)."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = get_status(port)
        if status and status["step"] >= step and (not with_loss or status.get("loss") is not None):
            return status
        for a in agents:
            assert a.proc.poll() is None, f"agent exited early:\n{a.output()[-4000:]}"
        time.sleep(0.2)
    raise AssertionError(f"step {step} not reached within {timeout}s; last status {get_status(port)}")


# --- the pod contract's POST /checkpoint, and the docs' scripts --------------------------

CONTROL_TOKEN = "0b5e3c1e-pod-uid"  # what DISTTRAIN_CONTROL_TOKEN holds in the tests' pods


def post_checkpoint(port: int, query: str, token: str | None = CONTROL_TOKEN,
                    timeout: float = 150) -> tuple[int, dict[str, Any]]:
    """POST /checkpoint?query as the operator does: (HTTP status, the JSON answer or {})."""
    import json
    import urllib.error
    import urllib.request
    request = urllib.request.Request(f"http://127.0.0.1:{port}/checkpoint?{query}", method="POST", data=b"")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {}


def stop_agents(agents: list[Agent]) -> None:
    for agent in agents:
        if agent.proc.poll() is None:
            agent.kill_node()


def _doc_blocks() -> Any:
    import importlib.util
    spec = importlib.util.spec_from_file_location("doc_blocks", ROOT / "tests" / "doc_blocks.py")
    module = sys.modules.setdefault("doc_blocks", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


doc_blocks = _doc_blocks()


def doc_file(doc: str, name: str, dest: Path) -> Path:
    """The `<!-- file: name -->` block of docs/<doc>, saved in dest as a reader saves it."""
    text = (ROOT / "docs" / doc).read_text()
    (block,) = [b for b in doc_blocks.parse_blocks(f"docs/{doc}", text) if b.file == name]
    path = dest / name
    path.write_text(block.text)
    return path


# --- a script's pods (spec.trainer.command): the pod contract's env without the built-in's --

BUILTIN_ONLY = ("DISTTRAIN_MODEL", "DISTTRAIN_DATASET", "DISTTRAIN_STEPS", "DISTTRAIN_BATCH", "DISTTRAIN_SEED",
                "DISTTRAIN_LEARNING")


def script_env(**pod: Any) -> dict[str, str]:
    """pod_env(**pod) less what the operator sets for the built-in trainer only."""
    return {k: v for k, v in pod_env(**pod).items() if not k.startswith(BUILTIN_ONLY)}


def script_pods(tmp: Path, argv: list[str], ck: Path, tag: str, *, nodes: int = 2, nproc: int = 1,
                strategy: str = "ddp", interval: int = 0, max_restarts: int = 0,
                extra_env: dict[str, str] | None = None) -> tuple[list[Agent], list[int]]:
    """`nodes` agents of a script's job, each with its /status port, its report file
    tmp/report<i>-<tag> and its log tmp/agent<i>-<tag>.log."""
    rdzv, agents, ports = free_port(), [], []
    for i in range(nodes):
        ports.append(free_port())
        env = script_env(node=i, rdzv_port=rdzv, nnodes=f"{nodes}:{nodes}", nproc=nproc, metrics_port=ports[i],
                         ckpt_dir=str(ck), interval=interval, max_restarts=max_restarts, rdzv_id=tag, strategy=strategy)
        env |= {"DISTTRAIN_CONTROL_TOKEN": CONTROL_TOKEN, "DISTTRAIN_TERMINATION_LOG": str(tmp / f"report{i}-{tag}")}
        agents.append(Agent(env | (extra_env or {}), tmp / f"agent{i}-{tag}.log", argv))
    return agents, ports


def delete_held_pods(agents: list[Agent], ports: list[int], held: int, tmp: Path, tag: str) -> None:
    """The ranks hold at `held` after a requested checkpoint: no rank trains on; then the
    pods are deleted (SIGTERM), and every pod's report says Interrupted at that step."""
    import json
    import time
    try:
        time.sleep(1.5)
        status = get_status(ports[0])
        assert status is not None and (status["step"], status["heldAtStep"]) == (held, held), status
        for agent in agents:
            agent.proc.terminate()  # the pod deletion that follows
        for agent in agents:
            agent.wait(timeout=120)
    finally:
        stop_agents(agents)
    for i in range(len(agents)):
        report = json.loads((tmp / f"report{i}-{tag}").read_text())
        assert (report["outcome"], report["step"], report["checkpoint"]["step"]) == ("Interrupted", held, held)
