"""`disttrain`: validate, render and run DistributedTraining files without a cluster.

Prints the same errors and warnings the operator writes to status and Events.
Exit codes: 0 valid, 1 invalid input, 2 usage errors (argparse).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

import yaml

from .api import schema
from .api.errors import FieldError
from .api.validate import Validation, validate_document
from .documents import Document, DocumentError, describe, is_distributed_training, load_documents
from .render import render_children


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # `disttrain render x.yaml | head`
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="disttrain", description="Validate, render and run DistributedTraining jobs.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check files offline with the operator's rules")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("render", help="print the Service and Pods the operator would create")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("-n", "--namespace", help="namespace to render into (default: the "
                   "object's own, else default)")
    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("crd", help="print the CustomResourceDefinition")
    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    p.set_defaults(func=cmd_crd)

    p = sub.add_parser("docs", help="print generated documentation (api: the API reference)")
    p.add_argument("topic", choices=("api",))
    p.set_defaults(func=cmd_docs)

    p = sub.add_parser("run", help="run a job on this machine (--local), no cluster needed")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--local", action="store_true", required=True,
                   help="start one torchrun agent per node on this machine")
    p.add_argument("--workdir", default=".disttrain",
                   help="where checkpoints and logs go (default: ./.disttrain/<job>)")
    p.add_argument("--no-progress", action="store_true", help="plain log lines, no progress bar")
    p.set_defaults(func=cmd_run)

    from .sweep.command import add_parser as add_sweep_parser

    add_sweep_parser(sub)
    return parser


# ---- validate -----------------------------------------------------------------------


def cmd_validate(args: argparse.Namespace) -> int:
    checked = list(validated_jobs(args.files))
    reports = [report(doc, result) for doc, result in checked if doc is not None]
    if args.output == "text":
        for entry in reports:
            print_report(entry, sys.stdout)
    else:
        dump(reports, args.output, sys.stdout)
    return 0 if all(result.ok for _, result in checked) else 1


def validated_jobs(paths: list[str], namespace: str | None = None):
    """(document, validation) for every job in the files; (None, failed) for a file that
    cannot be read, after printing its one-line error."""
    for path in paths:
        try:
            documents = _jobs_in(path)
        except DocumentError as exc:
            print(exc, file=sys.stderr)
            yield None, Validation(None, None, [FieldError(path, None, str(exc))])
            continue
        for doc in documents:
            data = doc.data
            if namespace:
                data = {**data, "metadata": {**(data.get("metadata") or {}), "namespace": namespace}}
            yield doc, validate_document(data)


def report(doc: Document, result: Validation) -> dict[str, Any]:
    metadata = doc.data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    name = name if isinstance(name, str) and len(name) <= 253 else None
    entry: dict[str, Any] = {"file": doc.path, "line": doc.line, "name": name, "valid": result.ok}
    if result.resolved is not None:
        r = result.resolved
        entry["resolved"] = {"strategy": r.strategy, "nodes": r.nodes, "minNodes": r.min_nodes,
                             "maxNodes": r.max_nodes, "nprocPerNode": r.nproc_per_node,
                             "worldSize": r.world_size, "precision": r.precision}
        entry["gpusPerNode"] = result.job.spec.gpus_per_node
    entry["warnings"] = [{"reason": w.reason, "field": w.path, "message": w.message,
                          "line": doc.line_of(w.path)} for w in result.warnings]
    entry["errors"] = [{"field": e.path, "message": str(e), "line": doc.line_of(e.path)}
                       for e in result.errors]
    return entry


def print_report(entry: dict[str, Any], out: TextIO) -> None:
    where = f"{entry['file']}:{entry['line']}"
    if entry["valid"]:
        r = entry["resolved"]
        elastic = (_count(r["nodes"], "node") if r["minNodes"] == r["maxNodes"] == r["nodes"]
                   else f"{_count(r['nodes'], 'node')} (elastic {r['minNodes']}..{r['maxNodes']})")
        device = _count(entry["gpusPerNode"], "GPU") if entry["gpusPerNode"] else "CPU"
        print(f"{where}: {entry['name']}: valid", file=out)
        print(f"  topology: {elastic} x {_count(r['nprocPerNode'], 'process', 'processes')} = world size "
              f"{r['worldSize']}, strategy {r['strategy']}, precision {r['precision']}, "
              f"{device} per node", file=out)
    else:
        print(f"{where}: {entry['name'] or '(unnamed)'}: invalid", file=out)
    for w in entry["warnings"]:
        print(f"  {entry['file']}:{w['line']}: warning [{w['reason']}] {w['field']}: {w['message']}", file=out)
    for e in entry["errors"]:
        print(f"  {entry['file']}:{e['line']}: error: {e['message']}", file=out)


def _count(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


def _jobs_in(path: str) -> list[Document]:
    """The DistributedTraining documents of a file; other kinds are noted and skipped."""
    documents = load_documents(path)
    jobs = [d for d in documents if is_distributed_training(d.data)]
    for d in documents:
        if not is_distributed_training(d.data):
            print(f"{d.label}: skipping {describe(d.data)}: not a DistributedTraining",
                  file=sys.stderr)
    if not jobs:
        raise DocumentError(f"{path}:1: no DistributedTraining in this file (expected "
                            "apiVersion: disttrain.dev/v1alpha1, kind: DistributedTraining)")
    return jobs


# ---- render, crd --------------------------------------------------------------------


def cmd_render(args: argparse.Namespace) -> int:
    objects, failed = [], False
    for doc, result in validated_jobs(args.files, args.namespace):
        if not result.ok:
            failed = True
            if doc is not None:
                print_report(report(doc, result), sys.stderr)
            continue
        for w in report(doc, result)["warnings"]:
            print(f"{doc.path}:{w['line']}: warning [{w['reason']}] {w['field']}: {w['message']}",
                  file=sys.stderr)
        objects.extend(render_children(result.job, result.resolved))
    if failed:
        return 1
    dump(objects, args.output, sys.stdout, multi=True)
    return 0


def cmd_crd(args: argparse.Namespace) -> int:
    dump(schema.crd(), args.output, sys.stdout)
    return 0


def cmd_docs(args: argparse.Namespace) -> int:
    from .api.reference import api_reference

    sys.stdout.write(api_reference())
    return 0


def dump(data: Any, fmt: str, out: TextIO, multi: bool = False) -> None:
    if fmt == "json":
        json.dump(data, out, indent=2)
        out.write("\n")
    elif multi:
        yaml.safe_dump_all(data, out, sort_keys=False, width=100)
    else:
        yaml.safe_dump(data, out, sort_keys=False, width=100)


# ---- run --local --------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    try:
        documents = _jobs_in(args.file)
    except DocumentError as exc:
        print(exc, file=sys.stderr)
        return 1
    if len(documents) != 1:
        print(f"{args.file}: holds {len(documents)} DistributedTrainings; run --local takes one "
              "per call", file=sys.stderr)
        return 1
    doc = documents[0]
    result = validate_document(doc.data)
    entry = report(doc, result)
    print_report(entry, sys.stderr)
    if not result.ok:
        return 1
    from .local_run import run_local  # needs torch: imported only for this command

    return run_local(result.job, result.resolved, workdir=args.workdir,
                     progress=not args.no_progress)


if __name__ == "__main__":
    sys.exit(main())
