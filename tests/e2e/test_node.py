"""The real node's life cycle: `down` undoes everything on the host, a second `up` starts clean."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .conftest import HACK, NODE

pytestmark = [pytest.mark.slow]


def host_state(state_dir: Path) -> dict[str, object]:
    """What a run may leave on the host, as sets of names."""
    def lines(*cmd: str) -> list[str]:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()
    mounts = {line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
              if line.split()[1].startswith(str(state_dir))}
    cgroups = {str(p) for p in Path("/sys/fs/cgroup").glob(f"*/disttrain-{state_dir.name}")}
    bridges = {line.split(":")[1].strip().split("@")[0] for line in lines("ip", "-o", "link", "show", "type", "bridge")
               if ": dtbr-" in line}
    chains = {f"{table}:{line.split()[1]}" for table in ("filter", "nat", "mangle")
              for line in lines("iptables", "-w", "-t", table, "-S")
              if line.startswith("-N ") and line.split()[1].startswith(("DISTTRAIN-", "KUBE-"))}
    return {"mounts": mounts, "cgroups": cgroups, "bridges": bridges, "chains": chains}


def process_groups(state_dir: Path) -> set[int]:
    groups = set()
    for pidfile in (state_dir / "pids").glob("*.pid"):
        groups.add(int(pidfile.read_text().strip()))
    return groups


def alive_in_groups(groups: set[int]) -> list[str]:
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) in groups:
            alive.append(stat.parent.name)
    return alive


def shims(state: Path) -> list[str]:
    """The runc shims of this node's containerd (its socket under `state`): kind's nodes, in
    a group beside this one, have shims of their own."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes()
            if b"containerd-shim-runc-v2" in line and str(state).encode() in line:
                found.append(cmdline.parent.name)
        except OSError:
            continue
    return found


def test_down_undoes_everything_and_a_second_up_starts_clean(node_cluster):
    state = Path(node_cluster.state_dir)
    env = {**os.environ, "DISTTRAIN_CLUSTER_DIR": str(state), "DISTTRAIN_REAL_NODE": "1",
           "DISTTRAIN_FAKE_GPU_NODES": "0", "DISTTRAIN_FAKE_CPU_NODES": "0",
           "DISTTRAIN_CLUSTER_OWNER_PID": str(os.getpid())}
    # a pod running, so there are containers, mounts, a netns and cgroups to undo
    node_cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper", "namespace": "default"},
                        "spec": {"containers": [{"name": "c", "image": "ghcr.io/disttrain/operator:0.1.0",
                                                 "imagePullPolicy": "Never", "command": ["sleep", "600"]}]}})
    node_cluster.wait_for(lambda: node_cluster.get("pod", "sleeper", "default")["status"].get("phase") == "Running",
                          timeout=120, what="a pod running on the node")
    before = host_state(state)
    assert before["bridges"] and before["cgroups"] and before["mounts"], before
    groups = process_groups(state)

    down = subprocess.run(["bash", str(HACK / "cluster.sh"), "down", node_cluster.name], env=env,
                          capture_output=True, text=True, timeout=300)
    try:
        assert down.returncode == 0, down.stderr
        # `down` returned: every process it started has exited already
        assert alive_in_groups(groups) == [] and shims(state) == []
        after = host_state(state)
        assert after == {"mounts": set(), "cgroups": set(), "bridges": set(), "chains": set()}, \
            (after, down.stderr[-3000:])
        assert not state.exists()
    finally:
        # the next tests need the cluster back, whatever happened above
        up = subprocess.run(["bash", str(HACK / "cluster.sh"), "up", node_cluster.name], env=env,
                            capture_output=True, text=True, timeout=900)
    assert up.returncode == 0, up.stderr[-4000:]
    nodes = node_cluster.kubectl("get", "nodes", "-o", "name").stdout.split()
    assert nodes == [f"node/{NODE}"]
    # nothing of the first run came back: no pods, and containerd runs no containers
    assert node_cluster.kubectl("get", "pods", "-A", "-o", "name").stdout.strip() == ""
