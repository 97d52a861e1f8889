"""Real torchrun agents as "nodes" on loopback, configured only through the pod contract's
env, running `python -m disttrain_trainer`: SIGTERM checkpoints, losing a node, losing
the rendezvous host (see docs/trainer.md)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from dt_helpers import Agent, free_port, pod_env, rank0_story, wait_for_step
from disttrain_trainer.checkpoint import complete_checkpoints

pytestmark = [pytest.mark.dist, pytest.mark.slow]

STEP_LINE = re.compile(r"\bstep (\d+)/(\d+) loss")


def logged_steps_after_resume(output: str) -> tuple[int | None, list[int]]:
    """(step resumed at, optimizer steps logged afterwards) of the last incarnation."""
    marker = output.rfind("resuming at step ")
    resumed = int(output[marker:].split()[3]) if marker >= 0 else None
    return resumed, [int(m.group(1)) for m in STEP_LINE.finditer(output[max(marker, 0):])]


def termination_report(path: Path) -> dict:
    """The container's termination message, as the kubelet would hand it to the operator."""
    return json.loads(path.read_text())


def test_sigterm_writes_a_checkpoint_of_the_current_step(tmp_path: Path) -> None:
    ck, port, message = tmp_path / "ck", free_port(), tmp_path / "termination-log"
    env = pod_env(node=0, rdzv_port=free_port(), nnodes="1:1", nproc=2, metrics_port=port,
                  ckpt_dir=str(ck), interval=0, steps=100000, max_restarts=0)
    env["DISTTRAIN_TERMINATION_LOG"] = str(message)
    agent = Agent(env, tmp_path / "agent.log")
    try:
        status = wait_for_step(port, 5, timeout=240, agents=[agent])
        assert status["totalSteps"] == 100000 and status["worldSize"] == 2 and status["checkpoint"] is None
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            metrics = r.read().decode()
        for name in ("disttrain_train_step", "disttrain_train_samples_per_second", "disttrain_train_world_size",
                     "disttrain_checkpoint_last_step", "disttrain_train_restarts"):
            assert f'{name}{{job="t",namespace="default",pod="t-worker-0"}}' in metrics
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            assert r.status == 200
        agent.proc.terminate()  # what the kubelet sends to the container's PID 1
        rc = agent.wait(timeout=60)
    finally:
        if agent.proc.poll() is None:
            agent.kill_node()
    out = agent.output()
    stopped = re.search(r"stopped on SIGTERM at step (\d+)", out)
    assert stopped, out[-4000:]
    step = int(stopped.group(1))
    assert step >= status["step"]
    # interval 0: the only checkpoint is the emergency one, of exactly the stopped step.
    assert [s for s, _ in complete_checkpoints(ck)] == [step]
    # The workers exit 75 (interrupted), torchrun re-raises the signal: exit 1. The
    # termination message says why, so the operator never takes it for a success.
    assert rc == 1
    report = termination_report(message)
    assert report["outcome"] == "Interrupted" and report["step"] == step
    assert report["checkpoint"]["step"] == step and report["totalSteps"] == 100000


def test_sigterm_to_one_rank_stops_every_rank_at_the_same_step(tmp_path: Path) -> None:
    """Only one worker gets the signal: the flag is agreed on (MAX) so both ranks stop at
    the same step and write one checkpoint together. They stopped before the end, so they
    exit 75, not 0: a peer's disruption never reads as a finished run (the bug where
    deleting one pod made the job Succeeded)."""
    import os
    import signal

    from dt_helpers import _descendants
    ck, port, message = tmp_path / "ck", free_port(), tmp_path / "termination-log"
    env = pod_env(node=0, rdzv_port=free_port(), nnodes="1:1", nproc=2, metrics_port=port,
                  ckpt_dir=str(ck), interval=0, steps=100000, max_restarts=0)
    env["DISTTRAIN_TERMINATION_LOG"] = str(message)
    agent = Agent(env, tmp_path / "agent.log")
    try:
        wait_for_step(port, 5, timeout=240, agents=[agent])
        workers = _descendants(agent.proc.pid)[1:]
        assert len(workers) >= 2
        os.kill(max(workers), signal.SIGTERM)  # one worker process, not the agent
        rc = agent.wait(timeout=60)
    finally:
        if agent.proc.poll() is None:
            agent.kill_node()
    out = agent.output()
    assert rc != 0, out[-4000:]
    assert re.search(r"exitcode\s*:\s*75", out), out[-4000:]  # torchrun's failure summary
    stopped = re.search(r"stopped on SIGTERM at step (\d+)", out)
    assert stopped, out[-4000:]
    assert [s for s, _ in complete_checkpoints(ck)] == [int(stopped.group(1))]
    assert termination_report(message)["outcome"] == "Interrupted"


