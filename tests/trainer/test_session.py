"""The reporting session (disttrain.train.Session): a loop of the user's own gets the
built-in trainer's report and checkpoint-then-evict. The multi-process test runs the
script docs/training-api.md shows, as shown, under real torchrun agents configured only
through the pod contract's env."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest
import torch

from dt_helpers import (CONTROL_TOKEN, _descendants, delete_held_pods, doc_file, free_port, get_status,
                        post_checkpoint, script_pods, stop_agents, wait_for_step)
from disttrain.train import Action, Session


def pod(tmp_path: Path, port: int = 0) -> dict[str, str]:
    return {"DISTTRAIN_JOB_NAME": "mine", "DISTTRAIN_METRICS_PORT": str(port),
            "DISTTRAIN_TERMINATION_LOG": str(tmp_path / "report"), "DISTTRAIN_CONTROL_TOKEN": CONTROL_TOKEN}


def test_outside_a_pod_the_session_does_nothing_and_every_step_carries_on(tmp_path: Path) -> None:
    handler = signal.getsignal(signal.SIGTERM)
    with Session(total_steps=3, env={}) as session:
        assert signal.getsignal(signal.SIGTERM) is handler  # a notebook's own handler stays
        assert [session.step(s, loss=1.0) for s in (1, 2, 3)] == [Action()] * 3
        session.evaluated(3, 0.5)
        session.checkpointed(3, str(tmp_path / "x"))
        assert not session.stopping and session.metrics is None


def test_a_world_of_one_reports_asks_holds_and_stops_on_sigterm(tmp_path: Path) -> None:
    """In-process, one rank: /status follows the steps; a request comes back as an Action
    that asks for a checkpoint, the hold ends with SIGTERM, the report says Interrupted."""
    port = free_port()
    handler = signal.getsignal(signal.SIGTERM)
    with Session(total_steps=100, samples_per_step=8, log_every=2, env=pod(tmp_path, port)) as session:
        assert signal.getsignal(signal.SIGTERM) is not handler
        assert session.step(1, loss=9.0) == Action()  # not a log step: the loss is not read
        assert session.step(2, loss=4.0) == Action()
        session.evaluated(2, 5.0, accuracy=torch.tensor(0.75), metrics={"val/f1": 0.5})
        status = get_status(port)
        assert (status["step"], status["totalSteps"], status["loss"], status["evalLoss"]) == (2, 100, 4.0, 5.0)
        assert status["evalMetrics"] == {"val/f1": 0.5, "accuracy": 0.75}
        with pytest.raises(ValueError, match="evaluation metric 'top 1' = 0.9 is not a metric name"):
            session.evaluated(2, 5.0, metrics={"top 1": 0.9})
        assert status["samplesPerSecond"] > 0 and status["stepSeconds"] > 0
        session.stops.request.ask(30)  # what POST /checkpoint does
        action = session.step(3, loss=3.0)
        assert action == Action(checkpoint=True) and not session.stopping
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()  # the pod deletion
        session.checkpointed(3, str(tmp_path / "step-3"))  # holds until SIGTERM
        assert session.stopping
    assert signal.getsignal(signal.SIGTERM) is handler
    report = json.loads((tmp_path / "report").read_text())
    assert (report["outcome"], report["step"], report["checkpoint"]["step"]) == ("Interrupted", 3, 3), report
    assert report["checkpoint"]["path"] == str(tmp_path / "step-3")


def test_sigterm_without_a_request_asks_for_a_checkpoint_and_a_stop(tmp_path: Path) -> None:
    with Session(total_steps=10, env=pod(tmp_path)) as session:
        session.step(1)
        session.stops.signal.set()
        assert session.step(2) == Action(checkpoint=True, stop=True) and session.stopping
    assert json.loads((tmp_path / "report").read_text())["outcome"] == "Interrupted"


def test_a_request_the_loop_does_not_save_for_is_dropped_saying_so(tmp_path: Path, caplog) -> None:
    with Session(total_steps=10, env=pod(tmp_path)) as session:
        session.stops.request.ask(30)
        assert session.step(1).checkpoint
        with caplog.at_level("WARNING", logger="disttrain_trainer"):
            assert session.step(2) == Action()  # taken, no hold: the operator will SIGTERM
        assert session.stops.request.pending() == 0
    assert "went on without calling Session.checkpointed()" in caplog.text
    report = json.loads((tmp_path / "report").read_text())
    assert (report["outcome"], report["step"], report["checkpoint"]) == ("Finished", 2, None)


def test_more_than_one_process_without_a_process_group_is_told_the_fix(tmp_path: Path) -> None:
    with Session(total_steps=10, env=pod(tmp_path) | {"WORLD_SIZE": "2", "RANK": "1"}) as session:
        with pytest.raises(RuntimeError, match=r"WORLD_SIZE=2 but torch.distributed is not initialised.*"
                                               r"init_process_group\(\)"):
            session.step(1)


def test_bad_arguments_name_what_is_allowed() -> None:
    with pytest.raises(ValueError, match=r"Session\(total_steps=-1, log_every=10\): total_steps must be >= 0 and "
                                         r"log_every >= 1"):
        Session(total_steps=-1, env={})


@pytest.mark.dist
@pytest.mark.slow
def test_the_documented_loop_holds_every_rank_at_one_checkpoint_and_resumes_from_it(tmp_path: Path) -> None:
    """Two pods run docs/training-api.md's script: /status shows its step, loss and eval
    loss; a POST /checkpoint to the second pod holds both ranks at one step with the
    script's own checkpoint of that step; SIGTERM then ends them Interrupted there. Started
    again, the script resumes from that checkpoint; a rank killed with -9 is restarted by
    torchrun and resumes from the newest save; the run finishes at exactly its steps."""
    script, ck = doc_file("training-api.md", "train_loop.py", tmp_path), tmp_path / "ck"
    agents, ports = script_pods(tmp_path, [str(script), "--steps", "100000"], ck, "a", interval=50)
    try:
        status = wait_for_step(ports[0], 60, timeout=240, agents=agents)
        assert status["totalSteps"] == 100_000 and status["loss"] is not None and status["samplesPerSecond"] > 0
        assert status["evalLoss"] is not None and status["evalStep"] % 50 == 0
        code, doc = post_checkpoint(ports[1], "holdSeconds=300&waitSeconds=120")
        assert code == 200, doc
        held = doc["heldAtStep"]
        assert held >= 60 and doc["checkpoint"] == {**doc["checkpoint"], "step": held,
                                                    "path": str(ck / f"step-{held:08d}.pt")}
    except BaseException:
        stop_agents(agents)
        raise
    delete_held_pods(agents, ports, held, tmp_path, "a")
    assert sorted(os.listdir(ck))[-1] == f"step-{held:08d}.pt"

    total = held + 400
    agents, ports = script_pods(tmp_path, [str(script), "--steps", str(total)], ck, "b", interval=50, max_restarts=2)
    try:
        wait_for_step(ports[0], held + 60, timeout=240, agents=agents)
        rank1 = [p for p in _descendants(agents[1].proc.pid) if "train_loop.py" in _cmdline(p)]
        os.kill(rank1[-1], signal.SIGKILL)  # torchrun restarts its worker group
        rcs = [agent.wait(timeout=300) for agent in agents]
    finally:
        stop_agents(agents)
    logs = [agent.output() for agent in agents]
    assert rcs == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    resumed = [int(line.split()[-1]) for line in logs[0].splitlines() if line.startswith("resuming at step")]
    assert resumed[0] == held and len(resumed) == 2 and resumed[1] > held and resumed[1] % 50 == 0, resumed
    for i in range(2):
        report = json.loads((tmp_path / f"report{i}-b").read_text())
        assert (report["outcome"], report["step"], report["checkpoint"]["step"]) == ("Finished", total, total)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


def test_a_sigterm_another_thread_receives_ends_the_hold(tmp_path: Path) -> None:
    """The kernel hands a process signal to any thread that does not block it (a tracer's,
    the status server's); Python then runs the handler on the main thread only when that
    thread next runs Python code. A hold that blocks the main thread in one long wait
    would sleep through the SIGTERM until the hold ran out, then train on (issue 68 d)."""
    with Session(total_steps=10, env=pod(tmp_path)) as session:
        session.stops.request.ask(5)
        assert session.step(1) == Action(checkpoint=True)
        other = threading.Thread(target=lambda: (threading.Event().wait(0.5),
                                                 signal.pthread_kill(threading.get_ident(), signal.SIGTERM)))
        other.start()
        session.checkpointed(1, str(tmp_path / "ckpt-1"))
        other.join()
        assert session.stopping, "the hold ran out: the SIGTERM another thread received was not seen"
    assert json.loads((tmp_path / "report").read_text())["outcome"] == "Interrupted"
