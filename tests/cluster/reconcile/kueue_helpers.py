"""Helpers of the Kueue cluster tests: each test's ClusterQueue and LocalQueue, a queued
job, waits on Kueue's side, and a job's pod run as a real local torchrun agent."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from collections.abc import Iterator

from .conftest import (MANIFESTS, REPO, annotate_exit, condition, free_port, get_job, job_manifest, kill, pods_of,
                       start_operator_process, wait_phase)

QUEUE = "team"
KUEUE_LABELS = {"kueue.x-k8s.io/queue-name": QUEUE}


@pytest.fixture
def queued_operator(cluster, namespace, kueue, operator_kubeconfig, tmp_path) -> Iterator[Logs]:
    """The operator's real entry point with DISTTRAIN_KUEUE=true, as its ServiceAccount with
    the Kueue rights applied from manifests/kueue/rbac.yaml. Yields its log and Kueue's; at
    the end it must never have been refused by RBAC."""
    cluster.kubectl("apply", "-f", str(MANIFESTS / "kueue" / "rbac.yaml"))
    health = free_port()
    log = tmp_path / "operator.log"
    proc = start_operator_process(namespace, operator_kubeconfig, log, liveness=f"http://127.0.0.1:{health}/healthz",
                                  env={"DISTTRAIN_KUEUE": "true"})
    try:
        cluster.wait_for(lambda: _answers(proc, health, log), timeout=60, what="the operator's /healthz")
        yield Logs(operator=log, kueue=kueue)
    finally:
        kill(proc, signal.SIGTERM)
    output = log.read_text(errors="replace")
    assert "forbidden" not in output.lower(), "\n".join(line for line in output.splitlines()
                                                       if "forbidden" in line.lower())[:3000]




@dataclasses.dataclass(frozen=True)
class Logs:
    operator: Path
    kueue: Path

    def tails(self) -> str:
        """The last lines of both, for a failure's message."""
        return "".join(f"--- {name} log ---\n{_tail(path, lines)}\n"
                       for name, path, lines in (("operator", self.operator, 40), ("kueue", self.kueue, 30)))


def _tail(path: Path, lines: int) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _answers(proc: subprocess.Popen, port: int, log: Path) -> bool:
    if proc.poll() is not None:
        pytest.fail(f"the operator exited {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}",
                    pytrace=False)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def queues(cluster, namespace: str, *, gpus: int = 8, flavor: dict | None = None,
           preemption: dict | None = None, resource: str = "nvidia.com/gpu") -> str:
    """A ResourceFlavor, a ClusterQueue with `gpus` of quota of `resource` on it (StrictFIFO: jobs of one
    priority are admitted in the order their Workloads were made; BestEffortFIFO may admit
    a later one first when quota frees), and the LocalQueue QUEUE in `namespace`. Returns
    the ClusterQueue's name."""
    name = f"cq-{namespace}"[:63]
    flavor_name = f"fl-{namespace}"[:63]
    cq_spec = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
               "queueingStrategy": "StrictFIFO",
               "resourceGroups": [{"coveredResources": [resource], "flavors": [
                   {"name": flavor_name, "resources": [{"name": resource, "nominalQuota": gpus}]}]}]}
    if preemption:
        cq_spec["preemption"] = preemption
    cluster.apply([
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor_name},
         "spec": flavor or {}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": cq_spec},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": QUEUE, "namespace": namespace}, "spec": {"clusterQueue": name}}])
    return name


def queued_job(name: str, labels: dict | None = None, **spec) -> dict:
    doc = job_manifest(name, **{"nodes": 2, "gpusPerNode": 4, **spec})
    doc["metadata"]["labels"] = {**KUEUE_LABELS, **(labels or {})}
    return doc


def running(cluster, namespace: str, name: str, logs: Logs) -> dict:
    """The job once Running; on a timeout the failure also shows the namespace's Workloads
    (Kueue's side) and the tails of the operator's and Kueue's logs."""
    def current():
        job = cluster.try_get("dt", name, namespace) or {}
        return job if (job.get("status") or {}).get("phase") == "Running" else None

    def seen() -> str:
        job = cluster.try_get("dt", name, namespace) or {}
        wls = [{"name": w["metadata"]["name"], "active": w["spec"].get("active"),
                "conditions": [(c["type"], c["status"], c.get("reason"), c.get("message", "")[:160])
                               for c in (w.get("status") or {}).get("conditions", [])]}
               for w in workloads(cluster, namespace)]
        return yaml.safe_dump({"status": job.get("status"), "workloads": wls}, sort_keys=False) + logs.tails()

    return cluster.wait_for(current, timeout=180, interval=0.3, what=f"{name}: Running", describe=seen)


def status_of(cluster, namespace: str, name: str, type_: str) -> str | None:
    found = condition(get_job(cluster, namespace, name), type_)
    return found["status"] if found else None


def workloads(cluster, namespace: str) -> list[dict]:
    return yaml.safe_load(cluster.kubectl("get", "workloads.kueue.x-k8s.io", "-n", namespace, "-o", "json").stdout)[
        "items"]


