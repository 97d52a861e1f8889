"""Recovery, measured: for each fault class, the time from the fault to the job's first new
training step, the steps lost and the backoffLimit restarts spent; then a goodput run, the
CPU example with a fault every 2 minutes in rotation, status.goodput beside an independent
count. On the real node: our images, run by a real kubelet and containerd (as `make e2e`;
root), the operator installed by its chart with its defaults.

    python bench/recovery.py                                  # every class, 3 times, then 20 goodput minutes
    python bench/recovery.py --faults rank-killed --repeat 1 --goodput-minutes 0

Fault classes (each on a fresh two-worker job of manifests/examples/cpu-ddp-2x1.yaml,
checkpointing every --interval steps to a claim on the node, once it has trained past
its first checkpoint):

  rank-killed     SIGKILL of worker 1's trainer process (torchrun restarts its workers in
                  place: the pod stays)
  pod-deleted     `kubectl delete pod` of worker 1 (SIGTERM: the trainer saves, the operator
                  recreates the pod)
  hang            worker 1's rank stops inside a step (the trainer's test hook), with
                  failurePolicy.hangSeconds 30: the clock starts at the last step before it
  suspend-resume  spec.suspend true, then false once the pods are gone: what a Kueue
                  preemption and re-admission does to a job, without Kueue's own decision
  drain           `kubectl drain` of the node (the job's pods only), uncordoned once the
                  workers are gone: there is one node, so the workers come back to it
  node-lost       the node dies: its kubelet and the job's processes on it stop (SIGSTOP)
                  and its Ready condition says Unknown, as the node lifecycle controller
                  writes it once the kubelet is silent for the cluster's
                  node-monitor-grace-period (not counted here: a cluster setting, 40 s by
                  default); once the operator has replaced the workers the node comes
                  back rebooted (its old processes killed, the kubelet resumed), as the
                  replacements need a node and there is one (so the job has
                  failurePolicy.avoidNodeAfterFailures 0: a lost node is avoided otherwise)
  kueue-preempt   a job of a higher WorkloadPriorityClass queued on a ClusterQueue that
                  fits one job (real Kueue, tests/kueue_host.py): Kueue preempts this one,
                  the operator stops it checkpoint first; the preemptor is deleted once
                  the job is back in its queue, so Kueue admits it again at once

"First new step": the first moment a trainer process that started after the fault reports
a step past the checkpoint it resumed from, polled every 0.2 s at each worker's /status.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "operator")]
import kueue_host  # noqa: E402  (tests/kueue_host.py: Kueue as a host process)
CLUSTER = "bench-recovery"
NS = "recovery"
EXAMPLE = REPO / "manifests" / "examples" / "cpu-ddp-2x1.yaml"
CLASSES = ("rank-killed", "pod-deleted", "hang", "suspend-resume", "drain", "node-lost", "kueue-preempt")
ROTATION = ("rank-killed", "pod-deleted", "suspend-resume", "drain")  # the hang hook fires once per job
HANG_SECONDS = 30
QUEUE, HIGH = "bench", "bench-high"  # the Kueue class's LocalQueue and preemptor's WorkloadPriorityClass


def sh(*args: str, env: dict[str, str] | None = None, input: str | None = None, check: bool = True,
       timeout: float = 900) -> str:
    proc = subprocess.run(args, env=env, input=input, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise SystemExit(f"{' '.join(args[:4])} ... exited {proc.returncode}:\n{proc.stderr[-3000:]}{proc.stdout[-2000:]}")
    return proc.stdout


class Cluster:
    def __init__(self) -> None:
        self.bin = sh("bash", str(REPO / "hack" / "build-tools.sh"), "--print-bin").strip()
        self.state = Path(os.environ.get("DISTTRAIN_CACHE", Path.home() / ".cache" / "disttrain")) / "clusters" / CLUSTER
        self.env = {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}", "DISTTRAIN_REAL_NODE": "1",
                    "DISTTRAIN_FAKE_GPU_NODES": "0", "DISTTRAIN_FAKE_CPU_NODES": "0",
                    "DISTTRAIN_CLUSTER_OWNER_PID": str(os.getpid()), "DISTTRAIN_CLUSTER_DIR": str(self.state),
                    "KUBECONFIG": str(self.state / "kubeconfig")}

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        return sh(f"{self.bin}/kubectl", *args, env=self.env, input=input, check=check)

    def up(self, stack: contextlib.ExitStack, kueue: bool) -> None:
        """The cluster, and with `kueue` Kueue running and the chart's kueue.enabled."""
        print("building the images and starting the control plane with the real node ...", file=sys.stderr)
        sh("bash", str(REPO / "hack" / "images.sh"), "build", timeout=3600)
        sh("bash", str(REPO / "hack" / "cluster.sh"), "up", CLUSTER, env=self.env, timeout=1800)
        if kueue:
            work = self.state / "kueue"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            stack.enter_context(kueue_host.running(Path(self.bin), self.env["KUBECONFIG"], work,
                                                   pods_ready_timeout=300))
        sh(f"{self.bin}/helm", "install", "disttrain", str(REPO / "charts" / "disttrain"), "-n", "disttrain-system",
           "--create-namespace", "--wait", "--timeout=300s", *(["--set", "kueue.enabled=true"] if kueue else []),
           env=self.env)
        self.kubectl("create", "namespace", NS)
        self.node = self.kubectl("get", "nodes", "-o", "jsonpath={.items[0].metadata.name}")
        if kueue:
            self.queues()

    def queues(self) -> None:
        """A ClusterQueue that fits one job of the example (2 workers of 500m and 2Gi),
        preempting for a higher priority, its LocalQueue, and the preemptor's class."""
        group = "kueue.x-k8s.io/v1beta2"
        quota = [{"name": "cpu", "nominalQuota": "1"}, {"name": "memory", "nominalQuota": "4Gi"}]
        self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": group, "kind": "ResourceFlavor", "metadata": {"name": QUEUE}, "spec": {}},
            {"apiVersion": group, "kind": "ClusterQueue", "metadata": {"name": QUEUE}, "spec": {
                "namespaceSelector": {}, "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [{"coveredResources": ["cpu", "memory"],
                                    "flavors": [{"name": QUEUE, "resources": quota}]}]}},
            {"apiVersion": group, "kind": "LocalQueue", "metadata": {"name": QUEUE, "namespace": NS},
             "spec": {"clusterQueue": QUEUE}},
            {"apiVersion": group, "kind": "WorkloadPriorityClass", "metadata": {"name": HIGH}, "value": 1000}]}))

    detail = ""  # what a fault class says of its own steps, for the run's line

    def kubelet(self, sig: int) -> None:
        """Signal the real node's kubelet (its process group: hack/node.sh starts it so)."""
        os.killpg(os.getpgid(int((self.state / "pids" / "node-kubelet.pid").read_text())), sig)

    def down(self) -> None:
        sh("bash", str(REPO / "hack" / "cluster.sh"), "down", CLUSTER, env=self.env, check=False)

    def job(self, name: str) -> dict[str, Any]:
        return json.loads(self.kubectl("get", "dt", name, "-n", NS, "-o", "json"))

    def pods(self, name: str) -> list[dict[str, Any]]:
        return json.loads(self.kubectl("get", "pods", "-n", NS, "-l", f"disttrain.dev/job={name}",
                                       "-o", "json"))["items"]

    def claim(self, name: str) -> str:
        """A ReadWriteMany claim on a directory of the node (uid 1000), as the e2e tests bind one."""
        path = self.state / "node" / "volumes" / NS / name
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, 1000, 1000)
        pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{NS}-{name}"},
              "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                       "persistentVolumeReclaimPolicy": "Retain", "claimRef": {"namespace": NS, "name": name},
                       "hostPath": {"path": str(path), "type": "Directory"}}}
        pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": NS},
               "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": f"{NS}-{name}",
                        "resources": {"requests": {"storage": "1Gi"}}}}
        self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [pv, pvc]}))
        return name


