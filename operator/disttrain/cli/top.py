"""`disttrain top`: every job, one live line each, redrawn on every watch event."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from disttrain.cli.cluster import client_for, now
from disttrain.cli.registry import Command, register


def cmd_top(args: argparse.Namespace) -> int:
    """Redraw on every watch event: no polling, so the API server sees one watch."""
    from disttrain.client.jobview import top_table, view_of

    client = client_for(args)
    tty = sys.stdout.isatty()
    views: dict[tuple[str, str], Any] = {}
    synced = False
    for kind, obj in client.watch_all(all_namespaces=args.all_namespaces):
        if kind == "RELIST":
            views.clear()
            synced = False
            continue
        if kind == "SYNCED":
            synced = True
        else:
            key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
            if kind == "DELETED":
                views.pop(key, None)
            else:
                views[key] = view_of(obj)
        if not synced:
            continue
        lines = top_table(list(views.values()), now(), args.all_namespaces) or ["(no jobs yet)"]
        stamp = now().strftime("%H:%M:%S")
        if tty:
            sys.stdout.write("\x1b[H\x1b[2J")
        sys.stdout.write("\n".join(lines) + f"\n-- {stamp}, {len(views)} job(s); updates on every change, "
                         "Ctrl-C quits\n" + ("" if tty else "\n"))
        sys.stdout.flush()
    return 0


def _setup_top(p: argparse.ArgumentParser) -> None:
    p.add_argument("-A", "--all-namespaces", action="store_true", help="jobs of every namespace")


register(Command("top", "every job of a namespace (or all), one live line each, redrawn on every change",
                 "top -A", _setup_top, cmd_top, cluster=True,
                 instead="top redraws on every change until Ctrl-C, `disttrain get` lists the jobs once"))
