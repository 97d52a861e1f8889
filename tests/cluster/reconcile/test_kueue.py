"""Kueue manages DistributedTrainings: the real Kueue (the `kueue` fixture) admits,
orders, places and preempts them, and the operator, run as shipped (its entry point, with
DISTTRAIN_KUEUE and exactly the RBAC of manifests/rbac + manifests/kueue), follows.

Each test owns a ClusterQueue (named after its namespace) with a LocalQueue "team" in its
namespace. The fake GPU nodes have 8 GPUs each; a job of 2 workers x 4 GPUs takes 8."""

from __future__ import annotations

import calendar
import re
import time

import pytest

from disttrain.integrations.kueue.admission import UNEVALUATED

from .conftest import (CHECKPOINT_CLAIM, KUEUE_PODS_READY_TIMEOUT_SECONDS, REPO, annotate_exit, condition, free_port,
                       get_job, job_manifest, pods_of, wait_job, wait_phase)
from .kueue_helpers import (QUEUE, finish, pods_ready_of, queued_job, queued_operator, queues, running,
                            start_trainer, status_of_job, stop_trainer, trainer_log, workload_of, workloads)

pytestmark = pytest.mark.cluster

__all__ = ["queued_operator"]  # the fixture, shared with the other Kueue tests


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
    # StrictFIFO: Kueue tries the head of the queue, the second, and says why it waits.
    words = "insufficient unused quota for nvidia.com/gpu"
    second = wait_job(cluster, namespace, "second", lambda j: words in (condition(j, "Queued") or {}).get(
        "message", ""), what="second Queued with Kueue's words")
    # The third is behind a head that does not fit: Kueue tries no other Workload of the
    # queue, and leaves it without a QuotaReserved condition (its own batch Jobs' too, seen
    # on v0.19.2). The job says exactly that, and where it waits.
    third = wait_job(cluster, namespace, "third", lambda j: status_of_job(j, "Queued") == "True", what="third Queued")
    assert condition(third, "Queued")["message"] == f"waiting in LocalQueue {QUEUE} (ClusterQueue {cq}): {UNEVALUATED}"
    assert condition(workload_of(cluster, namespace, "third"), "QuotaReserved") is None
    for job in (second, third):
        assert job["status"]["phase"] == "Pending" and not pods_of(cluster, namespace, job["metadata"]["name"])
    assert condition(get_job(cluster, namespace, "first"), "Admitted")["message"].startswith(
        f"admitted by ClusterQueue {cq}")
    assert len(workloads(cluster, namespace)) == 3  # one each, made by the operator

    finish(cluster, namespace, "first")
    running(cluster, namespace, "second", queued_operator)
    # Now the head, the third gets Kueue's verdict too, and waits with it.
    third = wait_job(cluster, namespace, "third", lambda j: words in (condition(j, "Queued") or {}).get(
        "message", ""), what="third Queued with Kueue's words")
    assert condition(third, "Queued")["message"].startswith(f"waiting in LocalQueue {QUEUE} (ClusterQueue {cq}): ")
    assert not pods_of(cluster, namespace, "third")
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
