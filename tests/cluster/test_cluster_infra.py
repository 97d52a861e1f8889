"""The local control plane itself: scheduling onto fake GPU nodes, garbage
collection, RBAC via ServiceAccount tokens, the KWOK test annotations, and
server-side dry-run of every manifest under manifests/."""

from __future__ import annotations

import http.server
import json
import os
import re
import signal
import subprocess
import threading
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from conftest import Cluster  # tests/conftest.py; not importable at run time

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
SWEEPS = MANIFESTS / "examples" / "sweeps"
EXIT_CODE_ANNOTATION = "disttrain.dev/test-exit-code"
POD_IP_ANNOTATION = "disttrain.dev/test-pod-ip"


def pod(name: str, *, gpus: int = 0, cpu: str = "1", annotations: dict[str, str] | None = None,
        owner: dict[str, Any] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    meta: dict[str, Any] = {"name": name, "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "trainer", "image": "registry.invalid/disttrain:test",
                            "resources": resources}],
        },
    }


def phase_of(cluster: Cluster, name: str, ns: str) -> str:
    return cluster.get("pod", name, ns).get("status", {}).get("phase", "")


def wait_phase(cluster: Cluster, name: str, ns: str, phase: str, timeout: float = 30) -> dict[str, Any]:
    return cluster.wait_for(
        lambda: (p := cluster.get("pod", name, ns)).get("status", {}).get("phase") == phase and p,
        timeout=timeout, what=f"pod {ns}/{name} phase {phase}",
    )


@pytest.mark.cluster
def test_server_reports_pinned_release(cluster: Cluster) -> None:
    gomod = (REPO / "hack/tools/kubernetes/go.mod").read_text()
    pinned = re.search(r"^require k8s\.io/kubernetes (v\S+)( // indirect)?$", gomod, re.M).group(1)
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == pinned
    assert version["clientVersion"]["gitVersion"] == pinned


@pytest.mark.cluster
def test_fake_nodes_advertise_gpus(cluster: Cluster) -> None:
    nodes = json.loads(cluster.kubectl("get", "nodes", "-l", "type=kwok", "-o", "json").stdout)["items"]
    gpu = [n for n in nodes if n["metadata"]["labels"].get("disttrain.dev/fake-node") == "gpu"]
    cpu = [n for n in nodes if n["metadata"]["labels"].get("disttrain.dev/fake-node") == "cpu"]
    assert gpu and cpu
    for n in gpu:
        assert n["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert n["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
    for n in cpu:
        assert "nvidia.com/gpu" not in n["status"]["allocatable"]
    for n in nodes:
        ready = {c["type"]: c["status"] for c in n["status"]["conditions"]}["Ready"]
        assert ready == "True", n["metadata"]["name"]


@pytest.mark.cluster
def test_fake_nodes_renew_their_leases_so_they_stay_ready_all_session(cluster: Cluster) -> None:
    """The node lifecycle controller judges a node by its Lease: KWOK must renew one per
    fake node, or 5 minutes into the session every node turns Unknown and its pods
    NotReady for good. Two reads of each Lease: its renewTime moves."""
    def renewals() -> dict[str, str]:
        leases = json.loads(cluster.kubectl("get", "leases", "-n", "kube-node-lease", "-o", "json").stdout)["items"]
        return {lease["metadata"]["name"]: lease["spec"]["renewTime"] for lease in leases}

    nodes = set(cluster.kubectl("get", "nodes", "-l", "type=kwok", "-o", "name").stdout.split())
    first = renewals()
    assert {f"node/{name}" for name in first} >= nodes
    cluster.wait_for(lambda: all(renewals()[n.removeprefix("node/")] != first[n.removeprefix("node/")] for n in nodes),
                     timeout=120, what="every fake node's Lease renewed")


@pytest.mark.cluster
def test_gpu_pod_is_scheduled_to_gpu_node_and_runs(cluster: Cluster, namespace: str) -> None:
    cluster.apply(pod("gpu8", gpus=8), namespace=namespace)
    p = wait_phase(cluster, "gpu8", namespace, "Running")
    node = cluster.get("node", p["spec"]["nodeName"])
    assert node["metadata"]["labels"]["disttrain.dev/fake-node"] == "gpu"
    statuses = p["status"]["containerStatuses"]
    assert [s["name"] for s in statuses] == ["trainer"]
    assert "running" in statuses[0]["state"] and statuses[0]["ready"] is True
    assert p["status"]["podIP"]


@pytest.mark.cluster
def test_pod_wanting_more_gpus_than_any_node_stays_pending(cluster: Cluster, namespace: str) -> None:
    cluster.apply(pod("gpu9", gpus=9), namespace=namespace)

    def unschedulable() -> dict[str, Any] | None:
        st = cluster.get("pod", "gpu9", namespace).get("status", {})
        conds = [c for c in st.get("conditions", []) if c["type"] == "PodScheduled"]
        return conds[0] if conds and conds[0]["status"] == "False" else None

    cond = cluster.wait_for(unschedulable, timeout=30, what="PodScheduled=False")
    assert cond["reason"] == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in cond["message"]
    events = cluster.wait_for(
        lambda: [e for e in json.loads(cluster.kubectl(
            "get", "events", "-n", namespace, "--field-selector", "involvedObject.name=gpu9",
            "-o", "json").stdout)["items"] if e["reason"] == "FailedScheduling"],
        timeout=30, what="FailedScheduling event",
    )
    assert "Insufficient nvidia.com/gpu" in events[0]["message"]
    p = cluster.get("pod", "gpu9", namespace)
    assert p["status"]["phase"] == "Pending" and not p["spec"].get("nodeName")


@pytest.mark.cluster
def test_garbage_collector_deletes_owned_pods(cluster: Cluster, namespace: str) -> None:
    cluster.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}},
                  namespace=namespace)
    uid = cluster.get("configmap", "owner", namespace)["metadata"]["uid"]
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid,
             "controller": True, "blockOwnerDeletion": True}
    cluster.apply([pod(f"owned-{i}", owner=owner) for i in range(3)] + [pod("bystander")],
                  namespace=namespace)
    for i in range(3):
        wait_phase(cluster, f"owned-{i}", namespace, "Running")

    cluster.kubectl("delete", "configmap", "owner", "-n", namespace, "--cascade=background")

    def pods() -> list[str]:
        out = cluster.kubectl("get", "pods", "-n", namespace, "-o", "name").stdout
        return sorted(out.split())

    cluster.wait_for(lambda: pods() == ["pod/bystander"], timeout=60, what="owned pods collected")


