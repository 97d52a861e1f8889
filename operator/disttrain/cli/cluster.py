"""What the commands that talk to a cluster share: -n, --context, --kubeconfig and
--request-timeout, the client they make of them, a job's NAME argument (completed from the
cluster), and kubectl's words for what they did or could not do."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timezone
from typing import Any


def client_error() -> type[Exception]:
    """DisttrainError, imported only once a cluster command has imported the client."""
    module = sys.modules.get("disttrain.client.errors")
    return module.DisttrainError if module else _NeverRaised


class _NeverRaised(Exception):
    exit_code = 1


def program_name() -> str:
    """`kubectl disttrain` when kubectl runs us as the plugin kubectl-disttrain."""
    return "kubectl disttrain" if os.path.basename(sys.argv[0]).startswith("kubectl-") else "disttrain"


def cluster_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--namespace", help="the namespace (default: the kubeconfig context's, else default)")
    p.add_argument("--context", help="the kubeconfig context to use (default: the current one)")
    p.add_argument("--kubeconfig", help="path of the kubeconfig (default: $KUBECONFIG, else ~/.kube/config)")
    p.add_argument("--request-timeout", type=duration, metavar="DURATION",
                   help="how long one request may take, like kubectl's (30s, 1m, or seconds; 0: no limit; "
                        "default 10 s to connect, 60 s to answer); watches and -f are not bounded by it")


def duration(text: str) -> float:
    from disttrain.client.waiting import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


COMPLETION_TIMEOUT = 2.0  # seconds a completion of job names may ask the cluster for


def job_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """Completer: the names of the jobs in the namespace, or none when the cluster is away."""
    from disttrain.client.client import Client
    from disttrain.client.errors import DisttrainError

    try:
        # A shell waits on this: a cluster that is away must not hold the prompt for long.
        client = Client(getattr(parsed_args, "namespace", None), context=getattr(parsed_args, "context", None),
                        kubeconfig=getattr(parsed_args, "kubeconfig", None), request_timeout=COMPLETION_TIMEOUT)
        return [o["metadata"]["name"] for o in client.list() if o["metadata"]["name"].startswith(prefix)]
    except DisttrainError:
        return []


def job_argument(p: argparse.ArgumentParser, nargs: str | None = None) -> None:
    p.add_argument("name", nargs=nargs, metavar="NAME", help="the DistributedTraining's name"
                   ).completer = job_names  # type: ignore[attr-defined]


def client_for(args: argparse.Namespace) -> Any:
    from disttrain.client.client import Client  # the kubernetes client: imported only for cluster commands

    return Client(args.namespace, context=args.context, kubeconfig=args.kubeconfig,
                  request_timeout=args.request_timeout)


def now() -> datetime:
    return datetime.now(timezone.utc)


def ref(name: str) -> str:
    from disttrain.client.errors import OBJECT

    return f"{OBJECT}/{name}"


def usage_error(message: str) -> int:
    """A command line that cannot be carried out as given: one line, exit 2 (argparse's code)."""
    print(f"error: {message}", file=sys.stderr)
    return 2


def none_found(client: Any, all_namespaces: bool = False) -> str:
    """kubectl's words for an empty list."""
    return "No resources found" if all_namespaces else f"No resources found in {client.namespace} namespace."
