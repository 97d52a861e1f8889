"""`disttrain get` and `disttrain status`: list jobs or show one, once or on every change (-w)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from disttrain.cli.cluster import client_for, job_argument, none_found
from disttrain.cli.output import GET_FORMATS, output_format, print_objects
from disttrain.cli.registry import Command, register


def cmd_get(args: argparse.Namespace) -> int:
    client = client_for(args)
    if args.name is not None and args.all_namespaces:
        print("error: a NAME takes one namespace: drop -A and pass -n NAMESPACE", file=sys.stderr)
        return 2
    if args.watch:
        return _watch_get(client, args)
    if args.name is None:
        objs = client.list(all_namespaces=args.all_namespaces, selector=args.selector)
        if objs or args.output in ("json", "yaml"):
            print_objects(objs, args, listing=True)
        else:  # kubectl's words
            print(none_found(client, args.all_namespaces), file=sys.stderr)
        return 0
    obj = client.get(args.name)
    events = client.events(args.name) if args.output == "text" else None
    print_objects([obj], args, listing=False, events=events)
    return 0


def _watch_get(client: Any, args: argparse.Namespace) -> int:
    """`get -w`: what get prints now, then one line (or document) per change, until
    Ctrl-C. A NAME that does not exist is NotFound, as in kubectl."""
    if args.name is not None:
        client.get(args.name)
    # One job is a row too (get NAME's text is several lines: a row per change reads better).
    rows = argparse.Namespace(**{**vars(args), "output": "wide" if args.name and args.output == "text"
                                 else args.output})
    table = rows.output.partition("=")[0] in ("text", "wide", "custom-columns")
    first: list[dict[str, Any]] = []
    seen: dict[tuple[str, str], str] = {}
    synced = False
    for kind, obj in client.watch_all(all_namespaces=args.all_namespaces, selector=args.selector, name=args.name):
        if kind in ("RELIST", "SYNCED"):
            if kind == "SYNCED" and not synced:
                synced = True
                if first:
                    print_objects(first, rows, listing=True, headers=table)
                elif args.name is None:
                    print(none_found(client, args.all_namespaces), file=sys.stderr)
            continue
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        version = obj["metadata"].get("resourceVersion", "")
        if kind != "DELETED" and seen.get(key) == version:
            continue  # a relist after an expired watch: already shown
        seen[key] = version
        if not synced:
            first.append(obj)
        else:
            print_objects([obj], rows, listing=True, headers=False)
    return 0


def _setup_get(p: argparse.ArgumentParser) -> None:
    job_argument(p, nargs="?")
    p.add_argument("-A", "--all-namespaces", action="store_true", help="list jobs of every namespace")
    p.add_argument("-o", "--output", type=output_format, default="text", metavar="FORMAT",
                   help="wide: also workers, loss and ETA; name: kind/name, one a line; json; yaml; "
                        "jsonpath=TEMPLATE and custom-columns=HEADER:PATH,... as kubectl takes them"
                   ).completer = lambda **_: [*GET_FORMATS, "jsonpath=", "custom-columns="]  # type: ignore[attr-defined]
    p.add_argument("-l", "--selector", help="only jobs with these labels, like kubectl -l (e.g. disttrain.dev/sweep=lr)")
    p.add_argument("--no-headers", action="store_true", help="the list without its header line")
    p.add_argument("-w", "--watch", action="store_true",
                   help="after the list (or the job), print a line on every change until Ctrl-C")


def _setup_status(p: argparse.ArgumentParser) -> None:
    job_argument(p)
    p.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text",
                   help="json, yaml: the object itself, as kubectl get -o prints it")
    p.set_defaults(all_namespaces=False, watch=False)  # what get reads of a named job


register(Command("get", "list jobs, or show one (phase, progress, conditions, events)", "get -A",
                 _setup_get, cmd_get, cluster=True))
register(Command("status", "one job: phase, progress bar, loss, samples/s, ETA, checkpoint age, conditions, "
                 "recent events", "status my-job", _setup_status, cmd_get, cluster=True))
