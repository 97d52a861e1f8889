"""`disttrain sweep SWEEP.yaml`: the shell around the pure sweep core. Reads the file,
prints its errors with line numbers, locks the sweep's folder, runs the study, prints the
table and writes the best job.

Folder (default .disttrain/<sweep>/): study.db (the Optuna study), sweep.lock, trials/
(local mode: one `run --local` workdir per trial job), best.yaml.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from disttrain.api.errors import FieldError
from disttrain.client.documents import (Document, DocumentError, dump_yaml, is_distributed_training,
                                        load_documents)
from disttrain.sweep.results import best_trial, summary, table
from disttrain.sweep.space import best_job
from disttrain.sweep.spec import SweepSpec, parse_sweep


HELP = "hyperparameter search: one job per trial, locally or in a cluster (docs/sweeps.md)"


def setup_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="SWEEP.yaml",
                   help="the sweep: its search space, objective and trial template (docs/sweeps.md)")
    p.add_argument("--workdir", default=".disttrain",
                   help="the sweep's study, trial runs and best job go to WORKDIR/<sweep>/ (default .disttrain)")
    p.add_argument("--storage", help="an Optuna storage URL instead of sqlite:///WORKDIR/<sweep>/study.db")
    p.add_argument("--mode", choices=("local", "cluster"), help="override the file's mode")
    p.add_argument("-n", "--namespace", help="cluster mode: namespace of the trial jobs (default: the "
                   "file's namespace, the template's, the kubeconfig context's, else default)")
    p.add_argument("--context", help="cluster mode: the kubeconfig context to use (default: the current one)")
    p.add_argument("--kubeconfig", help="cluster mode: path of the kubeconfig (default: $KUBECONFIG, else "
                   "~/.kube/config; in a pod, its service account)")


def cmd_sweep(args: argparse.Namespace) -> int:
    spec = load_sweep(args.file)
    if spec is None:
        return 1
    if args.mode:
        spec = dataclasses.replace(spec, mode=args.mode)
    api = None
    if spec.mode == "cluster":
        from disttrain.client.errors import DisttrainError
        from disttrain.client.kubeconfig import connect

        try:  # the cluster the way kubectl and the other commands read it, before anything starts
            api, context_ns = connect(args.kubeconfig, args.context, fail_fast=False)
        except DisttrainError as exc:
            print(exc, file=sys.stderr)
            return 1
        template_ns = (spec.template.get("metadata") or {}).get("namespace")
        spec = dataclasses.replace(spec, namespace=args.namespace or spec.namespace or template_ns or context_ns
                                   or "default")
    root = Path(args.workdir) / spec.name
    root.mkdir(parents=True, exist_ok=True)
    lock = (root / "sweep.lock").open("w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"{args.file}: sweep {spec.name} is already running (lock {root / 'sweep.lock'}); wait for it "
              "or stop it first", file=sys.stderr)
        return 1
    with lock:
        return _run(spec, args, root, api)


def _run(spec: SweepSpec, args: argparse.Namespace, root: Path, api: Any) -> int:
    from disttrain.sweep.runner import open_study, run_sweep, space_changes

    storage = args.storage or f"sqlite:///{(root / 'study.db').resolve()}"
    stopping = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        if not stopping.is_set():
            print("\nstopping: running trials checkpoint and stop; re-run the same command to resume",
                  file=sys.stderr, flush=True)
        stopping.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        backend = _backend(spec, root, stopping, api)
        study = open_study(spec, storage)
        changed = space_changes(spec, study)
        if changed:
            for line in changed:
                print(f"{args.file}: error: {line}; the study {storage} was started with another search space. "
                      "Fix: restore the ranges, or give the sweep a new name (or --workdir)", file=sys.stderr)
            return 1
        print(f"disttrain: sweep {spec.name}: {spec.trials} trials, {spec.parallelism} at once, {spec.mode}, "
              f"sampler {spec.sampler} (seed {spec.seed}), pruner {spec.pruner}, {spec.direction} {spec.objective}; "
              f"study {storage}", flush=True)
        run_sweep(spec, backend, study, stopping=stopping, out=sys.stdout)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    trials = study.get_trials(deepcopy=False)
    print("\n" + table(trials, [p.path for p in spec.params], spec.objective, spec.direction))
    print(summary(trials, spec.objective, spec.direction))
    best = best_trial(trials, spec.direction)
    if best is not None:
        path = root / "best.yaml"
        path.write_text(dump_yaml(best_job(spec, best.params, best.number)))
        print("best parameters: " + ", ".join(f"{k}={v}" for k, v in best.params.items()))
        print(f"best job: {path} (kubectl apply -f {path})")
    return 130 if stopping.is_set() else 0


def _backend(spec: SweepSpec, root: Path, stopping: threading.Event, api: Any) -> Any:
    if spec.mode == "local":
        from disttrain.sweep.local import LocalBackend  # the trainer runs in subprocesses; no torch import here

        return LocalBackend(root / "trials", stopping=stopping, parallelism=spec.parallelism)
    from kubernetes import client

    from disttrain.sweep.cluster import ClusterBackend

    return ClusterBackend(client.CustomObjectsApi(api), spec.namespace or "default", stopping=stopping)


def load_sweep(path: str) -> SweepSpec | None:
    """The sweep file -> SweepSpec, or None after printing every error with its line."""
    try:
        docs = load_documents(path)
    except DocumentError as exc:
        print(exc, file=sys.stderr)
        return None
    if len(docs) != 1:
        print(f"{path}: holds {len(docs)} documents; a sweep file holds one", file=sys.stderr)
        return None
    doc = docs[0]
    spec, errors = parse_sweep(doc.data, lambda rel: _load_template(path, rel))
    for e in errors:
        print(f"{path}:{_line(doc, e)}: error: {e}", file=sys.stderr)
    return spec


def _load_template(sweep_path: str, rel: str) -> dict[str, Any]:
    path = rel if os.path.isabs(rel) else os.path.join(os.path.dirname(sweep_path) or ".", rel)
    try:
        jobs = [d.data for d in load_documents(path) if is_distributed_training(d.data)]
    except DocumentError as exc:
        raise ValueError(str(exc)) from None
    if len(jobs) != 1:
        raise ValueError(f"{path} holds {len(jobs)} DistributedTrainings; a template is exactly one")
    return jobs[0]


def _line(doc: Document, error: FieldError) -> int:
    path = error.path
    if path.startswith("parameters["):
        key, _, rest = path[len("parameters["):].partition("]")
        node = next((v for k, v in getattr(doc.node, "value", []) if getattr(k, "value", None) == "parameters"), None)
        for k, v in getattr(node, "value", []) if node is not None else []:
            if getattr(k, "value", None) == key:
                sub = next((vv for kk, vv in getattr(v, "value", []) if f".{getattr(kk, 'value', '')}" == rest), None)
                return (sub or k).start_mark.line + 1
        return doc.line_of("parameters")
    return doc.line_of(path)
