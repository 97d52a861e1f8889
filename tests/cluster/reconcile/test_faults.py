"""Faults an SRE meets, on the real control plane: a graceful pod deletion, status writes
refused for a while, pod creation refused by admission, squatters on a child's name,
a job re-created under the name of a deleted one, a spec that stops validating, a
deleted child Service, the CRD deleted under running jobs, a hostile trainer /status."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request

import pytest

from .conftest import (MANIFESTS, annotate_exit, condition, events_of, free_port, get_job, job_manifest, kill,
                       pods_of, start_operator_process, wait_phase)

pytestmark = pytest.mark.cluster


def report(outcome: str | None, step: int, total: int, ckpt: int) -> str:
    """A trainer termination message (docs/pod-contract.md, "Success contract")."""
    return json.dumps({"step": step, "totalSteps": total, "loss": 3.0, "samplesPerSecond": 10.0,
                       "worldSize": 2, "outcome": outcome,
                       "checkpoint": {"step": ckpt, "time": "2026-11-23T00:00:00Z", "path": f"/ck/step-{ckpt:08d}"}})


def end_pod(cluster, namespace: str, pod: str, code: int, message: str) -> None:
    cluster.kubectl("annotate", "pod", pod, "-n", namespace, "--overwrite",
                    f"disttrain.dev/test-termination-message={message}", f"{cluster.EXIT_CODE_ANNOTATION}={code}")


def uid_of(cluster, namespace: str, kind: str, name: str) -> str:
    return cluster.get(kind, name, namespace)["metadata"]["uid"]


def test_graceful_delete_recreates_and_never_succeeds(cluster, namespace, operator):
    """Deleting worker-1 (a drain): every rank checkpointed and stopped; worker-0's torchrun
    exits 0 with the trainer's Interrupted report (the shape that made the job Succeeded at
    step 11 of 100000). Both come back; the job finishes only with a Finished report."""
    cluster.apply(job_manifest("drained", nodes=2, trainer={"builtin": {"steps": 100000}}), namespace=namespace)
    wait_phase(cluster, namespace, "drained", "Running")
    first = uid_of(cluster, namespace, "pod", "drained-worker-0")
    cluster.kubectl("delete", "pod", "drained-worker-1", "-n", namespace, "--wait=false")
    end_pod(cluster, namespace, "drained-worker-0", 0, report("Interrupted", 11, 100000, 11))

    def recreated():
        pods = pods_of(cluster, namespace, "drained")
        fresh = [p for p in pods if p["metadata"]["uid"] != first and p["status"].get("phase") == "Running"]
        return len(fresh) == 2
    cluster.wait_for(recreated, timeout=60, what="both workers recreated")
    job = wait_phase(cluster, namespace, "drained", "Running")
    assert job["status"].get("restarts", 0) == 0  # a disruption does not spend backoffLimit
    assert job["status"]["progress"]["step"] == 11 and job["status"]["checkpoint"]["step"] == 11
    assert "completionTime" not in job["status"]

    # The real end: both agents exit 0 with the Finished report of the last step.
    for i in range(2):
        end_pod(cluster, namespace, f"drained-worker-{i}", 0, report("Finished", 100000, 100000, 100000))
    job = wait_phase(cluster, namespace, "drained", "Succeeded")
    assert job["status"]["progress"]["step"] == 100000 and job["status"]["progress"]["percentComplete"] == "100%"
    assert job["status"]["checkpoint"]["path"] == "/ck/step-00100000"


def test_pod_security_refusal_is_a_condition_with_the_admission_message(cluster, namespace, operator):
    cluster.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    # An NFS volume passes the operator's own pod policy (it leaves no sandbox) but not the
    # namespace's "restricted" level: the refusal comes from admission, as on a real platform.
    nfs = {"spec": {"volumes": [{"name": "data", "nfs": {"server": "nfs.example", "path": "/"}}]}}
    cluster.apply(job_manifest("strict", nodes=1, podTemplate=nfs), namespace=namespace)

    def refused():
        job = get_job(cluster, namespace, "strict")
        return condition(job, "PodCreationForbidden") and job
    job = cluster.wait_for(refused, timeout=30, what="PodCreationForbidden")
    cond = condition(job, "PodCreationForbidden")
    assert cond["status"] == "True" and cond["reason"] == "Forbidden"
    assert "violates PodSecurity" in cond["message"] and "nfs" in cond["message"]
    assert job["status"]["phase"] == "Pending"
    # Several refused retries later (the operator's own count of 403 answers to creates)...
    cluster.wait_for(lambda: operator.sample("disttrain_operator_api_requests_total", verb="POST", code="403") >= 3,
                     timeout=60, what="three refused creations")
    warnings = [e for e in events_of(cluster, namespace, "strict") if e["reason"] == "Forbidden"]
    assert len(warnings) == 1 and warnings[0].get("count", 1) == 1, warnings
    assert pods_of(cluster, namespace, "strict") == []

    # Lift the restriction: the next retry creates the pod and the condition clears.
    cluster.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce-")
    wait_phase(cluster, namespace, "strict", "Running", stall=60)
    assert condition(get_job(cluster, namespace, "strict"), "PodCreationForbidden")["status"] == "False"


def test_squatters_are_never_adopted(cluster, namespace, operator):
    """An unrelated pod and ClusterIP Service hold the child names: NameConflict names them,
    nothing is adopted or deleted; once they are gone the job starts."""
    squat_pod = {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": "taken-worker-1", "labels": {"app": "squatter"}},
                 "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    squat_svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "taken"},
                 "spec": {"ports": [{"port": 80}]}}
    cluster.apply([squat_pod, squat_svc], namespace=namespace)
    cluster.apply(job_manifest("taken", nodes=2), namespace=namespace)

    def conflicted():
        job = get_job(cluster, namespace, "taken")
        return (condition(job, "NameConflict") or {}).get("status") == "True" and job
    job = cluster.wait_for(conflicted, timeout=30, what="NameConflict")
    message = condition(job, "NameConflict")["message"]
    assert "taken is taken by service taken" in message
    assert pods_of(cluster, namespace, "taken") == []  # no pod without its Service
    # Never adopted (no owner reference added) and never counted as a worker.
    assert not cluster.get("service", "taken", namespace)["metadata"].get("ownerReferences")
    assert not cluster.get("pod", "taken-worker-1", namespace)["metadata"].get("ownerReferences")
    assert (job.get("status", {}).get("workers") or {}).get("active", 0) == 0
    cluster.kubectl("delete", "service", "taken", "-n", namespace)
    job = cluster.wait_for(lambda: "taken-worker-1 is taken by pod" in (
        condition(get_job(cluster, namespace, "taken"), "NameConflict") or {}).get("message", "")
        and get_job(cluster, namespace, "taken"), timeout=60, what="the pod squatter named")
    squatter = cluster.get("pod", "taken-worker-1", namespace)
    assert squatter["metadata"]["labels"] == {"app": "squatter"} and not squatter["metadata"].get("ownerReferences")
    cluster.kubectl("delete", "pod", "taken-worker-1", "-n", namespace, "--wait=true")
    wait_phase(cluster, namespace, "taken", "Running", stall=90)
    assert condition(get_job(cluster, namespace, "taken"), "NameConflict")["status"] == "False"


def test_a_recreated_job_ignores_the_pods_of_the_deleted_one(cluster, namespace, operator):
    """The pods of a deleted job linger (finalizer, or the garbage collector not done yet):
    a new job of the same name must not count them, and above all not take the old
    worker's exit 0 for its own success."""
    cluster.apply(job_manifest("again", nodes=1), namespace=namespace)
    wait_phase(cluster, namespace, "again", "Running")
    old_pod = cluster.get("pod", "again-worker-0", namespace)
    # Hold the old pod back from deletion so it outlives its job, then end it with exit 0.
    cluster.kubectl("patch", "pod", "again-worker-0", "-n", namespace, "--type=merge",
                    "-p", '{"metadata": {"finalizers": ["disttrain.dev/test-hold"]}}')
    end_pod(cluster, namespace, "again-worker-0", 0, report("Finished", 10, 10, 10))
    wait_phase(cluster, namespace, "again", "Succeeded")
    cluster.kubectl("delete", "dt", "again", "-n", namespace, "--wait=true", "--timeout=60s")
    try:
        cluster.apply(job_manifest("again", nodes=1), namespace=namespace)

        def blocked():
            job = get_job(cluster, namespace, "again")
            return (condition(job, "NameConflict") or {}).get("status") == "True" and job
        job = cluster.wait_for(blocked, timeout=30, what="NameConflict on the old pod")
        assert job["status"]["phase"] == "Pending"
        assert job["status"]["workers"]["succeeded"] == 0
    finally:
        cluster.kubectl("patch", "pod", "again-worker-0", "-n", namespace, "--type=merge",
                        "-p", '{"metadata": {"finalizers": null}}')
    cluster.wait_for(lambda: cluster.try_get("pod", "again-worker-0", namespace) is None or
                     cluster.get("pod", "again-worker-0", namespace)["metadata"]["uid"] != old_pod["metadata"]["uid"],
                     timeout=60, what="the old pod gone")
    job = wait_phase(cluster, namespace, "again", "Running", stall=60)
    assert condition(job, "NameConflict")["status"] == "False"