@dataclass
class Seen:
    """What the poller saw of one worker process: its pod, and the steps of its /status."""
    uid: str
    since: float  # when it was first seen answering
    step: int = 0
    resumed: int | None = None  # the checkpoint it reported with its first step: where it resumed from
    step_time: float = 0.0  # when `step` was first seen


@dataclass
class Poller:
    """Polls every worker's /status every 0.2 s (the node's pods are reachable from this
    machine); a restarted process is told by its pod's uid and a step that went back."""
    cluster: Cluster
    name: str
    port: int
    processes: list[Seen] = field(default_factory=list)
    max_step: int = 0
    last_step_time: float = 0.0  # when max_step last moved
    step_seconds: list[float] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        current: dict[str, Seen] = {}  # pod name -> its current process
        while not self.stop.wait(0.2):
            try:
                pods = self.cluster.pods(self.name)
            except SystemExit:
                continue
            for pod in pods:
                ip, uid, pod_name = pod["status"].get("podIP"), pod["metadata"]["uid"], pod["metadata"]["name"]
                doc = _status(ip, self.port) if ip else None
                if doc is None or not isinstance(doc.get("step"), int):
                    continue
                now, step = time.monotonic(), doc["step"]
                seen = current.get(pod_name)
                if seen is None or seen.uid != uid or step < seen.step:
                    seen = Seen(uid=uid, since=now, step=step, step_time=now)
                    current[pod_name] = seen
                    self.processes.append(seen)
                elif step > seen.step:
                    seen.step, seen.step_time = step, now
                if step > 0 and seen.resumed is None:
                    seen.resumed = min(step - 1, (doc.get("checkpoint") or {}).get("step") or 0)
                if step > self.max_step:
                    self.max_step, self.last_step_time = step, now
                if isinstance(doc.get("stepSeconds"), (int, float)) and doc["stepSeconds"] > 0:
                    self.step_seconds.append(doc["stepSeconds"])

    def first_new_step(self, after: float) -> tuple[float, int, int] | None:
        """(when, the step, resumed from) of the first step of a process started after `after`."""
        fresh = [p for p in self.processes if p.since > after and p.resumed is not None and p.step > p.resumed]
        if not fresh:
            return None
        first = min(fresh, key=lambda p: p.step_time)
        return first.step_time, first.step, first.resumed  # type: ignore[return-value]


