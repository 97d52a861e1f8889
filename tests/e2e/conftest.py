"""End-to-end tests on a real node: our images, run by a real kubelet and containerd.

``node_cluster`` (session scope) builds the images (``hack/images.sh build``, cached on
the Dockerfile, constraints and sources) and starts ``hack/cluster.sh up e2e-<pid>`` with
``DISTTRAIN_REAL_NODE=1`` and no fake nodes: every pod lands on the one real node,
``disttrain-node``, whose pods live on a bridge subnet that exists only on this machine
(docs/local-cluster.md, "The real node"). It needs root; if anything cannot start, the
tests FAIL with the log tail, they never skip.

The operator is installed the way a user installs it (``helm install`` of
charts/disttrain, or ``kubectl apply -k manifests/``), from our operator image, with
nothing patched. Every test here carries the markers ``cluster`` and ``e2e``.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from scraping import scrape_config



def _root_conftest():
    """tests/conftest.py as a module. Every conftest.py outside a package is imported as a
    top-level module named `conftest`, so `from conftest import ...` finds whichever one was
    imported last (tests/cluster/conftest.py when the whole suite runs): load it by path."""
    import importlib.util
    import sys

    path = Path(__file__).resolve().parents[1] / "conftest.py"
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) and Path(module.__file__).resolve() == path:
            return module
    spec = importlib.util.spec_from_file_location("disttrain_tests_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


_root = _root_conftest()
HACK, REPO, Cluster, start_cluster = _root.HACK, _root.REPO, _root.Cluster, _root.start_cluster
S3Server, tools_bin = _root.S3Server, _root.tools_bin

HERE = Path(__file__).resolve().parent
CHART = REPO / "charts" / "disttrain"
EXAMPLE = REPO / "manifests" / "examples" / "cpu-ddp-2x1.yaml"
NODE = "disttrain-node"
OPERATOR_NS = "disttrain-system"


# Modules that pull our images back from a registry run after every other e2e test. The
# pulled image is the very image the node was given (same image ID); once the test removes
# the pulled names, containerd's CRI stops resolving the given names until containerd
# restarts, and a later test's pod would try to pull ghcr.io/disttrain/... and fail.
PULL_BACK = ("test_registry_install.py",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.cluster)
            item.add_marker(pytest.mark.e2e)
    items.sort(key=lambda item: HERE in Path(str(item.path)).resolve().parents
               and Path(str(item.path)).name in PULL_BACK)  # stable: the rest keep their order


@pytest.fixture(scope="session")
def images() -> None:
    """Our operator and trainer images, built from the Dockerfile with buildah (cached)."""
    start = time.monotonic()
    proc = subprocess.run(["bash", str(HACK / "images.sh"), "build"], capture_output=True, text=True,
                          timeout=3600)
    if proc.returncode != 0:
        pytest.fail(f"hack/images.sh build failed:\n{proc.stderr[-6000:]}", pytrace=False)
    print(f"\n[e2e] images ready in {time.monotonic() - start:.0f}s")


@pytest.fixture(scope="session")
def node_cluster(request: pytest.FixtureRequest, images: None) -> Iterator[Cluster]:
    """A control plane plus the real node (no fake nodes), up for the whole session."""
    start = time.monotonic()
    env = {"DISTTRAIN_REAL_NODE": "1", "DISTTRAIN_FAKE_GPU_NODES": "0", "DISTTRAIN_FAKE_CPU_NODES": "0"}
    for handle in start_cluster(request, f"e2e-{os.getpid()}", env):
        print(f"\n[e2e] control plane and real node up in {time.monotonic() - start:.0f}s")
        yield handle


@pytest.fixture(scope="module")
def node_s3(node_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real S3 server (versitygw) where the real node's pods reach it: on the host's
    address on their bridge (hack/node.sh writes it to node/net.env). Nothing outside this
    machine can reach that subnet."""
    net = dict(line.split("=", 1) for line in
               (Path(node_cluster.state_dir) / "node" / "net.env").read_text().split())  # type: ignore[arg-type]
    server = S3Server(tools_bin(), tmp_path_factory.mktemp("node-s3") / "data", host=net["NODE_IP"])
    yield server
    server.stop()


