"""`disttrain logs` on the real node, where worker pods really log: every worker's lines
interleaved with a [worker-i] prefix, one worker with --worker, and -f following pods
that had not started yet, and --timestamps, --since and --previous. The job is the shipped CPU example, submitted with the CLI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from datetime import datetime

import pytest

from .conftest import EXAMPLE, REPO, shared_checkpoints, worker_pods

pytestmark = [pytest.mark.slow]


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "disttrain.cli", *args]


def cli_env(cluster) -> dict[str, str]:
    return {**cluster.env, "PYTHONPATH": os.pathsep.join([str(REPO / "operator"), str(REPO / "trainer")])}


def test_logs_interleave_workers_with_a_prefix_and_follow(node_cluster, chart_operator, ns):
    shared_checkpoints(node_cluster, ns, claim="cpu-ddp-checkpoints")  # the claim the example names
    env = cli_env(node_cluster)
    submitted = subprocess.run(cli_command("submit", "--detach", str(EXAMPLE), "-n", ns), capture_output=True,
                               text=True, env=env, timeout=120)
    assert submitted.stdout == "distributedtraining.disttrain.dev/cpu-ddp created\n", submitted.stderr

    # -f while both workers train: their lines come as they are written.
    node_cluster.wait_for(lambda: [p["status"].get("phase") for p in worker_pods(node_cluster, ns, "cpu-ddp")]
                          == ["Running", "Running"], timeout=300, interval=1, what="both workers running")
    follow = subprocess.Popen(cli_command("logs", "cpu-ddp", "-f", "-n", ns), text=True, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(follow.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        def both_workers() -> bool:
            return {line.split(" ", 1)[0] for line in list(lines)} >= {"[worker-0]", "[worker-1]"}
        node_cluster.wait_for(both_workers, timeout=300, interval=1,
                              what=f"lines of both workers from logs -f (exit {follow.poll()}); so far: {lines[-10:]}")
        assert follow.poll() is None, follow.stderr.read()  # still following while the job trains
    finally:
        follow.terminate()
        follow.wait(timeout=30)
        reader.join(timeout=10)
    assert all(line.startswith(("[worker-0] ", "[worker-1] ")) for line in lines), lines[:20]

    logs = subprocess.run(cli_command("logs", "cpu-ddp", "-n", ns), capture_output=True, text=True, env=env,
                          timeout=120)
    assert logs.returncode == 0, logs.stderr
    prefixes = [line.split(" ", 1)[0] for line in logs.stdout.splitlines()]
    assert set(prefixes) == {"[worker-0]", "[worker-1]"}, logs.stdout[-2000:]
    one = subprocess.run(cli_command("logs", "cpu-ddp", "--worker", "1", "--tail", "5", "-n", ns),
                         capture_output=True, text=True, env=env, timeout=120)
    assert one.returncode == 0 and 0 < len(one.stdout.splitlines()) <= 5, one.stderr
    assert all(line.startswith("[worker-1] ") for line in one.stdout.splitlines())
    # The Python client reads the same lines: one worker's, each with its index and the kubelet's time.
    from disttrain import Client
    tail = list(Client(ns, kubeconfig=node_cluster.kubeconfig).logs("cpu-ddp", worker=1, tail=5))
    assert 0 < len(tail) <= 5 and {line.worker for line in tail} == {1}, tail
    assert all(line.time.endswith("Z") for line in tail), tail
    # Both workers' lines come ordered by time (as times: Go trims a fraction's zeros).
    both = list(Client(ns, kubeconfig=node_cluster.kubeconfig).logs("cpu-ddp"))
    times = [datetime.fromisoformat(line.time) for line in both]
    assert {line.worker for line in both} == {0, 1} and times == sorted(times), both[-20:]
    missing = subprocess.run(cli_command("logs", "cpu-ddp", "--worker", "7", "-n", ns), capture_output=True,
                             text=True, env=env, timeout=120)
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr.startswith("error: distributedtraining.disttrain.dev/cpu-ddp has no worker 7 now")
    # kubectl's --timestamps, --since and --previous, on the same pods.
    stamped = subprocess.run(cli_command("logs", "cpu-ddp", "--worker", "0", "--tail", "3", "--timestamps", "-n", ns),
                             capture_output=True, text=True, env=env, timeout=120)
    assert stamped.returncode == 0 and stamped.stdout, stamped.stderr
    assert all(re.fullmatch(r"\[worker-0\] \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z .*", line)
               for line in stamped.stdout.splitlines()), stamped.stdout
    recent = subprocess.run(cli_command("logs", "cpu-ddp", "--since", "1h", "-n", ns), capture_output=True,
                            text=True, env=env, timeout=120)
    # Every line so far is less than an hour old, and logs only grow: nothing may be missing.
    assert recent.returncode == 0, recent.stderr
    assert len(recent.stdout.splitlines()) >= len(logs.stdout.splitlines()), (recent.stdout[-500:], logs.stdout[-500:])
    previous = subprocess.run(cli_command("logs", "cpu-ddp", "--worker", "0", "--previous", "-n", ns),
                              capture_output=True, text=True, env=env, timeout=120)
    # No container of this pod restarted: the API server says so, in one line.
    assert (previous.returncode, previous.stdout) == (1, ""), previous.stdout
    assert previous.stderr.startswith("Error from server (BadRequest): previous terminated container"), previous.stderr
    deleted = subprocess.run(cli_command("delete", "cpu-ddp", "-n", ns), capture_output=True, text=True, env=env,
                             timeout=120)
    assert deleted.stdout == 'distributedtraining.disttrain.dev "cpu-ddp" deleted\n', deleted.stderr
