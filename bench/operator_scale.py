"""Operator at scale: N jobs x M nodes on KWOK fake nodes, on a real control plane.

Prints, per N and run: p50/p99 time from a job's creation to all its pods created and to
`phase: Running`, the operator's own lag (last pod Running -> job Running), its write
requests to the API server per job, the 409 AlreadyExists and 429 answers, the CPU
seconds of the operator and of the API server, and the operator's peak RSS. Everything
is measured in this one run on this machine, side by side.

    make bench                                           # N = 100 and 500, M = 8, two runs each
    python bench/operator_scale.py --jobs 100 --nodes 8 --repeat 1
    python bench/operator_scale.py --baseline e6014ee    # the same, and an older operator beside it
    python bench/operator_scale.py --jobs 100,500,2000 --repeat 1 --baseline ccb9e70 --lifted
                                                         # issue 20's table, and the lifted run

--lifted adds a run of this operator with DISTTRAIN_API_QPS/BURST at 1000 (its own pacing
out of the way), reported as "all N Running" (first creation -> last job Running) against
the cluster's own floor below.

--baseline REF runs the operator of that git revision (a temporary worktree) on the same
cluster, one after the other, so "before" and "after" share the machine and the load.
It starts its own cluster (hack/cluster.sh up bench-scale) and stops it at the end.
Writes are the operator's own, counted from the API server's audit log (the cluster runs
with an audit policy that records every create/update/patch/delete by the operator's
service account, whatever the resource: pods, Services, NetworkPolicies, Events, job
status, finalizers), so neither the scheduler's nor KWOK's writes are counted; 409s are
the operator's creates answered AlreadyExists, 429s every client's throttled requests.
The audit log also keeps the bodies of the operator's status patches: the one that said
Running splits each job's lag into the operator's share (last pod Running -> the API server
received the patch), the API server's (received -> answered: its queueing under API
Priority and Fairness included) and the watch's (answered -> the bench saw Running), and
the slowest 1 % are shown with when their pods turned Running. The operator's log line for
each phase change (when its pod watch told of the pods' change, how long the pass waited for
a worker, decided, and waited for its patch) splits the slowest jobs' operator share again:
its pod watch behind the bench's, the wait to the pass (coalescing, the delaying queue), the
wait for a worker, the pass itself, and the patch until the API server received it (its
write token, a connection).
Before the runs of each N, the same pods are created by an unpaced client (32 requests
in flight, the operator's credentials): the API server's ceiling on this machine, which
bounds "creation -> all its pods exist" for the last of N jobs whatever the operator does;
the time until the scheduler and KWOK have all those pods Running is the cluster's floor
under "all N Running".
Between runs every job is deleted
while the operator still runs (its finalizers come off), so the same N runs again clean.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLUSTER = "bench-scale"
NAMESPACE = "bench"
CLAIM = "shared-checkpoints"
# kubectl's condition wait errs on a just-created CRD (status.conditions: null); its JSONPath wait waits.
ESTABLISHED = '--for=jsonpath={.status.conditions[?(@.type=="Established")].status}=True'
OPERATOR_USER = "system:serviceaccount:disttrain-system:disttrain-operator"
# Every write by the operator, nothing else: the log stays small at 500 jobs. Its status
# patches with their bodies: the one that says Running splits the lag (lag_split).
AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                "rules": [{"level": "Request", "users": [OPERATOR_USER], "verbs": ["patch"],
                           "resources": [{"group": "disttrain.dev", "resources": ["distributedtrainings/status"]}]},
                          {"level": "Metadata", "users": [OPERATOR_USER],
                           "verbs": ["create", "update", "patch", "delete", "deletecollection"]},
                          {"level": "None"}]}


# `python -m disttrain.operator` as the operator image runs it: that image has no official
# Kubernetes client (the operator extra leaves it out), which this machine's virtualenv has
# for the CLI; kopf would import it into the operator's memory. Older operators kept it out
# themselves, so both variants are measured alike.
AS_IN_THE_IMAGE = """
import runpy, sys
class NotInTheImage:
    def find_spec(self, name, path=None, target=None):
        if name == "kubernetes" or name.startswith("kubernetes."):
            raise ImportError("the operator image has no official client")
