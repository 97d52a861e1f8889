"""Checkpoint-then-evict, trainer side (drain.py, docs/pod-contract.md): a POST /checkpoint
with the pod's token makes every rank save the current step and hold; SIGTERM then stops
them without a step more, and a hold that runs out trains on to the exact end. Real
torchrun agents as the pods, configured only through the pod contract's env."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from dt_helpers import CONTROL_TOKEN as TOKEN
from dt_helpers import Agent, free_port, get_status, pod_env, wait_for_step
from dt_helpers import post_checkpoint as post
from disttrain_trainer.checkpoint import complete_checkpoints
from disttrain_trainer.drain import CheckpointRequest
from disttrain_trainer.metrics import StatusSink
from disttrain_trainer.status_server import Control, StatusServer

@pytest.mark.parametrize("query,answer", [
    ("holdSeconds=1", 202), ("holdSeconds=3600", 202), ("holdSeconds=3600&waitSeconds=0", 202),
    ("holdSeconds=0", 400), ("holdSeconds=3601", 400), ("holdSeconds=-1", 400), ("holdSeconds=1.5", 400),
    ("waitSeconds=1", 400), ("holdSeconds=5&waitSeconds=-0.5", 400), ("holdSeconds=5&waitSeconds=301", 400),
    ("holdSeconds=5&waitSeconds=x", 400),
])
def test_hold_and_wait_are_taken_at_their_bounds_and_refused_past_them_saying_so(query: str, answer: int) -> None:
    """pod-contract.md: holdSeconds 1 to 3600 (required), waitSeconds 0 to 300 (default 0);
    a refusal is a 400 whose error says what is allowed, and asks for no checkpoint."""
    request, port = CheckpointRequest(), free_port()
    server = StatusServer(port, CollectorRegistry(), StatusSink(), Control(TOKEN, request))
    try:
        target = f"http://127.0.0.1:{port}/checkpoint?{query}"
        call = urllib.request.Request(target, method="POST", data=b"", headers={"Authorization": f"Bearer {TOKEN}"})
        try:
            with urllib.request.urlopen(call, timeout=60) as reply:
                code, doc = reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            code, doc = exc.code, json.loads(exc.read())
        assert code == answer, doc
        if answer == 400:
            assert request.pending() == 0
            assert doc["error"] in ("want ?holdSeconds=<1..3600>[&waitSeconds=<0..300>]",
                                    "holdSeconds must be within 1..3600, waitSeconds within 0..300"), doc
        else:
            assert request.pending() == int(query.split("&")[0].split("=")[1])
    finally:
        server.close()


def test_the_endpoint_wants_the_token_and_a_hold_and_answers_202_until_held() -> None:
    request, port = CheckpointRequest(), free_port()
    server = StatusServer(port, CollectorRegistry(), StatusSink(), Control(TOKEN, request))
    bare = StatusServer(free_port(), CollectorRegistry(), StatusSink())  # no token in the env
    try:
        assert post(port, "holdSeconds=30", token="guess")[0] == 401
        assert post(port, "holdSeconds=30", token=None)[0] == 401
        assert request.pending() == 0  # refused requests ask for nothing
        assert post(port, "")[0] == 400
        assert post(port, "holdSeconds=0")[0] == 400
        assert post(port, "holdSeconds=30&waitSeconds=301")[0] == 400
        assert post(bare.server.server_address[1], "holdSeconds=30")[0] == 404
        code, doc = post(port, "holdSeconds=30")  # waitSeconds 0: answered at once
        assert code == 202 and doc["heldAtStep"] is None and request.pending() == 30
        # Held while the request waits: answered 200 with the report.
        threading.Timer(0.3, request.held.set).start()
        assert post(port, "holdSeconds=10&waitSeconds=30")[0] == 200
        assert request.pending() == 30  # the longest hold asked for stands until taken
    finally:
        server.close()
        bare.close()



@pytest.mark.dist
@pytest.mark.slow
def test_a_request_to_any_pod_checkpoints_every_rank_at_one_step_and_sigterm_then_loses_none(tmp_path: Path) -> None:
    ck, rdzv, ports = tmp_path / "ck", free_port(), (free_port(), free_port())
    agents = []
    for i in range(2):
        env = pod_env(node=i, rdzv_port=rdzv, nnodes="2:2", metrics_port=ports[i], ckpt_dir=str(ck),
                      interval=0, steps=100000, max_restarts=0)
        env |= {"DISTTRAIN_CONTROL_TOKEN": TOKEN, "DISTTRAIN_TERMINATION_LOG": str(tmp_path / f"report{i}")}
        agents.append(Agent(env, tmp_path / f"agent{i}.log"))
    try:
        wait_for_step(ports[0], 5, timeout=240, agents=agents)
        # The second pod is asked: the request reaches rank 0 through the stop check.
        code, doc = post(ports[1], "holdSeconds=300&waitSeconds=120")
        assert code == 200, doc
        held = doc["heldAtStep"]
        assert held >= 5 and doc["checkpoint"]["step"] == held and doc["step"] == held
        assert [s for s, _ in complete_checkpoints(ck)] == [held]
        time.sleep(1.5)  # holding: no rank trains on
        assert get_status(ports[0])["step"] == held and get_status(ports[1])["heldAtStep"] == held
        for agent in agents:
            agent.proc.terminate()  # the pod deletion the operator does next
        for agent in agents:
            agent.wait(timeout=120)
    finally:
        for agent in agents:
            if agent.proc.poll() is None:
                agent.kill_node()
    for i in range(2):
        report = json.loads((tmp_path / f"report{i}").read_text())
        assert report["outcome"] == "Interrupted" and report["step"] == held, report
        assert report["checkpoint"]["step"] == held
    assert [s for s, _ in complete_checkpoints(ck)] == [held]  # SIGTERM saved nothing new


@pytest.mark.dist
@pytest.mark.slow
def test_a_hold_that_runs_out_trains_on_to_the_exact_end(tmp_path: Path) -> None:
    ck, port = tmp_path / "ck", free_port()
    env = pod_env(node=0, rdzv_port=free_port(), nnodes="1:1", nproc=2, metrics_port=port, ckpt_dir=str(ck),
                  interval=0, steps=400, max_restarts=0)
    env |= {"DISTTRAIN_CONTROL_TOKEN": TOKEN, "DISTTRAIN_TERMINATION_LOG": str(tmp_path / "report")}
    agent = Agent(env, tmp_path / "agent.log")
    try:
        wait_for_step(port, 5, timeout=240, agents=[agent])
        code, doc = post(port, "holdSeconds=2&waitSeconds=120")
        assert code == 200 and doc["heldAtStep"] == doc["checkpoint"]["step"]
        rc = agent.wait(timeout=300)
    finally:
        if agent.proc.poll() is None:
            agent.kill_node()
    out = agent.output()
    assert rc == 0, out[-4000:]
    assert "no stop came within 2s of the requested checkpoint" in out
    report = json.loads((tmp_path / "report").read_text())
    assert report["outcome"] == "Finished" and report["step"] == 400 and report["heldAtStep"] is None
    assert [s for s, _ in complete_checkpoints(ck)] == [doc["heldAtStep"], 400]
