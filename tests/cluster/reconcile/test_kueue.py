"""Kueue manages DistributedTrainings: the real Kueue (the `kueue` fixture) admits,
orders, places and preempts them, and the operator, run as shipped (its entry point, with
DISTTRAIN_KUEUE and exactly the RBAC of manifests/rbac + manifests/kueue), follows.

Each test owns a ClusterQueue (named after its namespace) with a LocalQueue "team" in its
namespace. The fake GPU nodes have 8 GPUs each; a job of 2 workers x 4 GPUs takes 8."""

from __future__ import annotations

import calendar
import contextlib
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .conftest import (CHECKPOINT_CLAIM, KUEUE_PODS_READY_TIMEOUT_SECONDS, MANIFESTS, REPO, annotate_exit, condition,
                       free_port, get_job, job_manifest, kill, pods_of, start_operator_process, wait_job, wait_phase)

pytestmark = pytest.mark.cluster

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
           preemption: dict | None = None) -> str:
    """A ResourceFlavor, a ClusterQueue with `gpus` of quota on it (StrictFIFO: jobs of one
    priority are admitted in the order their Workloads were made; BestEffortFIFO may admit
    a later one first when quota frees), and the LocalQueue QUEUE in `namespace`. Returns
    the ClusterQueue's name."""
    name = f"cq-{namespace}"[:63]
    flavor_name = f"fl-{namespace}"[:63]
    cq_spec = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
               "queueingStrategy": "StrictFIFO",
               "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                   {"name": flavor_name, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}
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


def test_three_jobs_on_quota_for_one_run_one_at_a_time_in_order(cluster, namespace, queued_operator):
    cq = queues(cluster, namespace, gpus=8)
    for name in ("first", "second", "third"):
        cluster.apply(queued_job(name), namespace=namespace)
        wait_job(cluster, namespace, name, lambda j: j.get("status", {}).get("conditions"), what=f"{name} seen")
        # Kueue orders a queue by the Workloads' creationTimestamp, which has whole seconds:
        # two made in one second tie, and either may go first. Each job's comes a second later.
        made = next(w["metadata"]["creationTimestamp"] for w in cluster.wait_for(
            lambda: [w for w in workloads(cluster, namespace) if w["metadata"]["name"].startswith(
                f"distributedtraining-{name}-")], what=f"{name}'s Workload"))
        cluster.wait_for(lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) > made,
                         what=f"the second after {made}")
    running(cluster, namespace, "first", queued_operator)
    # StrictFIFO: Kueue evaluates the head of the queue first. The second gets its words;
    # the third waits behind it (evaluated or not, as Kueue gets to it).
    second = wait_job(cluster, namespace, "second", lambda j: "insufficient unused quota for nvidia.com/gpu" in (
        condition(j, "Queued") or {}).get("message", ""), what="second Queued with Kueue's words")
    third = wait_job(cluster, namespace, "third", lambda j: status_of_job(j, "Queued") == "True", what="third Queued")
    # Kueue's words when it evaluated it, else why it has none: a StrictFIFO ClusterQueue
    # evaluates its head only, and Kueue leaves the Workloads behind it (its own batch
    # Jobs' too) without a condition. Either way, where it waits.
    assert condition(third, "Queued")["message"].startswith(f"waiting in LocalQueue {QUEUE} (ClusterQueue {cq}): ")
    for job in (second, third):
        assert job["status"]["phase"] == "Pending" and not pods_of(cluster, namespace, job["metadata"]["name"])
    assert condition(get_job(cluster, namespace, "first"), "Admitted")["message"].startswith(
        f"admitted by ClusterQueue {cq}")
    assert len(workloads(cluster, namespace)) == 3  # one each, made by the operator

    finish(cluster, namespace, "first")
    running(cluster, namespace, "second", queued_operator)
    assert status_of(cluster, namespace, "third", "Queued") == "True" and not pods_of(cluster, namespace, "third")
    finish(cluster, namespace, "second")
    running(cluster, namespace, "third", queued_operator)
    assert len(pods_of(cluster, namespace, "third")) == 2


def test_the_admitted_flavors_node_labels_and_tolerations_land_on_the_workers(cluster, namespace, queued_operator):
    toleration = {"key": "disttrain.dev/pool", "operator": "Equal", "value": "a", "effect": "NoSchedule"}
    queues(cluster, namespace, flavor={"nodeLabels": {"disttrain.dev/fake-node": "gpu"}, "tolerations": [toleration]})
    cluster.apply(queued_job("placed"), namespace=namespace)
    running(cluster, namespace, "placed", queued_operator)
    for pod in pods_of(cluster, namespace, "placed"):
        assert pod["spec"]["nodeSelector"]["disttrain.dev/fake-node"] == "gpu"
        assert toleration in pod["spec"]["tolerations"]


