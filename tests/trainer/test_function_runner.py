"""A function shipped with Client.train() runs under a real torchrun as the pod runs it
(`torchrun <spec.trainer.command> <spec.trainer.args>`): every rank calls it with its
arguments over gloo, and a failure names the line of the function's own source."""

from __future__ import annotations

import re
import subprocess

import pytest

from dt_helpers import TORCHRUN, base_env, free_port

from disttrain_operator.function_job import function_trainer

pytestmark = pytest.mark.dist  # torchrun and two gloo ranks


def all_reduce_ranks(scale: int, tag: str) -> None:
    import os

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.tensor([float(dist.get_rank() + 1) * scale])
    dist.all_reduce(total)
    print(f"{tag} rank {os.environ['RANK']} of {dist.get_world_size()}: sum {int(total.item())}", flush=True)
    dist.destroy_process_group()


def fails_on_rank_one() -> None:
    import os

    if os.environ["RANK"] == "1":
        raise RuntimeError("rank one gives up")


def torchrun(func, kwargs=None, nproc: int = 2) -> subprocess.CompletedProcess:
    trainer = function_trainer(func, kwargs)
    cmd = [TORCHRUN, "--nnodes=1", f"--nproc-per-node={nproc}", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{free_port()}", "--max-restarts=0", *trainer["command"], *trainer["args"]]
    return subprocess.run(cmd, env=base_env(), capture_output=True, text=True, timeout=300)


def test_every_rank_runs_the_function_with_its_arguments():
    proc = torchrun(all_reduce_ranks, {"scale": 10, "tag": "shipped"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    # The ranks share torchrun's stdout, so one rank's line can land inside the other's.
    lines = sorted(re.findall(r"shipped rank \d+ of \d+: sum \d+", proc.stdout))
    assert lines == ["shipped rank 0 of 2: sum 30", "shipped rank 1 of 2: sum 30"], proc.stdout


def test_an_exception_fails_the_worker_with_the_functions_own_line():
    proc = torchrun(fails_on_rank_one)
    assert proc.returncode != 0
    assert "RuntimeError: rank one gives up" in proc.stderr
    # The traceback shows the function's source line, not only "<string>".
    assert 'File "<disttrain function fails_on_rank_one>", line 4' in proc.stderr
    assert "raise RuntimeError('rank one gives up')" in proc.stderr