def _status(ip: str, port: int) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://{ip}:{port}/status", timeout=1) as answer:
            return json.loads(answer.read())
    except (OSError, ValueError):
        return None


def job_manifest(name: str, claim: str, interval: int, env: list[dict[str, str]] | None = None,
                 labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"] = {"name": name, "namespace": NS, **({"labels": labels} if labels else {})}
    doc["spec"]["trainer"]["builtin"]["steps"] = 10_000_000
    doc["spec"]["checkpoint"] = {**doc["spec"]["checkpoint"], "claimName": claim, "intervalSteps": interval}
    doc["spec"]["env"] = [{"name": "OMP_NUM_THREADS", "value": "1"}, *(env or [])]
    doc["spec"].update(spec)
    return doc


def wait(what: str, test: Any, timeout: float = 600, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = test()
        if value:
            return value
        time.sleep(every)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")


# --- the faults --------------------------------------------------------------------

def pod_processes(pod: str) -> list[int]:
    """The processes of a pod of the real node (they are this machine's)."""
    want = f"DISTTRAIN_POD_NAME={pod}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if want in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                found.append(int(entry))
        except OSError:
            continue
    return found


def trainer_pid(name: str) -> int:
    """Worker 1's trainer process (local rank 0)."""
    for pid in pod_processes(f"{name}-worker-1"):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"LOCAL_RANK=0" in environ and b"disttrain_trainer" in cmdline:
            return pid
    raise SystemExit(f"no trainer process of {name}-worker-1 on this machine")


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def node_lost(cluster: Cluster, name: str) -> None:
    """The node dies with the job's workers on it; it comes back (rebooted) once the
    operator has taken the workers off it."""
    began = time.monotonic()
    uids = {p["metadata"]["uid"] for p in cluster.pods(name)}
    frozen = [pid for i in range(2) for pid in pod_processes(f"{name}-worker-{i}")]
    cluster.kubelet(signal.SIGSTOP)
    signal_all(frozen, signal.SIGSTOP)
    try:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        unknown = {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                   "message": "Kubelet stopped posting node status.", "lastHeartbeatTime": stamp,
                   "lastTransitionTime": stamp}
        cluster.kubectl("patch", "node", cluster.node, "--subresource=status", "--type=strategic", "-p",
                        json.dumps({"status": {"conditions": [unknown]}}))
        wait("the lost node's workers replaced", lambda: not uids & {p["metadata"]["uid"] for p in cluster.pods(name)},
             timeout=300)
        cluster.detail = f"replacements made {time.monotonic() - began:.1f} s after the node was lost"
    finally:
        signal_all(frozen, signal.SIGKILL)  # what a reboot leaves of them
        cluster.kubelet(signal.SIGCONT)


def kueue_preempt(cluster: Cluster, name: str) -> None:
    """A job of a higher priority takes the queue; deleted once this one is back in it."""
    began = time.monotonic()
    preemptor = f"{name}-urgent"
    claim = cluster.claim(preemptor)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(job_manifest(
        preemptor, claim, 50, labels={"kueue.x-k8s.io/queue-name": QUEUE, "kueue.x-k8s.io/priority-class": HIGH})))
    try:
        wait(f"{name} back in its queue", lambda: _condition(cluster.job(name), "Queued") == "True"
             and not cluster.pods(name), timeout=300)
        queued = time.monotonic() - began
    finally:
        cluster.kubectl("delete", "dt", preemptor, "-n", NS, "--wait=false")
    freed = time.monotonic()
    wait(f"{name} admitted again", lambda: _condition(cluster.job(name), "Queued") == "False", timeout=600)
    admitted = time.monotonic() - freed
    wait(f"{name}'s workers back", lambda: len(cluster.pods(name)) == 2, timeout=600)
    cluster.detail = (f"back in its queue {queued:.1f} s after the preemptor was queued; admitted again "
                      f"{admitted:.1f} s after the preemptor was deleted, workers created "
                      f"{time.monotonic() - freed:.1f} s after")


def _condition(job: dict[str, Any], kind: str) -> str | None:
    return next((c.get("status") for c in job.get("status", {}).get("conditions") or [] if c.get("type") == kind),
                None)


def inject(cluster: Cluster, kind: str, name: str) -> float:
    """Cause the fault now; returns when it began (monotonic)."""
    began = time.monotonic()
    if kind == "rank-killed":
        os.kill(trainer_pid(name), signal.SIGKILL)
    elif kind == "pod-deleted":
        cluster.kubectl("delete", "pod", f"{name}-worker-1", "-n", NS, "--wait=false")
    elif kind == "suspend-resume":
        cluster.kubectl("patch", "dt", name, "-n", NS, "--type=merge", "-p", '{"spec":{"suspend":true}}')
        wait("the suspended job's pods gone", lambda: cluster.job(name)["status"].get("phase") == "Suspended"
             and not cluster.pods(name))
        cluster.kubectl("patch", "dt", name, "-n", NS, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    elif kind == "drain":
        drain = subprocess.Popen([f"{cluster.bin}/kubectl", "drain", cluster.node, "--pod-selector",
                                  f"disttrain.dev/job={name}", "--ignore-daemonsets", "--delete-emptydir-data",
                                  "--timeout=300s"], env=cluster.env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        try:
            wait("the drained job's workers gone", lambda: (cluster.job(name)["status"].get("eviction") or {}).get(
                "stopTime") and not [p for p in cluster.pods(name) if not p["metadata"].get("deletionTimestamp")],
                 timeout=300)
        finally:
            cluster.kubectl("uncordon", cluster.node)
            drain.wait(timeout=330)
    elif kind == "node-lost":
        node_lost(cluster, name)
    elif kind == "kueue-preempt":
        kueue_preempt(cluster, name)
    return began


@dataclass
class Outcome:
    kind: str
    seconds: float
    lost: int
    restarts: int
    reported_lost: int | None  # status.failures' or status.eviction's stepsLost
    detail: str = ""


def one_fault(cluster: Cluster, kind: str, run: int, interval: int, port: int) -> Outcome:
    name = f"{kind}-{run}"
    claim = cluster.claim(name)  # a job of its own resumes from its own checkpoints only
    hang = kind == "hang"
    warm = 3 * interval
    env = [{"name": "DT_TEST_HANG_AT_STEP", "value": str(warm + interval // 2)}] if hang else None
    policy = {"failurePolicy": {"hangSeconds": HANG_SECONDS}} if hang else {}
    if kind == "node-lost":  # the one node comes back and must take the workers: not avoided
        policy = {"failurePolicy": {"avoidNodeAfterFailures": 0}}
    labels = {"kueue.x-k8s.io/queue-name": QUEUE} if kind == "kueue-preempt" else None
    cluster.kubectl("apply", "-f", "-", input=json.dumps(job_manifest(name, claim, interval, env, labels, **policy)))
    poller = Poller(cluster, name, port)
    poller.start()
    try:
        wait(f"{name} past step {warm}", lambda: poller.max_step >= warm, timeout=900)
        if hang:  # the hook stops the rank itself: the fault began with the last step before it
            wait(f"{name} hung", lambda: time.monotonic() - poller.last_step_time > 5, timeout=300)
            began, before = poller.last_step_time, poller.max_step
        else:
            before = poller.max_step
            began = inject(cluster, kind, name)
        first = wait(f"{name}'s first new step", lambda: poller.first_new_step(began), timeout=900, every=0.2)
        job = cluster.job(name)["status"]
    finally:
        poller.stop.set()
    at, _step, resumed = first
    stopped_at = max([before] + [p.step for p in poller.processes if p.since <= began])
    failures = job.get("failures") or []
    said = [f["stepsLost"] for f in failures if f.get("stepsLost") is not None]  # not a pod's wait to schedule
    reported = said[-1] if said else (job.get("eviction") or {}).get("stepsLost")
    cluster.kubectl("delete", "dt", name, "-n", NS, "--wait=false")
    cluster.kubectl("delete", "pods", "-n", NS, "-l", f"disttrain.dev/job={name}", "--grace-period=0", "--force",
                    check=False)
    wait(f"{name}'s pods gone", lambda: not cluster.pods(name), timeout=120)
    outcome = Outcome(kind, at - began, max(0, stopped_at - resumed), job.get("restarts") or 0, reported,
                      cluster.detail)
    cluster.detail = ""
    print(f"  {name}: {outcome}", file=sys.stderr)
    return outcome


def goodput_run(cluster: Cluster, minutes: float, every: float, interval: int, port: int) -> None:
    name = "goodput"
    claim = cluster.claim(name)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(job_manifest(name, claim, interval)))
    created = time.monotonic()
    poller = Poller(cluster, name, port)
    poller.start()
    end = created + 60 * minutes
    faults = []
    try:
        turn = 0
        while True:
            due = created + every * (turn + 1)
            if due >= end - every / 2:
                break
            time.sleep(max(0.0, due - time.monotonic()))
            kind = ROTATION[turn % len(ROTATION)]
            faults.append(kind)
            print(f"  {time.monotonic() - created:6.0f}s  {kind} at step {poller.max_step}", file=sys.stderr)
            inject(cluster, kind, name)
            turn += 1
        time.sleep(max(0.0, end - time.monotonic()))
        status = cluster.job(name)["status"]
    finally:
        poller.stop.set()
    wall = time.monotonic() - created
    step_time = statistics.median(poller.step_seconds) if poller.step_seconds else 0.0
    done = max(poller.max_step, (status.get("progress") or {}).get("step") or 0)
    independent = done * step_time / wall
    goodput = status.get("goodput") or {}
    print(f"\ngoodput run: {wall / 60:.1f} min, {len(faults)} faults ({', '.join(faults)}), checkpoint every "
          f"{interval} steps")
    print(f"  status.goodput.ratio                       {goodput.get('ratio')}")
    print(f"  independent: {done} steps x {step_time:.4f} s / {wall:.0f} s = {independent:.3f}")
    print(f"  status.goodput: {json.dumps(goodput)}")
    print(f"  failures: {[f.get('cause') for f in status.get('failures') or []]}, restarts {status.get('restarts')}")
    cluster.kubectl("delete", "dt", name, "-n", NS, "--wait=false")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", default=",".join(CLASSES), help=f"comma-separated, of {', '.join(CLASSES)}")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--interval", type=int, default=50, help="checkpoint.intervalSteps")
    parser.add_argument("--goodput-minutes", type=float, default=20)
    parser.add_argument("--fault-every", type=float, default=120, help="seconds between the goodput run's faults")
    args = parser.parse_args()
    kinds = [k for k in args.faults.split(",") if k]
    unknown = sorted(set(kinds) - set(CLASSES))
    if unknown:
        parser.error(f"--faults: {', '.join(unknown)} is no fault class; the classes are {', '.join(CLASSES)}")
    if os.geteuid() != 0:
        parser.error("the real node needs root (a kubelet and containerd on this machine), as make e2e does")
    cluster = Cluster()
    stack = contextlib.ExitStack()
    try:
        cluster.up(stack, kueue="kueue-preempt" in kinds)
        port = yaml.safe_load(EXAMPLE.read_text())["spec"].get("metrics", {}).get("port") or 9400
        outcomes = [one_fault(cluster, kind, run, args.interval, port)
                    for kind in kinds for run in range(args.repeat)]
        if outcomes:
            table(outcomes, kinds, args.interval)
        if args.goodput_minutes > 0:
            goodput_run(cluster, args.goodput_minutes, args.fault_every, args.interval, port)
    finally:
        stack.close()
        cluster.down()


def table(outcomes: list[Outcome], kinds: list[str], interval: int) -> None:
    print(f"\nrecovery on this machine ({os.cpu_count()} cores), checkpoint every {interval} steps:")
    print(f"  {'fault':<16} {'to first new step (s)':>22} {'steps lost':>12} {'stepsLost said':>15} "
          f"{'restarts':>9}")
    for kind in kinds:
        mine = [o for o in outcomes if o.kind == kind]
        seconds = [o.seconds for o in mine]
        print(f"  {kind:<16} {statistics.median(seconds):>12.1f} ({min(seconds):.1f}-{max(seconds):.1f})"
              f" {'/'.join(str(o.lost) for o in mine):>12} "
              f"{'/'.join(str(o.reported_lost) for o in mine):>15} {'/'.join(str(o.restarts) for o in mine):>9}")


if __name__ == "__main__":
    main()