@pytest.fixture
def ns(node_cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, deleted (and waited for) after it."""
    name = f"e2e-{request.node.name.removeprefix('test_').replace('_', '-')[:40]}".rstrip("-")
    node_cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    node_cluster.wait_for(
        lambda: node_cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
        timeout=30, what=f"ServiceAccount {name}/default")
    yield name
    # Trainer pods have a long grace period (an emergency checkpoint): end them at once so
    # the next test gets the node's CPUs.
    node_cluster.kubectl("delete", "dt", "--all", "-n", name, "--wait=false", check=False)
    node_cluster.kubectl("delete", "pods", "--all", "-n", name, "--grace-period=0", "--force", check=False)
    node_cluster.kubectl("delete", "namespace", name, "--ignore-not-found", "--timeout=180s", check=False,
                         timeout=200)


def helm(cluster: Cluster, *args: str, timeout: float = 300) -> str:
    proc = subprocess.run([str(cluster.bin_dir / "helm"), *args], capture_output=True, text=True,
                          env=cluster.env, timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}{proc.stdout}", pytrace=False)
    return proc.stdout


def operator_pods(cluster: Cluster, namespace: str = OPERATOR_NS) -> list[dict[str, Any]]:
    out = cluster.kubectl("get", "pods", "-n", namespace, "-l", "app.kubernetes.io/name=disttrain,"
                          "app.kubernetes.io/component=operator", "-o", "json").stdout
    return json.loads(out)["items"]


def wait_operator_ready(cluster: Cluster, namespace: str = OPERATOR_NS, timeout: float = 180) -> dict[str, Any]:
    """The operator pod on the real node, Ready (its probes pass), restarted at most never."""
    def ready() -> dict[str, Any] | None:
        for pod in operator_pods(cluster, namespace):
            conds = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
            if conds.get("Ready") == "True":
                return pod
        return None
    pod = cluster.wait_for(ready, timeout=timeout, interval=1, what=f"the operator pod Ready in {namespace}",
                           describe=lambda: describe_operator(cluster, namespace) + operator_log(cluster, namespace))
    assert pod["spec"]["nodeName"] == NODE
    return pod


def describe_operator(cluster: Cluster, namespace: str) -> str:
    return cluster.kubectl("describe", "pods", "-n", namespace, check=False).stdout[-3000:]


def operator_log(cluster: Cluster, namespace: str = OPERATOR_NS) -> str:
    return cluster.kubectl("logs", "-n", namespace, "-l", "app.kubernetes.io/component=operator",
                           "--tail=200", check=False).stdout


@pytest.fixture(scope="module")
def chart_operator(node_cluster: Cluster) -> Iterator[str]:
    """The chart installed with its default values, for the training scenarios of one module."""
    helm(node_cluster, "install", "disttrain", str(CHART), "-n", OPERATOR_NS, "--create-namespace", "--wait=false")
    wait_operator_ready(node_cluster)
    yield OPERATOR_NS
    helm(node_cluster, "uninstall", "disttrain", "-n", OPERATOR_NS, "--wait", "--timeout=120s")
    node_cluster.kubectl("delete", "namespace", OPERATOR_NS, "--ignore-not-found", "--timeout=120s",
                         check=False, timeout=150)


# --- jobs -----------------------------------------------------------------------

def example_job(**spec: Any) -> dict[str, Any]:
    """The shipped CPU example, with ``spec`` fields replaced (checkpoint merged)."""
    job = yaml.safe_load(EXAMPLE.read_text())
    for key, value in spec.items():
        if isinstance(value, dict) and isinstance(job["spec"].get(key), dict):
            job["spec"][key] = {**job["spec"][key], **value}
        else:
            job["spec"][key] = value
    return job


def shared_checkpoints(cluster: Cluster, namespace: str, claim: str = "checkpoints") -> str:
    """A ReadWriteMany claim bound to a directory on the real node (a hostPath PV, uid 1000)."""
    path = Path(cluster.state_dir) / "node" / "volumes" / namespace
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, 1000, 1000)
    cluster.apply([
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{namespace}-{claim}"},
         "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                  "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "",
                  "claimRef": {"namespace": namespace, "name": claim},
                  "hostPath": {"path": str(path), "type": "Directory"}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": namespace},
         "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": f"{namespace}-{claim}",
                  "resources": {"requests": {"storage": "1Gi"}}}},
    ])
    return claim


def job(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return cluster.get("dt", name, namespace)


def wait_job(cluster: Cluster, namespace: str, name: str, what: str, predicate, stall: float = 600) -> dict[str, Any]:
    """The job once `predicate(job)` holds; fails when the job stops moving (no new phase,
    step, worker, condition or checkpoint for `stall` seconds), showing its status, pods
    and the operator's log."""
    def story() -> str:
        return "\n".join([json.dumps(job(cluster, namespace, name).get("status", {}), indent=1),
                          cluster.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout,
                          operator_log(cluster)[-4000:]])
    return cluster.wait_job(namespace, name, predicate, what=what, stall=stall, describe=story)


def phase(obj: dict[str, Any]) -> str | None:
    return obj.get("status", {}).get("phase")


def worker_pods(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("get", "pods", "-n", namespace, "-l", f"disttrain.dev/job={name}", "-o", "json").stdout
    return json.loads(out)["items"]


def job_story(cluster: Cluster, namespace: str, name: str) -> str:
    """What a failed assertion needs to be understood without a rerun: the job's status,
    each worker pod's containers (restarts, exits, times) and log, the namespace's events,
    the operator's lines about the job."""
    pods = worker_pods(cluster, namespace, name)
    parts = [json.dumps(job(cluster, namespace, name).get("status", {}), indent=1)]
    for pod in pods:
        meta, status = pod["metadata"], pod.get("status", {})
        containers = [{k: c.get(k) for k in ("name", "restartCount", "state", "lastState")}
                      for c in status.get("containerStatuses", [])]
        parts.append(f"pod {meta['name']} uid {meta['uid']} created {meta['creationTimestamp']} "
                     f"phase {status.get('phase')}: {json.dumps(containers)}")
        parts.append(cluster.kubectl("logs", "-n", namespace, meta["name"], "--timestamps", "--tail=40",
                                     check=False).stdout)
    parts.append(cluster.kubectl("get", "events", "-n", namespace, "--sort-by=.lastTimestamp", check=False).stdout)
    parts += [line for line in operator_log(cluster).splitlines() if name in line][-40:]
    return "\n".join(parts)


# --- Prometheus -----------------------------------------------------------------

class Prometheus:
    """A real Prometheus on loopback (its API); targets from ``discovered_targets``."""

    def __init__(self, port: int, proc: subprocess.Popen):
        self.port = port
        self.proc = proc

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.loads(response.read())["data"]["result"]
        except OSError:
            return []


@functools.cache
def _monitors(helm_binary: str, env: tuple[tuple[str, str], ...]) -> tuple[dict, dict]:
    out = subprocess.run([helm_binary, "template", "disttrain", str(CHART), "-n", OPERATOR_NS,
                          "--set", "serviceMonitor.enabled=true", "--set", "podMonitor.enabled=true"],
                         capture_output=True, text=True, env=dict(env), check=True).stdout
    specs = {d["kind"]: d["spec"] for d in yaml.safe_load_all(out) if d and d["kind"].endswith("Monitor")}
    return specs["ServiceMonitor"], specs["PodMonitor"]


def monitors(cluster: Cluster) -> tuple[dict, dict]:
    """The specs of the ServiceMonitor and PodMonitor the chart renders with monitoring on."""
    return _monitors(str(cluster.bin_dir / "helm"), tuple(sorted(cluster.env.items())))


def label_selector(selector: dict) -> str:
    assert not selector.get("matchExpressions"), "only matchLabels are read here"
    return ",".join(f"{k}={v}" for k, v in selector["matchLabels"].items())


def discovered_targets(cluster: Cluster) -> dict[str, list[dict[str, Any]]]:
    """What the chart's ServiceMonitor and PodMonitor would scrape, read from the API server.

    Debian's Prometheus is built without Kubernetes service discovery, so the test does
    what Prometheus Operator would: the endpoints (EndpointSlices) of every Service the
    ServiceMonitor's selector matches, on its endpoint's port, and every running pod the
    PodMonitor's selector matches, on its endpoint's container port. The selectors and
    ports are the chart's own (``monitors``), so a monitor that selects nothing scrapes
    nothing here too.
    """
    service_monitor, pod_monitor = monitors(cluster)
    slices = json.loads(cluster.kubectl("get", "endpointslices", "-A", "-o", "json", check=False).stdout or "{}")
    services = json.loads(cluster.kubectl("get", "services", "-A", "-l", label_selector(service_monitor["selector"]),
                                          "-o", "json", check=False).stdout or "{}")
    operator_services = {(s["metadata"]["namespace"], s["metadata"]["name"]) for s in services.get("items", [])}
    operator = []
    for item in slices.get("items", []):
        key = (item["metadata"]["namespace"], item["metadata"].get("labels", {}).get("kubernetes.io/service-name"))
        ports = [p["port"] for p in item.get("ports") or [] if p.get("name") == service_monitor["endpoints"][0]["port"]]
        if key not in operator_services or not ports:
            continue
        for endpoint in item.get("endpoints") or []:
            if endpoint.get("conditions", {}).get("ready"):
                operator += [{"targets": [f"{address}:{ports[0]}"],
                              "labels": {"service": key[1], "service_namespace": key[0]}}
                             for address in endpoint["addresses"]]
    pods = json.loads(cluster.kubectl("get", "pods", "-A", "-l", label_selector(pod_monitor["selector"]),
                                      "--field-selector=status.phase=Running", "-o", "json", check=False).stdout
                      or "{}")
    trainers = []
    for pod in pods.get("items", []):
        for container in pod["spec"]["containers"]:
            for port in container.get("ports", []):
                if port.get("name") == pod_monitor["podMetricsEndpoints"][0]["port"] and pod["status"].get("podIP"):
                    trainers.append({"targets": [f"{pod['status']['podIP']}:{port['containerPort']}"],
                                     "labels": {"scraped_pod": pod["metadata"]["name"]}})
    return {"operator": operator, "trainers": trainers}


# Prometheus's account: the chart's metrics.readers names it (READERS) where a test
# scrapes the operator.
PROMETHEUS_SA = ("monitoring", "prometheus")
READERS = ["--set-json", f'metrics.readers=[{{"kind": "ServiceAccount", "namespace": "{PROMETHEUS_SA[0]}", '
           f'"name": "{PROMETHEUS_SA[1]}"}}]']


def prometheus_token(cluster: Cluster) -> str:
    namespace, name = PROMETHEUS_SA
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    cluster.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}})
    return cluster.kubectl("create", "token", name, "-n", namespace, "--duration=2h").stdout.strip()


