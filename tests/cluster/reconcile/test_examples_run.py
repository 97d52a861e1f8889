"""Every file in manifests/examples/ applies and runs as written on the local cluster.

Each example's first comment says what it needs beyond itself; the commands indented
there (`#   bash hack/local-volumes.sh ...`, `#   kubectl create secret ...`) are run
exactly as written, then `kubectl apply -f manifests/examples/<file>`, and the job must
reach Running with the operator (our handlers, the operator's RBAC) and KWOK's nodes.
The commands run with a kubeconfig whose context namespace is the test's, as a user's
context would name theirs.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

import pytest
import yaml

from .conftest import REPO, running_operator, wait_phase

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

EXAMPLES = sorted(glob.glob(str(REPO / "manifests" / "examples" / "*.yaml")))


def first_comment(path: str) -> list[str]:
    lines = []
    for line in open(path):
        if not line.startswith("#"):
            break
        lines.append(line[1:].rstrip("\n"))
    return lines


def setup_commands(path: str) -> list[str]:
    """The commands the first comment tells a user to run first (indented by three)."""
    return [line.strip() for line in first_comment(path) if re.match(r"^   \S", line)]


def claims_named(docs: list[dict]) -> set[str]:
    """Every claim a job uses: its checkpoint claim and its podTemplate volumes' claims."""
    out = set()
    for doc in docs:
        if doc["kind"] != "DistributedTraining":
            continue
        spec = doc["spec"]
        out.add((spec.get("checkpoint") or {}).get("claimName"))
        for volume in ((spec.get("podTemplate") or {}).get("spec") or {}).get("volumes", []):
            out.add((volume.get("persistentVolumeClaim") or {}).get("claimName"))
    return out - {None}


@pytest.mark.parametrize("path", EXAMPLES, ids=os.path.basename)
def test_every_claim_is_shipped_or_named_in_the_first_comment(path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    shipped = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    comment = "\n".join(first_comment(path))
    for claim in claims_named(docs) - shipped:
        assert f"`{claim}`" in comment, f"{path}: claim {claim} is neither shipped nor named in the first comment"
    if shipped:
        assert "hack/local-volumes.sh" in comment, f"{path}: say how to bind its claims on make cluster-up"


def test_every_example_runs_as_written(cluster, namespace, operator_kubeconfig, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    shutil.copy(cluster.kubeconfig, kubeconfig)
    env = {**cluster.env, "KUBECONFIG": str(kubeconfig)}
    subprocess.run(["kubectl", "config", "set-context", "--current", f"--namespace={namespace}"], env=env,
                   check=True, capture_output=True)

    def sh(command: str) -> None:
        proc = subprocess.run(command, shell=True, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{command}\n{proc.stdout}{proc.stderr}"

    try:
        with running_operator(cluster, namespace, operator_kubeconfig):
            for path in EXAMPLES:
                rel = os.path.relpath(path, REPO)
                for command in setup_commands(path):
                    sh(command)
                sh(f"kubectl apply -f {rel}")
                job = next(d for d in yaml.safe_load_all(open(path)) if d and d["kind"] == "DistributedTraining")
                name = job["metadata"]["name"]
                running = wait_phase(cluster, namespace, name, "Running", stall=60)
                workers = running["status"]["workers"]
                assert workers["active"] == workers["desired"] >= 1, (rel, running["status"])
                # The fake nodes hold 32 GPUs: one example at a time.
                sh(f"kubectl delete -f {rel} --wait=true --timeout=60s")
                cluster.wait_for(lambda: not cluster.kubectl(
                    "get", "pods", "-n", namespace, "-l", f"disttrain.dev/job={name}", "-o", "name").stdout.strip(),
                    timeout=60, what=f"{name}'s pods gone")
    finally:
        cluster.kubectl("delete", "pv", "-l", "disttrain.dev/local-volume=true", "--wait=false", check=False)
