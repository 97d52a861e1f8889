"""status.failures on the real API server: each cause is read from a pod status written the
way the kubelet and the control plane write it (an exit code with its termination message,
an OOM kill, an eviction through the Eviction API, a kubelet eviction), the entry names the
pod's real node, each failure counts once in disttrain_job_failures_total, and the history
stays at its 16 newest entries. KWOK's pods have no kubelet, so the test writes the pod
status a kubelet would (the status subresource, as the kubelet does)."""

from __future__ import annotations

import json

import pytest

from .conftest import (CHECKPOINT_CLAIM, condition, dump, get_job, job_manifest, pods_of, running_operator, wait_job,
                       wait_phase)

pytestmark = pytest.mark.cluster

HOLD = "disttrain.dev/test-hold"  # a finalizer standing in for a kubelet's grace period


def failures(job: dict) -> list[dict]:
    return (job.get("status") or {}).get("failures") or []


def running_worker(cluster, namespace: str, name: str, not_uid: str | None = None) -> dict:
    """The worker pod once it runs (a new one, if not_uid names the old)."""
    def current():
        pod = cluster.try_get("pod", name, namespace)
        return pod if (pod and pod["metadata"]["uid"] != not_uid and not pod["metadata"].get("deletionTimestamp")
                       and pod.get("status", {}).get("phase") == "Running") else None

    return cluster.wait_for(current, timeout=90, what=f"{name} running")


def kubelet_reports(cluster, namespace: str, pod: dict, **status) -> None:
    """Write the pod's status as a kubelet would: its trainer container terminated."""
    container = {"name": "trainer", "image": pod["spec"]["containers"][0]["image"], "imageID": "", "ready": False,
                 "restartCount": 0, "started": False, "state": {"terminated": status.pop("terminated")}}
    body = {"status": {"phase": "Failed", "containerStatuses": [container], **status}}
    cluster.kubectl("patch", "pod", pod["metadata"]["name"], "-n", namespace, "--subresource=status",
                    "--type=merge", "-p", json.dumps(body))


