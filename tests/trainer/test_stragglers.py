"""A slow rank is found (failurePolicy.stragglers): two pods of the built-in trainer under
real torchrun and gloo, one rank made 3x slower by the documented test hook
(DT_TEST_SLOW_RANK, faults.py). Every pod's /status carries both workers' compute and step
times (workerTimes), and the operator's own rule (operator/core/stragglers.py) names the
slow rank's worker and no other; the step times, which every rank shares at each
collective, would not have told them apart."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from disttrain.api.report import TrainerReport, parse_report
from disttrain.operator.core.stragglers import find, ratios

from dt_helpers import _descendants as descendants
from dt_helpers import Agent, doc_file, free_port, get_status, pod_env, script_pods, stop_agents

pytestmark = [pytest.mark.dist, pytest.mark.slow]


def _windows(agents: list[Agent], port: int, count: int) -> TrainerReport:
    """The pod's report once it holds `count` windows of workers' times."""
    deadline, report = time.monotonic() + 300, None
    while time.monotonic() < deadline:
        for agent in agents:
            assert agent.proc.poll() is None, agent.output()[-4000:]
        doc = get_status(port)
        report = parse_report(doc) if doc else None
        if report is not None and len(report.worker_windows) >= count:
            return report
        time.sleep(0.5)
    raise AssertionError(f"no {count} windows of worker times within 300 s: {report}")


def _pod_of_rank(agents: list[Agent], rank: int) -> int:
    """torchrun hands out ranks at the rendezvous: the pod (agent) one of whose processes
    has RANK=`rank` in its environment. Asked while the agents run."""
    for i, agent in enumerate(agents):
        for pid in descendants(agent.proc.pid):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"RANK={rank}".encode() in environ and b"LOCAL_RANK=0" in environ:
                return i
    raise AssertionError(f"no process of the agents holds rank {rank}")


def test_the_slow_ranks_worker_is_the_straggler_and_only_it(tmp_path: Path) -> None:
    rdzv, ports = free_port(), (free_port(), free_port())
    agents = []
    for i in range(2):
        env = pod_env(node=i, rdzv_port=rdzv, nnodes="2:2", metrics_port=ports[i], steps=100000, max_restarts=0)
        # 5x: a busy machine's noise in the fast rank's compute (seen: x1.5 of the slow one's base) leaves it
        # well above 2.
        env |= {"DT_TEST_SLOW_RANK": "1", "DT_TEST_SLOW_FACTOR": "5"}
        agents.append(Agent(env, tmp_path / f"agent{i}.log"))
    try:
        report = _windows(agents, ports[1], 4)  # any pod's report has every worker's times
        slow = _pod_of_rank(agents, 1)
    finally:
        stop_agents(agents)
    window = report.worker_windows[-1]
    assert [t.worker for t in window.times] == [0, 1]
    by_worker = {t.worker: t for t in window.times}
    assert all(t.step_seconds > 0 for t in by_worker.values())  # both report a step time beside their compute
    assert ratios(window)[slow] > 2.0, window
    [straggler] = find(report.worker_windows, 1.3, 3)
    assert straggler.worker == slow and straggler.windows >= 3, (straggler, report.worker_windows)


def test_your_own_loop_is_watched_through_session_compute(tmp_path: Path) -> None:
    """docs/training-api.md's loop, as shown, on two pods: what it wraps in
    session.compute() is each worker's compute time, and the slow rank's worker is found."""
    script = doc_file("training-api.md", "train_loop.py", tmp_path)
    agents, ports = script_pods(tmp_path, [str(script), "--steps", "100000"], tmp_path / "ck", "slow",
                                extra_env={"DT_TEST_SLOW_RANK": "0", "DT_TEST_SLOW_FACTOR": "40"})
    try:
        report = _windows(agents, ports[0], 4)
        slow = _pod_of_rank(agents, 0)
    finally:
        stop_agents(agents)
    [straggler] = find(report.worker_windows, 1.3, 3)
    assert straggler.worker == slow, report.worker_windows
