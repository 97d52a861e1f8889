"""Placement's cost: the time from a job's creation until all its workers are Running, with
Kueue's Topology-Aware Scheduling and with kube-scheduler's own gang, against the same jobs
without them, in one run, side by side as ratios (issue 69; the goal is no worse than 1.2x).

    make bench                                          # 100 jobs of 2 workers, each variant once
    python bench/placement.py --jobs 10                 # a quick look
    python bench/placement.py --variants plain,tas --repeat 2

Variants (the same job, 2 workers of 4 fake GPUs, on the same nodes):

  plain   no gang, no queue: the operator creates the workers, kube-scheduler binds them
  gang    spec.scheduling.gang without schedulerName: a scheduling.k8s.io/v1beta1 PodGroup,
          kube-scheduler places the workers all or none (GenericWorkload)
  kueue   queued (the label kueue.x-k8s.io/queue-name), a flavor without a topology: Kueue
          admits the Workload before the operator creates any worker
  tas     queued on a TAS flavor, spec.scheduling.topology.required: rack: Kueue admits and
          places the Workload on one rack, its ungater lifts each worker's gate

"tas / kueue" separates the topology's own cost from Kueue's admission, which a queued job
pays whether or not it asks for a topology.

Why so: one cluster (hack/cluster.sh, GenericWorkload on in all three components) with
Kueue running (tests/kueue_host.py, as the cluster tests run it) and KWOK nodes of 8 fake
GPUs labelled block / rack / host, enough for every job at once (a spare rack besides), and
ClusterQueues with quota for all: what is measured is the mechanism's latency, never a wait
for room. The variants run one after the other on this cluster, so they share the machine,
its load and the control plane's warm caches; each in its own namespace with a fresh
operator (DISTTRAIN_KUEUE on for all: one operator, as a cluster with Kueue runs it), its
jobs deleted and the namespace gone before the next. The same GenericWorkload gate is on for
every variant: the plain jobs are measured on the gated scheduler too, so the ratio is the
gang's own cost, not the gate's. Jobs are created 50 to a request, each stamped when its
request was sent; a worker is Running when the bench's pod watch first says so.
Percentiles over the jobs of one variant; "all" is the first creation -> the last worker
Running. Everything the bench makes lives in the cluster's state directory, removed by
`cluster.sh down`, or by its reaper if this process dies.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "bench")]
import kueue_host  # noqa: E402  (tests/kueue_host.py: Kueue as a host process)
import operator_scale as scale  # noqa: E402  (the operator as a process, the watches)

CLUSTER = "bench-placement"
POOL, BLOCK, RACK, HOST = ("bench.disttrain.dev/pool", "bench.disttrain.dev/block", "bench.disttrain.dev/rack",
                           "kubernetes.io/hostname")
GPUS, GPUS_PER_HOST, HOSTS_PER_RACK, RACKS_PER_BLOCK = "nvidia.com/gpu", 8, 4, 4
KUEUE = "kueue.x-k8s.io/v1beta2"
ACTIVE = '--for=jsonpath={.status.conditions[?(@.type=="Active")].status}=True'
CHUNK = 50  # jobs per create request, as operator_scale creates them


@dataclass(frozen=True)
class Variant:
    name: str
    scheduling: dict = field(default_factory=dict)  # added to spec.scheduling
    queue: str = ""  # the LocalQueue (and ClusterQueue) of a queued variant


VARIANTS = {v.name: v for v in (Variant("plain"), Variant("gang", {"gang": {}}), Variant("kueue", queue="kueue"),
                                Variant("tas", {"topology": {"required": RACK}}, queue="tas"))}


class Placement(scale.Bench):
    name = CLUSTER

    def __init__(self, workers: int, gpus: int):
        super().__init__(workers)
        self.gpus = gpus

    def up(self, stack: contextlib.ExitStack, jobs: int) -> None:
        """The gated cluster, its nodes, the operator's rights, Kueue and its queues."""
        print(f"starting cluster {CLUSTER} (GenericWorkload on) ...", file=sys.stderr)
        out = scale.sh("bash", str(REPO / "hack" / "cluster.sh"), "up", CLUSTER, env={
            **self.env, "DISTTRAIN_CLUSTER_OWNER_PID": str(os.getpid()), "DISTTRAIN_FEATURE_GATES":
            "GenericWorkload=true", "DISTTRAIN_FAKE_GPU_NODES": "0", "DISTTRAIN_FAKE_CPU_NODES": "0"})
        self.kubeconfig = out.strip().split("=", 1)[1].strip("'\"")
        self.work = Path(self.kubeconfig).parent / "bench-placement"  # goes with the cluster
        self.work.mkdir(exist_ok=True)
        hosts = self.nodes_for(jobs)
        self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": hosts}))
        self.kubectl("wait", "--for=condition=Ready", "node", "-l", POOL, "--timeout=180s")
        self.operator_credentials(self.work)
        self.kubectl("apply", "-f", str(REPO / "manifests" / "kueue" / "rbac.yaml"))
        print("starting Kueue ...", file=sys.stderr)
        # Evicting a slow gang is Kueue's answer to a stuck start; here it would only blur the time.
        stack.enter_context(kueue_host.running(Path(self.bin), self.kubeconfig, self.work / "kueue",
                                               pods_ready_timeout=3600))
        self.queues(len(hosts) * GPUS_PER_HOST)

    def nodes_for(self, jobs: int) -> list[dict]:
        """KWOK hosts of 8 GPUs for every worker at once, whole racks of 4 and one spare
        rack, 4 racks to a block."""
        racks = math.ceil(jobs * self.nodes * self.gpus / (GPUS_PER_HOST * HOSTS_PER_RACK)) + 1
        capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", GPUS: str(GPUS_PER_HOST)}
        hosts = []
        for rack in range(racks):
            block = rack // RACKS_PER_BLOCK
            for host in range(HOSTS_PER_RACK):
                name = f"bench-r{rack:03d}-h{host}"
                hosts.append({"apiVersion": "v1", "kind": "Node", "metadata": {
                    "name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                    "labels": {POOL: "bench", BLOCK: f"b{block}", RACK: f"r{rack:03d}", HOST: name, "type": "kwok"}},
                    "status": {"capacity": capacity, "allocatable": capacity}})
        return hosts

    def queues(self, gpus: int) -> None:
        """A Topology, and per queued variant a flavor on the bench's nodes (with the topology
        for tas) and a ClusterQueue with quota for every job."""
        items = [{"apiVersion": KUEUE, "kind": "Topology", "metadata": {"name": "bench"},
                  "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOST}]}}]
        for queue, topology in (("kueue", {}), ("tas", {"topologyName": "bench"})):
            items += [{"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": queue},
                       "spec": {"nodeLabels": {POOL: "bench"}, **topology}},
                      {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": queue}, "spec": {
                          "namespaceSelector": {}, "resourceGroups": [{"coveredResources": [GPUS], "flavors": [
                              {"name": queue, "resources": [{"name": GPUS, "nominalQuota": gpus}]}]}]}}]
        self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        for queue in ("kueue", "tas"):
            self.kubectl("wait", ACTIVE, f"clusterqueue/{queue}", "--timeout=60s")

    def job(self, name: str, ns: str, variant: Variant) -> dict:
        doc = {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
               "metadata": {"name": name, "namespace": ns},
               "spec": {"nodes": self.nodes, "gpusPerNode": self.gpus, "checkpoint": {"storage": "none"},
                        "trainer": {"builtin": {"steps": 1000}},
                        "scheduling": {"nodeSelector": {POOL: "bench"}, **variant.scheduling}}}
        if variant.queue:
            doc["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": variant.queue}
        return doc

    def start_operator(self, ns: str) -> subprocess.Popen:
        """The operator as its image runs it, on NS only, DISTTRAIN_KUEUE on; it dies with us."""
        from disttrain.local.ports import free_port
        from disttrain.local.run import die_with_parent

        port = free_port()
        env = {**self.env, "KUBECONFIG": str(self.operator_kubeconfig), "DISTTRAIN_OPERATOR_METRICS_PORT": str(port),
               "DISTTRAIN_METRICS_AUTH": "none", "DISTTRAIN_KUEUE": "true",
               "PYTHONPATH": f"{REPO / 'operator'}:{REPO / 'trainer'}"}
        log = open(self.work / f"operator-{ns}.log", "wb")
        command = [sys.executable, "-c", scale.AS_IN_THE_IMAGE, scale.operator_module(REPO), "-n", ns, "--liveness", ""]
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=die_with_parent)
        log.close()  # the child holds its own copy
        try:
            scale.wait_http(port)
        except SystemExit:
            stop(proc)
            raise
        return proc

    def create(self, ns: str, variant: Variant, jobs: int) -> dict[str, float]:
        """The jobs, 50 to a request; each stamped when its request was sent."""
        created: dict[str, float] = {}
        docs = [self.job(f"job-{i:04d}", ns, variant) for i in range(jobs)]
        for chunk in range(0, jobs, CHUNK):
            batch = docs[chunk:chunk + CHUNK]
            stamp = time.monotonic()
            self.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": batch}))
            created.update((d["metadata"]["name"], stamp) for d in batch)
        return created

    def run(self, variant: Variant, jobs: int, attempt: int, timeout: float) -> dict:
        ns = f"placement-{variant.name}-{attempt}"
        self.kubectl("create", "namespace", ns)
        if variant.queue:
            self.kubectl("apply", "-f", "-", input=json.dumps({
                "apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"name": variant.queue, "namespace": ns},
                "spec": {"clusterQueue": variant.queue}}))
        workers: dict[str, float] = {}
        phases: dict[str, float] = {}
        halt = threading.Event()
        watches = [threading.Thread(target=self._watch, args=(ns, "pods", {}, halt, workers), daemon=True),
                   threading.Thread(target=self._watch, args=(ns, "dt", phases, halt), daemon=True)]
        operator = self.start_operator(ns)
        try:
            for w in watches:
                w.start()
            time.sleep(1)  # the watches listening before the first create
            created = self.create(ns, variant, jobs)
            scale.wait_for_count(workers, jobs * self.nodes, timeout)
            scale.wait_for_count(phases, jobs, 30)
            seen = self.evidence(ns)
            # Deleted while the operator runs, so the next variant finds the nodes empty.
            self.kubectl("delete", "dt", "--all", "-n", ns, "--wait=true", "--timeout=600s", check=False)
        finally:
            halt.set()
            stop(operator)
            self.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=600s", check=False)
        return summary(variant.name, attempt, created, workers, phases, self.nodes) | seen

    def evidence(self, ns: str) -> dict:
        """What the variant did, read before its jobs go: PodGroups, admitted Workloads, and
        jobs whose workers all share one rack (what the topology asks for)."""
        groups = self.kubectl("get", "podgroups.scheduling.k8s.io", "-n", ns, "-o", "name").split()
        loads = json.loads(self.kubectl("get", "workloads.kueue.x-k8s.io", "-n", ns, "-o", "json"))["items"]
        admitted = [w for w in loads if any(c["type"] == "Admitted" and c["status"] == "True"
                                            for c in (w.get("status") or {}).get("conditions", []))]
        pods = json.loads(self.kubectl("get", "pods", "-n", ns, "-o", "json"))["items"]
        racks: dict[str, set[str]] = {}
        for pod in pods:  # bench-rNNN-hH: the rack is in the node's name
            job = pod["metadata"].get("labels", {}).get("disttrain.dev/job", "?")
            racks.setdefault(job, set()).add((pod["spec"].get("nodeName") or "?").rsplit("-", 1)[0])
        return {"podgroups": len(groups), "admitted": len(admitted),
                "one_rack": sum(1 for r in racks.values() if len(r) == 1 and "?" not in r)}


def stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def summary(name: str, attempt: int, created: dict[str, float], workers: dict[str, float],
            phases: dict[str, float], count: int) -> dict:
    """Per job, creation -> its last worker Running (and -> its phase Running)."""
    to_workers, to_phase, last = [], [], []
    for job, t0 in created.items():
        ran = [workers.get(f"{job}-worker-{i}") for i in range(count)]
        if all(ran):
            to_workers.append(max(ran) - t0)
            last.append(max(ran))
        if job in phases:
            to_phase.append(phases[job] - t0)
    nan = float("nan")

    def pct(values: list[float], q: float) -> float:
        return scale.percentile(values, q) if values else nan

    return {"variant": name, "run": attempt, "jobs": len(created), "complete": len(to_workers),
            "p50": pct(to_workers, 0.5), "p99": pct(to_workers, 0.99),
            "all": max(last) - min(created.values()) if len(last) == len(created) else nan,
            "phase_p50": pct(to_phase, 0.5), "phase_p99": pct(to_phase, 0.99)}


def ratio(a: float, b: float) -> str:
    return f"x{a / b:.2f}" if b and not math.isnan(a) and not math.isnan(b) else "-"


def report(results: list[dict], workers: int, gpus: int) -> None:
    print(f"creation -> all workers Running (the bench's pod watch), per job; all: the first creation -> the last "
          f"worker Running; job: -> the job's phase Running. {workers} workers of {gpus} GPUs per job")
    print(f"{'variant':<8} {'#':>2} {'Running':>9} {'p50':>7} {'p99':>7} {'all':>7} {'job p50':>8} {'job p99':>8}"
          f"   {'vs plain: p50':>13} {'p99':>6} {'all':>6}")
    for r in results:
        base = next((b for b in results if b["variant"] == "plain" and b["run"] == r["run"]), None)
        vs = "   ".join(ratio(r[k], base[k]) if base else "-" for k in ("p50", "p99", "all"))
        print(f"{r['variant']:<8} {r['run']:>2} {r['complete']:>4}/{r['jobs']:<4} {r['p50']:>6.2f}s {r['p99']:>6.2f}s "
              f"{r['all']:>6.1f}s {r['phase_p50']:>7.2f}s {r['phase_p99']:>7.2f}s   {vs:>27}")
    for r in results:
        print(f"  {r['variant']} run {r['run']}: {r['podgroups']} PodGroups (scheduling.k8s.io), {r['admitted']} "
              f"Workloads admitted by Kueue, {r['one_rack']} of {r['jobs']} jobs with all workers in one rack")
    for r in (r for r in results if r["variant"] == "tas"):
        kueue = next((k for k in results if k["variant"] == "kueue" and k["run"] == r["run"]), None)
        if kueue:
            print(f"tas / kueue (the topology's own cost, run {r['run']}): p50 {ratio(r['p50'], kueue['p50'])}, "
                  f"p99 {ratio(r['p99'], kueue['p99'])}, all {ratio(r['all'], kueue['all'])}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100, help="jobs per variant (default 100)")
    parser.add_argument("--workers", type=int, default=2, help="workers per job (default 2)")
    parser.add_argument("--gpus", type=int, default=4, choices=(1, 2, 4, 8), help="fake GPUs per worker (default 4)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--repeat", type=int, default=1, help="runs of every variant, in turn (default 1)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a variant may take to run (default 600)")
    args = parser.parse_args()
    chosen = [VARIANTS[name] for name in args.variants.split(",")]
    bench = Placement(args.workers, args.gpus)
    results = []
    with contextlib.ExitStack() as stack:
        stack.callback(bench.down)
        bench.up(stack, args.jobs)
        for attempt in range(1, args.repeat + 1):
            for variant in chosen:
                print(f"running {variant.name}: {args.jobs} jobs x {args.workers} (run {attempt}) ...", file=sys.stderr)
                results.append(bench.run(variant, args.jobs, attempt, args.timeout))
    report(results, args.workers, args.gpus)
    return 0


if __name__ == "__main__":
    sys.exit(main())