def finish(cluster, namespace: str, name: str) -> None:
    """Every worker of the job exits 0 (KWOK plays the kubelet)."""
    for pod in pods_of(cluster, namespace, name):
        annotate_exit(cluster, namespace, pod["metadata"]["name"], 0)
    wait_phase(cluster, namespace, name, "Succeeded")


def workload_of(cluster, namespace: str, name: str) -> dict | None:
    return next((w for w in workloads(cluster, namespace)
                 if w["metadata"]["name"].startswith(f"distributedtraining-{name}-")), None)


def pods_ready_of(cluster, namespace: str, name: str) -> tuple[str, str] | None:
    """The (status, reason) of the job's Workload's PodsReady condition."""
    found = condition(workload_of(cluster, namespace, name) or {}, "PodsReady")
    return (found["status"], found["reason"]) if found else None


def status_of_job(job: dict, type_: str) -> str | None:
    found = condition(job, type_)
    return found["status"] if found else None


def start_trainer(cluster, namespace: str, name: str, spec: dict, workdir: Path,
                  port: int) -> tuple[subprocess.Popen, Path]:
    """The job's one pod as a local torchrun agent (Agents, below). Returns it and where it
    writes its final report (the pod's termination message)."""
    agents = Agents(cluster, namespace, name, spec, workdir, port)
    return agents.start(0), agents.plan.nodes[0].report


class Agents:
    """The job's pods as local torchrun agents on one rendezvous: each with its pod's
    command and env (localize), its pod's UID as the control token (as the Downward API
    gives it in the pod), one CPU; pod 0's trainer serves /status on `port`, the port
    the job names (every pod's IP is 127.0.0.1 here)."""

    def __init__(self, cluster, namespace: str, name: str, spec: dict, workdir: Path, port: int):
        from disttrain.api.validate import validate_document
        from disttrain.local.plan import localize
        from disttrain.integrations.registry import render_children

        doc = job_manifest(name, **spec)
        doc["metadata"]["namespace"] = namespace
        result = validate_document(doc)
        assert result.ok, result
        self.cluster, self.namespace, self.name = cluster, namespace, name
        pods = render_children(result.job, result.resolved)
        first = pods_of(cluster, namespace, name)[0]
        self.plan = localize(pods, workdir=workdir, rdzv_port=free_port(),
                             metrics_ports=[port] + [free_port() for _ in range(result.resolved.nodes - 1)],
                             rdzv_id=f"{name}-{first['metadata']['uid'][:8]}", torchrun="torchrun", cpus=1)
        self.procs: dict[int, subprocess.Popen] = {}

    def start(self, index: int) -> subprocess.Popen:
        node = self.plan.nodes[index]
        pod = next(p for p in pods_of(self.cluster, self.namespace, self.name) if p["metadata"]["name"] == node.pod)
        node.log.parent.mkdir(parents=True, exist_ok=True)
        node.report.parent.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "DISTTRAIN_"))}
        env.update(node.env, DISTTRAIN_CONTROL_TOKEN=pod["metadata"]["uid"],
                   PYTHONPATH=os.pathsep.join([str(REPO / "operator"), str(REPO / "trainer")]),
                   PYTHONWARNINGS="ignore", TORCH_CPP_LOG_LEVEL="ERROR")
        argv = [sys.executable, "-m", "torch.distributed.run", *node.argv[1:]]
        self.procs[index] = subprocess.Popen(argv, env=env, stdout=open(node.log, "ab"), stderr=subprocess.STDOUT,
                                             start_new_session=True)
        return self.procs[index]

    def stop(self, *indices: int) -> None:
        for index in indices or tuple(self.procs):
            stop_trainer(self.procs[index])

    def hand_over_reports(self, *indices: int) -> None:
        """What the kubelet does as each agent exits: its exit code and final report on its pod."""
        for index in indices:
            node = self.plan.nodes[index]
            code = self.procs[index].wait(timeout=30)
            self.cluster.kubectl("annotate", "pod", node.pod, "-n", self.namespace,  # the message with the exit
                                 f"disttrain.dev/test-termination-message={node.report.read_text()}",
                                 f"{self.cluster.EXIT_CODE_ANNOTATION}={code}")

    def rank0_story(self) -> str:
        """Rank 0's lines from every agent's log, in time order: torchrun hands out ranks
        afresh at each rendezvous, so rank 0 may live on any node."""
        lines = [line for node in self.plan.nodes if node.log.exists()
                 for line in node.log.read_text(errors="replace").splitlines(keepends=True) if RANK0_LINE.match(line)]
        return "".join(sorted(lines, key=lambda line: line[:23]))


RANK0_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \[rank0\] ")


def trainer_status(port: int) -> dict | None:
    """The trainer's /status on this machine, None while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=3) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError):
        return None


def stop_trainer(proc: subprocess.Popen) -> None:
    """SIGTERM to torchrun (as the kubelet's), then whatever is left is killed."""
    from disttrain.local.run import descendants

    left = descendants(proc.pid) if proc.poll() is None else []  # the worker runs in a session of its own
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=60)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def trainer_log(workdir: Path, tail: int = 3000) -> str:
    logs = sorted(workdir.rglob("*.log"))
    return "\n".join(p.read_text(errors="replace")[-tail:] for p in logs) or "(no log)"