OUTAGE_SECONDS = 180


@pytest.mark.rbac_refusals_expected
@pytest.mark.parametrize("install_mode", ["cluster-wide"], indirect=True)  # it edits the ClusterRole
def test_status_writes_refused_for_a_while_then_converge(cluster, namespace, operator):
    """The operator may not write status (its RBAC rule removed, as a broken upgrade would):
    its loop retries with back-off for as long as it takes; once the rule is back the job
    converges within seconds, with no operator restart."""
    role = json.loads(cluster.kubectl("get", "clusterrole", "disttrain-operator", "-o", "json").stdout)
    rules = role["rules"]
    without = [r for r in rules if "distributedtrainings/status" not in r.get("resources", [])]
    assert len(without) == len(rules) - 1
    patch = json.dumps([{"op": "replace", "path": "/rules", "value": without}])
    cluster.kubectl("patch", "clusterrole", "disttrain-operator", "--type=json", "-p", patch)
    try:
        cluster.apply(job_manifest("muted", nodes=2), namespace=namespace)
        cluster.wait_for(lambda: len(pods_of(cluster, namespace, "muted")) == 2, timeout=60, what="pods created")
        # Three minutes of refusals, as the fault asks: the loop keeps retrying at its
        # 10 s ceiling all along (0.5+1+2+4+8 s, then every 10 s: about 21 attempts).
        started = time.monotonic()
        cluster.wait_for(lambda: time.monotonic() - started >= OUTAGE_SECONDS, timeout=OUTAGE_SECONDS + 10,
                         interval=5, what="the outage to last")
        errors = operator.sample("disttrain_operator_reconcile_errors_total", reason="Api403")
        assert errors >= 17, f"only {errors} refused passes in {OUTAGE_SECONDS}s: the loop stopped retrying"
        assert not (get_job(cluster, namespace, "muted").get("status") or {}).get("phase")
    finally:
        cluster.kubectl("apply", "-f", str(MANIFESTS / "rbac" / "cluster-role.yaml"))
    # Converges on the next retry (at most the 10 s ceiling), with no operator restart.
    wait_phase(cluster, namespace, "muted", "Running", stall=30)
    annotate_exit(cluster, namespace, "muted-worker-1", 1)  # and it still reacts afterwards
    cluster.wait_for(lambda: get_job(cluster, namespace, "muted")["status"].get("restarts") == 1, timeout=60,
                     what="a restart after the outage")


