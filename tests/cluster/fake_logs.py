"""Fake pods with logs: KWOK serves a fake pod's log to the API server as a kubelet would,
from the file its Logs object names (docs/local-cluster.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

CRDS = Path(__file__).resolve().parents[2] / "manifests" / "crd"


@dataclass(frozen=True)
class LoggedJob:
    """A job whose workers have logs: `lines` are (worker, text, kubelet timestamp) in time
    order, as a reader gets them; `previous` is worker 0's container before it restarted;
    `files` the log file of each worker, which a test may append to."""
    name: str
    namespace: str
    lines: list[tuple[int | None, str, str]]
    previous: list[str]
    files: dict[int | None, Path]

    def ages(self, newer_than: float) -> list[tuple[int | None, str, str]]:
        """The lines written less than `newer_than` seconds before the fixture ran."""
        return [line for line, age in zip(self.lines, LOG_AGES, strict=True) if age < newer_than]


# (worker, the bytes of a line, seconds before now): worker-0, worker-1, and a pod of the
# job with no worker index; their lines interleave in time, and lines of the same time
# read in worker order, the pod without an index last. A line keeps its trailing
# whitespace and its last letter; a byte that is not UTF-8 reads as U+FFFD.
LOG_SCRIPT = [(0, b"w0 starts", 300), (1, b"w1 starts", 200), (None, b"no INDEX", 200), (0, b"w0 step 1\t ", 100),
              (1, b"w1 step 1 \xff", 100), (0, b"w0 step 2", 10)]
LOG_AGES = [age for _, _, age in LOG_SCRIPT]


def kubelet_time(moment: datetime) -> str:
    """RFC 3339 with 9 fractional digits, as a kubelet writes and answers a log line's time."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


def wait_served(cluster, namespace: str, pod: str) -> None:
    """KWOK reads Logs objects through a watch: wait until it serves the pod's log."""
    from disttrain.api.names import CONTAINER_NAME

    cluster.wait_for(lambda: cluster.kubectl("logs", "-n", namespace, pod, "-c", CONTAINER_NAME,
                                             "--limit-bytes=2", check=False).stdout,
                     timeout=30, what=f"KWOK serving {pod}'s log")


def logged_job(cluster, namespace, tmp_path) -> LoggedJob:
    """The job `logged` (2 workers, no operator) with its pods as the operator names and
    labels them, on a fake node, each with a log: KWOK serves a fake pod's log to the API
    server as a kubelet would, from the file its Logs object names, in the CRI format a
    kubelet writes (docs/local-cluster.md). Worker 0 has a second container, whose log is
    never the trainer's."""
    from disttrain.api.names import CONTAINER_NAME, INDEX_LABEL, JOB_LABEL

    cluster.kubectl("apply", "-f", str(CRDS))
    cluster.wait_established()
    name, now = "logged", datetime.now(timezone.utc)
    stamp = {age: kubelet_time(now - timedelta(seconds=age)) for age in LOG_AGES}
    pods = {0: f"{name}-worker-0", 1: f"{name}-worker-1", None: f"{name}-launcher"}
    docs: list[dict] = [{"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
                         "metadata": {"name": name}, "spec": {"nodes": 2, "checkpoint": {"storage": "none"}}}]
    files = {}
    for worker, pod in pods.items():
        labels = {JOB_LABEL: name, **({INDEX_LABEL: str(worker)} if worker is not None else {})}
        log = files[worker] = tmp_path / f"{pod}.log"
        log.write_bytes(b"".join(stamp[age].encode() + b" stdout F " + raw + b"\n"
                                 for w, raw, age in LOG_SCRIPT if w == worker))
        logs = [{"containers": [CONTAINER_NAME], "logsFile": str(log)}]
        containers = [{"name": CONTAINER_NAME, "image": "trainer"}]
        if worker == 0:
            (tmp_path / "previous.log").write_text(f"{stamp[300]} stdout F before the restart\n"
                                                   f"{stamp[300]} stderr F exit 1\n")
            logs[0]["previousLogsFile"] = str(tmp_path / "previous.log")
            (tmp_path / "sidecar.log").write_text(f"{stamp[10]} stdout F the sidecar's line\n")
            logs.append({"containers": ["sidecar"], "logsFile": str(tmp_path / "sidecar.log")})
            containers.append({"name": "sidecar", "image": "sidecar"})
        docs += [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "labels": labels},
                  "spec": {"nodeName": "kwok-cpu-0", "containers": containers}},
                 {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs", "metadata": {"name": pod},
                  "spec": {"logs": logs}}]
    cluster.apply(docs, namespace=namespace)
    for pod in pods.values():
        wait_served(cluster, namespace, pod)
    return LoggedJob(name, namespace, [(w, raw.decode(errors="replace"), stamp[age]) for w, raw, age in LOG_SCRIPT],
                     ["before the restart", "exit 1"], files)


def worker_with_log(job: str, index: int, log: Path, text: str, node: str | None = "kwok-cpu-0",
                    at: datetime | None = None) -> list[dict]:
    """Worker `index` of `job` as the operator names and labels it, and its Logs object:
    one line, `text`, written to `log` at `at` (now). node None: a pod no scheduler places."""
    from disttrain.api.names import CONTAINER_NAME, INDEX_LABEL, JOB_LABEL

    log.write_text(f"{kubelet_time(at or datetime.now(timezone.utc))} stdout F {text}\n")
    pod = f"{job}-worker-{index}"
    placed = {"nodeName": node} if node else {"schedulerName": "nobody"}
    return [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": pod, "labels": {JOB_LABEL: job, INDEX_LABEL: str(index)}},
             "spec": {**placed, "containers": [{"name": CONTAINER_NAME, "image": "trainer"}]}},
            {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs", "metadata": {"name": pod},
             "spec": {"logs": [{"containers": [CONTAINER_NAME], "logsFile": str(log)}]}}]
