"""Fixtures for operator tests: the CRDs and the operator's RBAC installed from
manifests/, and the operator running with a token of exactly that ServiceAccount, in
each install mode: cluster-wide (manifests/rbac) and namespaced (manifests/namespaced:
a Role in the test's namespace and read-only cluster rights)."""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from disttrain.local.run import die_with_parent
from disttrain.local.ports import free_port  # noqa: F401  (the reconcile tests import it from here)

import kueue_host  # tests/kueue_host.py (tests/ is on sys.path)

REPO = Path(__file__).resolve().parents[3]
MANIFESTS = REPO / "manifests"
OPERATOR_NS = "disttrain-system"
OPERATOR_SA = "disttrain-operator"
# The namespaced mode's account (its own, so the cluster-wide binding of OPERATOR_SA
# cannot lend it rights).
NAMESPACED_SA = "disttrain-operator-namespaced"
INSTALL_MODES = ("cluster-wide", "namespaced")

# Fast clocks for tests; the defaults are documented in settings.py.
TEST_ENV = {
    # Far longer than any wait in the tests: every reaction must come from an event.
    "DISTTRAIN_RESYNC_SECONDS": "300",
    "DISTTRAIN_PROGRESS_SECONDS": "1",
    "DISTTRAIN_RESTART_BACKOFF_SECONDS": "1",
    "DISTTRAIN_RESTART_BACKOFF_MAX_SECONDS": "4",
}


@pytest.fixture(scope="session")
def operator_kubeconfig(cluster) -> str:
    return install_operator_rights(cluster)


def install_operator_rights(cluster) -> str:
    """Install CRDs + RBAC the way a user does; a kubeconfig for the operator's account."""
    cluster.kubectl("apply", "-f", str(MANIFESTS / "crd"))
    cluster.kubectl("apply", "-f", str(MANIFESTS / "operator" / "namespace.yaml"))
    cluster.kubectl("apply", "-f", str(MANIFESTS / "rbac"))
    cluster.wait_established(*(f"{plural}.disttrain.dev" for plural in
                               ("distributedtrainings", "trainingtemplates", "clustertrainingtemplates")))
    return cluster.kubeconfig_for_service_account(OPERATOR_NS, OPERATOR_SA)


def namespaced_rbac(namespace: str) -> list[dict]:
    """manifests/namespaced/rbac.yaml for NAMESPACED_SA, its Role in `namespace`."""
    docs = [d for d in yaml.safe_load_all((MANIFESTS / "namespaced" / "rbac.yaml").read_text()) if d]
    for doc in docs:
        doc["metadata"]["name"] = doc["metadata"]["name"].replace(OPERATOR_SA, NAMESPACED_SA)
        if "namespace" in doc["metadata"]:
            doc["metadata"]["namespace"] = namespace
        if "roleRef" in doc:
            doc["roleRef"]["name"] = doc["roleRef"]["name"].replace(OPERATOR_SA, NAMESPACED_SA)
            doc["subjects"] = [{"kind": "ServiceAccount", "name": NAMESPACED_SA, "namespace": OPERATOR_NS}]
    return docs


@pytest.fixture(scope="session")
def namespaced_operator_kubeconfig(cluster, operator_kubeconfig) -> str:
    """The namespaced mode's account with its read-only cluster rights; each test's
    namespace grants it the Role (`install_mode`)."""
    cluster.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": NAMESPACED_SA, "namespace": OPERATOR_NS}})
    for doc in namespaced_rbac("unused"):
        if doc["kind"].startswith("Cluster"):
            cluster.apply(doc)
    return cluster.kubeconfig_for_service_account(OPERATOR_NS, NAMESPACED_SA)


@pytest.fixture(params=INSTALL_MODES)
def install_mode(request, cluster, namespace, operator_kubeconfig) -> tuple[str, str]:
    """(mode, kubeconfig of the operator's account in that mode)."""
    if request.param == "cluster-wide":
        return request.param, operator_kubeconfig
    kubeconfig = request.getfixturevalue("namespaced_operator_kubeconfig")
    for doc in namespaced_rbac(namespace):
        if not doc["kind"].startswith("Cluster"):
            cluster.apply(doc)
    return request.param, kubeconfig


# An account bound to manifests/rbac/metrics-reader.yaml, as a user binds their Prometheus's.
METRICS_READER_SA = "metrics-scraper"
_tokens: dict[str, str] = {}