@pytest.fixture
def prometheus(node_cluster: Cluster, tmp_path: Path) -> Iterator[Prometheus]:
    """A real Prometheus scraping what the chart's Service and the worker pods expose.

    Targets come from ``discovered_targets`` (refreshed every second into file_sd files,
    which Prometheus watches), under the jobs ``disttrain-operator`` and ``disttrain-trainers``.
    """
    import threading

    from disttrain.local.ports import free_port
    binary = shutil.which("prometheus")
    assert binary, "prometheus missing: hack/ensure-promtool.sh installs Debian's prometheus package"
    port = free_port()
    files = {name: tmp_path / f"{name}.json" for name in ("operator", "trainers")}
    for path in files.values():
        path.write_text("[]")
    # The operator as the chart's ServiceMonitor has it scraped (HTTPS, Prometheus's own
    # token: here the token of PROMETHEUS_SA, which the installs name in metrics.readers).
    token = tmp_path / "prometheus.token"
    token.write_text(prometheus_token(node_cluster))
    service_monitor, pod_monitor = monitors(node_cluster)
    config = {"global": {"scrape_interval": "2s"}, "scrape_configs": [
        scrape_config("disttrain-operator", service_monitor["endpoints"][0], token,
                      file_sd_configs=[{"files": [str(files["operator"])], "refresh_interval": "1s"}]),
        scrape_config("disttrain-trainers", pod_monitor["podMetricsEndpoints"][0], token,
                      file_sd_configs=[{"files": [str(files["trainers"])], "refresh_interval": "1s"}])]}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    stop = threading.Event()

    def discover() -> None:
        while not stop.is_set():
            for name, targets in discovered_targets(node_cluster).items():
                tmp = files[name].with_suffix(".tmp")
                tmp.write_text(json.dumps(targets))
                tmp.replace(files[name])
            stop.wait(1)

    discovery = threading.Thread(target=discover, daemon=True)
    discovery.start()
    proc = subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"),
                            start_new_session=True)
    try:
        yield Prometheus(port, proc)
    finally:
        stop.set()
        discovery.join(timeout=30)
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Registry:
    """The CNCF distribution registry (`registry serve`, hack/tools/registry) on a free port,
    storing under `root`, over plain HTTP; images are named 127.0.0.1:PORT/... (`host`).
    `listen`: the address it serves on (0.0.0.0 where kind's nodes reach it through their
    gateway). It dies with the test process (PR_SET_PDEATHSIG): a killed run leaves no
    server behind."""

    def __init__(self, root: Path, listen: str = "127.0.0.1") -> None:
        with socket.socket() as s:
            s.bind((listen, 0))
            port = s.getsockname()[1]
        self.host = f"127.0.0.1:{port}"
        root.mkdir(parents=True)
        config = root / "config.yml"
        config.write_text(yaml.safe_dump({
            "version": 0.1, "log": {"level": "warn"}, "http": {"addr": f"{listen}:{port}"},
            "storage": {"filesystem": {"rootdirectory": str(root / "data")}, "delete": {"enabled": True}}}))
        self.log = root / "registry.log"
        libc = ctypes.CDLL(None, use_errno=True)
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen([str(tools_bin() / "registry"), "serve", str(config)],
                                         stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=lambda: libc.prctl(1, signal.SIGKILL))  # PR_SET_PDEATHSIG
        deadline = time.monotonic() + 60
        while True:
            try:
                if self.get("/v2/") == {}:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"the registry did not start on {self.host}:\n{self.log.read_text()[-3000:]}",
                            pytrace=False)
            time.sleep(0.2)

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(f"http://{self.host}{path}", timeout=10) as reply:
            return json.loads(reply.read() or b"{}")

    def digest(self, repository: str, tag: str) -> str:
        """The manifest digest the registry serves for repository:tag."""
        accept = ", ".join(("application/vnd.oci.image.manifest.v1+json",
                            "application/vnd.docker.distribution.manifest.v2+json"))
        request = urllib.request.Request(f"http://{self.host}/v2/{repository}/manifests/{tag}", method="HEAD",
                                         headers={"Accept": accept})
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.headers["Docker-Content-Digest"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


def pulled(cluster, namespace: str, pod: str, image: str) -> bool:
    """The kubelet's Pulled event for this pod says it pulled `image` (not "already present")."""
    out = cluster.kubectl("get", "events", "-n", namespace, "--field-selector",
                          f"involvedObject.name={pod},reason=Pulled", "-o", "json").stdout
    return any(f'Successfully pulled image "{image}"' in e.get("message", "") for e in json.loads(out)["items"])
