"""`disttrain run --local`: the rendered pods as local torchrun agents (2 CPU nodes)."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from dt_helpers import ROOT, base_env
from disttrain.api.validate import validate_document
from disttrain.local.plan import localize, newest_checkpoint
from disttrain.local.run import run_local
from disttrain.integrations.registry import render_children

def job_doc(name: str, steps: int) -> dict:
    return {
        "apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
        "metadata": {"name": name},
        "spec": {"strategy": "ddp", "nodes": 2, "nprocPerNode": 1, "gpusPerNode": 0, "precision": "32",
                 "trainer": {"builtin": {"model": "gpt-nano", "dataset": "text", "steps": steps,
                                         "batchSize": 4, "learningRate": 0.001}},
                 "checkpoint": {"intervalSteps": 10, "keep": 2, "claimName": "local"}},
    }


def test_localize_swaps_only_cluster_addresses(tmp_path: Path) -> None:
    result = validate_document(job_doc("loc", 20))
    assert result.ok
    children = render_children(result.job, result.resolved)
    plan = localize(children, workdir=tmp_path, rdzv_port=1234, metrics_ports=[5000, 5001], rdzv_id="abc",
                    torchrun="/venv/bin/torchrun", cpus=4)
    pods = [c for c in children if c["kind"] == "Pod"]
    for pod, node in zip(pods, plan.nodes, strict=True):
        rendered = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        changed = {k for k in rendered if rendered[k] != node.env.get(k)}
        assert changed == {"PET_RDZV_ENDPOINT", "PET_RDZV_ID", "DISTTRAIN_METRICS_PORT",
                           "DISTTRAIN_CHECKPOINT_DIR", "DISTTRAIN_POD_NAME", "DISTTRAIN_TERMINATION_LOG",
                           "DISTTRAIN_CONTROL_TOKEN"}
        assert len(node.env["DISTTRAIN_CONTROL_TOKEN"]) == 32  # a fresh uuid per agent: /checkpoint works locally
        assert node.env["DISTTRAIN_TERMINATION_LOG"] == str(node.report)
        assert node.env["PET_RDZV_ENDPOINT"] == "127.0.0.1:1234" and node.env["PET_RDZV_ID"] == "abc"
        assert node.env["DISTTRAIN_POD_NAME"] == pod["metadata"]["name"]
        assert node.env["DISTTRAIN_CHECKPOINT_DIR"] == str((tmp_path / "loc" / "checkpoints").resolve())
        assert node.argv == ["/venv/bin/torchrun"] + pod["spec"]["containers"][0]["command"][1:]
        assert node.env["OMP_NUM_THREADS"] == "2"
        assert node.env["TMPDIR"] == str((tmp_path / "loc" / "tmp").resolve())  # not the machine's /tmp
    assert [n.metrics_port for n in plan.nodes] == [5000, 5001]
    assert "is_host=true" in plan.nodes[0].env["PET_RDZV_CONF"]
    assert "is_host=false" in plan.nodes[1].env["PET_RDZV_CONF"]


@pytest.mark.dist
@pytest.mark.slow
def test_run_local_trains_two_nodes_to_the_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in base_env().items():
        monkeypatch.setenv(k, v)
    result = validate_document(job_doc("local2", 20))
    out = io.StringIO()
    rc = run_local(result.job, result.resolved, workdir=tmp_path, progress=False, out=out)
    text = out.getvalue()
    assert rc == 0, text
    assert "local2 succeeded" in text and "step        20/20" in text, text
    newest = newest_checkpoint(tmp_path / "local2" / "checkpoints")
    assert newest is not None and newest[0] == 20
    assert "world 2" in (tmp_path / "local2" / "logs" / "local2-worker-0.log").read_text()
    # Every pod's log says which rank it joined as, not only the one that holds rank 0
    # (`disttrain logs` of a multi-node job shows where each worker stands).
    joined = [re.findall(r"joined: rank (\d+) of 2", (tmp_path / "local2" / "logs" / f"local2-worker-{i}.log").read_text())
              for i in range(2)]
    assert sorted(map(tuple, joined)) == [("0",), ("1",)], joined
    assert "world size 2" in text, text
    # torchrun's agents leave their temporary directories in the job's workdir, not in /tmp.
    assert len(list((tmp_path / "local2" / "tmp").glob("torchelastic_*"))) == 2
    # The same command again: nothing left to train, and it says so (it once printed a
    # summary with "world size 0") with how to start fresh; no agent is started.
    again = io.StringIO()
    assert run_local(result.job, result.resolved, workdir=tmp_path, progress=False, out=again) == 0
    assert "local2 already finished: its checkpoint at step 20 of 20" in again.getvalue(), again.getvalue()
    assert f"rm -rf {(tmp_path / 'local2').resolve()}" in again.getvalue() and "world size" not in again.getvalue()


@pytest.mark.dist
@pytest.mark.slow
def test_run_local_can_checkpoint_to_an_object_store(tmp_path: Path, s3_bucket: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in base_env().items():
        monkeypatch.setenv(k, v)
    uri = f"{s3_bucket}/local"
    result = validate_document(job_doc("locals3", 20))
    out = io.StringIO()
    assert run_local(result.job, result.resolved, workdir=tmp_path, progress=False, out=out, checkpoint_uri=uri) == 0, \
        out.getvalue()
    text = out.getvalue()
    assert f"checkpoints {uri} " in text or f"checkpoints {uri}\n" in text, text
    newest = newest_checkpoint(uri)
    assert newest is not None and newest[0] == 20 and newest[1].startswith(f"{uri}/step-00000020-")
    assert f"checkpoint  step 20 at {newest[1]}" in text, text
    assert not (tmp_path / "locals3" / "checkpoints").exists()  # nothing went to the workdir
    # The same job again, through the CLI's --checkpoint-uri: it finds the finished run there.
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(job_doc("locals3", 20)))
    again = subprocess.run([sys.executable, "-m", "disttrain.cli", "run", "--local", str(job), "--workdir",
                            str(tmp_path), "--checkpoint-uri", uri, "--no-progress"], env={**os.environ},
                           capture_output=True, text=True, cwd=ROOT, timeout=120)
    said = again.stdout + again.stderr
    assert again.returncode == 0 and f"its checkpoint at step 20 of 20 is in {uri}" in said, said
    assert f"remove the objects under {uri}" in said


def _start_cli(tmp_path: Path, name: str, **popen: object) -> subprocess.Popen:
    """`disttrain run --local` on a long job, returned once worker-0 logged step 10."""
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(job_doc(name, 100000)))
    proc = subprocess.Popen([sys.executable, "-m", "disttrain.cli", "run", "--local", str(job),
                             "--workdir", str(tmp_path), "--no-progress"], env=base_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            **popen)  # type: ignore[call-overload]
    log = tmp_path / name / "logs" / f"{name}-worker-0.log"
    deadline = time.monotonic() + 240
    while not (log.exists() and "step 10/" in log.read_text()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(proc.stdout.read() if proc.stdout else "")
        time.sleep(0.3)
    return proc


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell does for `cmd &`


@pytest.mark.dist
@pytest.mark.slow
@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_ctrl_c_checkpoints_and_reports(tmp_path: Path, inherited: str) -> None:
    proc = _start_cli(tmp_path, "intr", preexec_fn=_ignore_sigint if inherited == "ignored" else None)
    try:
        proc.send_signal(signal.SIGINT)  # what Ctrl-C delivers to the CLI
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, output
    assert "intr interrupted" in output and "re-run the same command" in output, output
    newest = newest_checkpoint(tmp_path / "intr" / "checkpoints")
    assert newest is not None and newest[0] >= 10, output


@pytest.mark.dist
@pytest.mark.slow
def test_agents_stop_when_the_cli_is_killed(tmp_path: Path) -> None:
    """SIGKILL to the CLI (no chance to clean up): the kernel sends SIGTERM to each agent,
    which checkpoints and exits instead of training on unattended."""
    from disttrain.local.run import descendants

    proc = _start_cli(tmp_path, "orphan")
    tree = descendants(proc.pid)[1:]
    assert tree, "no agents started"
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 120
    while any(_alive(pid) for pid in tree) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [pid for pid in tree if _alive(pid)], "agents outlived the CLI"
    newest = newest_checkpoint(tmp_path / "orphan" / "checkpoints")
    assert newest is not None and newest[0] >= 10


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.dist
@pytest.mark.slow
def test_run_local_instruments_an_unchanged_transformers_script_as_the_pod_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """instrument: auto locally (issue 68 b): the pod's init container copies disttrain into a
    folder its PYTHONPATH names; `run --local` does the same here, so the unchanged script
    reports its steps and its checkpoint, as in the cluster (it once ran uninstrumented and
    "succeeded" at step 0/? without a word)."""
    from dt_helpers import doc_file
    for k, v in base_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    script = doc_file("training-api.md", "train_hf.py", tmp_path)
    script.write_text(script.read_text().replace("from disttrain.train.hf import DisttrainCallback\n", "")
                      .replace(", callbacks=[DisttrainCallback()]", ""))
    doc = job_doc("hf-local", 55)
    doc["spec"]["nodes"] = 1
    doc["spec"]["trainer"] = {"command": ["python", str(script)], "args": ["--steps", "55"], "instrument": "auto"}
    result = validate_document(doc)
    assert result.ok, result.errors
    out = io.StringIO()
    rc = run_local(result.job, result.resolved, workdir=tmp_path, progress=False, out=out)
    text = out.getvalue()
    assert rc == 0, text
    assert "step        55/55" in text, text
    # Transformers' own save at its last step, as the script's report says it (not a progress line of a poll)
    assert f"checkpoint  step 55 at {(tmp_path / 'hf-local').resolve() / 'checkpoints' / 'checkpoint-55'}" in text, text
