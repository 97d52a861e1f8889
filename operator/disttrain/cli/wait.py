"""`disttrain wait NAME --for WHAT`: block until the job gets there, as kubectl wait does."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from disttrain.cli.cluster import client_for, job_argument, ref
from disttrain.cli.registry import Command, register


def cmd_wait(args: argparse.Namespace) -> int:
    from disttrain.client.waiting import parse_duration

    try:
        timeout = parse_duration(args.timeout) if args.timeout else None
    except ValueError as exc:
        print(f"error: --timeout: {exc}", file=sys.stderr)
        return 2
    want = args.target
    view = client_for(args).wait_for(args.name, want, timeout=timeout)
    if want.delete:
        print(f"{ref(args.name)} deleted")
    elif want.phases:
        print(f"{ref(args.name)} is {view.phase}")
    else:
        print(f"{ref(args.name)} condition met")  # kubectl's words
    return 0


def _wait_target(text: str) -> Any:
    from disttrain.client.waiting import parse_wait_for

    try:
        return parse_wait_for(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _setup_wait(p: argparse.ArgumentParser) -> None:
    from disttrain.client.jobview import WAITABLE
    from disttrain.client.waiting import WAIT_FORMS

    job_argument(p)
    p.add_argument("--for", dest="target", type=_wait_target, default="Succeeded", metavar="WHAT",
                   help=f"what to wait for: {'; '.join(WAIT_FORMS)} (default: Succeeded)"
                   ).completer = lambda **_: [*WAITABLE, "condition=", "delete", "jsonpath="]  # type: ignore[attr-defined]
    p.add_argument("--timeout", metavar="DURATION", help="give up after this long: 90s, 5m, 1h (default: never); "
                   "exit code 124")


register(Command("wait", "block until the job is Running, Succeeded or Suspended, has a condition, is deleted, "
                 "or a JSONPath has a value",
                 "wait my-job --for Succeeded --timeout 1h", _setup_wait, cmd_wait, cluster=True))
