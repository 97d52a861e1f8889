"""`disttrain run --local FILE`: run a DistributedTraining on this machine, no cluster.

The job is rendered exactly as the operator would (`render_children`); every worker pod
becomes one torchrun agent subprocess with that pod's command and env, where only the
cluster addresses are swapped for local ones (`localize`):

  PET_RDZV_ENDPOINT        <job>-worker-0.<job>.<ns>.svc:<port> -> 127.0.0.1:<free port>
  PET_RDZV_ID              job UID/name                         -> a fresh uuid
  DISTTRAIN_METRICS_PORT   9400 in every pod                    -> a free port per node
  DISTTRAIN_CHECKPOINT_DIR the pod's volume mount               -> <workdir>/<job>/checkpoints
  valueFrom.fieldRef       metadata.name / metadata.namespace   -> the pod's name / namespace
  `torchrun`               the image's                          -> the one next to this Python

and OMP_NUM_THREADS (unless set) is the local CPUs split over all local processes, as
the pods' CPU limits would do. Rank 0's `/status` drives a progress bar; Ctrl-C sends
SIGTERM to every agent (the trainer writes an emergency checkpoint, as on pod deletion),
waits for the pods' grace period, and reports. Re-running the same command resumes from
the newest checkpoint under the workdir.

No torch import here: the trainer runs in the subprocesses.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from .render import render_children

DEFAULT_GRACE_SECONDS = 60
_STEP_DIR = re.compile(r"^step-(\d{8})$")


@dataclass(kw_only=True)
class LocalNode:
    """One pod, made runnable here."""

    pod: str
    argv: list[str]
    env: dict[str, str]
    metrics_port: int
    log: Path


@dataclass(kw_only=True)
class LocalPlan:
    job: str
    nodes: list[LocalNode]
    checkpoint_dir: Path
    grace_seconds: int
    warnings: list[str] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def localize(children: list[dict[str, Any]], *, workdir: Path, rdzv_port: int, metrics_ports: list[int],
             rdzv_id: str, torchrun: str, cpus: int) -> LocalPlan:
    """Rendered Service + Pods -> agents to start here. Pure (ports and ids are inputs)."""
    pods = [c for c in children if c.get("kind") == "Pod"]
    if not pods:
        raise ValueError("the job rendered no worker pods")
    job = pods[0]["metadata"]["labels"].get("disttrain.dev/job", pods[0]["metadata"]["name"])
    root = (workdir / job).resolve()
    ckpt_dir = root / "checkpoints"
    warnings: list[str] = []
    nodes, total_procs = [], 0
    for index, pod in enumerate(pods):
        meta, spec = pod["metadata"], pod["spec"]
        container = spec["containers"][0]
        env: dict[str, str] = {}
        for var in container.get("env", []):
            if "value" in var:
                env[var["name"]] = str(var["value"])
                continue
            ref = (var.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
            if ref == "metadata.name":
                env[var["name"]] = meta["name"]
            elif ref == "metadata.namespace":
                env[var["name"]] = meta.get("namespace", "default")
            else:
                warnings.append(f"{meta['name']}: env {var['name']} comes from the cluster; not set locally")
        env["PET_RDZV_ENDPOINT"] = f"127.0.0.1:{rdzv_port}"
        env["PET_RDZV_ID"] = rdzv_id
        env["DISTTRAIN_METRICS_PORT"] = str(metrics_ports[index])
        if env.get("DISTTRAIN_CHECKPOINT_DIR"):
            env["DISTTRAIN_CHECKPOINT_DIR"] = str(ckpt_dir)
        total_procs += int(env.get("PET_NPROC_PER_NODE", "1"))
        argv = list(container.get("command", [])) + list(container.get("args", []))
        if argv and argv[0] == "torchrun":
            argv[0] = torchrun
        nodes.append(LocalNode(pod=meta["name"], argv=argv, env=env, metrics_port=metrics_ports[index],
                               log=root / "logs" / f"{meta['name']}.log"))
    threads = str(max(1, cpus // max(1, total_procs)))
    for node in nodes:
        node.env.setdefault("OMP_NUM_THREADS", threads)
    grace = int(pods[0]["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS))
    return LocalPlan(job=job, nodes=nodes, checkpoint_dir=ckpt_dir, grace_seconds=grace, warnings=warnings)


def newest_checkpoint(root: Path) -> tuple[int, Path] | None:
    if not root.is_dir():
        return None
    done = [(int(m.group(1)), p) for p in root.iterdir()
            if (m := _STEP_DIR.match(p.name)) and (p / ".metadata").is_file()]
    return max(done) if done else None


def read_status(port: int, timeout: float = 1.0) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=timeout) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return None


class _Progress:
    """tqdm bar fed from rank 0's /status, or plain lines without a terminal/bar."""

    def __init__(self, enabled: bool, out: TextIO) -> None:
        self.out = out
        self.bar = None
        self.enabled = enabled
        self._last_line = 0.0

    def update(self, status: dict[str, Any]) -> None:
        step, total = int(status.get("step") or 0), int(status.get("totalSteps") or 0)
        ckpt = (status.get("checkpoint") or {}).get("step")
        loss = status.get("loss")
        if self.enabled:
            if self.bar is None and total:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit="step", file=self.out, dynamic_ncols=True, desc="training")
            if self.bar is not None:
                self.bar.n = step
                self.bar.set_postfix(loss=f"{loss:.4f}" if loss is not None else "-",
                                     samples_s=f"{status.get('samplesPerSecond', 0):.0f}",
                                     world=status.get("worldSize"), ckpt=ckpt if ckpt is not None else "-",
                                     refresh=False)
                self.bar.refresh()
        elif time.monotonic() - self._last_line > 5:
            self._last_line = time.monotonic()
            print(f"step {step}/{total} loss {loss} samples/s {status.get('samplesPerSecond')} "
                  f"world {status.get('worldSize')} checkpoint {ckpt}", file=self.out, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def descendants(pid: int) -> list[int]:
    """pid and every process below it, parents first (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    todo, found = [pid], []
    while todo:
        p = todo.pop()
        found.append(p)
        todo += children.get(p, [])
    return found


def _kill_tree(pid: int, sig: int) -> None:
    """Signal a process and its descendants (an agent's workers live in their own groups)."""
    for p in reversed(descendants(pid)):
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def run_local(job: Any, resolved: Any, *, workdir: str | os.PathLike[str] = ".disttrain", progress: bool = True,
              out: TextIO | None = None, poll_seconds: float = 0.5) -> int:
    """Run the job's pods as local torchrun agents; 0 on success, 130 on Ctrl-C, else 1."""
    out = out or sys.stderr
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
    children = render_children(job, resolved)
    n_pods = sum(1 for c in children if c.get("kind") == "Pod")
    plan = localize(children, workdir=Path(workdir), rdzv_port=free_port(),
                    metrics_ports=[free_port() for _ in range(n_pods)], rdzv_id=uuid.uuid4().hex,
                    torchrun=torchrun, cpus=os.cpu_count() or 1)
    for w in plan.warnings:
        print(f"warning: {w}", file=out)
    resume = newest_checkpoint(plan.checkpoint_dir)
    print(f"disttrain: running {plan.job} locally: {len(plan.nodes)} torchrun agents, rendezvous "
          f"{plan.nodes[0].env['PET_RDZV_ENDPOINT']}, checkpoints {plan.checkpoint_dir}"
          + (f" (resuming from step {resume[0]})" if resume else ""), file=out, flush=True)
    started = time.monotonic()
    agents: list[subprocess.Popen[bytes]] = []
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "DISTTRAIN_"))}
    for node in plan.nodes:
        node.log.parent.mkdir(parents=True, exist_ok=True)
        with node.log.open("ab") as log:
            agents.append(subprocess.Popen(node.argv, env=base_env | node.env, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True))
    bar = _Progress(progress, out)
    last: dict[str, Any] = {}
    interrupted = False
    try:
        while any(a.poll() is None for a in agents):
            status = read_status(plan.nodes[0].metrics_port)
            if status:
                last = status
                bar.update(status)
            time.sleep(poll_seconds)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: sending SIGTERM to the agents (emergency checkpoint), "
              f"waiting up to {plan.grace_seconds}s", file=out, flush=True)
        for a in agents:
            if a.poll() is None:
                a.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + plan.grace_seconds
        try:
            for a in agents:
                a.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print("grace period over: killing the agents", file=out)
        except KeyboardInterrupt:
            print("second interrupt: killing the agents", file=out)
    finally:
        for a in agents:  # past the grace period (or on any error): like the kubelet, SIGKILL
            if a.poll() is None:
                _kill_tree(a.pid, signal.SIGKILL)
                a.wait()
        bar.close()
    codes = [a.returncode for a in agents]
    newest = newest_checkpoint(plan.checkpoint_dir)
    ok = not interrupted and all(c == 0 for c in codes)
    print(_summary(plan, codes, last, newest, time.monotonic() - started, interrupted), file=out, flush=True)
    if not ok and not interrupted:
        for node, code in zip(plan.nodes, codes, strict=True):
            if code != 0:
                tail = node.log.read_text(errors="replace").splitlines()[-25:]
                print(f"--- last lines of {node.log} ---\n" + "\n".join(tail), file=out)
    return 0 if ok else (130 if interrupted else 1)


