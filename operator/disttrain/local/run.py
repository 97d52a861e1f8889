"""`disttrain run --local FILE`: run a DistributedTraining on this machine, no cluster:
one torchrun agent subprocess per worker pod, as `localize` (plan.py) makes them.

Rank 0's `/status` drives a progress bar, and the summary
is the trainer's own final report (the termination message a pod would leave), read
through the same parser the operator uses. Ctrl-C (or SIGTERM) sends SIGTERM to every
agent (the trainer writes an emergency checkpoint, as on pod deletion), waits for the
pods' grace period, and reports; if the CLI itself is killed, the agents get SIGTERM
from the kernel (PR_SET_PDEATHSIG) instead of training on unattended. Re-running the
same command resumes from the newest checkpoint under the workdir; once the built-in
trainer's last step is checkpointed there, it says so (and how to start fresh) instead.

No torch import here: the trainer runs in the subprocesses.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from disttrain.api import pod_contract as pc
from disttrain.api.report import INTERRUPTED, TrainerReport, newest, parse_report
from disttrain.local.plan import LocalPlan, finished_note, gpu_note, localize, newest_checkpoint, visible_gpus
from disttrain.local.ports import free_port, free_ports
from disttrain.integrations.registry import render_children


def read_status(port: int, timeout: float = 1.0) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=timeout) as r:
            data = json.loads(r.read(1 << 20))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_report(path: Path) -> TrainerReport | None:
    """A node's termination message, if its trainer wrote one."""
    try:
        return parse_report(path.read_text(errors="replace")[:1 << 16])
    except OSError:
        return None


def die_with_parent() -> None:
    """In the agent, before exec: SIGTERM it when the CLI dies, however it dies (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


class _Progress:
    """tqdm bar fed from rank 0's /status, or plain lines without a terminal/bar."""

    def __init__(self, enabled: bool, out: TextIO) -> None:
        self.out = out
        self.bar = None
        if enabled and importlib.util.find_spec("tqdm") is None:
            print("no progress bar: the tqdm package is not installed (pip install 'disttrain[local]'); "
                  "a line every 5 s instead", file=out, flush=True)
            enabled = False
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


@dataclass(kw_only=True)
class LocalOutcome:
    code: int  # 0 on success, 130 when interrupted or stopped, else 1
    final: TrainerReport | None  # the trainer's newest report (its termination message at the end)
    stopped: bool = False  # `watch` asked to stop (a sweep pruning the trial)


def run_local(job: Any, resolved: Any, *, workdir: str | os.PathLike[str] = ".disttrain", progress: bool = True,
              out: TextIO | None = None, poll_seconds: float = 0.5, checkpoint_uri: str | None = None) -> int:
    """Run the job's pods as local torchrun agents; 0 on success, 130 on Ctrl-C, else 1."""
    return run_local_job(job, resolved, workdir=workdir, progress=progress, out=out,
                         poll_seconds=poll_seconds, checkpoint_uri=checkpoint_uri).code


def run_local_job(job: Any, resolved: Any, *, workdir: str | os.PathLike[str] = ".disttrain", progress: bool = True,
                  out: TextIO | None = None, poll_seconds: float = 0.5, cpus: int | None = None,
                  watch: Callable[[dict[str, Any]], bool] | None = None,
                  checkpoint_uri: str | None = None) -> LocalOutcome:
    """run_local for callers that want the final report. `watch` sees rank 0's /status at
    every poll; when it returns True the run stops as on Ctrl-C (SIGTERM: checkpoint, exit
    75). Off the main thread no signal handler is bound: the caller's watch stops the run."""
    out = out or sys.stderr
    plan = _local_plan(job, resolved, Path(workdir), cpus, checkpoint_uri)
    gpus = gpu_note(job.spec.gpus, visible_gpus(), resolved.nproc_per_node or 1,
                    resolved.precision or "")
    for w in plan.warnings + ([gpus] if gpus else []):
        print(f"warning: {w}", file=out)
    resume = newest_checkpoint(plan.checkpoint_dir)
    if note := finished_note(plan, resume):
        print(note, file=out, flush=True)
        return LocalOutcome(code=0, final=None)
    print(f"disttrain: running {plan.job} locally: {len(plan.nodes)} torchrun agents, rendezvous "
          f"{plan.nodes[0].env['PET_RDZV_ENDPOINT']}, checkpoints {plan.checkpoint_dir}"
          + (f" (resuming from step {resume[0]})" if resume else ""), file=out, flush=True)
    for command in plan.setup:  # the init containers this machine runs (instrument: auto's copy), first
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            print(f"error: {' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-2000:]}", file=out)
            return LocalOutcome(code=1, final=None)
    started = time.monotonic()
    # Started from a background shell, SIGINT arrives ignored: Ctrl-C (and SIGTERM) must
    # still stop the run gracefully, so both are bound here whatever we inherited.
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)} if main else {}
    agents = _start_agents(plan)
    bar = _Progress(progress, out)
    seen = _Seen()
    interrupted = False
    try:
        _follow(plan, agents, bar, seen, watch, poll_seconds)
    except KeyboardInterrupt:
        interrupted = True
        _stop_agents(plan, agents, seen.stopped, out)
    finally:
        for a in agents:  # past the grace period (or on any error): like the kubelet, SIGKILL
            if a.poll() is None:
                _kill_tree(a.pid, signal.SIGKILL)
                a.wait()
        bar.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return _outcome(plan, agents, seen, interrupted, time.monotonic() - started, out)


