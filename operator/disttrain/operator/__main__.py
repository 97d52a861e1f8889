"""`disttrain-operator`: run the operator (in a pod, or locally against a kubeconfig).

    disttrain-operator --all-namespaces            # cluster-wide
    disttrain-operator -n team-a -n team-b         # only these namespaces
    disttrain-operator -A --leader-elect           # HA: replicas elect one active on a Lease

kopf is embedded through its public API (`kopf.operator` with ready and stop flags), with
the handlers of disttrain.operator.handlers; SIGTERM and SIGINT stop it cleanly (a leader
releases its Lease on the way out).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import Any

from disttrain.api.bounds import RECURSION_LIMIT
from disttrain.operator.logformat import log_format


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="disttrain-operator", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", default=[],
                       help="watch this namespace (repeatable; globs allowed); env DISTTRAIN_WATCH_NAMESPACES "
                            "takes a comma-separated list")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace")
    parser.add_argument("--leader-elect", action="store_true", default=None,
                        help="elect one active replica on a coordination.k8s.io Lease (env "
                             "DISTTRAIN_LEADER_ELECTION=true); the others keep their caches warm and take over "
                             "within DISTTRAIN_LEASE_SECONDS")
    parser.add_argument("--liveness", default=os.environ.get("DISTTRAIN_LIVENESS", "http://0.0.0.0:8081/healthz"),
                        help="liveness endpoint URL ('' = off)")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    args.namespaces = args.namespace or [n for n in os.environ.get("DISTTRAIN_WATCH_NAMESPACES", "").split(",") if n]
    if not args.namespaces and not args.all_namespaces:
        parser.error("choose what to watch: --all-namespaces, or -n NAMESPACE (or set DISTTRAIN_WATCH_NAMESPACES)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    fmt = log_format(os.environ)  # a bad DISTTRAIN_LOG_FORMAT stops here, named
    if args.leader_elect:
        os.environ["DISTTRAIN_LEADER_ELECTION"] = "true"  # Settings.from_env reads it in startup
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))
    import kopf  # imported late: `--help` works without kopf's start-up cost

    from disttrain.operator import handlers  # registers the handlers on kopf's default registry
    from disttrain.operator.settings import Settings

    handlers.watch_integrations(Settings.from_env())

    kopf.configure(verbose=args.verbose, log_format=fmt)
    return asyncio.run(serve(args, kopf))


async def serve(args: argparse.Namespace, kopf: Any) -> int:
    """Run kopf until SIGTERM/SIGINT (0), or until the work stops itself because the Lease
    was lost (1: the Pod restarts as a standby). kopf is started over, in this process,
    when a CRD it watches came back after it was gone, and when kopf ended because one went
    (crds.py says why)."""
    terminating, current = asyncio.Event(), [asyncio.Event()]  # current[0]: the stop flag of kopf's run now
    while not terminating.is_set():
        stop, ready, again = asyncio.Event(), asyncio.Event(), asyncio.Event()
        current[0] = stop
        memo = kopf.Memo(stop_flag=stop, leadership_lost=False, cluster_wide=args.all_namespaces, serve_again=again)
        guard = asyncio.create_task(_signals_end_the_process(ready, current, terminating))
        try:
            await kopf.operator(standalone=True, clusterwide=args.all_namespaces, namespaces=args.namespaces,
                                liveness_endpoint=args.liveness or None, stop_flag=stop, ready_flag=ready, memo=memo)
        except Exception as exc:  # noqa: BLE001  (kopf's own errors are private classes)
            if terminating.is_set() or not await _a_watched_crd_is_gone():
                raise
            logging.getLogger("disttrain.operator").warning(
                "kopf stopped (%s: %s) because a CRD it watched is gone: starting over", type(exc).__name__, exc)
            again.set()
        finally:
            guard.cancel()
        if memo.leadership_lost:
            return 1
        if not again.is_set():
            return 0
    return 0


async def _signals_end_the_process(ready: asyncio.Event, current: list[asyncio.Event],
                                   terminating: asyncio.Event) -> None:
    """Once kopf is up (it has put its own SIGTERM/SIGINT handlers in place), a signal stops
    kopf's current run as before and ends the process: one that comes while kopf is starting
    over must not be spent on the run that ends (which kopf's handler would do)."""
    await ready.wait()

    def received() -> None:
        terminating.set()
        current[0].set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, received)


async def _a_watched_crd_is_gone() -> bool:
    """Whether discovery lacks one of the resources kopf watches for us."""
    from disttrain.integrations.registry import integrations
    from disttrain.operator.handlers import needed_crds
    from disttrain.operator.kube import Kube, login
    from disttrain.operator.settings import Settings

    kube = Kube(login(), qps=5.0, burst=5)
    try:
        for _name, group, version, plural in needed_crds(integrations(Settings.from_env())):
            if not await kube.served(group, version, plural):
                return True
        return False
    finally:
        await kube.close()

if __name__ == "__main__":
    sys.exit(main())