sys.meta_path.insert(0, NotInTheImage())
runpy.run_module(sys.argv.pop(1), run_name="__main__")
"""


# The operator's module in a tree: disttrain.operator since issue 55's layout, the flat
# disttrain_operator package before it (a --baseline from before the move).
def operator_module(tree: Path) -> str:
    return "disttrain.operator" if (tree / "operator" / "disttrain" / "operator").is_dir() else "disttrain_operator"



def sh(*args: str, env=None, input: str | None = None, check=True) -> str:
    proc = subprocess.run(args, capture_output=True, text=True, env=env, input=input)
    if check and proc.returncode:
        raise SystemExit(f"{' '.join(args[:4])}... failed: {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (and its reaped children), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks


def apiserver_pid(state_hint: str) -> int | None:
    """The kube-apiserver of our cluster (its command line names the cluster's state dir)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"kube-apiserver") and any(state_hint.encode() in c for c in cmd):
            return int(entry)
    return None


class Bench:
    name = CLUSTER  # the cluster's name for hack/cluster.sh

    def __init__(self, nodes: int):
        self.nodes = nodes
        self.bin = sh("bash", str(REPO / "hack" / "build-tools.sh"), "--print-bin").strip()
        self.env = {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}"}

    def kubectl(self, *args: str, input: str | None = None, check=True) -> str:
        return sh(f"{self.bin}/kubectl", "--kubeconfig", self.kubeconfig, *args, input=input, check=check)

    def up(self) -> None:
        print(f"starting cluster {CLUSTER} ...", file=sys.stderr)
        policy = Path(tempfile.mkdtemp()) / "audit-policy.json"
        policy.write_text(json.dumps(AUDIT_POLICY))
        out = sh("bash", str(REPO / "hack" / "cluster.sh"), "up", CLUSTER,
                 env={**self.env, "DISTTRAIN_CLUSTER_OWNER_PID": str(os.getpid()),
                      "DISTTRAIN_AUDIT_POLICY": str(policy)})
        self.kubeconfig = out.strip().split("=", 1)[1].strip("'\"")
        # Roomy fake nodes for 2,000 jobs of 8 (the default ones hold 110 pods each).
        room = {"cpu": "4000", "memory": "16Ti", "pods": "5000"}
        nodes = [{"apiVersion": "v1", "kind": "Node",
                  "metadata": {"name": f"bench-node-{i}", "annotations": {"kwok.x-k8s.io/node": "fake"},
                               "labels": {"type": "kwok", "bench": "true"}},
                  "status": {"capacity": room, "allocatable": room}}
                 for i in range(4)]
        self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}))
        self.operator_credentials(Path(tempfile.mkdtemp()))

    def operator_credentials(self, where: Path) -> None:
        """The CRD and the operator's namespace and RBAC, and a kubeconfig in WHERE with its
        ServiceAccount's token: the operator runs with the rights users give it."""
        self.kubectl("apply", "-f", str(REPO / "manifests" / "crd"))
        self.kubectl("apply", "-f", str(REPO / "manifests" / "operator" / "namespace.yaml"))
        self.kubectl("apply", "-f", str(REPO / "manifests" / "rbac"))
        self.kubectl("wait", ESTABLISHED, "crd/distributedtrainings.disttrain.dev")
        token = self.kubectl("create", "token", "disttrain-operator", "-n", "disttrain-system",
                             "--duration=2h").strip()
        admin = json.loads(self.kubectl("config", "view", "--raw", "-o", "json"))
        cluster = admin["clusters"][0]
        self.operator_kubeconfig = where / "operator.kubeconfig"
        self.operator_kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
            "users": [{"name": "operator", "user": {"token": token}}],
            "contexts": [{"name": "operator", "context": {"cluster": cluster["name"], "user": "operator"}}],
            "current-context": "operator"}))

    def down(self) -> None:
        sh("bash", str(REPO / "hack" / "cluster.sh"), "down", self.name, env=self.env, check=False)

    def throttled(self) -> int:
        """429 answers to any client so far (apiserver_request_total)."""
        total = 0
        for line in self.kubectl("get", "--raw", "/metrics").splitlines():
            if line.startswith("apiserver_request_total{") and 'code="429"' in line:
                total += int(float(line.rsplit(" ", 1)[1]))
        return total

    def _audit(self, ns: str) -> Iterator[dict]:
        """The audit log's answered requests in namespace NS (the operator's writes)."""
        with open(Path(self.kubeconfig).parent / "audit.log", encoding="utf-8") as lines:
            for line in lines:
                entry = json.loads(line)
                if entry.get("stage") == "ResponseComplete" and (entry.get("objectRef") or {}).get("namespace") == ns:
                    yield entry

    def operator_writes(self, ns: str) -> collections.Counter:
        """The operator's writes in namespace NS by (verb, resource[/subresource], code),
        from the audit log."""
        counts: collections.Counter = collections.Counter()
        for entry in self._audit(ns):
            ref = entry["objectRef"]
            resource = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            counts[(entry["verb"], resource, (entry.get("responseStatus") or {}).get("code", 0))] += 1
        return counts

    def running_writes(self, ns: str) -> dict[str, tuple[float, float]]:
        """Per job of namespace NS, when the API server received the operator's status patch
        that said Running and when it had answered it (wall clock, from the audit log)."""
        found: dict[str, tuple[float, float]] = {}
        for entry in self._audit(ns):
            ref = entry["objectRef"]
            phase = (((entry.get("requestObject") or {}).get("status")) or {}).get("phase")
            if ref.get("subresource") == "status" and phase == "Running":
                found.setdefault(ref["name"], (wall_seconds(entry["requestReceivedTimestamp"]),
                                               wall_seconds(entry["stageTimestamp"])))
        return found

    def run(self, jobs: int, variant: str, tree: Path, attempt: int, profile: Path | None = None,
            extra_env: dict[str, str] | None = None) -> dict:
        ns = f"{NAMESPACE}-{jobs}-{variant}-{attempt}"
        # Each operator runs with its own tree's CRD: the API server stores a newer CRD's
        # defaults into every job, and an older operator refuses fields it does not know.
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(tree / "manifests" / "crd" /
                                                                               "disttrain.dev_distributedtrainings.yaml"))
        self.kubectl("wait", ESTABLISHED, "crd/distributedtrainings.disttrain.dev")
        self.kubectl("create", "namespace", ns)
        self.checkpoint_claim(ns)
        from disttrain.local.ports import free_port

        port = free_port()
        # /metrics is read only to see the operator up: plain HTTP, as older trees serve it
        # (they ignore DISTTRAIN_METRICS_AUTH), so every tree is started the same way.
        env = {**self.env, "KUBECONFIG": str(self.operator_kubeconfig), "DISTTRAIN_OPERATOR_METRICS_PORT": str(port),
               "DISTTRAIN_METRICS_AUTH": "none", "PYTHONPATH": f"{tree / 'operator'}:{tree / 'trainer'}",
               **(extra_env or {})}
        log_path = Path(tempfile.gettempdir()) / f"disttrain-bench-operator-{jobs}-{variant}-{attempt}.log"
        log = open(log_path, "wb")
        command = [sys.executable, "-c", AS_IN_THE_IMAGE, operator_module(tree), "-n", ns, "--liveness", ""]
        operator = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        apiserver = apiserver_pid(CLUSTER)
        spy = None
        if profile is not None:  # sample the operator's stacks for the whole run (py-spy, optional)
            profile.mkdir(parents=True, exist_ok=True)
            spy = subprocess.Popen(["py-spy", "record", "--format", "raw", "--rate", "50", "--pid", str(operator.pid),
                                    "-o", str(profile / f"{variant}-{jobs}-{attempt}.txt")],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.time() - time.monotonic()  # audit log stamps (wall) -> this run's monotonic stamps
        seen_pods: dict[str, float] = {}
        pods_running: dict[str, float] = {}
        running: dict[str, float] = {}
        stop = threading.Event()
        watchers = [threading.Thread(target=self._watch, args=(ns, "pods", seen_pods, stop, pods_running), daemon=True),
                    threading.Thread(target=self._watch, args=(ns, "dt", running, stop), daemon=True)]
        try:
            wait_http(port)
            for w in watchers:
                w.start()
            time.sleep(1)
            throttled_before = self.throttled()
            cpu_before = cpu_seconds(operator.pid), cpu_seconds(apiserver) if apiserver else 0.0
            created: dict[str, float] = {}
            manifests = [self.manifest(f"job-{i:04d}", ns) for i in range(jobs)]
            for chunk in range(0, jobs, 50):
                batch = manifests[chunk:chunk + 50]
                stamp = time.monotonic()
                self.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": batch}))
                for m in batch:
                    created[m["metadata"]["name"]] = stamp
            wait_for_count(running, jobs)
            time.sleep(3)
            writes = self.operator_writes(ns)
            said_running = self.running_writes(ns)
            throttled = self.throttled() - throttled_before
            rss_kib = peak_rss_kib(operator.pid)
            cpu = (cpu_seconds(operator.pid) - cpu_before[0],
                   (cpu_seconds(apiserver) - cpu_before[1]) if apiserver else float("nan"))
            # Delete the jobs while the operator runs, so its finalizers come off and the
            # namespace goes away: the same N can run again on this cluster.
            self.kubectl("delete", "dt", "--all", "-n", ns, "--wait=true", "--timeout=600s", check=False)
        finally:
            stop.set()
            if spy is not None:
                spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                spy.wait(timeout=60)
            os.killpg(operator.pid, signal.SIGTERM)
            operator.wait(timeout=60)
        to_pods, to_running, lag, split, inside = [], [], [], [], []
        first = min(created.values(), default=0.0)
        passes = operator_passes(log_path)
        for name, t0 in created.items():
            pods = [seen_pods.get(f"{name}-worker-{i}") for i in range(self.nodes)]
            if all(pods):
                to_pods.append(max(pods) - t0)
            if name in running:
                to_running.append(running[name] - t0)
                ran = [pods_running.get(f"{name}-worker-{i}") for i in range(self.nodes)]
                if all(ran):  # the operator's own share: last pod Running -> job Running
                    lag.append(running[name] - max(ran))
                    if name in said_running:  # (lag, since the first creation, operator, API server, watch)
                        received, answered = (t - wall for t in said_running[name])
                        split.append((lag[-1], max(ran) - first, received - max(ran),
                                      answered - received, running[name] - answered))
                        if name in passes:  # (lag, watch, to the pass, worker, decide, patch until received)
                            changed, waited, decide, asked = passes[name]
                            inside.append((lag[-1], changed - wall - max(ran), asked - decide - changed - waited,
                                           waited, decide, received - (asked - wall)))
        self.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=300s", check=False)
        return {"variant": variant, "run": attempt, "jobs": jobs, "nodes": self.nodes, "complete": len(to_running),
                "conflicts": sum(n for (verb, _r, code), n in writes.items() if verb == "create" and code == 409),
                "throttled": throttled, "writes": writes,
                "op_throttled": sum(n for (_verb, _r, code), n in writes.items() if code == 429), "cpu_operator": cpu[0], "cpu_apiserver": cpu[1],
                "pods_p50": statistics.median(to_pods) if to_pods else float("nan"),
                "pods_p99": percentile(to_pods, 0.99) if to_pods else float("nan"),
                "running_p50": statistics.median(to_running) if to_running else float("nan"),
                "running_p99": percentile(to_running, 0.99) if to_running else float("nan"),
                "lag_p50": statistics.median(lag) if lag else float("nan"),
                "lag_p99": percentile(lag, 0.99) if lag else float("nan"),
                "lag_split": split, "operator_split": inside,
                "writes_per_job": sum(writes.values()) / jobs, "rss_mib": rss_kib / 1024,
                # The first job created -> the last job Running: the whole burst.
                "all_running": (max(running[n] for n in created if n in running) - first
                                if len(to_running) == jobs else float("nan"))}

    def create_ceiling(self, jobs: int) -> dict:
        """What this API server absorbs here: the pods of `jobs` bench jobs (the operator's
        own rendering, owner references left out) created by an unpaced client, 32 requests
        in flight, with the operator's credentials, so the same priority level. The time it
        takes is the floor under 'create -> all pods created' for the last job; the time until
        the scheduler and KWOK have them all Running is the cluster's own floor under 'all N
        Running', which no operator can beat."""
        import asyncio

        import kopf

        from disttrain.api.validate import validate_document
        from disttrain.operator.kube import Kube
        from disttrain.integrations.registry import render_pod

        ns = f"{NAMESPACE}-ceiling-{jobs}"
        self.kubectl("create", "namespace", ns)
        self.checkpoint_claim(ns)
        pods = []
        for i in range(jobs):
            result = validate_document(self.manifest(f"job-{i:04d}", ns))
            for index in range(self.nodes):
                pod = render_pod(result.job, result.resolved, index)
                pod["metadata"].pop("ownerReferences", None)
                pods.append(pod)

        async def create_all() -> float:
            os.environ["KUBECONFIG"] = str(self.operator_kubeconfig)
            kube = Kube(kopf.login_with_kubeconfig(settings=kopf.OperatorSettings()), qps=1e9, burst=10**9)
            gate = asyncio.Semaphore(32)

            async def one(pod: dict) -> None:
                async with gate:
                    await kube.create(pod)

            try:
                start = time.monotonic()
                await asyncio.gather(*(one(pod) for pod in pods))
                return time.monotonic() - start
            finally:
                await kube.close()

        running: dict[str, float] = {}
        stop = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(ns, "pods", {}, stop, running), daemon=True)
        try:
            watcher.start()
            time.sleep(1)
            start = time.monotonic()
            elapsed = asyncio.run(create_all())
            wait_for_count(running, len(pods))
            all_running = max(running.values()) - start if len(running) == len(pods) else float("nan")
        finally:
            stop.set()
            self.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=300s", check=False)
        return {"jobs": jobs, "pods": len(pods), "seconds": elapsed, "rate": len(pods) / elapsed,
                "all_running": all_running}

    def manifest(self, name: str, ns: str) -> dict:
        return {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"nodes": self.nodes, "checkpoint": {"claimName": CLAIM},
                         "trainer": {"builtin": {"steps": 1000}},
                         "scheduling": {"nodeSelector": {"bench": "true"}}}}

    def checkpoint_claim(self, ns: str) -> None:
        """Jobs of several pods need a shared claim, bound, or no pod is scheduled."""
        volume = f"{ns}-{uuid.uuid4().hex[:6]}"
        pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
              "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                       "claimRef": {"namespace": ns, "name": CLAIM}, "hostPath": {"path": "/nonexistent"}}}
        pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CLAIM, "namespace": ns},
               "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": volume,
                        "resources": {"requests": {"storage": "1Gi"}}}}
        self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [pv, pvc]}))
        self.kubectl("wait", "-n", ns, "--for=jsonpath={.status.phase}=Bound", "--timeout=60s", f"pvc/{CLAIM}")

    def _watch(self, ns: str, kind: str, seen: dict[str, float], stop: threading.Event,
               running: dict[str, float] | None = None) -> None:
        """First time each pod appears (and runs) / each job reports Running (client clock).
        kubectl prints one line per object, name and phase: a burst of thousands of pods'
        events as pretty-printed JSON took this thread minutes to parse, so every time it
        took was late by its backlog; and a watch that starts (or starts again) on more than
        500 objects gets them as chunked lists, which custom-columns prints item by item
        (JSON or JSONPath would see one list and miss every pod in it)."""
        cmd = [f"{self.bin}/kubectl", "--kubeconfig", self.kubeconfig, "get", kind, "-n", ns, "--watch",
               "--no-headers", "-o", "custom-columns=NAME:.metadata.name,PHASE:.status.phase"]
        while not stop.is_set():  # the API server ends watches now and then: watch again
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
            while not stop.is_set():
                line = proc.stdout.readline()
                if not line:
                    break
                name, _, phase = line.strip().partition(" ")
                phase = phase.strip()
                if kind == "pods" and name:
                    seen.setdefault(name, time.monotonic())
                    if running is not None and phase == "Running":
                        running.setdefault(name, time.monotonic())
                if kind == "dt" and name and phase == "Running":
                    seen.setdefault(name, time.monotonic())
            proc.kill()
            proc.wait()