def test_each_failure_is_recorded_from_the_pod_status_once_and_the_history_stays_bounded(
        cluster, namespace, operator_kubeconfig, tmp_path):
    with running_operator(cluster, namespace, operator_kubeconfig) as operator:
        # evictGraceSeconds 0: no PodDisruptionBudget, so the Eviction API below evicts at
        # once (with one, it refuses: test_node_drain.py).
        cluster.apply(job_manifest("hist", nodes=2, backoffLimit=30,
                                   checkpoint={"claimName": CHECKPOINT_CLAIM, "evictGraceSeconds": 0}),
                      namespace=namespace)
        wait_phase(cluster, namespace, "hist", "Running")

        # 1. The trainer exits 1; its termination message ends with the error.
        first = running_worker(cluster, namespace, "hist-worker-1")
        cluster.kubectl("annotate", "pod", "hist-worker-1", "-n", namespace,
                        "disttrain.dev/test-termination-message=Traceback (most recent call last):\n"
                        "RuntimeError: NCCL watchdog timeout", f"{cluster.EXIT_CODE_ANNOTATION}=1")
        job = wait_job(cluster, namespace, "hist", lambda j: len(failures(j)) == 1, what="the first failure")
        entry = failures(job)[0]
        assert {k: entry.get(k) for k in ("cause", "pod", "podUID", "rank", "node", "exitCode", "message")} == {
            "cause": "ExitCode", "pod": "hist-worker-1", "podUID": first["metadata"]["uid"], "rank": 1,
            "node": first["spec"]["nodeName"], "exitCode": 1, "message": "RuntimeError: NCCL watchdog timeout"}
        # No trainer /status here: the steps it cost are unknown, and say so by their absence.
        assert "stepsLost" not in entry and "resumedFromStep" not in entry

        # 2. Worker 0 is OOM-killed (the round then replaces worker 1 too: no entry for that).
        second = running_worker(cluster, namespace, "hist-worker-1", not_uid=first["metadata"]["uid"])
        zero = running_worker(cluster, namespace, "hist-worker-0")
        kubelet_reports(cluster, namespace, zero, terminated={
            "exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-11-25T10:00:00Z",
            "startedAt": "2026-11-25T09:00:00Z"})
        job = wait_job(cluster, namespace, "hist", lambda j: len(failures(j)) == 2, what="the OOM kill")
        oom = failures(job)[1]
        assert (oom["cause"], oom["pod"], oom["exitCode"], oom["time"], oom["node"]) == (
            "OOMKilled", "hist-worker-0", 137, "2026-11-25T10:00:00Z", zero["spec"]["nodeName"])
        job = wait_job(cluster, namespace, "hist", lambda j: j["status"].get("restarts") == 2
                       and j["status"].get("phase") == "Running", what="running again after two restarts")
        assert len(failures(job)) == 2, dump(job["status"])

        # 3. A drain: the Eviction API sets DisruptionTarget, then deletes the pod, which a
        # kubelet would stop within its grace period (here a finalizer holds it meanwhile).
        third = running_worker(cluster, namespace, "hist-worker-1", not_uid=second["metadata"]["uid"])
        cluster.kubectl("patch", "pod", "hist-worker-1", "-n", namespace, "--type=merge",
                        "-p", json.dumps({"metadata": {"finalizers": [HOLD]}}))
        eviction = tmp_path / "eviction.json"
        eviction.write_text(json.dumps({"apiVersion": "policy/v1", "kind": "Eviction",
                                        "metadata": {"name": "hist-worker-1", "namespace": namespace}}))
        cluster.kubectl("create", "--raw", f"/api/v1/namespaces/{namespace}/pods/hist-worker-1/eviction",
                        "-f", str(eviction))
        try:
            job = wait_job(cluster, namespace, "hist", lambda j: len(failures(j)) == 3, what="the eviction")
        finally:
            cluster.kubectl("patch", "pod", "hist-worker-1", "-n", namespace, "--type=json",
                            "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]', check=False)
        evicted = failures(job)[2]
        assert (evicted["cause"], evicted["podUID"], evicted.get("exitCode")) == (
            "Evicted", third["metadata"]["uid"], None)
        assert "Eviction API" in evicted["message"], evicted

        # 4. Kubelet evictions under node pressure, until the history is past its bound: each
        # is recreated at once (a disruption spends no backoffLimit) and recorded once.
        uid = third["metadata"]["uid"]
        for n in range(15):
            pod = running_worker(cluster, namespace, "hist-worker-1", not_uid=uid)
            uid = pod["metadata"]["uid"]
            kubelet_reports(cluster, namespace, pod, reason="Evicted",
                            message=f"The node was low on resource: memory. ({n})",
                            terminated={"exitCode": 137, "reason": "Error", "finishedAt": f"2026-11-25T11:00:{n:02d}Z",
                                        "startedAt": "2026-11-25T10:30:00Z"})
            wait_job(cluster, namespace, "hist", lambda j, n=n: any(
                f.get("message", "").endswith(f"({n})") for f in failures(j)), what=f"kubelet eviction {n}")
        running_worker(cluster, namespace, "hist-worker-1", not_uid=uid)
        job = get_job(cluster, namespace, "hist")
        history = failures(job)
        # 18 failures: the newest 16 are kept, oldest first (the exit code and the OOM kill went).
        assert len(history) == 16, dump(job["status"])
        assert [f["cause"] for f in history] == ["Evicted"] * 16
        assert history[0]["podUID"] == third["metadata"]["uid"]
        assert history[-1]["message"] == "The node was low on resource: memory. (14)"
        assert len({f["podUID"] for f in history}) == 16
        assert job["status"]["restarts"] == 2  # disruptions spent no backoffLimit
        assert condition(job, "Running")["status"] == "True"

        def counts() -> dict[str, float]:
            return {cause: operator.sample("disttrain_job_failures_total", namespace=namespace, job="hist",
                                           cause=cause) for cause in ("ExitCode", "OOMKilled", "Evicted")}

        # (the counters move just after the status write read above)
        cluster.wait_for(lambda: sum(counts().values()) >= 18, timeout=10, what="18 failures counted")
        assert counts() == {"ExitCode": 1, "OOMKilled": 1, "Evicted": 16}
        assert [p["metadata"]["name"] for p in pods_of(cluster, namespace, "hist")
                if not p["metadata"].get("deletionTimestamp")] == ["hist-worker-0", "hist-worker-1"]