def _summary(plan: LocalPlan, codes: list[int], last: dict[str, Any], newest: tuple[int, Path] | None,
             seconds: float, interrupted: bool) -> str:
    state = "interrupted" if interrupted else ("succeeded" if all(c == 0 for c in codes) else "failed")
    loss = last.get("loss")
    step = max(int(last.get("step") or 0), newest[0] if newest else 0)  # the last poll may lag
    lines = [
        f"disttrain: {plan.job} {state} after {seconds:.1f}s",
        f"  step        {step}/{last.get('totalSteps', '?')}"
        + (f"  loss {loss:.4f} (last reported)" if isinstance(loss, (int, float)) else ""),
        f"  throughput  {last.get('samplesPerSecond', 0):.1f} samples/s, "
        f"{last.get('tokensPerSecond', 0):.0f} tokens/s, world size {last.get('worldSize', '?')}",
        f"  checkpoint  " + (f"step {newest[0]} at {newest[1]}" if newest else "none"),
        f"  agents      " + ", ".join(f"{n.pod}: exit {c}" for n, c in zip(plan.nodes, codes, strict=True)),
        f"  logs        {plan.nodes[0].log.parent}",
    ]
    if interrupted or state == "failed":
        lines.append("  re-run the same command to resume from the newest checkpoint")
    return "\n".join(lines)