def metrics_token(cluster) -> str:
    """A token of METRICS_READER_SA, which the operator's /metrics accepts (made once a cluster)."""
    if cluster.kubeconfig not in _tokens:
        cluster.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": METRICS_READER_SA, "namespace": OPERATOR_NS}})
        cluster.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                       "metadata": {"name": METRICS_READER_SA},
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                   "name": "disttrain-operator-metrics-reader"},
                       "subjects": [{"kind": "ServiceAccount", "name": METRICS_READER_SA, "namespace": OPERATOR_NS}]})
        _tokens[cluster.kubeconfig] = cluster.kubectl(
            "create", "token", METRICS_READER_SA, "-n", OPERATOR_NS, "--duration=4h").stdout.strip()
    return _tokens[cluster.kubeconfig]


def scrape(port: int, token: str | None, *, scheme: str = "https") -> str:
    """GET /metrics as a scraper does: HTTPS without verifying the operator's self-made
    certificate (the chart's ServiceMonitor does the same), the token as a bearer."""
    request = urllib.request.Request(f"{scheme}://127.0.0.1:{port}/metrics",
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
    context = ssl._create_unverified_context() if scheme == "https" else None
    with urllib.request.urlopen(request, timeout=5, context=context) as resp:
        return resp.read().decode()


def operator_scrape_config(cluster, tmp_path: Path, job_name: str, **targets: Any) -> dict[str, Any]:
    """Prometheus's scrape config for the operator, from the chart's ServiceMonitor, with a
    reader's token (tests/scraping.py)."""
    from operator_reading import chart_objects
    from scraping import scrape_config

    monitor = next(o for o in chart_objects(cluster, "dt", OPERATOR_NS, "--set", "serviceMonitor.enabled=true")
                   if o["kind"] == "ServiceMonitor")
    token_file = tmp_path / f"{job_name}.token"
    token_file.write_text(metrics_token(cluster))
    return scrape_config(job_name, monitor["spec"]["endpoints"][0], token_file, **targets)


class Operator:
    """A running operator; `metrics()` scrapes its Prometheus endpoint with a reader's token."""

    def __init__(self, metrics_port: int, token: str):
        self.metrics_port, self.token = metrics_port, token

    def metrics(self) -> str:
        return scrape(self.metrics_port, self.token)

    def sample(self, name: str, **labels: str) -> float:
        """The value of one sample (0 when absent)."""
        from prometheus_client.parser import text_string_to_metric_families

        for family in text_string_to_metric_families(self.metrics()):
            for s in family.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return s.value
        return 0.0


@contextlib.contextmanager
def env_vars(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def operator(cluster, namespace, install_mode, request) -> Iterator[Operator]:
    """kopf's KopfRunner with our handlers, watching the test's namespace, as the
    operator's ServiceAccount (never as admin), once per install mode."""
    allow = request.node.get_closest_marker("rbac_refusals_expected") is not None
    with running_operator(cluster, namespace, install_mode[1], allow_forbidden=allow) as handle:
        yield handle


@contextlib.contextmanager
def running_operator(cluster, namespace: str, kubeconfig: str, allow_forbidden: bool = False,
                     **env: str) -> Iterator[Operator]:
    from kopf.testing import KopfRunner

    port = free_port()
    token = metrics_token(cluster)
    env = {**TEST_ENV, "KUBECONFIG": kubeconfig, "DISTTRAIN_OPERATOR_METRICS_PORT": str(port), **env}
    with env_vars(env):
        with KopfRunner(["run", "--standalone", "-n", namespace, "-m", "disttrain.operator.handlers"],
                        timeout=60) as runner:
            handle = Operator(port, token)
            cluster.wait_for(lambda: _answers(handle), timeout=30, what="operator metrics endpoint")
            yield handle
    assert runner.exception is None, runner.exception
    assert runner.exit_code == 0, runner.output[-3000:]
    # Least privilege: the operator must never have been refused by RBAC.
    if not allow_forbidden:
        assert "forbidden" not in runner.output.lower(), _forbidden_lines(runner.output)


def _answers(handle: Operator) -> bool:
    try:
        return "disttrain_operator_jobs" in handle.metrics()
    except OSError:
        return False


def _forbidden_lines(output: str) -> str:
    return "\n".join(line for line in output.splitlines() if "forbidden" in line.lower())[:3000]


def start_operator_process(namespace: str, kubeconfig: str, log: Path, *extra: str,
                           liveness: str = "", env: dict[str, str] | None = None) -> subprocess.Popen:
    """The real entry point (`python -m disttrain.operator`) in a child process."""
    env = {**os.environ, **TEST_ENV, "KUBECONFIG": kubeconfig, "DISTTRAIN_OPERATOR_METRICS_PORT": "0",
           "PYTHONPATH": os.pathsep.join([str(REPO / "operator"), str(REPO / "trainer")]), **(env or {})}
    handle = open(log, "ab")
    return subprocess.Popen([sys.executable, "-m", "disttrain.operator", "-n", namespace, "--liveness", liveness,
                             *extra], env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)


def kill(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    proc.wait(timeout=30)


# The coscheduling scheduler's name in the tests (its profile's schedulerName).
GANG_SCHEDULER = "disttrain-gang"


@pytest.fixture(scope="session")
def coscheduler(cluster, tmp_path_factory) -> Iterator[str]:
    """The coscheduling scheduler of scheduler-plugins (hack/build-tools.sh), with the
    PodGroup CRD of its release, as a second scheduler next to the cluster's own (its
    profile GANG_SCHEDULER, as an admin: it is a cluster component, not ours). Yields its
    schedulerName; stopped at the end of the session (and with this process)."""
    crd = cluster.bin_dir / "podgroups.scheduling.x-k8s.io.yaml"
    cluster.kubectl("apply", "-f", str(crd))
    cluster.wait_established("podgroups.scheduling.x-k8s.io")
    work = tmp_path_factory.mktemp("coscheduler")
    port = free_port()
    config = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
              "leaderElection": {"leaderElect": False}, "clientConnection": {"kubeconfig": cluster.kubeconfig},
              "profiles": [{"schedulerName": GANG_SCHEDULER, "plugins": {
                  "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
                  "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]}},
                  "pluginConfig": [{"name": "Coscheduling", "args": {"permitWaitingTimeSeconds": 10}}]}]}
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    log = open(work / "coscheduler.log", "wb")
    proc = subprocess.Popen([str(cluster.bin_dir / "coscheduler"), "--config", str(work / "config.yaml"),
                             "--secure-port", str(port), "--bind-address", "127.0.0.1", "--v=2"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=die_with_parent)  # gone with this process, killed or not
    try:
        cluster.wait_for(lambda: _healthy(port), timeout=60, what="the coscheduling scheduler healthy")
        yield GANG_SCHEDULER
    finally:
        kill(proc, signal.SIGTERM)
        log.close()


def _healthy(port: int) -> bool:
    import ssl

    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=2, context=context) as resp:
            return resp.status == 200
    except OSError:
        return False


# Kueue's waitForPodsReady timeout in the tests (its recoveryTimeout defaults to the same).
KUEUE_PODS_READY_TIMEOUT_SECONDS = 30


@pytest.fixture(scope="session")
def kueue(cluster, tmp_path_factory) -> Iterator[Path]:
    """Kueue's manager as a host process (tests/kueue_host.py), with a
    KUEUE_PODS_READY_TIMEOUT_SECONDS waitForPodsReady timeout, so a job whose PodsReady is
    never said is evicted within a test, and requeued at once. Yields its log file; stopped
    at the end of the session (and with this process)."""
    try:
        with kueue_host.running(cluster.bin_dir, cluster.kubeconfig, tmp_path_factory.mktemp("kueue"),
                                pods_ready_timeout=KUEUE_PODS_READY_TIMEOUT_SECONDS) as log:
            yield log
    except kueue_host.KueueFailed as failed:
        pytest.fail(str(failed), pytrace=False)


# ---- helpers for tests ----------------------------------------------------------------


CHECKPOINT_CLAIM = "shared-checkpoints"


@pytest.fixture(autouse=True)
def checkpoint_claim(cluster, namespace) -> Iterator[str]:
    """A bound ReadWriteMany claim in the test's namespace: jobs of several pods need one
    (checkpoint.claimName), and the scheduler places no pod whose claim is missing or
    unbound. A PersistentVolume pre-bound to it; pods on KWOK never mount it."""
    volume = f"{namespace}-checkpoints"
    cluster.apply({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
                   "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                            "storageClassName": "", "persistentVolumeReclaimPolicy": "Delete",
                            "claimRef": {"namespace": namespace, "name": CHECKPOINT_CLAIM},
                            "hostPath": {"path": "/nonexistent/disttrain-test"}}})
    cluster.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CHECKPOINT_CLAIM},
                   "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": volume,
                            "resources": {"requests": {"storage": "1Gi"}}}}, namespace=namespace)
    cluster.wait_for(lambda: (cluster.try_get("pvc", CHECKPOINT_CLAIM, namespace) or {}).get("status", {})
                     .get("phase") == "Bound", timeout=30, what="checkpoint claim bound")
    yield CHECKPOINT_CLAIM
    cluster.kubectl("delete", "pv", volume, "--wait=false", "--ignore-not-found", check=False)


