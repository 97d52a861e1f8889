"""The sample outputs in docs/cli.md and README.md are what the code prints for the objects
described here (a job of the shipped examples, with the status an operator writes): a change
of the formatter, or a figure typed by hand that the code would not print (an ETA the
throughput does not give), fails here."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import yaml

from disttrain.client.jobview import progress_line, status_lines, top_table, view_of

from .helpers import ROOT

NOW = datetime(2026, 11, 24, 12, 4, 51, tzinfo=timezone.utc)


def iso(delta: timedelta) -> str:
    return (NOW - delta).strftime("%Y-%m-%dT%H:%M:%SZ")


def example(name: str) -> dict:
    docs = yaml.safe_load_all((ROOT / "manifests" / "examples" / f"{name}.yaml").read_text())
    return next(d for d in docs if d and d["kind"] == "DistributedTraining")


def gpt_ddp_2x4() -> dict:
    """manifests/examples/gpt-ddp-2x4.yaml a quarter of the way through: 8 ranks, global batch
    32 x 8 = 256 samples a step at 1,024 samples/s."""
    obj = example("gpt-ddp-2x4")
    obj["metadata"].update(namespace="default", creationTimestamp=iso(timedelta(minutes=21)))
    obj["status"] = {
        "phase": "Running", "resolved": {"worldSize": 8, "nodes": 2, "nprocPerNode": 4},
        "workers": {"active": 2, "running": 2, "desired": 2},
        "progress": {"step": 1250, "totalSteps": 5000, "loss": 3.412, "samplesPerSecond": 1024.0,
                     "evalStep": 1000, "evalLoss": 3.498},
        "checkpoint": {"step": 1000, "time": iso(timedelta(minutes=4, seconds=10))}, "restarts": 0,
        "goodput": {"ratio": 0.968, "productiveSeconds": 2440, "lostSeconds": 0, "restartingSeconds": 0,
                    "waitingSeconds": 80, "step": 1250},
        "conditions": [
            {"type": "Validated", "status": "True", "reason": "Valid", "message": "spec is valid"},
            {"type": "Running", "status": "True", "reason": "PodsRunning",
             "message": "2 of 2 workers running (minNodes 2)"}]}
    return obj


def cpu_ddp(phase: str, step: int, samples: float, loss: float, checkpoint_ago: timedelta) -> dict:
    """manifests/examples/cpu-ddp-2x1.yaml: 2 ranks, global batch 8 x 2 = 16."""
    obj = example("cpu-ddp-2x1")
    obj["metadata"].update(namespace="team-b", creationTimestamp=iso(timedelta(minutes=5)))
    obj["status"] = {"phase": phase, "resolved": {"worldSize": 2, "nodes": 2},
                     "progress": {"step": step, "totalSteps": 60, "loss": loss, "samplesPerSecond": samples},
                     "checkpoint": {"step": step // 20 * 20, "time": iso(checkpoint_ago)}}
    return obj


def text_blocks(path: str) -> list[str]:
    return re.findall(r"```text\n(.*?)```", (ROOT / path).read_text(), re.S)


def block_with(path: str, first_line: str) -> list[str]:
    block = next(b for b in text_blocks(path) if b.startswith(first_line + "\n"))
    return block.rstrip("\n").splitlines()[1:]


def test_the_status_sample():
    shown = block_with("docs/cli.md", "$ kubectl disttrain status gpt-ddp-2x4")
    # A healthy job has no Events (the operator posts them on warnings, failures, restarts,
    # scaling, suspension and the end; test_cli_jobview formats them).
    assert shown == status_lines(view_of(gpt_ddp_2x4()), [], NOW)


def test_the_top_sample():
    shown = block_with("docs/cli.md", "$ kubectl disttrain top -A")
    views = [view_of(gpt_ddp_2x4()), view_of(cpu_ddp("Succeeded", 60, 425.0, 2.43, timedelta(minutes=3)))]
    assert shown[:-1] == top_table(views, NOW, all_namespaces=True)
    assert shown[-1] == "-- 12:04:51, 2 job(s); updates on every change, Ctrl-C quits"


def test_the_readme_get_sample():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"\$ kubectl disttrain get\n(.*?)```", readme, re.S).group(1).rstrip("\n").splitlines()
    assert block == top_table([view_of(gpt_ddp_2x4())], NOW)


def test_the_submit_sample():
    shown = block_with("docs/cli.md", "$ kubectl disttrain submit manifests/examples/cpu-ddp-2x1.yaml")
    running = cpu_ddp("Running", 20, 410.2, 2.91, timedelta(seconds=1))
    done = cpu_ddp("Succeeded", 60, 425.0, 2.43, timedelta(seconds=0))
    assert shown[-2:] == [progress_line(view_of(running), NOW), progress_line(view_of(done), NOW)]


def test_the_failure_history_sample():
    """docs/operations.md "When things fail": the table `status NAME` prints for an entry of
    status.failures as the operator writes it for an OOM-killed worker."""
    shown = block_with("docs/operations.md", "Failures:")
    entry = {"time": "2026-11-25T10:02:11Z", "cause": "OOMKilled", "node": "gpu-a7", "pod": "gpt-ddp-2x4-worker-1",
             "podUID": "2b1e", "rank": 1, "exitCode": 137, "resumedFromStep": 1000, "stepsLost": 250,
             "message": "the trainer container used more memory than its limit (resources.limits.memory)"}
    job = gpt_ddp_2x4()
    job["status"]["failures"] = [entry]
    lines = status_lines(view_of(job), [], NOW)
    start = lines.index("Failures:")
    assert shown == lines[start + 1:lines.index("Events:")]
