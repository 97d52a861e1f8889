"""What `disttrain run --local` starts: a DistributedTraining rendered exactly as the
operator would (`render_children`), every worker pod made one torchrun agent with that
pod's command and env, where only the cluster addresses are swapped for local ones
(`localize`):

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
the pods' CPU limits would do. Pure but for the machine it reads (its GPUs, the
checkpoints already under the workdir).
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from disttrain.api import pod_contract as pc
from disttrain.api.names import JOB_LABEL
from disttrain.render import instrument

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
    setup: list[list[str]] = field(default_factory=list)
    """Commands to run here before the agents start: the pod's init containers this machine can run."""


def localize(children: list[dict[str, Any]], *, workdir: Path, rdzv_port: int, metrics_ports: list[int],
             rdzv_id: str, torchrun: str, cpus: int, checkpoint_uri: str | None = None,
             python: str = "python") -> LocalPlan:
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
    setup = _init_containers(pods[0], root, python, warnings)
    for index, pod in enumerate(pods):
        meta, container = pod["metadata"], pod["spec"]["containers"][0]
        env = _pod_env(meta, container, warnings)
        if setup:  # instrument: auto's folder is this machine's copy
            env["PYTHONPATH"] = env["PYTHONPATH"].replace(instrument.FOLDER, str(root / INSTRUMENT_DIR), 1)
        env["PET_RDZV_ENDPOINT"] = f"127.0.0.1:{rdzv_port}"
        env["PET_RDZV_ID"] = rdzv_id
        env[pc.METRICS_PORT.env] = str(metrics_ports[index])
        # torchrun's agent makes a temporary directory per run and leaves it behind (and
        # anything killed does): in the job's workdir, not the machine's /tmp.
        env["TMPDIR"] = str(root / "tmp")
        report = root / "reports" / f"{meta['name']}.json"
        if pc.TERMINATION_LOG.env in env:
            env[pc.TERMINATION_LOG.env] = str(report)
        if env.get(pc.CHECKPOINT_DIR.env):
            env[pc.CHECKPOINT_DIR.env] = ckpt_dir
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
    return LocalPlan(job=job, nodes=nodes, checkpoint_dir=ckpt_dir, grace_seconds=grace, warnings=warnings,
                     setup=setup)


# Where a local run keeps instrument: auto's copy of disttrain (the pod's emptyDir).
INSTRUMENT_DIR = "instrument"


def _init_containers(pod: dict[str, Any], root: Path, python: str, warnings: list[str]) -> list[list[str]]:
    """The pod's init containers as commands for this machine: instrument: auto's copy of
    disttrain runs here into the job's workdir, as the init container does into its
    emptyDir; one of the user's own runs nowhere, said in a warning."""
    setup = []
    for init in pod["spec"].get("initContainers") or []:
        if init["name"] == instrument.INIT_CONTAINER:
            setup.append([python, *init["command"][1:-1], str(root / INSTRUMENT_DIR)])
        else:
            warnings.append(f"init container {init['name']} is not run locally")
    return setup


def _pod_env(meta: dict[str, Any], container: dict[str, Any], warnings: list[str]) -> dict[str, str]:
    """The container's env as the kubelet would set it here: values as written, the pod's
    own fields (name, namespace, a fresh uid); a variable from elsewhere in the cluster is
    left out, with a warning."""
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
    return env


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
    total = plan.nodes[0].env.get(pc.STEPS.env, "")
    if not total.isdigit() or newest is None or newest[0] < int(total):
        return None
    fresh = (f"remove the objects under {plan.checkpoint_dir} (or pass another --checkpoint-uri)"
             if "://" in plan.checkpoint_dir else f"rm -rf {Path(plan.checkpoint_dir).parent} (or pass another --workdir)")
    return (f"disttrain: {plan.job} already finished: its checkpoint at step {newest[0]} of {total} is in "
            f"{plan.checkpoint_dir}; nothing left to train.\n"
            f"  start fresh: {fresh}\n"
            f"  train longer: raise spec.trainer.builtin.steps and run again (it resumes from step {newest[0]})")