def job_manifest(name: str, **spec: Any) -> dict:
    base = {"nodes": 2, "trainer": {"builtin": {"steps": 10}}, "checkpoint": {"claimName": CHECKPOINT_CLAIM}}
    return {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
            "metadata": {"name": name}, "spec": {**base, **spec}}


TEST_POOL = "disttrain.dev/test-pool"  # the label (and taint) of a test's own KWOK nodes


def kwok_node(name: str, labels: dict, capacity: dict, taints: list | None = None) -> dict:
    """A fake node of the test's own, run by KWOK: its hostname label, `labels`, `capacity`
    (allocatable too) and `taints`."""
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": name, **labels}},
            "status": {"capacity": capacity, "allocatable": capacity}}
    if taints:
        node["spec"] = {"taints": taints}
    return node


def gpu_node(name: str, pool: str) -> dict:
    """A node of one GPU in the test's pool (the gang tests count room a node at a time)."""
    return kwok_node(name, {TEST_POOL: pool, "type": "kwok-gang"},
                     {"cpu": "8", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "1"})


def get_job(cluster, namespace: str, name: str) -> dict:
    return cluster.get("dt", name, namespace)


def pods_of(cluster, namespace: str, job: str) -> list[dict]:
    import json

    out = cluster.kubectl("get", "pods", "-n", namespace, "-l", f"disttrain.dev/job={job}", "-o", "json").stdout
    return sorted(json.loads(out)["items"], key=lambda p: p["metadata"]["name"])


