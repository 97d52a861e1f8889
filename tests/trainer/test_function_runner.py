"""A function shipped with Client.train() runs under a real torchrun as the pod runs it
(`torchrun <spec.trainer.command> <spec.trainer.args>`): every rank calls it with its
arguments over gloo, and a failure names the line of the function's own source."""

from __future__ import annotations

import importlib.util
import re
import subprocess

import pytest

from dt_helpers import ROOT, TORCHRUN, base_env, free_port

from disttrain.client.function_job import function_trainer

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


def test_a_function_that_leaves_its_process_group_succeeds_on_every_rank(tmp_path):
    """docs/cli.md's function, as a reader copies it: it sets up gloo and returns without
    tearing the group down. Left to the interpreter's exit, gloo aborts the process more
    often than not (SIGABRT after the function's last line), which torchrun and then the
    operator read as a crash: the runner tears the group down. Five runs in a row: each
    exits 0 with both ranks' lines and no abort."""
    text = (ROOT / "docs" / "cli.md").read_text()
    (block,) = [b for b in re.findall(r"^```python\n(.*?)^```", text, re.S | re.M) if "client.train(" in b]
    source = tmp_path / "shipped.py"  # the function and its imports, as the reader's file defines them
    source.write_text(block.split("\nclient = Client()")[0])
    spec = importlib.util.spec_from_file_location("shipped", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert "destroy_process_group" not in source.read_text()
    for _ in range(5):
        proc = torchrun(module.all_reduce, {"scale": 10})
        assert proc.returncode == 0 and "Aborted" not in proc.stderr, proc.stderr[-4000:]
        assert sorted(re.findall(r"rank \d of 2: sum \d+", proc.stdout)) == ["rank 0 of 2: sum 30",
                                                                            "rank 1 of 2: sum 30"]
