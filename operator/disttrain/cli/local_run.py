"""`disttrain run --local FILE`: run a DistributedTraining on this machine, no cluster.

The job is rendered exactly as the operator would (`render_children`); every worker pod
becomes one torchrun agent subprocess with that pod's command and env, where only the
cluster addresses are swapped for local ones (`localize`):

  PET_RDZV_ENDPOINT        <job>-worker-0.<job>.<ns>.svc:<port> -> 127.0.0.1:<free port>
  PET_RDZV_ID              job UID/name                         -> a fresh uuid
  DISTTRAIN_METRICS_PORT   9400 in every pod                    -> a free port per node
  DISTTRAIN_CHECKPOINT_DIR the pod's volume mount or spec's uri  -> <workdir>/<job>/checkpoints,
                           or --checkpoint-uri (an object store, reached with this shell's
                           AWS_* credentials and endpoint, as any AWS SDK would)
  DISTTRAIN_TERMINATION_LOG /dev/termination-log               -> <workdir>/<job>/reports/<pod>.json
  valueFrom.fieldRef       metadata.name / metadata.namespace   -> the pod's name / namespace
                           metadata.uid (the /checkpoint token) -> a fresh uuid
  `torchrun`               the image's                          -> the one next to this Python

and OMP_NUM_THREADS (unless set) is the local CPUs split over all local processes, as
the pods' CPU limits would do. Rank 0's `/status` drives a progress bar, and the summary
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
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from disttrain.api.names import JOB_LABEL
from disttrain.cli.ports import free_port, free_ports
from disttrain.integrations.registry import render_children
from disttrain.api.report import INTERRUPTED, TrainerReport, newest, parse_report

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
    report: Path  # the termination message the trainer leaves


@dataclass(kw_only=True)
class LocalPlan:
    job: str
    nodes: list[LocalNode]
    checkpoint_dir: str  # a local directory, or an object-store URL
    grace_seconds: int
    warnings: list[str] = field(default_factory=list)


def localize(children: list[dict[str, Any]], *, workdir: Path, rdzv_port: int, metrics_ports: list[int],
             rdzv_id: str, torchrun: str, cpus: int, checkpoint_uri: str | None = None) -> LocalPlan:
    """Rendered Service + Pods -> agents to start here. Pure (ports and ids are inputs).
    Checkpoints go under the workdir, or to `checkpoint_uri`: never to the spec's own
    bucket by accident (a local try-out must not write into a team's production prefix)."""
    pods = [c for c in children if c.get("kind") == "Pod"]
    if not pods:
        raise ValueError("the job rendered no worker pods")
    job = pods[0]["metadata"]["labels"].get(JOB_LABEL, pods[0]["metadata"]["name"])
    root = (workdir / job).resolve()
    ckpt_dir = checkpoint_uri.rstrip("/") if checkpoint_uri else str(root / "checkpoints")
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
            elif ref == "metadata.uid":
                env[var["name"]] = uuid.uuid4().hex
            else:
                warnings.append(f"{meta['name']}: env {var['name']} comes from the cluster; not set locally")
        env["PET_RDZV_ENDPOINT"] = f"127.0.0.1:{rdzv_port}"
        env["PET_RDZV_ID"] = rdzv_id
        env["DISTTRAIN_METRICS_PORT"] = str(metrics_ports[index])
        # torchrun's agent makes a temporary directory per run and leaves it behind (and
        # anything killed does): in the job's workdir, not the machine's /tmp.
        env["TMPDIR"] = str(root / "tmp")
        report = root / "reports" / f"{meta['name']}.json"
        if "DISTTRAIN_TERMINATION_LOG" in env:
            env["DISTTRAIN_TERMINATION_LOG"] = str(report)
        if env.get("DISTTRAIN_CHECKPOINT_DIR"):
            env["DISTTRAIN_CHECKPOINT_DIR"] = ckpt_dir
        total_procs += int(env.get("PET_NPROC_PER_NODE", "1"))
        argv = list(container.get("command", [])) + list(container.get("args", []))
        if argv and argv[0] == "torchrun":
            argv[0] = torchrun
        nodes.append(LocalNode(pod=meta["name"], argv=argv, env=env, metrics_port=metrics_ports[index],
                               log=root / "logs" / f"{meta['name']}.log", report=report))
    threads = str(max(1, cpus // max(1, total_procs)))
    for node in nodes:
        node.env.setdefault("OMP_NUM_THREADS", threads)
    grace = int(pods[0]["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS))
    return LocalPlan(job=job, nodes=nodes, checkpoint_dir=ckpt_dir, grace_seconds=grace, warnings=warnings)


def visible_gpus(env: Mapping[str, str] = os.environ, driver: Path = Path("/proc/driver/nvidia/gpus")) -> int:
    """The NVIDIA GPUs the trainer will see here, without importing torch: one folder per
    GPU in the driver's /proc, narrowed by CUDA_VISIBLE_DEVICES as CUDA narrows it."""
    try:
        count = sum(1 for _ in driver.iterdir())
    except OSError:  # no NVIDIA driver (or not Linux): none
        count = 0
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        count = min(count, len([d for d in listed.split(",") if d.strip()]))
    return count


# What the trainer makes of a GPU precision on the CPU (disttrain_trainer.config.resolve_parallel).
CPU_PRECISION = {"bf16-mixed": ", with bf16-mixed as CPU autocast", "16-mixed": ", in precision 32 (16-mixed needs a GPU)"}


def gpu_note(requested: int, visible: int, nproc: int, precision: str) -> str | None:
    """What the trainer's device clamp will do to a job that asks for more GPUs than this
    machine has, said before it starts (the trainer says it only in the worker's log)."""
    if requested <= visible:
        return None
    if visible:
        here, where = f"{visible}", f"on {visible} GPU{'s' if visible > 1 else ''}"
    else:
        here, where = "none", "on the CPU" + CPU_PRECISION.get(precision, "")
    return (f"the job asks for {requested} GPU{'s' if requested > 1 else ''} per node and this machine has {here}: "
            f"its {nproc} process{'es' if nproc > 1 else ''} per node train {where}. For a job "
            "made for this machine, set gpusPerNode: 0 (manifests/examples/cpu-ddp-2x1.yaml)")


def newest_checkpoint(location: str | os.PathLike[str]) -> tuple[int, str] | None:
    """The newest committed step under a checkpoint directory or object-store URL."""
    location = os.fspath(location)
    if "://" in location:
        from disttrain_trainer.storage import ObjectStorage  # the `local` extra: torch and s3fs

        storage = ObjectStorage(location)
        steps = storage.list()
        return (steps[-1], storage.location(steps[-1])) if steps else None
    root = Path(location)
    if not root.is_dir():
        return None
    done = [(int(m.group(1)), str(p)) for p in root.iterdir()
            if (m := _STEP_DIR.match(p.name)) and (p / ".metadata").is_file()]
    return max(done) if done else None


def finished_note(plan: LocalPlan, newest: tuple[int, Path] | None) -> str | None:
    """What to say instead of training when the built-in trainer's last step is already
    checkpointed here (a re-run would load it, train nothing and report nothing useful)."""
    total = plan.nodes[0].env.get("DISTTRAIN_STEPS", "")
    if not total.isdigit() or newest is None or newest[0] < int(total):
        return None
    fresh = (f"remove the objects under {plan.checkpoint_dir} (or pass another --checkpoint-uri)"
             if "://" in plan.checkpoint_dir else f"rm -rf {Path(plan.checkpoint_dir).parent} (or pass another --workdir)")
    return (f"disttrain: {plan.job} already finished: its checkpoint at step {newest[0]} of {total} is in "
            f"{plan.checkpoint_dir}; nothing left to train.\n"
            f"  start fresh: {fresh}\n"
            f"  train longer: raise spec.trainer.builtin.steps and run again (it resumes from step {newest[0]})")


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
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
    children = render_children(job, resolved)
    n_pods = sum(1 for c in children if c.get("kind") == "Pod")
    plan = localize(children, workdir=Path(workdir), rdzv_port=free_port(),
                    metrics_ports=free_ports(n_pods), rdzv_id=uuid.uuid4().hex,
                    torchrun=torchrun, cpus=cpus or os.cpu_count() or 1, checkpoint_uri=checkpoint_uri)
    gpus = gpu_note(job.spec.gpus_per_node or 0, visible_gpus(), resolved.nproc_per_node or 1,
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
    started = time.monotonic()
    agents: list[subprocess.Popen[bytes]] = []
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "DISTTRAIN_"))}
    # Started from a background shell, SIGINT arrives ignored: Ctrl-C (and SIGTERM) must
    # still stop the run gracefully, so both are bound here whatever we inherited.
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)} if main else {}
    for node in plan.nodes:
        Path(node.env["TMPDIR"]).mkdir(parents=True, exist_ok=True)
        node.log.parent.mkdir(parents=True, exist_ok=True)
        node.report.parent.mkdir(parents=True, exist_ok=True)
        node.report.unlink(missing_ok=True)  # a report from an earlier run would mislead
        with node.log.open("ab") as log:
            agents.append(subprocess.Popen(node.argv, env=base_env | node.env, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True,
                                           preexec_fn=die_with_parent))
    bar = _Progress(progress, out)
    last: dict[str, Any] = {}
    interrupted = stopped = False
    try:
        while any(a.poll() is None for a in agents):
            status = read_status(plan.nodes[0].metrics_port)
            if status:
                last = status
                bar.update(status)
            if watch is not None and watch(status or {}):
                stopped = True
                raise KeyboardInterrupt
            time.sleep(poll_seconds)
    except KeyboardInterrupt:
        interrupted = True
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
    finally:
        for a in agents:  # past the grace period (or on any error): like the kubelet, SIGKILL
            if a.poll() is None:
                _kill_tree(a.pid, signal.SIGKILL)
                a.wait()
        bar.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    codes = [a.returncode for a in agents]
    final = newest(parse_report(last), *(read_report(n.report) for n in plan.nodes))
    # The success contract, as the operator applies it: exit 0, and not a stop on a signal.
    ok = not interrupted and all(c == 0 for c in codes) and not (final and final.outcome == INTERRUPTED)
    print(_summary(plan, codes, final, newest_checkpoint(plan.checkpoint_dir), time.monotonic() - started,
                   interrupted, ok), file=out, flush=True)
    if not ok and not interrupted:
        for node, code in zip(plan.nodes, codes, strict=True):
            if code != 0:
                tail = node.log.read_text(errors="replace").splitlines()[-25:]
                print(f"--- last lines of {node.log} ---\n" + "\n".join(tail), file=out)
    return LocalOutcome(code=0 if ok else (130 if interrupted else 1), final=final, stopped=stopped)


def _summary(plan: LocalPlan, codes: list[int], final: TrainerReport | None, ckpt: tuple[int, str] | None,
             seconds: float, interrupted: bool, ok: bool) -> str:
    state = "interrupted" if interrupted else ("succeeded" if ok else "failed")
    final = final or TrainerReport()
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