def _local_plan(job: Any, resolved: Any, workdir: Path, cpus: int | None, checkpoint_uri: str | None) -> LocalPlan:
    """The job rendered as the operator would, its pods made agents of this machine."""
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
    children = render_children(job, resolved)
    n_pods = sum(1 for c in children if c.get("kind") == "Pod")
    return localize(children, workdir=workdir, rdzv_port=free_port(),
                    metrics_ports=free_ports(n_pods), rdzv_id=uuid.uuid4().hex,
                    torchrun=torchrun, cpus=cpus or os.cpu_count() or 1, checkpoint_uri=checkpoint_uri,
                    python=sys.executable)


def _start_agents(plan: LocalPlan) -> list[subprocess.Popen[bytes]]:
    """One torchrun agent per node, its output in the node's log, each in a session of its own."""
    agents: list[subprocess.Popen[bytes]] = []
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", pc.PREFIX))}
    for node in plan.nodes:
        Path(node.env["TMPDIR"]).mkdir(parents=True, exist_ok=True)
        node.log.parent.mkdir(parents=True, exist_ok=True)
        node.report.parent.mkdir(parents=True, exist_ok=True)
        node.report.unlink(missing_ok=True)  # a report from an earlier run would mislead
        with node.log.open("ab") as log:
            agents.append(subprocess.Popen(node.argv, env=base_env | node.env, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True,
                                           preexec_fn=die_with_parent))
    return agents


@dataclass
class _Seen:
    """What following the agents saw: rank 0's newest /status, and whether `watch` stopped the run."""

    last: dict[str, Any] = field(default_factory=dict)
    stopped: bool = False


def _follow(plan: LocalPlan, agents: list[subprocess.Popen[bytes]], bar: _Progress, seen: _Seen,
            watch: Callable[[dict[str, Any]], bool] | None, poll_seconds: float) -> None:
    """Rank 0's /status on the bar until every agent has exited; KeyboardInterrupt when
    `watch` says stop."""
    while any(a.poll() is None for a in agents):
        status = read_status(plan.nodes[0].metrics_port)
        if status:
            seen.last = status
            bar.update(status)
        if watch is not None and watch(status or {}):
            seen.stopped = True
            raise KeyboardInterrupt
        time.sleep(poll_seconds)


def _stop_agents(plan: LocalPlan, agents: list[subprocess.Popen[bytes]], stopped: bool, out: TextIO) -> None:
    """SIGTERM to every agent (the trainer's emergency checkpoint), then wait out the
    pods' grace period, or a second Ctrl-C."""
    print(f"\n{'stopping' if stopped else 'interrupted'}: sending SIGTERM to the agents (emergency "
          f"checkpoint), waiting up to {plan.grace_seconds}s", file=out, flush=True)
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


def _outcome(plan: LocalPlan, agents: list[subprocess.Popen[bytes]], seen: _Seen, interrupted: bool,
             seconds: float, out: TextIO) -> LocalOutcome:
    """The summary printed (and the failed agents' last log lines), and the outcome."""
    codes = [a.returncode for a in agents]
    final = newest(parse_report(seen.last), *(read_report(n.report) for n in plan.nodes))
    # The success contract, as the operator applies it: exit 0, and not a stop on a signal.
    ok = not interrupted and all(c == 0 for c in codes) and not (final and final.outcome == INTERRUPTED)
    print(_summary(plan, codes, final, newest_checkpoint(plan.checkpoint_dir), seconds,
                   interrupted, ok), file=out, flush=True)
    if not ok and not interrupted:
        for node, code in zip(plan.nodes, codes, strict=True):
            if code != 0:
                tail = node.log.read_text(errors="replace").splitlines()[-25:]
                print(f"--- last lines of {node.log} ---\n" + "\n".join(tail), file=out)
    return LocalOutcome(code=0 if ok else (130 if interrupted else 1), final=final, stopped=seen.stopped)


def _summary(plan: LocalPlan, codes: list[int], final: TrainerReport | None, ckpt: tuple[int, str] | None,
             seconds: float, interrupted: bool, ok: bool) -> str:
    state = "interrupted" if interrupted else ("succeeded" if ok else "failed")
    final = final or TrainerReport()
    if ckpt is None and final.checkpoint is not None and final.checkpoint.path:  # a framework's own (checkpoint-50)
        ckpt = (final.checkpoint.step, final.checkpoint.path)
    step = max(final.step or 0, ckpt[0] if ckpt else 0)  # a report may lag the last checkpoint
    world = final.world_size if final.world_size else "?"
    lines = [
        f"disttrain: {plan.job} {state} after {seconds:.1f}s",
        f"  step        {step}/{final.total_steps or '?'}"
        + (f"  loss {final.loss:.4f} (last reported)" if final.loss is not None else ""),
        f"  throughput  {final.samples_per_second or 0:.1f} samples/s, "
        f"{final.tokens_per_second or 0:.0f} tokens/s, world size {world}",
        f"  checkpoint  " + (f"step {ckpt[0]} at {ckpt[1]}" if ckpt else "none"),
        f"  agents      " + ", ".join(f"{n.pod}: exit {c}" for n, c in zip(plan.nodes, codes, strict=True)),
        f"  logs        {plan.nodes[0].log.parent}",
    ]
    if interrupted or state == "failed":
        lines.append("  re-run the same command to resume from the newest checkpoint")
    return "\n".join(lines)
