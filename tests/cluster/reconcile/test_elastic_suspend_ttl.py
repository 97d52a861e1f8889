"""Scale, suspend/resume, TTL and cascading deletion through the real API server."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from .conftest import condition, events_of, get_job, job_manifest, pods_of, wait_phase

pytestmark = pytest.mark.cluster

# What a job owns besides its pods, each named after the job (the budget: evictGraceSeconds > 0).
CHILD_KINDS = ("service", "networkpolicy", "poddisruptionbudget")


def names(cluster, namespace, job):
    return [p["metadata"]["name"] for p in pods_of(cluster, namespace, job)
            if not p["metadata"].get("deletionTimestamp")]


def test_kubectl_scale_adds_and_removes_workers_within_the_elastic_range(cluster, namespace, operator):
    cluster.apply(job_manifest("elastic", nodes=2, minNodes=1, maxNodes=4), namespace=namespace)
    wait_phase(cluster, namespace, "elastic", "Running")
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods_of(cluster, namespace, "elastic")}
    cluster.kubectl("scale", "dt/elastic", "-n", namespace, "--replicas=4")
    cluster.wait_for(lambda: names(cluster, namespace, "elastic") == [f"elastic-worker-{i}" for i in range(4)],
                     timeout=30, what="scaled to 4")
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods_of(cluster, namespace, "elastic")}
    assert after["elastic-worker-0"] == uids["elastic-worker-0"]  # running workers untouched
    assert after["elastic-worker-1"] == uids["elastic-worker-1"]
    scale = cluster.get("dt", "elastic", namespace)
    cluster.wait_for(lambda: get_job(cluster, namespace, "elastic")["status"]["workers"]["active"] == 4,
                     timeout=30, what="status.workers.active == 4")
    assert scale["spec"]["nodes"] == 4
    cluster.kubectl("scale", "dt/elastic", "-n", namespace, "--replicas=1")
    cluster.wait_for(lambda: names(cluster, namespace, "elastic") == ["elastic-worker-0"], timeout=30,
                     what="scaled to 1")
    assert pods_of(cluster, namespace, "elastic")[0]["metadata"]["uid"] == uids["elastic-worker-0"]
    # A scale-down is the user's choice: no restart, no failure recorded, one worker counted.
    cluster.wait_for(lambda: get_job(cluster, namespace, "elastic")["status"]["workers"]["active"] == 1,
                     timeout=30, what="status.workers.active == 1")
    status = get_job(cluster, namespace, "elastic")["status"]
    assert status.get("restarts", 0) == 0 and not status.get("failures"), status
    assert "Scaled" in {e["reason"] for e in events_of(cluster, namespace, "elastic")}
    # Outside the range the API server refuses, naming the fix.
    refused = cluster.kubectl("scale", "dt/elastic", "-n", namespace, "--replicas=5", check=False)
    assert refused.returncode != 0 and "raise spec.maxNodes" in refused.stderr


def test_suspend_removes_pods_and_resume_recreates_them(cluster, namespace, operator):
    cluster.apply(job_manifest("pausable", nodes=2), namespace=namespace)
    wait_phase(cluster, namespace, "pausable", "Running")
    cluster.kubectl("patch", "dt/pausable", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    uids = {p["metadata"]["uid"] for p in pods_of(cluster, namespace, "pausable")}
    job = wait_phase(cluster, namespace, "pausable", "Suspended")
    assert condition(job, "Suspended")["status"] == "True"
    cluster.wait_for(lambda: names(cluster, namespace, "pausable") == [], timeout=30, what="pods removed")
    # How it stopped, as `status` prints it (no trainer answers on these fake nodes).
    eviction = get_job(cluster, namespace, "pausable")["status"]["eviction"]
    assert eviction["reason"] == "Suspended" and eviction["stopTime"], eviction
    assert eviction["handshake"] in {"Checkpointed", "TimedOut", "NotSupported", "NotRunning"}, eviction
    # A Suspended job never shows workers it cannot have: its counters are not deferred
    # (they used to lag 30 s behind, saying 2 active with no pod left).
    cluster.wait_for(lambda: get_job(cluster, namespace, "pausable")["status"]["workers"]["active"] == 0,
                     timeout=20, what="status.workers.active == 0 once suspended")
    # While suspended, fields that cannot change live may change.
    cluster.kubectl("patch", "dt/pausable", "-n", namespace, "--type=merge", "-p",
                    '{"spec":{"image":"ghcr.io/disttrain/trainer:0.1.1"}}')
    cluster.kubectl("patch", "dt/pausable", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    job = wait_phase(cluster, namespace, "pausable", "Running")
    assert condition(job, "Suspended")["status"] == "False"
    images = {p["spec"]["containers"][0]["image"] for p in pods_of(cluster, namespace, "pausable")}
    assert images == {"ghcr.io/disttrain/trainer:0.1.1"}
    assert not uids & {p["metadata"]["uid"] for p in pods_of(cluster, namespace, "pausable")}  # new pods
    reasons = [e["reason"] for e in events_of(cluster, namespace, "pausable")]
    assert {"JobSuspended", "JobResumed"} <= set(reasons), reasons


def test_changes_that_cannot_apply_live_are_rejected(cluster, namespace, operator):
    cluster.apply(job_manifest("fixed", nodes=1), namespace=namespace)
    wait_phase(cluster, namespace, "fixed", "Running")
    refused = cluster.kubectl("patch", "dt/fixed", "-n", namespace, "--type=merge", "-p",
                              '{"spec":{"strategy":"fsdp"}}', check=False)
    assert refused.returncode != 0
    assert "spec.strategy cannot change while the job runs: set spec.suspend: true" in refused.stderr


def test_ttl_deletes_finished_jobs_and_deletion_cascades_to_children(cluster, namespace, operator):
    cluster.apply(job_manifest("short", nodes=1, ttlSecondsAfterFinished=2, cleanPodPolicy="None"),
                  namespace=namespace)
    wait_phase(cluster, namespace, "short", "Running")
    cluster.kubectl("annotate", "pod", "short-worker-0", "-n", namespace,
                    f"{cluster.EXIT_CODE_ANNOTATION}=0")
    done = wait_phase(cluster, namespace, "short", "Succeeded")
    assert names(cluster, namespace, "short") == ["short-worker-0"]  # cleanPodPolicy None keeps it
    finished = datetime.fromisoformat(done["status"]["completionTime"])
    cluster.wait_for(lambda: cluster.try_get("dt", "short", namespace) is None, timeout=90,
                     what="TTL deletion (last state shown if it times out)")
    # The TTL counts from the finish: the operator's TTLExpired Event is stamped no earlier
    # than completionTime + 2 s (both stamps are the operator's, whole seconds).
    (expired,) = [e for e in events_of(cluster, namespace, "short") if e["reason"] == "TTLExpired"]
    stamp = expired.get("eventTime") or expired.get("firstTimestamp") or expired["lastTimestamp"]
    assert datetime.fromisoformat(stamp) >= finished + timedelta(seconds=2), expired
    # The garbage collector removes what the job owned.
    # The garbage collector learns a new CRD's kind on its periodic resync (~30 s): be patient.
    cluster.wait_for(lambda: names(cluster, namespace, "short") == [], timeout=120, what="pods collected")
    for kind in CHILD_KINDS:
        cluster.wait_for(lambda: cluster.try_get(kind, "short", namespace) is None, timeout=120,
                         what=f"{kind} collected")


def test_deleting_a_running_job_removes_its_children(cluster, namespace, operator):
    cluster.apply(job_manifest("gone", nodes=2), namespace=namespace)
    wait_phase(cluster, namespace, "gone", "Running")
    assert all(cluster.try_get(kind, "gone", namespace) for kind in CHILD_KINDS)  # each was made
    cluster.kubectl("delete", "dt/gone", "-n", namespace, "--wait=true", "--timeout=60s")
    cluster.wait_for(lambda: names(cluster, namespace, "gone") == [], timeout=120, what="pods collected")
    for kind in CHILD_KINDS:  # a PodDisruptionBudget left behind would block every drain of those nodes
        cluster.wait_for(lambda: cluster.try_get(kind, "gone", namespace) is None, timeout=120,
                         what=f"{kind} collected")


def test_deleted_worker_is_recreated_with_the_same_name(cluster, namespace, operator):
    cluster.apply(job_manifest("again", nodes=2), namespace=namespace)
    wait_phase(cluster, namespace, "again", "Running")
    old = cluster.get("pod", "again-worker-1", namespace)["metadata"]["uid"]
    cluster.kubectl("delete", "pod", "again-worker-1", "-n", namespace)
    cluster.wait_for(lambda: (cluster.try_get("pod", "again-worker-1", namespace) or {"metadata": {"uid": old}})
                     ["metadata"]["uid"] != old, timeout=30, what="again-worker-1 recreated")
    job = wait_phase(cluster, namespace, "again", "Running")
    assert job["status"]["restarts"] == 0  # a deletion is not a failure