@pytest.mark.cluster
def test_exit_code_annotation_patched_on_running_pod_fails_it(cluster: Cluster, namespace: str) -> None:
    cluster.apply(pod("worker"), namespace=namespace)
    wait_phase(cluster, "worker", namespace, "Running")
    cluster.kubectl("annotate", "pod", "worker", "-n", namespace, f"{EXIT_CODE_ANNOTATION}=3")
    p = wait_phase(cluster, "worker", namespace, "Failed")
    (status,) = p["status"]["containerStatuses"]
    assert status["state"]["terminated"]["exitCode"] == 3
    assert status["state"]["terminated"]["reason"] == "Error"
    assert status["ready"] is False


@pytest.mark.cluster
def test_exit_code_zero_at_creation_succeeds(cluster: Cluster, namespace: str) -> None:
    cluster.apply(pod("done", gpus=8, annotations={EXIT_CODE_ANNOTATION: "0"}), namespace=namespace)
    p = wait_phase(cluster, "done", namespace, "Succeeded")
    assert p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert p["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"


@pytest.mark.cluster
def test_pod_ip_annotation_points_at_loopback_server(cluster: Cluster, namespace: str) -> None:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            body = b'{"step": 7}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cluster.apply(pod("loopback", annotations={POD_IP_ANNOTATION: "127.0.0.1"}), namespace=namespace)
        p = wait_phase(cluster, "loopback", namespace, "Running")
        assert p["status"]["podIP"] == "127.0.0.1"
        assert p["status"]["podIPs"] == [{"ip": "127.0.0.1"}]
        url = f"http://{p['status']['podIP']}:{server.server_address[1]}/status"
        with urllib.request.urlopen(url, timeout=5) as resp:
            assert json.load(resp) == {"step": 7}
    finally:
        server.shutdown()


@pytest.mark.cluster
def test_service_account_kubeconfig_has_exactly_its_rbac(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("create", "serviceaccount", "operator", "-n", namespace)
    kc = cluster.kubeconfig_for_service_account(namespace, "operator")
    who = cluster.kubectl("auth", "whoami", "-o", "json", kubeconfig=kc)
    assert json.loads(who.stdout)["status"]["userInfo"]["username"] == \
        f"system:serviceaccount:{namespace}:operator"
    denied = cluster.kubectl("get", "pods", "-n", namespace, kubeconfig=kc, check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower()

    cluster.kubectl("create", "role", "pod-reader", "-n", namespace, "--verb=get,list", "--resource=pods")
    cluster.kubectl("create", "rolebinding", "operator-reads", "-n", namespace, "--role=pod-reader",
                    f"--serviceaccount={namespace}:operator")
    cluster.wait_for(
        lambda: cluster.kubectl("get", "pods", "-n", namespace, kubeconfig=kc, check=False).returncode == 0,
        timeout=10, what="RoleBinding to take effect",
    )
    assert cluster.kubectl("get", "pods", "-n", "default", kubeconfig=kc, check=False).returncode != 0


# --- manifests/ -----------------------------------------------------------


def manifest_files() -> list[Path]:
    """Every *.yaml / *.yml under manifests/, recursively, except helm chart
    templates (rendered through `helm template` instead)."""
    if not MANIFESTS.is_dir():
        return []
    charts = [p.parent for p in MANIFESTS.rglob("Chart.yaml")]
    return sorted(
        p for p in MANIFESTS.rglob("*")
        if p.is_file() and p.suffix in (".yaml", ".yml")
        and not any(c in p.parents or p.parent == c for c in charts)
        and SWEEPS not in p.parents  # `disttrain sweep` files, not Kubernetes objects (test_sweep_spec)
    )


def load_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def dry_run(cluster: Cluster, *args: str, input: str | None = None) -> str | None:
    """Server-side dry-run apply; the error text, or None when accepted."""
    proc = cluster.kubectl("apply", "--dry-run=server", *args, input=input, check=False)
    return None if proc.returncode == 0 else (proc.stderr or proc.stdout).strip()


@pytest.mark.cluster
def test_dry_run_check_rejects_an_invalid_manifest(cluster: Cluster, tmp_path: Path) -> None:
    """Negative control for the manifests test: the same check catches errors."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"apiVersion": "apps/v1", "kind": "Deployment",
                                   "metadata": {"name": "Not_A_DNS_Name"},
                                   "spec": {"selector": {}, "template": {}}}))
    assert dry_run(cluster, "-f", str(bad)) is not None


@pytest.mark.cluster
def test_every_manifest_passes_server_side_dry_run(cluster: Cluster) -> None:
    """kubectl apply --dry-run=server of every manifest under manifests/.

    CRDs found there are installed for real first (then removed if this test
    created them), so the custom resources (examples) can be checked; the
    namespaces the manifests use are created for the test likewise.
    Kustomizations are checked with -k, helm charts through `helm template`.
    """
    files = manifest_files()
    docs = {f: load_docs(f) for f in files}
    created: list[tuple[str, str]] = []

    def ensure(kind: str, name: str, manifest: dict[str, Any]) -> None:
        if cluster.try_get(kind, name) is None:
            cluster.apply(manifest, "--server-side", "--force-conflicts")
            created.append((kind, name))

    errors: dict[str, str] = {}
    checked = 0
    try:
        for f, ds in docs.items():
            for d in ds:
                if d.get("kind") == "CustomResourceDefinition":
                    err = dry_run(cluster, "--server-side", "-f", "-", input=yaml.safe_dump(d))
                    if err:
                        errors[f"{f.relative_to(REPO)} (CRD {d['metadata']['name']})"] = err
                        continue
                    ensure("customresourcedefinition", d["metadata"]["name"], d)
                    cluster.wait_established(d["metadata"]["name"])
                namespaces = {d.get("metadata", {}).get("namespace")} - {None}
                if d.get("kind") == "Namespace":
                    namespaces.add(d["metadata"]["name"])
                for ns in namespaces:
                    ensure("namespace", ns, {"apiVersion": "v1", "kind": "Namespace",
                                             "metadata": {"name": ns}})

        for f, ds in docs.items():
            rel = str(f.relative_to(REPO))
            if f.name in ("kustomization.yaml", "kustomization.yml"):
                err = dry_run(cluster, "--server-side", "-k", str(f.parent))
            elif not ds:
                err = None  # comments only
            else:
                # --server-side: CRDs are too large for client-side apply's annotation.
                err = dry_run(cluster, "--server-side", "-f", str(f))
            checked += 1
            if err:
                errors[rel] = err

        for chart in sorted(p.parent for p in MANIFESTS.rglob("Chart.yaml")):
            rel = str(chart.relative_to(REPO))
            proc = subprocess.run(
                [str(cluster.bin_dir / "helm"), "template", "disttrain", str(chart)],
                capture_output=True, text=True, env=cluster.env,
            )
            checked += 1
            if proc.returncode != 0:
                errors[rel] = proc.stderr
            elif err := dry_run(cluster, "--server-side", "-f", "-", input=proc.stdout):
                errors[rel] = err
    finally:
        # Wait, so a later test installing the same CRD/namespace does not
        # race with its termination.
        for kind, name in reversed(created):
            cluster.kubectl("delete", kind, name, "--ignore-not-found", "--timeout=90s", check=False)

    assert not errors, "server-side dry-run rejected:\n" + "\n".join(f"{k}: {v}" for k, v in errors.items())
    charts = list(MANIFESTS.rglob("Chart.yaml")) if MANIFESTS.is_dir() else []
    assert checked == len(files) + len(charts)


# --- hack/cluster.sh itself -------------------------------------------------


def running(pid: int) -> bool:
    """Alive and not a zombie (PID 1 in a container may not reap)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.cluster
@pytest.mark.slow
def test_second_cluster_runs_side_by_side_and_dies_with_its_owner(cluster: Cluster, tmp_path: Path) -> None:
    """Two clusters at once (own ports, own state), and the reaper: when the
    process that started a cluster dies, every component is stopped and the
    state removed, as after a killed test run."""
    owner = subprocess.Popen(["sleep", "600"])
    state = tmp_path / "second"
    env = {**os.environ, "DISTTRAIN_CLUSTER_DIR": str(state), "DISTTRAIN_CLUSTER_OWNER_PID": str(owner.pid),
           "DISTTRAIN_FAKE_GPU_NODES": "1", "DISTTRAIN_FAKE_CPU_NODES": "0"}
    name = f"pytest-second-{os.getpid()}"
    try:
        up = subprocess.run(["bash", str(REPO / "hack/cluster.sh"), "up", name], env=env,
                            capture_output=True, text=True, timeout=300)
        assert up.returncode == 0, up.stderr
        assert up.stdout.strip() == f"export KUBECONFIG={state}/kubeconfig"
        pids = [int(p.read_text()) for p in (state / "pids").glob("*.pid")]
        assert len(pids) == 6  # 5 components + reaper

        second = cluster.kubectl("get", "nodes", "-o", "name", kubeconfig=str(state / "kubeconfig")).stdout
        assert second.split() == ["node/kwok-gpu-0"]
        first = cluster.kubectl("get", "nodes", "-o", "name").stdout
        assert "node/kwok-gpu-0" in first.split() and len(first.split()) > 1
        ports = (state / "ports").read_text()
        assert ports != (Path(cluster.state_dir) / "ports").read_text() if cluster.state_dir else True

        owner.send_signal(signal.SIGKILL)
        owner.wait()

        def all_gone() -> bool:
            return not any(running(pid) for pid in pids) and not state.exists()

        cluster.wait_for(all_gone, timeout=30, what="second cluster reaped")
    finally:
        owner.kill()
        subprocess.run(["bash", str(REPO / "hack/cluster.sh"), "down", name], env=env,
                       capture_output=True, timeout=60)


def processes_naming(text: str) -> list[int]:
    """PIDs of running processes whose command line contains text."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and text in (proc / "cmdline").read_bytes().decode(errors="replace") \
                    and running(int(proc.name)):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.cluster
@pytest.mark.slow
def test_a_cluster_whose_owner_dies_while_it_starts_is_torn_down(cluster: Cluster, tmp_path: Path) -> None:
    """The owner and `up` killed while `up` is still starting components (a test run
    interrupted in its first seconds: `up` dies with it, of SIGPIPE on its closed stderr or
    with its process group): nothing of that cluster runs on and its state is gone. The
    reaper used to start last, so such a cluster ran on, ownerless."""
    owner = subprocess.Popen(["sleep", "600"])
    state = tmp_path / "orphan"
    env = {**os.environ, "DISTTRAIN_CLUSTER_DIR": str(state), "DISTTRAIN_CLUSTER_OWNER_PID": str(owner.pid),
           "DISTTRAIN_FAKE_GPU_NODES": "1", "DISTTRAIN_FAKE_CPU_NODES": "0"}
    name = f"pytest-orphan-{os.getpid()}"
    up = subprocess.Popen(["bash", str(REPO / "hack/cluster.sh"), "up", name], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        cluster.wait_for(lambda: (state / "pids" / "etcd.pid").exists() or up.poll() is not None,
                         timeout=120, what="up to start etcd")
        assert up.poll() is None, "up ended before it started etcd"
        up.send_signal(signal.SIGKILL)
        owner.send_signal(signal.SIGKILL)
        up.wait()
        owner.wait()
        cluster.wait_for(lambda: not state.exists() and not processes_naming(str(state)), timeout=60,
                         what="the orphaned cluster to be torn down",
                         describe=lambda: f"state {'left' if state.exists() else 'gone'}, "
                                          f"processes {processes_naming(str(state))}")
    finally:
        owner.kill()
        up.kill()
        subprocess.run(["bash", str(REPO / "hack/cluster.sh"), "down", name], env=env,
                       capture_output=True, timeout=60)
