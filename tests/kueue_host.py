"""Kueue's manager run as a host process against a cluster: the CRDs and webhooks of its
release (hack/build-tools.sh builds the binary and keeps both manifests beside it), its
webhook served on 127.0.0.1 with a self-signed certificate the API server trusts. The
Kueue cluster tests (tests/cluster/reconcile/conftest.py's `kueue` fixture) and
bench/recovery.py's preemption class run it so; it is a cluster component, not ours, and
runs as the cluster's admin.

Its API is kueue.x-k8s.io/v1beta2 (v1beta1 is served too, but unconverted: no conversion
webhook). Built-in integrations: batch/job only (Kueue's default); disttrain's jobs through
its external framework. waitForPodsReady on, as by default, with the timeout given."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import yaml

from disttrain.local.run import die_with_parent
from disttrain.local.ports import free_port

# Kueue admits the Workloads the operator makes for its jobs (Kueue's external framework).
EXTERNAL_FRAMEWORK = "DistributedTraining.v1alpha1.disttrain.dev"
# Kueue counts the devices of this DeviceClass (a DRA job's claim template) as this quota
# resource (its resources.deviceClassMappings); tests/cluster/reconcile/test_dynamic_resources.py.
DRA_DEVICE_CLASS, DRA_RESOURCE = "kueue-test-gpu", "disttrain.dev/test-gpu"
# What may be left of Kueue's objects, deleted while Kueue runs (it removes their
# finalizers): the namespaced kinds first, as a ClusterQueue is kept while a Workload uses it.
LEFTOVERS = ("workloads.kueue.x-k8s.io,localqueues.kueue.x-k8s.io",
             "clusterqueues.kueue.x-k8s.io,cohorts.kueue.x-k8s.io,resourceflavors.kueue.x-k8s.io,"
             "workloadpriorityclasses.kueue.x-k8s.io")


class KueueFailed(RuntimeError):
    """Kueue did not come up: the message ends with its log."""


@contextlib.contextmanager
def running(bin_dir: Path, kubeconfig: str, work: Path, *, pods_ready_timeout: int) -> Iterator[Path]:
    """Kueue's manager, ready and its webhooks answering; yields its log file. On the way
    out its webhooks go first (a call to a stopped one hangs), then what is left of its
    objects, then it; it also dies with this process."""
    kubectl = _kubectl(bin_dir, kubeconfig)
    crds = bin_dir / "kueue-crds.yaml"
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))  # too big for an annotation
    for name in re.findall(r"^  name: (\S+)$", crds.read_text(), re.MULTILINE):  # metadata.name of each
        # Polled: `kubectl wait` fails on a CRD created a moment ago (conditions still null).
        _wait(lambda name=name: kubectl("get", "crd", name, "--ignore-not-found", "-o",
                                        'jsonpath={.status.conditions[?(@.type=="Established")].status}',
                                        check=False).stdout == "True", 60, f"CRD {name} established", None)
    # One self-signed certificate for 127.0.0.1: the webhook server's, and the API server's
    # trust in it. Without internal cert management Kueue also reads a metrics certificate
    # from the fixed /etc/kueue/metrics/certs (even with metrics off): the same one, shown
    # there by a read-only overlay of etc/ on /etc in a mount namespace of its own (the
    # host's /etc is untouched; the mount goes with the process).
    certs = work / "etc" / "kueue" / "metrics" / "certs"
    certs.mkdir(parents=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(certs / "tls.key"), "-out", str(certs / "tls.crt"), "-days", "7",
                    "-subj", "/CN=kueue-webhook", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    webhook_port, health_port = free_port(), free_port()
    config = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
              "internalCertManagement": {"enable": False}, "leaderElection": {"leaderElect": False},
              "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(certs)},
              "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"}, "metrics": {"bindAddress": "0"},
              "manageJobsWithoutQueueName": False, "integrations": {"externalFrameworks": [EXTERNAL_FRAMEWORK]},
              "resources": {"deviceClassMappings": [{"name": DRA_RESOURCE, "deviceClassNames": [DRA_DEVICE_CLASS]}]},
              # On by default (30 minutes when the section is absent); requeued at once here.
              "waitForPodsReady": {"timeout": f"{pods_ready_timeout}s",
                                   "requeuingStrategy": {"backoffBaseSeconds": 1, "backoffMaxSeconds": 2}}}
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    private_etc = ["unshare", "--mount", *([] if os.geteuid() == 0 else ["--map-root-user"]), "sh", "-c",
                   'mount -t overlay kueue-etc -o "lowerdir=$0:/etc" /etc && exec "$@"', str(work / "etc")]
    log_path = work / "kueue.log"
    log = open(log_path, "wb")
    # VisibilityOnDemand off: its API server would need an APIService and delegated auth.
    proc = subprocess.Popen([*private_etc, str(bin_dir / "kueue"), f"--config={work / 'config.yaml'}",
                             "--feature-gates=VisibilityOnDemand=false"],
                            env={**os.environ, "KUBECONFIG": kubeconfig}, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=die_with_parent)  # gone with this process
    webhooks = _webhooks(bin_dir / "kueue-webhooks.yaml", webhook_port, certs / "tls.crt")
    try:
        _wait(lambda: _ready(proc, health_port, log_path), 60, "Kueue ready", log_path)
        kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": webhooks}))
        _wait(lambda: _webhooks_answer(kubectl), 30, "Kueue's webhooks answering", log_path)
        yield log_path
    finally:
        for doc in webhooks:
            kubectl("delete", doc["kind"], doc["metadata"]["name"], "--ignore-not-found", check=False)
        if proc.poll() is None:
            for kinds in LEFTOVERS:
                kubectl("delete", kinds, "--all", "-A", "--ignore-not-found", "--timeout=60s", check=False)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


def _kubectl(bin_dir: Path, kubeconfig: str):
    def kubectl(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(bin_dir / "kubectl"), "--kubeconfig", kubeconfig, *args], input=input,
                              capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise KueueFailed(f"kubectl {' '.join(args[:3])} ... exited {proc.returncode}: {proc.stderr[-2000:]}")
        return proc
    return kubectl


def _wait(test, timeout: float, what: str, log: Path | None) -> None:
    deadline = time.monotonic() + timeout
    while not test():
        if time.monotonic() > deadline:
            said = f"; Kueue's log:\n{log.read_text(errors='replace')[-3000:]}" if log is not None else ""
            raise KueueFailed(f"timed out after {timeout:.0f}s waiting for {what}{said}")
        time.sleep(0.2)


def _webhooks(path: Path, port: int, ca: Path) -> list[dict]:
    """Kueue's webhook configurations, named as its release names them, called at
    https://127.0.0.1:PORT instead of its Service. Only those of its own kinds: the
    integrations' (pods, Jobs, Deployments, ...) fail closed on every such object in the
    cluster while Kueue runs."""
    bundle = base64.b64encode(ca.read_bytes()).decode()
    docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    for doc in docs:
        doc["metadata"]["name"] = f"kueue-{doc['metadata']['name']}"
        doc["webhooks"] = [hook for hook in doc["webhooks"]
                           if all(rule["apiGroups"] == ["kueue.x-k8s.io"] for rule in hook["rules"])]
        for hook in doc["webhooks"]:
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{hook['clientConfig']['service']['path']}",
                                    "caBundle": bundle}
    return docs


def _ready(proc: subprocess.Popen, port: int, log: Path) -> bool:
    if proc.poll() is not None:
        raise KueueFailed(f"kueue exited {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _webhooks_answer(kubectl) -> bool:
    """A ResourceFlavor created in dry run comes back with the finalizer Kueue's
    mutating webhook adds (and so passed its validating one too)."""
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "webhook-probe"}}
    proc = kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(flavor), check=False)
    return proc.returncode == 0 and "kueue.x-k8s.io/resource-in-use" in json.loads(proc.stdout)["metadata"].get(
        "finalizers", [])