def test_a_deleted_service_is_restored_before_workers_are_recreated(cluster, namespace, operator):
    """Someone deletes the job's headless Service while it runs: the next restart round
    restores it, so the recreated workers can resolve the rendezvous host."""
    cluster.apply(job_manifest("svc", nodes=2), namespace=namespace)
    wait_phase(cluster, namespace, "svc", "Running")
    job_uid = uid_of(cluster, namespace, "dt", "svc")
    cluster.kubectl("delete", "service", "svc", "-n", namespace, "--wait=true")
    cluster.kubectl("delete", "pod", "svc-worker-1", "-n", namespace, "--wait=false")
    service = cluster.wait_for(lambda: cluster.try_get("service", "svc", namespace), timeout=60,
                               what="the Service restored")
    assert [r["uid"] for r in service["metadata"]["ownerReferences"]] == [job_uid]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    cluster.wait_for(lambda: len([p for p in pods_of(cluster, namespace, "svc")
                                  if p["status"].get("phase") == "Running"
                                  and not p["metadata"].get("deletionTimestamp")]) == 2,
                     timeout=60, what="svc-worker-1 recreated")
    # Before: the recreated worker did not exist before the name it resolves did.
    worker = cluster.get("pod", "svc-worker-1", namespace)
    assert service["metadata"]["creationTimestamp"] <= worker["metadata"]["creationTimestamp"]