# The operator's own write pacing taken out of the way (the lifted run).
LIFTED = {"DISTTRAIN_API_QPS": "1000", "DISTTRAIN_API_BURST": "1000"}


def wait_for_count(seen: dict[str, float], count: int, seconds: float = 3600) -> None:
    """Until a watcher has seen `count` names (or an hour went by: the result then says so)."""
    deadline = time.monotonic() + seconds
    while len(seen) < count and time.monotonic() < deadline:
        time.sleep(0.5)


def wall_seconds(stamp: str) -> float:
    """An audit log timestamp (RFC 3339, microseconds) as seconds since the epoch."""
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


PHASE_LINE = re.compile(r"^\[(?P<stamp>[0-9-]+ [0-9:,]+)\] \S+ \[INFO *\] [^/]+/(?P<job>\S+): phase Pending -> "
                        r"Running; the pods changed (?P<since>[0-9.]+)s before the pass, which had waited "
                        r"(?P<waited>[0-9.]+)s for a worker and took (?P<decide>[0-9.]+)s to decide; the patch took "
                        r"(?P<patch>[0-9.]+)s")


def operator_passes(log: Path) -> dict[str, tuple[float, float, float, float]]:
    """From the operator's log, per job that turned Running: (when its pod watch told of the
    change, wall clock; the wait for a worker; the pass until the patch; when the patch was
    asked for, wall clock). The log's stamps are local time, to the millisecond."""
    found = {}
    for line in log.read_text(errors="replace").splitlines():
        m = PHASE_LINE.match(line)
        if m:
            logged = datetime.datetime.strptime(m["stamp"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            asked = logged - float(m["patch"])
            started = asked - float(m["decide"])
            found[m["job"]] = (started - float(m["since"]), float(m["waited"]), float(m["decide"]), asked)
    return found


def operator_split_summary(inside: list[tuple[float, ...]]) -> str:
    """Where the slowest 1 % of jobs spent the operator's share (means, in seconds)."""
    if not inside:
        return "no phase line in the operator's log"
    slow = sorted(inside)[-max(1, len(inside) // 100):]
    parts = ["pod watch behind the bench's", "to the pass", "waiting for a worker", "the pass", "patch until received"]
    return f"the slowest {len(slow)}: " + ", ".join(
        f"{part} {statistics.mean(s[1 + i] for s in slow):.2f}s" for i, part in enumerate(parts))


def lag_split_summary(split: list[tuple[float, float, float, float, float]]) -> str:
    """p50/p99 of each share of the lag, and where the slowest 1 % of jobs spent theirs."""
    if not split:
        return "no Running patch found in the audit log"
    parts = ["operator", "API server", "watch"]
    text = ", ".join(f"{part} {statistics.median(s[2 + i] for s in split):.2f}/"
                     f"{percentile([s[2 + i] for s in split], 0.99):.2f}s" for i, part in enumerate(parts))
    slow = sorted(split)[-max(1, len(split) // 100):]
    shares = ", ".join(f"{part} {statistics.mean(s[2 + i] for s in slow):.2f}s" for i, part in enumerate(parts))
    return (f"p50/p99 {text}; the slowest {len(slow)} (lag {slow[0][0]:.2f}-{slow[-1][0]:.2f}s, their last pod "
            f"Running {min(s[1] for s in slow):.0f}-{max(s[1] for s in slow):.0f}s after the first creation): "
            f"mean {shares}")


def wait_http(port: int, timeout: float = 60) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read()
            return
        except OSError:
            time.sleep(0.3)
    raise SystemExit("the operator did not start (see its log in the temp directory)")


def peak_rss_kib(pid: int) -> int:
    """VmHWM of the operator process (its peak resident set)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def profile_summary(path: Path, top: int = 8) -> list[str]:
    """Where the operator's samples went: the share of samples under each of our own (or
    kopf's, aiohttp's, the client's) functions nearest the leaf, from py-spy's raw stacks."""
    counts: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        total += int(n)
        frames = stack.split(";")
        leaf = next((f for f in reversed(frames) if any(k in f for k in ("disttrain.operator", "kopf/", "aiohttp/",
                                                                        "kubernetes/", "yaml/", "json/"))), frames[-1])
        name = re.sub(r":\d+\)$", ")", leaf)  # "func (path/file.py:123)" -> "func (path/file.py)"
        counts[name] = counts.get(name, 0) + int(n)
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
    return [f"    {100 * n / max(total, 1):5.1f}%  {name}" for name, n in ranked]


def baseline_tree(ref: str) -> Path:
    """A temporary worktree of an older revision, whose operator runs beside ours."""
    path = Path(tempfile.mkdtemp(prefix="disttrain-baseline-"))
    sh("git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(path), ref)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", default="100,500", help="comma-separated job counts (default 100,500)")
    parser.add_argument("--nodes", type=int, default=8, help="worker pods per job (default 8)")
    parser.add_argument("--repeat", type=int, default=2, help="runs per N and operator (default 2)")
    parser.add_argument("--baseline", default="", help="git revision whose operator runs beside this one")
    parser.add_argument("--profile", default="", help="directory for py-spy profiles of each run (needs py-spy)")
    parser.add_argument("--lifted", action="store_true",
                        help="also run this operator with DISTTRAIN_API_QPS/BURST lifted (1000/1000): how close "
                             "'all N Running' comes to the cluster's floor when the operator's pacing is off")
    args = parser.parse_args()
    variants: list[tuple[str, Path, dict[str, str]]] = [("this", REPO, {})]
    if args.baseline:
        variants.insert(0, (f"base:{args.baseline[:10]}", baseline_tree(args.baseline), {}))
    if args.lifted:
        variants.append(("this-lifted", REPO, LIFTED))
    bench = Bench(args.nodes)
    bench.up()
    results = []
    ceilings = []
    try:
        for jobs in (int(n) for n in args.jobs.split(",")):
            print(f"API server ceiling: creating the pods of {jobs} jobs unpaced ...", file=sys.stderr)
            ceilings.append(bench.create_ceiling(jobs))
            for attempt in range(1, args.repeat + 1):
                for label, tree, extra in variants:
                    print(f"running {label} N={jobs} x M={args.nodes} (run {attempt}) ...", file=sys.stderr)
                    results.append(bench.run(jobs, label.replace(":", "-"), tree, attempt,
                                             Path(args.profile) if args.profile else None, extra) | {"label": label})
    finally:
        bench.down()
        for label, tree, _extra in variants:
            if tree != REPO:
                sh("git", "-C", str(REPO), "worktree", "remove", "--force", str(tree), check=False)
    print("pods: creation -> all its pods exist; run: creation -> phase Running; "
          "lag: last pod Running -> phase Running (the operator's own share); CPU in seconds")
    print("409: the operator's creates answered AlreadyExists; op 429: its writes answered 429; "
          "all 429: every client's (the scheduler's and KWOK's too)")
    print(f"{'operator':<16} {'N':>4} {'#':>2} {'Running':>7} {'pods p50':>8} {'pods p99':>8} {'run p50':>8} "
          f"{'run p99':>8} {'lag p50':>8} {'lag p99':>8} {'writes/job':>10} {'409':>5} {'op 429':>6} {'all 429':>7} "
          f"{'op CPU':>7} {'api CPU':>7} {'peak RSS':>8} {'all Running':>11}")
    for r in results:
        print(f"{r['label']:<16} {r['jobs']:>4} {r['run']:>2} {r['complete']:>7} {r['pods_p50']:>7.2f}s "
              f"{r['pods_p99']:>7.2f}s {r['running_p50']:>7.2f}s {r['running_p99']:>7.2f}s {r['lag_p50']:>7.2f}s "
              f"{r['lag_p99']:>7.2f}s {r['writes_per_job']:>10.2f} {r['conflicts']:>5} {r['op_throttled']:>6} "
              f"{r['throttled']:>7} {r['cpu_operator']:>7.1f} {r['cpu_apiserver']:>7.1f} {r['rss_mib']:>6.0f}Mi "
              f"{r['all_running']:>10.1f}s")
    for c in ceilings:
        print(f"API server ceiling, N={c['jobs']}: {c['pods']} pods created unpaced (32 in flight, the operator's "
              f"credentials) in {c['seconds']:.1f}s = {c['rate']:.0f} pods/s: the last job's pods cannot all exist "
              f"sooner than that after the burst")
        print(f"  ... and all of them Running {c['all_running']:.1f}s after the first create: the cluster's own "
              f"floor (scheduler, KWOK) under 'all N Running'")
        for r in results:
            if r["jobs"] == c["jobs"]:
                print(f"  {r['label']} run {r['run']}: all {r['jobs']} Running after {r['all_running']:.1f}s = "
                      f"x{r['all_running'] / c['all_running']:.2f} the cluster's floor")
    print("lag split (the status patch that said Running, from the audit log): operator = last pod Running -> "
          "the API server received the patch; API server = received -> answered; watch = answered -> seen Running")
    for r in results:
        print(f"  {r['label']} N={r['jobs']} run {r['run']}: {lag_split_summary(r['lag_split'])}")
        print(f"    inside the operator (its log): {operator_split_summary(r['operator_split'])}")
    for r in results:
        per_job = ", ".join(f"{verb} {resource} {code} {n / r['jobs']:.2f}"
                            for (verb, resource, code), n in sorted(r["writes"].items()))
        print(f"{r['label']} N={r['jobs']} run {r['run']}: operator writes per job (audit log): {per_job}")
    if args.baseline:
        for jobs in sorted({r["jobs"] for r in results}):
            base = [r for r in results if r["jobs"] == jobs and r["label"].startswith("base:")]
            ours = [r for r in results if r["jobs"] == jobs and r["label"] == "this"]
            def mean(rows, key):
                return statistics.mean(r[key] for r in rows)
            print(f"N={jobs}, this / baseline (mean of runs): lag p99 x{mean(ours, 'lag_p99') / mean(base, 'lag_p99'):.2f}, "
                  f"writes/job x{mean(ours, 'writes_per_job') / mean(base, 'writes_per_job'):.2f}, "
                  f"operator CPU x{mean(ours, 'cpu_operator') / mean(base, 'cpu_operator'):.2f}, "
                  f"peak RSS x{mean(ours, 'rss_mib') / mean(base, 'rss_mib'):.2f}")
    if args.profile:
        for r in results:
            path = Path(args.profile) / f"{r['variant']}-{r['jobs']}-{r['run']}.txt"
            if path.exists():
                print(f"profile {r['label']} N={r['jobs']} run {r['run']} (share of samples, nearest own frame):")
                print("\n".join(profile_summary(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