def _node(tmp_path: Path, i: int, *, steps: int, interval: int, rdzv_port: int, ports: tuple[int, int],
          suffix: str = "") -> Agent:
    env = pod_env(node=i, rdzv_port=rdzv_port, nnodes="1:2", metrics_port=ports[i], ckpt_dir=str(tmp_path / "ck"),
                  interval=interval, steps=steps, batch=4)
    return Agent(env, tmp_path / f"agent{i}{suffix}.log")


def _two_nodes(tmp_path: Path, **kw: object) -> list[Agent]:
    return [_node(tmp_path, i, **kw) for i in range(2)]  # type: ignore[arg-type]


def test_losing_a_worker_node_the_job_goes_on_and_the_recreated_pod_rejoins(tmp_path: Path) -> None:
    """nnodes 1:2. Node 1 dies: node 0 restarts its worker, resumes from the checkpoint
    alone (world 1). The operator recreates worker-1: torchrun admits it at the next step
    boundary (world 2 again, resuming from the newest checkpoint) and the job finishes."""
    steps, interval, rdzv, ports = 200, 10, free_port(), (free_port(), free_port())
    agents = _two_nodes(tmp_path, steps=steps, interval=interval, rdzv_port=rdzv, ports=ports)
    try:
        before = wait_for_step(ports[0], 25, timeout=300, agents=agents)
        assert before["worldSize"] == 2
        agents[1].kill_node()  # node 1 dies: its agent and its worker, like a lost pod
        alone = _wait_for(lambda s: s["worldSize"] == 1 and s["step"] > before["step"], ports[0], agents[:1])
        agents[1] = _node(tmp_path, 1, steps=steps, interval=interval, rdzv_port=rdzv, ports=ports, suffix="-b")
        _wait_for(lambda s: s["worldSize"] == 2 and s["step"] > alone["step"], ports[0], agents)
        rcs = [a.wait(timeout=300) for a in agents]
    finally:
        _kill_leftovers(agents)
    out = _successful_output(tmp_path, agents, rcs)
    incarnations = out.split("resuming at step ")[1:]
    assert len(incarnations) == 2, out[-5000:]  # after the loss, after the rejoin
    first = int(incarnations[0].split()[0])
    assert first % interval == 0 and first >= before["step"] - interval  # nothing lost beyond the interval
    assert "world 1" in incarnations[0] and "world 2" in incarnations[1]
    resumed, logged = logged_steps_after_resume(out)
    assert resumed is not None and resumed >= alone["step"] - interval
    assert logged == sorted(set(logged)) and logged[0] > resumed and logged[-1] == steps
    assert complete_checkpoints(tmp_path / "ck")[-1][0] == steps


def _kill_leftovers(agents: list[Agent]) -> None:
    for a in agents:
        if a.proc.poll() is None:
            a.kill_node()


def _successful_output(tmp_path: Path, agents: list[Agent], rcs: list[int]) -> str:
    """Rank 0's story across every node that ever ran (agent*.log), once every agent exited 0."""
    assert rcs == [0, 0], "\n".join(a.output()[-3000:] for a in agents)
    return rank0_story(sorted(tmp_path.glob("agent*.log")))


def _wait_for(pred, port: int, agents: list[Agent], timeout: float = 240) -> dict:  # type: ignore[no-untyped-def]
    import time

    from dt_helpers import get_status
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = get_status(port)
        if status and pred(status):
            return status
        for a in agents:
            assert a.proc.poll() is None, f"agent exited early:\n{a.output()[-4000:]}"
        time.sleep(0.3)
    raise AssertionError(f"condition not reached within {timeout}s; last status {get_status(port)}")


def test_losing_the_rendezvous_host_recreating_the_pods_resumes(tmp_path: Path) -> None:
    """worker-0 hosts the c10d store. When it dies the other agents lose the store and exit
    non-zero within seconds; the operator recreates the pods under the same names and the
    job resumes from its newest checkpoint."""
    steps, interval, rdzv, ports = 80, 10, free_port(), (free_port(), free_port())
    agents = _two_nodes(tmp_path, steps=steps, interval=interval, rdzv_port=rdzv, ports=ports)
    try:
        before = wait_for_step(ports[0], 15, timeout=300, agents=agents)
        agents[0].kill_node()
        rc1 = agents[1].wait(timeout=120)
        assert rc1 != 0, "a surviving agent cannot outlive the rendezvous store"
        # The operator recreates the failed pods with the same names, env and endpoint.
        agents = _two_nodes(tmp_path, steps=steps, interval=interval, rdzv_port=rdzv, ports=ports, suffix="-b")
        rcs = [a.wait(timeout=300) for a in agents]
    finally:
        _kill_leftovers(agents)
    out = _successful_output(tmp_path, agents, rcs)
    resumed, logged = logged_steps_after_resume(out)
    assert resumed is not None and resumed >= before["step"] - interval
    assert logged[0] > resumed and logged[-1] == steps
    assert complete_checkpoints(tmp_path / "ck")[-1][0] == steps
