"""kind: what `make kind-up` gives a user, run as shipped. A two-node cluster of Docker
containers (hack/kind.sh: a control plane and a worker, both running pods), our images
loaded into both, the chart installed as shipped, and the CPU example trained across the
two nodes, so that rendezvous, gloo traffic and DNS cross a real node boundary; then
`make kind-down` leaves nothing of it on this machine.

Here (no registry, no Docker engine) hack/kind.sh takes its `local` path: the node image
from hack/kind/node-image.sh, a private dockerd (hack/kind/dockerd.sh), our images
streamed from buildah. Its own group in `make test` (hack/test_groups.py): it owns that
dockerd, and shares nothing with the real node of the other e2e tests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import EXAMPLE, HACK, OPERATOR_NS, REPO, Cluster, Registry, pulled, tools_bin

KIND = HACK / "kind.sh"
NAME = "disttrain"
NODES = {f"{NAME}-control-plane", f"{NAME}-worker"}
DOCKER_RUN = Path("/run/disttrain-docker")


def kind_env() -> dict[str, str]:
    env = {**os.environ, "PATH": f"{tools_bin()}:{os.environ['PATH']}", "DISTTRAIN_KIND_NAME": NAME}
    env.pop("KUBECONFIG", None)
    return env


def kind(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(KIND), *args], capture_output=True, text=True, env=kind_env(), timeout=timeout)


def host_state() -> dict[str, Any]:
    """What kind-up may change on this machine and kind-down must put back. Only what is ours
    by name: the real node of the other e2e tests adds and removes its own veths, rules and
    mounts beside it."""
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    mounts = Path("/proc/self/mounts").read_text()
    return {
        "dockerd": subprocess.run(["pgrep", "-f", "dockerd --host unix:///run/disttrain-docker"],
                                  capture_output=True, text=True).stdout.split(),
        # kind's network bridge and the nodes' veths on it
        "links": sorted(line.split(": ")[1].split("@")[0] for line in links.splitlines()
                        if "dtkind0" in line),
        "rules": sorted(line for line in rules.splitlines() if "DOCKER" in line or "dtkind0" in line
                        or "198.19.255." in line),
        "mounts": sorted(line.split()[1] for line in mounts.splitlines()
                         if "/disttrain-docker" in line or "/kind/docker" in line),
        "lib_modules": os.path.exists("/lib/modules"),
        "run_dir": DOCKER_RUN.exists(),
    }


@pytest.fixture(scope="module")
def kind_cluster() -> Iterator[Cluster]:
    before = host_state()
    up = kind("up", timeout=3600)
    if up.returncode != 0:
        down = kind("down", timeout=600)
        pytest.fail(f"hack/kind.sh up failed (rc {up.returncode}):\n{up.stderr[-6000:]}\n"
                    f"down: {down.stderr[-2000:]}", pytrace=False)
    kubeconfig = up.stdout.strip().splitlines()[-1].removeprefix("export KUBECONFIG=")
    cluster = Cluster(name=f"kind-{NAME}", kubeconfig=kubeconfig, state_dir=None, bin_dir=tools_bin())
    cluster.before = before  # type: ignore[attr-defined]
    yield cluster
    kind("down", timeout=600)


def worker_pods(cluster: Cluster, job: str) -> list[dict[str, Any]]:
    pods = json.loads(cluster.kubectl("get", "pods", "-l", f"disttrain.dev/job={job}", "-o", "json").stdout)
    return pods["items"]


def spread_example(steps: int, name: str | None = None) -> dict[str, Any]:
    """The shipped CPU example, longer, with one worker per node (a required pod anti-affinity
    in spec.scheduling, as a user spreads workers): on two nodes, the two land on both."""
    job = yaml.safe_load(EXAMPLE.read_text())
    job["metadata"]["name"] = name or job["metadata"]["name"]
    job["spec"]["trainer"]["builtin"]["steps"] = steps
    selector = {"matchLabels": {"disttrain.dev/job": job["metadata"]["name"]}}
    job["spec"]["scheduling"] = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}]}}}
    return job


# the cluster's setup (kind-up: minutes, more with the node image to build) counts in this
# test's time, and beside three other groups the training runs several times slower
@pytest.mark.timeout(2400)
def test_the_cpu_example_trains_across_two_kind_nodes_and_resumes_after_a_worker_is_deleted(kind_cluster):
    """Both nodes Ready and the chart's operator Running from the loaded image; the example's two
    workers run one on each node and rendezvous across them; the worker on the second node,
    deleted after a checkpoint, comes back and resumes from the shared checkpoint (a claim bound
    to one host directory mounted into both nodes); the job Succeeds at exactly its steps, and
    `disttrain logs` reads both workers through their two kubelets."""
    cluster = kind_cluster
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    assert {n["metadata"]["name"] for n in nodes} == NODES
    assert all(any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"]) for n in nodes)
    operator = json.loads(cluster.kubectl("get", "pods", "-n", "disttrain-system", "-o", "json").stdout)["items"]
    assert [p["status"]["phase"] for p in operator] == ["Running"], operator

    steps = 500
    job = spread_example(steps)
    name = job["metadata"]["name"]
    cluster.apply(job, namespace="default")

    def both_running():
        running = [p for p in worker_pods(cluster, name) if p["status"].get("phase") == "Running"]
        return running if len(running) == 2 else None
    pods = cluster.wait_for(both_running, timeout=600, interval=1, what="both workers Running")
    placed = {p["spec"]["nodeName"]: p["metadata"]["name"] for p in pods}
    assert set(placed) == NODES, placed

    def checkpoint(obj: dict) -> int:
        return (obj.get("status", {}).get("checkpoint") or {}).get("step", 0)
    at_delete = checkpoint(cluster.wait_job("default", name, lambda o: checkpoint(o) >= 20,
                                            what="a checkpoint at step >= 20", stall=600, interval=0.5))
    victim = placed[f"{NAME}-worker"]
    victim_uid = next(p["metadata"]["uid"] for p in pods if p["metadata"]["name"] == victim)
    cluster.kubectl("delete", "pod", victim, "--wait=false")

    done = cluster.wait_job("default", name, lambda o: o.get("status", {}).get("phase") in ("Succeeded", "Failed"),
                            what="Succeeded or Failed", stall=600, interval=2)
    status = done["status"]
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1)
    assert status["progress"]["step"] == steps and status["checkpoint"]["step"] == steps, status
    # a graceful delete is a disruption: resumed, and no restart of backoffLimit spent
    assert status.get("restarts", 0) == 0, status

    env = cluster.env
    logs = subprocess.run([sys.executable, "-m", "disttrain.cli", "logs", name, "-n", "default"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert logs.returncode == 0, logs.stderr[-3000:]
    lines = logs.stdout.splitlines()
    for rank in (0, 1):
        assert any(line.startswith(f"[worker-{rank}]") for line in lines), logs.stdout[-3000:]
    # the workers restarted together (one rendezvous) and loaded the checkpoint of the shared claim
    resumed = [int(line.split("resuming at step", 1)[1].split()[0]) for line in lines if "resuming at step" in line]
    assert resumed and max(resumed) >= at_delete, (at_delete, resumed)
    again = {p["metadata"]["name"]: p for p in worker_pods(cluster, name)}[victim]
    assert again["metadata"]["uid"] != victim_uid and again["spec"]["nodeName"] == f"{NAME}-worker", again["spec"]


@pytest.mark.timeout(2400)
def test_make_release_then_its_chart_installs_on_kind_from_a_registry_on_this_machine(kind_cluster, tmp_path):
    """docs/local-cluster.md, "From a registry": `make release` to a registry on this machine,
    `hack/kind.sh registry` points both nodes at it, and the doc's helm upgrade moves kind-up's
    release onto the packaged chart, whose operator and trainer images both nodes pull from
    that registry (the names are the registry's: nothing loaded by hand); a job that names no
    image Succeeds."""
    cluster = kind_cluster
    registry = Registry(tmp_path / "registry", listen="0.0.0.0")  # the nodes come in through their gateway
    repo = f"{registry.host}/disttrain"
    dist = tmp_path / "dist"
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
        release = subprocess.run(["make", "release", f"REGISTRY={repo}", f"DIST={dist}", "PUSH_TLS_VERIFY=false"],
                                 cwd=REPO, capture_output=True, text=True, timeout=3600, env=env)
        assert release.returncode == 0, release.stderr[-4000:] + release.stdout[-2000:]
        pointed = kind("registry", registry.host, timeout=120)
        assert pointed.returncode == 0, pointed.stderr[-3000:]
        # docs/local-cluster.md's upgrade of kind-up's release: its loaded-image values dropped.
        proc = subprocess.run([str(tools_bin() / "helm"), "upgrade", "disttrain", str(dist / "disttrain-0.1.0.tgz"),
                               "-n", OPERATOR_NS, "--reset-values", "--wait", "--timeout", "10m"],
                              capture_output=True, text=True, env=cluster.env, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        operator_image, trainer_image = f"{repo}/operator:0.1.0", f"{repo}/trainer:0.1.0"

        def rolled_out():
            pods = json.loads(cluster.kubectl("get", "pods", "-n", OPERATOR_NS, "-l",
                                              "app.kubernetes.io/component=operator", "-o", "json").stdout)["items"]
            return pods if [p["spec"]["containers"][0]["image"] for p in pods] == [operator_image] else None
        [pod] = cluster.wait_for(rolled_out, timeout=180, what="the old operator pod gone, the new one left")
        assert pulled(cluster, OPERATOR_NS, pod["metadata"]["name"], operator_image)

        name = "from-registry"
        job = spread_example(20, name)
        job["spec"]["checkpoint"] = {"storage": "none"}
        job["spec"].pop("image", None)
        cluster.apply(job, namespace="default")
        done = cluster.wait_job("default", name, lambda o: o.get("status", {}).get("phase") in ("Succeeded", "Failed"),
                                what="Succeeded or Failed", stall=900, interval=2)
        assert done["status"]["phase"] == "Succeeded", json.dumps(done["status"], indent=1)
        assert done["status"]["resolved"]["image"] == trainer_image
        workers = worker_pods(cluster, name)
        assert {p["spec"]["nodeName"] for p in workers} == NODES  # both nodes pulled it
        for worker in workers:
            assert worker["spec"]["containers"][0]["image"] == trainer_image
            assert pulled(cluster, "default", worker["metadata"]["name"], trainer_image)
    finally:
        registry.stop()


def test_kind_down_leaves_nothing_behind(kind_cluster):
    """After `make kind-down`: no dockerd of ours, no kind containers, network bridge or veth,
    no /lib/modules that kind-up made, no mounts under our roots, iptables as it was."""
    before = kind_cluster.before  # type: ignore[attr-defined]
    down = kind("down", timeout=600)
    assert down.returncode == 0, down.stderr[-3000:]
    after = host_state()
    assert after == before, (before, after)
    assert not after["dockerd"] and not after["run_dir"]


def test_a_killed_kind_up_is_undone_by_kind_down():
    """`make kind-up` killed with SIGKILL while kind creates the nodes (the engine running, the
    node containers and their network made, /lib/modules made), then `make kind-down`: the
    machine is as it was before."""
    before = host_state()
    with open(os.devnull, "wb") as devnull:
        up = subprocess.Popen(["bash", str(KIND), "up"], env=kind_env(), stdout=devnull, stderr=devnull,
                              start_new_session=True)
    docker = {**os.environ, "DOCKER_HOST": f"unix://{DOCKER_RUN}/docker.sock"}

    def nodes_created():
        if up.poll() is not None:
            pytest.fail(f"hack/kind.sh up ended (rc {up.returncode}) before it was killed", pytrace=False)
        ps = subprocess.run(["docker", "ps", "-aq", "--filter", f"name={NAME}-"], capture_output=True, text=True,
                            env=docker)
        return ps.stdout.split() or None
    try:
        Cluster.wait_for(nodes_created, timeout=1200, interval=1, what="kind to create the node containers")
    finally:
        os.killpg(up.pid, signal.SIGKILL)
        up.wait()
    down = kind("down", timeout=600)
    assert down.returncode == 0, down.stderr[-3000:]
    assert host_state() == before