def test_an_elastic_job_admitted_below_its_size_runs_at_the_admitted_size(cluster, namespace, queued_operator):
    queues(cluster, namespace, gpus=12)  # room for 3 workers of 4 GPUs, not 4
    cluster.apply(queued_job("elastic", nodes=4, minNodes=2, maxNodes=4), namespace=namespace)
    job = running(cluster, namespace, "elastic", queued_operator)
    assert job["status"]["workers"]["desired"] == 3
    assert len(pods_of(cluster, namespace, "elastic")) == 3
    assert "3 of 4 workers (minNodes 2)" in condition(job, "Admitted")["message"]


def workload_of(cluster, namespace: str, name: str) -> dict | None:
    return next((w for w in workloads(cluster, namespace)
                 if w["metadata"]["name"].startswith(f"distributedtraining-{name}-")), None)


def pods_ready_of(cluster, namespace: str, name: str) -> tuple[str, str] | None:
    """The (status, reason) of the job's Workload's PodsReady condition."""
    found = condition(workload_of(cluster, namespace, name) or {}, "PodsReady")
    return (found["status"], found["reason"]) if found else None


def test_a_running_job_says_pods_ready_is_not_evicted_and_recovers_from_a_crash(cluster, namespace, queued_operator):
    """Kueue's waitForPodsReady (KUEUE_PODS_READY_TIMEOUT_SECONDS here, 30 minutes by
    default) evicts an admitted Workload whose PodsReady stays unset: the operator says it
    as Kueue's own integrations do, so a running job runs on past the timeout, and after a
    worker's crash PodsReady is False until its replacement is Ready (Recovered)."""
    queues(cluster, namespace, gpus=8)
    cluster.apply(queued_job("steady"), namespace=namespace)
    running(cluster, namespace, "steady", queued_operator)
    cluster.wait_for(lambda: pods_ready_of(cluster, namespace, "steady") == ("True", "Started"),
                     what="PodsReady=True (Started) on steady's Workload", describe=queued_operator.tails)
    admitted_at = condition(workload_of(cluster, namespace, "steady"), "Admitted")["lastTransitionTime"]
    past = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(
        calendar.timegm(time.strptime(admitted_at, "%Y-%m-%dT%H:%M:%SZ")) + KUEUE_PODS_READY_TIMEOUT_SECONDS + 10))
    cluster.wait_for(lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) > past,
                     timeout=KUEUE_PODS_READY_TIMEOUT_SECONDS + 30, what=f"the timeout passed ({past})")
    job = get_job(cluster, namespace, "steady")
    assert job["status"]["phase"] == "Running" and condition(job, "Evicted") is None, job["status"]
    assert condition(workload_of(cluster, namespace, "steady"), "Evicted") is None

    crashed = pods_of(cluster, namespace, "steady")[1]["metadata"]["name"]
    annotate_exit(cluster, namespace, crashed, 1)
    # Recovered follows only a WaitForRecovery: the condition went False with the crash.
    cluster.wait_for(lambda: pods_ready_of(cluster, namespace, "steady") == ("True", "Recovered"),
                     timeout=90, what="PodsReady=True (Recovered) after the crash", describe=queued_operator.tails)
    job = get_job(cluster, namespace, "steady")
    assert job["status"]["restarts"] >= 1 and condition(job, "Evicted") is None, job["status"]