def wait_phase(cluster, namespace: str, name: str, phase: str, stall: float = 60,
               log: Path | None = None) -> dict:
    return wait_job(cluster, namespace, name, lambda job: (job.get("status") or {}).get("phase") == phase,
                    what=f"phase {phase}", stall=stall, log=log)


def wait_job(cluster, namespace: str, name: str, test: Any, *, what: str, stall: float = 60,
             log: Path | None = None) -> dict:
    """The job once `test(job)` holds; fails when the job has not changed for `stall`
    seconds (Cluster.wait_job). The failure shows the job's status and its pods (phase,
    readiness, IP), and the end of `log` where the test started its own operator process:
    enough to tell a slow operator from a stuck pod or a stuck operator."""
    def seen() -> str:
        job = cluster.try_get("dt", name, namespace) or {}
        pods = [{"name": p["metadata"]["name"], "phase": p.get("status", {}).get("phase"),
                 "ready": condition(p, "Ready"), "podIP": p.get("status", {}).get("podIP")}
                for p in pods_of(cluster, namespace, name)]
        tail = f"\noperator log (end):\n{log.read_text(errors='replace')[-4000:]}" if log else ""
        return dump({"status": job.get("status"), "pods": pods}) + tail

    return cluster.wait_job(namespace, name, test, what=what, stall=stall, interval=0.3, describe=seen)


def condition(job: dict, type_: str) -> dict | None:
    return next((c for c in job.get("status", {}).get("conditions", []) if c["type"] == type_), None)


def annotate_exit(cluster, namespace: str, pod: str, code: int) -> None:
    cluster.kubectl("annotate", "pod", pod, "-n", namespace, f"{cluster.EXIT_CODE_ANNOTATION}={code}",
                    "--overwrite")


def events_of(cluster, namespace: str, name: str) -> list[dict]:
    import json

    out = cluster.kubectl("get", "events", "-n", namespace, "--field-selector",
                          f"involvedObject.name={name}", "-o", "json").stdout
    return json.loads(out)["items"]


def dump(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False)[:4000]


# The trainer's status server, for tests of the operator's side of checkpoint-then-evict.
def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def holding_trainer():
    """(port, sink, start): the trainer's status server with /checkpoint, started by
    start(token) once the pod's UID is known, and a loop that holds at its current step,
    checkpointed, when a request comes."""
    from prometheus_client import CollectorRegistry

    from disttrain_trainer.drain import CheckpointRequest
    from disttrain_trainer.metrics import StatusSink
    from disttrain_trainer.status_server import Control, StatusServer

    port = free_port()
    sink, request, servers = StatusSink(), CheckpointRequest(), []
    done = threading.Event()

    def loop() -> None:
        while not done.wait(0.05):
            if request.pending():
                step = sink.doc["step"]
                with sink.lock:
                    sink.doc.update(heldAtStep=step, checkpoint={"step": step, "time": now(),
                                                                 "path": f"/checkpoints/step-{step:08d}"})
                request.taken()
                request.held.set()

    def start(token: str) -> None:
        servers.append(StatusServer(port, CollectorRegistry(), sink, Control(token=token, request=request)))

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield port, sink, start
    done.set()
    for server in servers:
        server.close()
