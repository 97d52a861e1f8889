"""`make demo-cluster`: the CPU example through the operator on a real node.

Brings up a control plane with the real node (hack/cluster.sh, DISTTRAIN_REAL_NODE=1, no
fake nodes), installs the chart as shipped, applies manifests/examples/cpu-ddp-2x1.yaml,
follows the job and prints the same summary as `disttrain run --local`. The cluster
stays up afterwards for a look around (the KUBECONFIG is printed); `make cluster-down`
with DISTTRAIN_CLUSTER_NAME=demo, or `hack/cluster.sh down demo`, removes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NAME = "demo"
JOB = "cpu-ddp"


def sh(*cmd: str, env: dict[str, str] | None = None, check: bool = True, input: str | None = None) -> str:
    proc = subprocess.run(cmd, env=env, text=True, capture_output=True, input=input)
    if check and proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr}{proc.stdout}")
    return proc.stdout


def main() -> int:
    env = {**os.environ, "DISTTRAIN_REAL_NODE": "1", "DISTTRAIN_FAKE_GPU_NODES": "0",
           "DISTTRAIN_FAKE_CPU_NODES": "0"}
    bin_dir = sh("bash", str(REPO / "hack" / "build-tools.sh"), "--print-bin").strip()
    print("demo-cluster: control plane + real node (hack/cluster.sh up demo)", flush=True)
    subprocess.run(["bash", str(REPO / "hack" / "cluster.sh"), "up", NAME], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    kubeconfig = sh("bash", str(REPO / "hack" / "cluster.sh"), "env", NAME, env=env).split("=", 1)[1].strip()
    env = {**env, "KUBECONFIG": kubeconfig, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}"}
    kubectl = [f"{bin_dir}/kubectl"]
    print("demo-cluster: helm install disttrain charts/disttrain", flush=True)
    if subprocess.run([f"{bin_dir}/helm", "status", "disttrain", "-n", "disttrain-system"], env=env,
                      capture_output=True).returncode != 0:
        sh(f"{bin_dir}/helm", "install", "disttrain", str(REPO / "charts" / "disttrain"), "-n",
           "disttrain-system", "--create-namespace", "--wait", "--timeout=5m", env=env)
    sh(*kubectl, "delete", "dt", JOB, "--ignore-not-found", "--wait=true", env=env)
    # The example checkpoints to a ReadWriteMany claim; here a hostPath volume on the one real node.
    volume = Path(kubeconfig).parent / "node" / "volumes" / "demo"
    volume.mkdir(parents=True, exist_ok=True)
    os.chown(volume, 1000, 1000)
    claim = "cpu-ddp-checkpoints"
    sh(*kubectl, "apply", "-f", "-", env=env, input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"demo-{claim}"},
         "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                  "claimRef": {"namespace": "default", "name": claim},
                  "hostPath": {"path": str(volume), "type": "Directory"}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": "default"},
         "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": f"demo-{claim}",
                  "resources": {"requests": {"storage": "1Gi"}}}}]}))
    print(f"demo-cluster: kubectl apply -f manifests/examples/cpu-ddp-2x1.yaml", flush=True)
    sh(*kubectl, "apply", "-f", str(REPO / "manifests" / "examples" / "cpu-ddp-2x1.yaml"), env=env)
    started = time.monotonic()
    last_line = ""
    while True:
        obj = json.loads(sh(*kubectl, "get", "dt", JOB, "-o", "json", env=env))
        status = obj.get("status", {})
        progress = status.get("progress", {})
        line = f"{status.get('phase', 'Pending'):<10} step {progress.get('step', 0)}/{progress.get('totalSteps', '?')}"
        if line != last_line:
            print(line, flush=True)
            last_line = line
        if status.get("phase") in ("Succeeded", "Failed"):
            break
        time.sleep(2)
    pods = json.loads(sh(*kubectl, "get", "pods", "-l", f"disttrain.dev/job={JOB}", "-o", "json", env=env))["items"]
    exits = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        state = (pod["status"].get("containerStatuses") or [{}])[0].get("state", {})
        code = state.get("terminated", {}).get("exitCode", "?")
        exits.append(f"{pod['metadata']['name']}: exit {code}")
    ckpt = status.get("checkpoint") or {}
    loss = progress.get("loss")
    print("\n".join([
        f"disttrain: {JOB} {status['phase'].lower()} after {time.monotonic() - started:.1f}s",
        f"  step        {progress.get('step', 0)}/{progress.get('totalSteps', '?')}"
        + (f"  loss {loss:.4f} (last reported)" if isinstance(loss, (int, float)) else ""),
        f"  throughput  {progress.get('samplesPerSecond', 0):.1f} samples/s, world size "
        f"{status.get('resolved', {}).get('worldSize', '?')}",
        "  checkpoint  " + (f"step {ckpt['step']} at {ckpt.get('path')}" if ckpt else "none"),
        "  agents      " + ", ".join(exits),
        f"  logs        kubectl logs {JOB}-worker-0   (export KUBECONFIG={kubeconfig})",
    ]))
    return 0 if status["phase"] == "Succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