def test_a_job_whose_workers_cannot_start_is_evicted_by_the_pods_ready_timeout_and_requeued(
        cluster, namespace, queued_operator):
    queues(cluster, namespace, gpus=8)
    cluster.apply(queued_job("stuck", scheduling={"nodeSelector": {"disttrain.dev/no-such-pool": "x"}}),
                  namespace=namespace)
    running_or_pending = wait_job(cluster, namespace, "stuck", lambda j: status_of_job(j, "Admitted") == "True",
                                  what="admitted")
    assert running_or_pending["status"]["workers"]["desired"] == 2
    cluster.wait_for(lambda: pods_ready_of(cluster, namespace, "stuck") == ("False", "WaitForStart"),
                     what="PodsReady=False (WaitForStart) on stuck's Workload", describe=queued_operator.tails)
    job = wait_job(cluster, namespace, "stuck", lambda j: (condition(j, "Evicted") or {}).get(
        "reason") == "PodsReadyTimeout", what="evicted by the PodsReady timeout",
        stall=KUEUE_PODS_READY_TIMEOUT_SECONDS + 60)
    assert "Exceeded the PodsReady timeout" in condition(job, "Evicted")["message"]
    # Its pods go, the quota is given back, and Kueue (back-off 1 s here) admits it again.
    def counted() -> bool:
        stats = ((workload_of(cluster, namespace, "stuck") or {}).get("status") or {}).get("schedulingStats") or {}
        return any(e.get("reason") == "PodsReadyTimeout" for e in stats.get("evictions") or [])

    cluster.wait_for(counted, what="the eviction in Kueue's schedulingStats", describe=queued_operator.tails)
    wait_job(cluster, namespace, "stuck", lambda j: status_of_job(j, "Admitted") == "True" and (
        condition(j, "Evicted") or {}).get("status") == "False", what="admitted again", stall=60)


def test_a_job_without_the_label_ignores_kueue(cluster, namespace, queued_operator):
    queues(cluster, namespace, gpus=0)  # no quota at all
    cluster.apply(job_manifest("free", nodes=2, gpusPerNode=4), namespace=namespace)
    job = running(cluster, namespace, "free", queued_operator)
    assert condition(job, "Queued") is None and not workloads(cluster, namespace)


def test_a_preempted_job_checkpoints_first_waits_and_resumes_to_its_exact_step_count(
        cluster, namespace, queued_operator, tmp_path):
    """A real trainer (the job's pod as a local torchrun agent, see start_trainer) is
    preempted by a job of a higher WorkloadPriorityClass: the operator asks it for a
    checkpoint and deletes the pods only after it holds at one; the job is Queued again,
    and once the preemptor finishes it resumes from exactly that step and finishes at
    exactly its step count."""
    queues(cluster, namespace, gpus=8, preemption={"withinClusterQueue": "LowerPriority"})
    high = f"high-{namespace}"[:63]
    cluster.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                   "metadata": {"name": high}, "value": 1000})
    steps, port = 400, free_port()
    spec = dict(nodes=1, gpusPerNode=8, precision="32", metrics={"port": port},
                trainer={"builtin": {"model": "gpt-nano", "dataset": "text", "steps": steps, "batchSize": 4}},
                checkpoint={"intervalSteps": 1000, "claimName": CHECKPOINT_CLAIM, "evictGraceSeconds": 120},
                podTemplate={"metadata": {"annotations": {cluster.POD_IP_ANNOTATION: "127.0.0.1"}}})
    cluster.apply(queued_job("victim", **spec), namespace=namespace)
    running(cluster, namespace, "victim", queued_operator)
    workdir = tmp_path / "work"
    first, _ = start_trainer(cluster, namespace, "victim", spec, workdir, port)
    try:
        wait_job(cluster, namespace, "victim", lambda j: (j["status"].get("progress") or {}).get("step", 0) >= 5,
                 what="the victim training", stall=240)
        cluster.apply(queued_job("urgent", labels={"kueue.x-k8s.io/priority-class": high}, nodes=1, gpusPerNode=8),
                      namespace=namespace)
        job = wait_job(cluster, namespace, "victim", lambda j: status_of_job(j, "Queued") == "True"
                       and not pods_of(cluster, namespace, "victim"), what="the victim stopped and Queued",
                       stall=180)
    finally:
        stop_trainer(first)  # the kubelet's SIGTERM, once the pod is deleted
    eviction = wait_job(cluster, namespace, "victim", lambda j: (j["status"].get("eviction") or {}).get(
        "stepsLost") is not None, what="the eviction settled")["status"]["eviction"]
    assert (eviction["reason"], eviction["handshake"]) == ("Evicted", "Checkpointed"), eviction
    # Asked at `step`, every rank agreed on the stop at the next stop check and saved that step.
    assert eviction["stepsLost"] == 0 and eviction["resumeFromStep"] >= eviction["step"] >= 5, eviction
    assert condition(job, "Evicted")["reason"] == "Preempted"
    # The requeued Workload says which checkpoint the job resumes from (kueue#477).
    saved = get_job(cluster, namespace, "victim")["status"]["checkpoint"]
    published = cluster.wait_for(lambda: {k.rsplit("/", 1)[1]: v for k, v in (
        (workload_of(cluster, namespace, "victim") or {}).get("metadata", {}).get("annotations") or {}).items()
        if k.startswith("disttrain.dev/checkpoint-")} or None, what="the checkpoint on victim's Workload")
    assert published == {"checkpoint-step": str(saved["step"]), "checkpoint-time": saved["time"]}, (published, saved)
    assert saved["step"] == eviction["resumeFromStep"], (saved, eviction)
    doc = re.search(r"`kubectl get workloads -o\s+(custom-columns=\S+)`", (REPO / "docs" / "operations.md").read_text())
    rows = cluster.kubectl("get", "workloads", "-n", namespace, "-o", doc.group(1)).stdout.split("\n")
    victim = workload_of(cluster, namespace, "victim")["metadata"]["name"]
    assert [victim, str(saved["step"])] in [r.split() for r in rows[1:]], rows  # as docs/operations.md shows it
    running(cluster, namespace, "urgent", queued_operator)

    finish(cluster, namespace, "urgent")
    running(cluster, namespace, "victim", queued_operator)
    second, report = start_trainer(cluster, namespace, "victim", spec, workdir, port)
    try:
        assert second.wait(timeout=480) == 0, trainer_log(workdir)
    finally:
        stop_trainer(second)
    # The kubelet hands the trainer's final report to the pod's status as it exits.
    (pod,) = pods_of(cluster, namespace, "victim")
    cluster.kubectl("annotate", "pod", pod["metadata"]["name"], "-n", namespace,
                    f"disttrain.dev/test-termination-message={report.read_text()}",
                    f"{cluster.EXIT_CODE_ANNOTATION}=0")
    wait_phase(cluster, namespace, "victim", "Succeeded")
    done = get_job(cluster, namespace, "victim")["status"]
    assert done["progress"]["step"] == done["progress"]["totalSteps"] == steps
    # After it ran again, its history and goodput still say it was preempted, and by whom.
    (stop,) = [f for f in done.get("failures") or [] if f["cause"] == "Preempted"]
    assert stop["message"].startswith("evicted by Kueue (Preempted): ") and "UID" in stop["message"], stop
    assert "pod" not in stop and stop["stepsLost"] == 0
    assert stop["resumedFromStep"] == done["eviction"]["resumeFromStep"]
    assert done["goodput"]["lostSeconds"] > 0, done["goodput"]  # its time back in the queue
    assert f"resuming at step {eviction['resumeFromStep']} of {steps}" in trainer_log(workdir, tail=10**7)


