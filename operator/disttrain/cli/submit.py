"""`disttrain submit` and `disttrain apply`: the jobs of the files, validated offline,
created (and followed) or applied server-side."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from disttrain.api.validate import validate_document
from disttrain.cli.cluster import client_error, client_for, now, program_name, ref, usage_error
from disttrain.cli.job_files import print_report, read_jobs, report
from disttrain.cli.registry import Command, register
from disttrain.client.documents import Document


def _files(args: argparse.Namespace) -> list[str] | str:
    """FILE and -f FILE (kubectl's -f; `-` reads stdin), in the order given; or what is wrong."""
    files = ([args.file] if args.file else []) + (args.filename or [])
    if not files:
        return "give the file of jobs: FILE or -f FILE (- reads stdin)"
    if files.count("-") > 1:
        return "stdin (-) can be read once"
    return files


def _checked_documents(args: argparse.Namespace) -> list[Document] | int:
    """Every job of the files, validated offline; else the exit code, after printing why
    (2: no file given; 1: a file cannot be read or a job is invalid): nothing is sent."""
    files = _files(args)
    if isinstance(files, str):
        return usage_error(files)
    documents: list[Document] = []
    for path in files:
        found = read_jobs(path)
        if found is None:
            return 1
        documents.extend(found)
    ok = True
    for doc in documents:
        result = validate_document(doc.data)
        entry = report(doc, result)
        if not result.ok or entry["warnings"]:
            print_report(entry, sys.stderr)
        ok = ok and result.ok
    for doc in documents:  # every reason at once
        metadata = doc.data.get("metadata")
        ns = metadata.get("namespace") if isinstance(metadata, dict) else None
        if ns and args.namespace and ns != args.namespace:
            print(f"error: {doc.label}: the object's namespace {ns!r} does not match -n {args.namespace!r}; "
                  "drop one of them", file=sys.stderr)
            ok = False
    return documents if ok else 1  # nothing was sent: the operator would refuse it too


DRY_RUN = {"none": "", "client": " (dry run)", "server": " (server dry run)"}  # kubectl's suffixes


def cmd_submit(args: argparse.Namespace) -> int:
    documents = _checked_documents(args)
    if isinstance(documents, int):
        return documents
    if args.dry_run == "client":  # checked offline, as the operator would; nothing sent
        for doc in documents:
            print(f"{ref(doc.data['metadata']['name'])} created (dry run)")  # a name is required: validated
        return 0
    client = client_for(args)
    names = []
    for doc in documents:
        try:
            created = client.create(doc.data, dry_run=args.dry_run == "server")
        except client_error() as exc:
            if "(AlreadyExists)" in str(exc):
                exc.args = (f"{exc}; `{program_name()} apply -f FILE` updates it",)
            raise
        names.append((created["metadata"]["name"], created["metadata"]["namespace"]))
        print(f"{ref(names[-1][0])} created{DRY_RUN[args.dry_run]}")
    if args.detach or args.dry_run != "none" or len(names) != 1:
        return 0
    return _follow(client, *names[0])


def cmd_apply(args: argparse.Namespace) -> int:
    documents = _checked_documents(args)
    if isinstance(documents, int):
        return documents
    if args.dry_run == "client":
        for doc in documents:
            print(f"{ref(doc.data['metadata']['name'])} configured (dry run)")  # apply needs a name: validated
        return 0
    from disttrain.client.jobview import resize_warning

    client = client_for(args)
    for doc in documents:
        before = _current(client, doc)
        obj, action = client.apply(doc.data, dry_run=args.dry_run == "server", force=args.force_conflicts)
        print(f"{ref(obj['metadata']['name'])} {action}{DRY_RUN[args.dry_run]}")
        warning = resize_warning(before, obj)
        if warning:
            print(warning, file=sys.stderr)
    return 0


def _current(client: Any, doc: Document) -> dict[str, Any] | None:
    """The job as it is before an apply changes it; None when there is none yet."""
    from disttrain.client.errors import NotFound

    try:
        return client.get(doc.data["metadata"]["name"], doc.data["metadata"].get("namespace"))
    except NotFound:
        return None


def _follow(client: Any, name: str, namespace: str) -> int:
    """Print a line on every change until the job ends: 0 Succeeded, 1 Failed."""
    from disttrain.client.jobview import progress_line

    print(f"following {name} (Ctrl-C stops following; the job keeps running)", file=sys.stderr)
    last = None
    for view in client.watch(name, namespace):
        if view != last:
            print(progress_line(view, now()), flush=True)
            last = view
    for c in last.conditions if last else ():
        if c.get("type") == "Failed" and c.get("status") == "True":
            print(f"{name} failed: {c.get('reason')}: {c.get('message')}", file=sys.stderr)
    return 0 if last and last.phase == "Succeeded" else 1


def _file_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", nargs="?", help="the file of jobs (YAML or JSON; - reads stdin)")
    p.add_argument("-f", "--filename", action="append", metavar="FILE",
                   help="a file of jobs, like kubectl -f (repeat for more; - reads stdin)")
    p.add_argument("--dry-run", choices=tuple(DRY_RUN), default="none",
                   help="client: validate offline and print what would be sent; server: the API server checks "
                        "it too and stores nothing")


def _setup_submit(p: argparse.ArgumentParser) -> None:
    _file_options(p)
    p.add_argument("-d", "--detach", action="store_true", help="return once created; do not follow")


def _setup_apply(p: argparse.ArgumentParser) -> None:
    _file_options(p)
    p.add_argument("--force-conflicts", action="store_true",
                   help="take over fields another manager (kubectl apply, a controller) set")


register(Command("submit", "validate offline, create the job, then follow it until it ends",
                 "submit job.yaml", _setup_submit, cmd_submit, cluster=True))
register(Command("apply", "validate offline, then create the job or update it (server-side apply)",
                 "apply -f job.yaml", _setup_apply, cmd_apply, cluster=True))
