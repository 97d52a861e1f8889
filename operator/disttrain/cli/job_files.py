"""The jobs in the files a command is given, checked offline as the operator checks them
(resolved against a --template file first), and the report of each: the entry -o json/yaml
prints and its text form."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, TextIO

from disttrain.api.defaults import Images
from disttrain.api.errors import FieldError
from disttrain.api.validate import Validation, validate_document
from disttrain.api.template_resolution import without_template
from disttrain.cli.template_files import load_template, print_sources, resolved_document
from disttrain.client.documents import Document, DocumentError, describe, is_distributed_training, load_documents
from disttrain.integrations.registry import held, queue_of


TEMPLATE_HELP = ("resolve each job against the TrainingTemplate or ClusterTrainingTemplate in FILE first, as "
                 "the operator does for spec.templateRef: its defaults < the job < its enforced settings "
                 "(docs/platform.md)")


def template_of(args: argparse.Namespace):
    """The --template file's template, None without one; False after printing why it
    cannot be used."""
    if not getattr(args, "template", None):
        return None
    try:
        return load_template(args.template)
    except DocumentError as exc:
        print(exc, file=sys.stderr)
        return False


def validated_jobs(paths: list[str], namespace: str | None = None, template=None):
    """(document, validation) for every job in the files, resolved against `template`
    first when there is one; (None, failed) for a file that cannot be read, after
    printing its one-line error."""
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
            data, refused, doc.template = resolved_document(template, data)
            result = validate_document(data, images=Images.from_env(os.environ))
            # Without --template, a job naming one is warned only about what its file sets.
            warnings = without_template(data, result.warnings) if template is None else result.warnings
            if refused or warnings is not result.warnings:
                result = Validation(result.job if not refused else None, result.resolved if not refused else None,
                                    [*refused, *result.errors], warnings)
            yield doc, result


def unusable(error: FieldError) -> dict[str, Any]:
    """The -o json/yaml entry of a file that could not be read or holds no job: programs
    reading the output see the file and why, as they would see an invalid job."""
    return {"file": error.path, "line": None, "name": None, "valid": False, "warnings": [],
            "errors": [{"field": None, "message": error.problem, "line": None}]}


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
        entry["gpusPerNode"] = result.job.spec.gpus
        entry["queue"] = queue_of(result.job.labels)
    if doc.template is not None:
        entry["template"] = doc.template
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
        if entry.get("queue"):
            print(f"  queue: {held(entry['queue'])}", file=out)
    else:
        print(f"{where}: {entry['name'] or '(unnamed)'}: invalid", file=out)
    if entry.get("template"):
        print_sources(entry["template"], out)
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


def read_jobs(path: str) -> list[Document] | None:
    """The jobs of one file, or None after printing why it cannot be read."""
    try:
        return _jobs_in(path)
    except DocumentError as exc:
        print(exc, file=sys.stderr)
        return None