def status_of_job(job: dict, type_: str) -> str | None:
    found = condition(job, type_)
    return found["status"] if found else None


def start_trainer(cluster, namespace: str, name: str, spec: dict, workdir: Path,
                  port: int) -> tuple[subprocess.Popen, Path]:
    """The job's one pod as a local torchrun agent: its command and env (localize), the
    pod's UID as the control token (as the Downward API gives it in the pod), one CPU.
    Returns it and where it writes its final report (the pod's termination message)."""
    from disttrain.api.validate import validate_document
    from disttrain.cli.local_run import localize
    from disttrain.render import render_children

    doc = job_manifest(name, **spec)
    doc["metadata"]["namespace"] = namespace
    result = validate_document(doc)
    assert result.ok, result
    (pod,) = pods_of(cluster, namespace, name)
    plan = localize(render_children(result.job, result.resolved), workdir=workdir, rdzv_port=free_port(),
                    metrics_ports=[port], rdzv_id=f"{name}-{pod['metadata']['uid'][:8]}", torchrun="torchrun", cpus=1)
    node = plan.nodes[0]
    node.log.parent.mkdir(parents=True, exist_ok=True)
    node.report.parent.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "DISTTRAIN_"))}
    env.update(node.env, DISTTRAIN_CONTROL_TOKEN=pod["metadata"]["uid"],
               PYTHONPATH=os.pathsep.join([str(REPO / "operator"), str(REPO / "trainer")]),
               PYTHONWARNINGS="ignore", TORCH_CPP_LOG_LEVEL="ERROR")
    argv = [sys.executable, "-m", "torch.distributed.run", *node.argv[1:]]
    return subprocess.Popen(argv, env=env, stdout=open(node.log, "ab"), stderr=subprocess.STDOUT,
                            start_new_session=True), node.report


def stop_trainer(proc: subprocess.Popen) -> None:
    """SIGTERM to torchrun (as the kubelet's), then whatever is left is killed."""
    from disttrain.cli.local_run import descendants

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

