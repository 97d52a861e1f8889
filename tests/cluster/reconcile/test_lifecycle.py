"""The operator on a real API server + KWOK, with exactly the RBAC of manifests/rbac."""

from __future__ import annotations

import json
import time

import pytest

from .conftest import (CHECKPOINT_CLAIM, annotate_exit, condition, dump, events_of, job_manifest, pods_of,
                       wait_job, wait_phase)

pytestmark = pytest.mark.cluster


def env_of(pod: dict) -> dict:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def test_job_runs_then_succeeds_and_running_policy_keeps_finished_pods(cluster, namespace, operator):
    cluster.apply(job_manifest("life", nodes=2, gpusPerNode=8, strategy="ddp",
                               resources={"requests": {"cpu": "4", "memory": "8Gi"}}), namespace=namespace)
    job = wait_phase(cluster, namespace, "life", "Running")
    service = cluster.get("service", "life", namespace)
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"]
    pods = pods_of(cluster, namespace, "life")
    assert [p["metadata"]["name"] for p in pods] == ["life-worker-0", "life-worker-1"]
    for pod in pods:
        assert pod["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
        assert pod["spec"]["nodeName"].startswith("kwok-gpu-")  # scheduled onto a fake GPU node
        env = env_of(pod)
        assert env["PET_NNODES"] == "2:2" and env["PET_NPROC_PER_NODE"] == "8"
        assert env["PET_RDZV_ENDPOINT"] == f"life-worker-0.life.{namespace}.svc:29400"
        assert env["PET_RDZV_ID"] == job["metadata"]["uid"]
        container = pod["spec"]["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["spec"]["automountServiceAccountToken"] is False
    status = job["status"]
    assert status["resolved"]["worldSize"] == 16 and status["resolved"]["strategy"] == "ddp"
    assert status["workers"]["active"] == 2 and status["startTime"]
    assert condition(job, "Running")["status"] == "True"
    assert condition(job, "Validated")["status"] == "True"
    assert not any("EphemeralCheckpoints" == e["reason"] for e in events_of(cluster, namespace, "life"))
    volumes = {v["name"]: v for v in pods[0]["spec"]["volumes"]}
    assert volumes["checkpoints"]["persistentVolumeClaim"] == {"claimName": CHECKPOINT_CLAIM}
    assert status["observedGeneration"] == job["metadata"]["generation"]

    for pod in pods:
        annotate_exit(cluster, namespace, pod["metadata"]["name"], 0)
    job = wait_phase(cluster, namespace, "life", "Succeeded")
    assert job["status"]["completionTime"] and condition(job, "Succeeded")["status"] == "True"
    # cleanPodPolicy Running (default) keeps finished pods for their logs.
    assert [p["status"]["phase"] for p in pods_of(cluster, namespace, "life")] == ["Succeeded", "Succeeded"]


def test_clean_pod_policy_all_deletes_every_pod(cluster, namespace, operator):
    cluster.apply(job_manifest("clean", nodes=1, cleanPodPolicy="All"), namespace=namespace)
    wait_phase(cluster, namespace, "clean", "Running")
    annotate_exit(cluster, namespace, "clean-worker-0", 0)
    wait_phase(cluster, namespace, "clean", "Succeeded")
    cluster.wait_for(lambda: pods_of(cluster, namespace, "clean") == [], timeout=30, what="pods deleted")


def test_failed_worker_is_recreated_then_backoff_limit_fails_the_job(cluster, namespace, operator):
    cluster.apply(job_manifest("flaky", nodes=2, backoffLimit=1), namespace=namespace)
    wait_phase(cluster, namespace, "flaky", "Running")
    first_uid = cluster.get("pod", "flaky-worker-1", namespace)["metadata"]["uid"]
    annotate_exit(cluster, namespace, "flaky-worker-1", 3)
    # The job passes through Restarting: its Restarting condition, added only in that phase,
    # stays to tell (the phase itself lasts about a second here, shorter than a poll of
    # kubectl on a busy machine).
    job = wait_job(cluster, namespace, "flaky", lambda j: condition(j, "Restarting"), what="its Restarting condition")
    restarting = condition(job, "Restarting")
    # Seen during the round (True, WorkerFailed) or, on a busy machine, once the round is
    # over (False, PodsRunning); the WorkerFailed Event below says why either way.
    assert (restarting["status"], restarting["reason"]) in {("True", "WorkerFailed"), ("False", "PodsRunning")}

    def recreated():
        pod = cluster.try_get("pod", "flaky-worker-1", namespace)
        return pod if pod and pod["metadata"]["uid"] != first_uid and pod["status"].get("phase") == "Running" else None

    cluster.wait_for(recreated, timeout=60, what="flaky-worker-1 recreated under the same name")
    job = wait_phase(cluster, namespace, "flaky", "Running")
    assert job["status"]["restarts"] == 1
    assert condition(job, "Restarting")["status"] == "False"
    reasons = [e["reason"] for e in events_of(cluster, namespace, "flaky")]
    assert "WorkerFailed" in reasons and "WorkersRecreated" in reasons

    annotate_exit(cluster, namespace, "flaky-worker-0", 137)
    job = wait_phase(cluster, namespace, "flaky", "Failed", stall=60)
    failed = condition(job, "Failed")
    assert failed["reason"] == "BackoffLimitExceeded", dump(job["status"])
    assert "flaky-worker-0 failed" in failed["message"] and "exit code 137" in failed["message"]
    # cleanPodPolicy Running: the still-running worker is removed, the failed one kept.
    cluster.wait_for(lambda: [p["metadata"]["name"] for p in pods_of(cluster, namespace, "flaky")
                              if not p["metadata"].get("deletionTimestamp")] == ["flaky-worker-0"],
                     timeout=30, what="running pods cleaned")


def test_semantically_invalid_spec_fails_with_the_validator_message_and_no_pods(cluster, namespace, operator):
    cluster.apply(job_manifest("bad", env=[{"name": "MASTER_ADDR", "value": "x"}]), namespace=namespace)
    job = wait_phase(cluster, namespace, "bad", "Failed")
    validated = condition(job, "Validated")
    assert validated["status"] == "False" and validated["reason"] == "InvalidSpec"
    assert validated["message"].startswith("spec.env[0].name: is reserved")
    assert pods_of(cluster, namespace, "bad") == []
    assert cluster.try_get("service", "bad", namespace) is None
    assert any(e["reason"] == "InvalidSpec" and e["type"] == "Warning" for e in events_of(cluster, namespace, "bad"))


def test_guardrail_warnings_reach_condition_status_and_events(cluster, namespace, operator):
    cluster.apply(job_manifest("warn", nodes=1, strategy="ddp", gpusPerNode=1), namespace=namespace)
    job = wait_phase(cluster, namespace, "warn", "Running")
    validated = condition(job, "Validated")
    assert validated["reason"] == "ValidWithWarnings"
    assert "DDP requires multiple devices, falling back to single-device training" in validated["message"]
    assert job["status"]["resolved"]["strategy"] == "auto"
    assert any("DDP requires multiple devices" in w for w in job["status"]["warnings"])
    assert any(e["reason"] == "DDPSingleDevice" for e in events_of(cluster, namespace, "warn"))
    cluster.wait_for(lambda: operator.sample("disttrain_operator_validation_warnings_total",
                                             reason="DDPSingleDevice") >= 1, timeout=10, what="the warning counted")


def test_jobs_carry_no_finalizer_and_one_left_by_an_older_operator_comes_off(cluster, namespace, operator):
    """A finalizer would cost a write per job and keep `kubectl delete` waiting whenever no
    operator runs; nothing has to happen before a job goes. A job an older operator marked
    is still released when it is deleted."""
    cluster.apply(job_manifest("plain", nodes=1), namespace=namespace)
    older = job_manifest("older", nodes=1)
    older["metadata"]["finalizers"] = ["disttrain.dev/finalizer"]
    cluster.apply(older, namespace=namespace)
    job = wait_phase(cluster, namespace, "plain", "Running")
    assert not job["metadata"].get("finalizers"), dump(job["metadata"])
    wait_phase(cluster, namespace, "older", "Running")
    cluster.kubectl("delete", "dt", "plain", "older", "-n", namespace, "--wait=true", "--timeout=30s")
    assert cluster.try_get("dt", "plain", namespace) is None and cluster.try_get("dt", "older", namespace) is None
    # A new job of the same name starts afresh: the deleted one's loop is gone, not confused.
    cluster.apply(job_manifest("plain", nodes=1), namespace=namespace)
    again = wait_phase(cluster, namespace, "plain", "Running")
    assert again["metadata"]["uid"] != job["metadata"]["uid"]
    assert [p["metadata"]["ownerReferences"][0]["uid"] for p in pods_of(cluster, namespace, "plain")] == \
        [again["metadata"]["uid"]]


def test_a_job_wait_follows_progress_not_a_total_time(cluster, namespace, operator_kubeconfig) -> None:
    """Cluster.wait_job, under every cluster and e2e wait on a job: a job whose status keeps
    changing is waited for past its stall time; one that stands still fails the wait, which
    names how long it stood and what it last saw."""
    cluster.apply(job_manifest("waited"), namespace=namespace)  # no operator: only the test writes its status
    reads, started = [], time.monotonic()

    def changing(job: dict) -> bool:  # each read a new step, done well past the stall time
        reads.append(job)
        cluster.kubectl("patch", "dt", "waited", "-n", namespace, "--subresource=status", "--type=merge",
                        "-p", json.dumps({"status": {"progress": {"step": len(reads)}}}))
        return time.monotonic() - started > 3
    done = cluster.wait_job(namespace, "waited", changing, what="a changing job", stall=0.5, interval=0.1)
    assert done["status"]["progress"]["step"] >= 1
    with pytest.raises(pytest.fail.Exception, match=r"waited: never.*no progress for 1s; last seen"):
        cluster.wait_job(namespace, "waited", lambda job: False, what="never", stall=1, interval=0.1)