def liveness(port: int) -> tuple[int, dict]:
    """The operator's liveness answer: its HTTP status and its body (the probes' results)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            return answer.status, json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as refused:
        return refused.code, {}
    except OSError:
        return 0, {}  # not listening (yet, or while kopf starts over)


def test_deleting_the_crd_creates_no_pod_for_the_jobs_it_took_and_its_return_is_served(
        cluster, namespace, operator_kubeconfig, tmp_path):
    """`helm uninstall` with CRDs, or a botched upgrade: the CRD goes and every job with it.
    The operator must not create pods for jobs that no longer exist (it did, from its
    cache: the owner kind gone, the garbage collector could not remove them). Its liveness
    answer says the CRD is missing, and once the CRD is back the same process serves new
    jobs (before, kopf stopped when its watch reopened into a 404, or never looked again,
    and the operator had to be restarted by hand). The real entry point runs here, as the
    Deployment runs it."""
    log, port = tmp_path / "operator.log", free_port()
    proc = start_operator_process(namespace, operator_kubeconfig, log, liveness=f"http://127.0.0.1:{port}/healthz")
    crd = "distributedtrainings.disttrain.dev"
    templates = {"trainingtemplates.disttrain.dev": "served", "clustertrainingtemplates.disttrain.dev": "served"}
    try:
        cluster.apply([job_manifest(f"doomed-{i}", nodes=2) for i in range(3)], namespace=namespace)
        for i in range(3):
            wait_phase(cluster, namespace, f"doomed-{i}", "Running")
        created = log.read_text(errors="replace").count("created pod")
        assert created == 6
        assert liveness(port) == (200, {"crds": {crd: "served", **templates}})
        cluster.kubectl("delete", "crd", crd, "--wait=true", "--timeout=120s")
        # The pods left behind change as pods do (ended by hand here, as their node or the
        # garbage collector would, and the collector may be first): each change reaches the operator.
        for i in range(3):
            for pod in pods_of(cluster, namespace, f"doomed-{i}"):
                cluster.kubectl("delete", "pod", pod["metadata"]["name"], "-n", namespace, "--wait=false",
                                "--ignore-not-found")
        cluster.wait_for(lambda: all(pods_of(cluster, namespace, f"doomed-{i}") == [] for i in range(3)),
                         timeout=60, what="the orphaned pods gone")
        missing = {"crds": {crd: "not installed: no job of this kind is served until it is created", **templates}}
        cluster.wait_for(lambda: liveness(port) == (200, missing), timeout=60, interval=1,
                         what="the liveness answer saying the CRD is missing")
        # Give a wrong operator every chance to act: a few of its passes, reacting to the deletions.
        deadline = time.monotonic() + 10
        cluster.wait_for(lambda: time.monotonic() > deadline, timeout=20, interval=1, what="10 s to pass")
        assert log.read_text(errors="replace").count("created pod") == created
        assert all(pods_of(cluster, namespace, f"doomed-{i}") == [] for i in range(3))
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        # The CRD comes back: the same process picks new jobs up.
        cluster.kubectl("apply", "--server-side", "-f", str(MANIFESTS / "crd"))
        cluster.wait_established(crd)
        cluster.apply(job_manifest("after", nodes=1), namespace=namespace)
        wait_phase(cluster, namespace, "after", "Running", stall=120, log=log)
        assert proc.poll() is None and f"the CRD {crd} is back: starting over to serve it" in log.read_text()
        cluster.wait_for(lambda: liveness(port) == (200, {"crds": {crd: "served", **templates}}), timeout=30, interval=1,
                         what="the liveness answer saying the CRD is served")
        kill(proc, signal.SIGTERM)  # a signal still ends the process that started kopf over
        assert proc.returncode == 0, log.read_text(errors="replace")[-3000:]
    finally:
        cluster.kubectl("apply", "--server-side", "-f", str(MANIFESTS / "crd"))
        cluster.wait_established(crd)
        kill(proc)
    assert "forbidden" not in log.read_text(errors="replace").lower()
