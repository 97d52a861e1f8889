"""`disttrain logs NAME`: every worker's trainer log, each line prefixed by its worker."""

from __future__ import annotations

import argparse

from disttrain.cli.cluster import client_for, duration, job_argument
from disttrain.cli.registry import Command, register


def cmd_logs(args: argparse.Namespace) -> int:
    client = client_for(args)
    for line in client.logs(args.name, worker=args.worker, follow=args.follow, tail=args.tail, since=args.since,
                            previous=args.previous):
        prefix = f"[worker-{line.worker}]" if line.worker is not None else "[worker-?]"
        stamp = f" {line.time}" if args.timestamps else ""
        print(f"{prefix}{stamp} {line.text}", flush=args.follow)
    return 0


def _setup_logs(p: argparse.ArgumentParser) -> None:
    job_argument(p)
    p.add_argument("-f", "--follow", action="store_true", help="stream new lines until every worker's log ends")
    p.add_argument("--worker", type=int, metavar="I", help="only worker I (pod NAME-worker-I)")
    p.add_argument("--tail", type=int, metavar="N", help="the last N lines of each worker")
    p.add_argument("--since", type=duration, metavar="DURATION",
                   help="only lines newer than this (30s, 5m, 1h), like kubectl logs --since")
    p.add_argument("--timestamps", action="store_true", help="each line's time (RFC 3339, from the kubelet) "
                   "after the worker prefix")
    p.add_argument("-p", "--previous", action="store_true",
                   help="the log of each worker's previous container (before it restarted)")


register(Command("logs", "the trainer logs of every worker, interleaved, each line prefixed [worker-i]",
                 "logs my-job -f", _setup_logs, cmd_logs, cluster=True))
