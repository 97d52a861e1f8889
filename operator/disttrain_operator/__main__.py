"""`disttrain-operator`: run the operator (in a pod, or locally against a kubeconfig).

    disttrain-operator --all-namespaces            # cluster-wide
    disttrain-operator -n team-a -n team-b         # only these namespaces
    disttrain-operator --peering disttrain --priority 100   # HA: one active replica

Equivalent to `kopf run -m disttrain_operator.handlers ...` with our defaults.
"""

from __future__ import annotations

import argparse
import os
import sys

from .api.bounds import RECURSION_LIMIT
from .logformat import kopf_log_args


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="disttrain-operator", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", default=[],
                       help="watch this namespace (repeatable; globs allowed); env DISTTRAIN_WATCH_NAMESPACES "
                            "takes a comma-separated list")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace")
    parser.add_argument("--peering", default=os.environ.get("DISTTRAIN_PEERING", ""),
                        help="kopf peering name: replicas with the same name elect one active "
                             "operator (needs the KopfPeering CRDs); empty = standalone")
    parser.add_argument("--priority", type=int, default=int(os.environ.get("DISTTRAIN_PRIORITY", "0")),
                        help="peering priority; the highest one works, the others wait")
    parser.add_argument("--liveness", default=os.environ.get("DISTTRAIN_LIVENESS", "http://0.0.0.0:8081/healthz"),
                        help="kopf liveness endpoint URL ('' = off)")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)

    namespaces = args.namespace or [n for n in os.environ.get("DISTTRAIN_WATCH_NAMESPACES", "").split(",") if n]
    if not namespaces and not args.all_namespaces:
        parser.error("choose what to watch: --all-namespaces, or -n NAMESPACE (or set DISTTRAIN_WATCH_NAMESPACES)")

    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))
    # kopf imports the official `kubernetes` client when it is installed (the CLI needs it,
    # so the image has it), only to recognise that client's model classes. The operator
    # never hands kopf one (kube.py speaks to the API), and the import costs about 20 MiB
    # of resident memory: keep it out of this process.
    sys.modules.setdefault("kubernetes", None)  # type: ignore[assignment]
    from kopf.cli import main as kopf_main  # imported late: `--help` works without a cluster

    kopf_args = ["run", "-m", "disttrain_operator.handlers", *kopf_log_args(os.environ)]
    kopf_args += ["--all-namespaces"] if args.all_namespaces else [f"--namespace={n}" for n in namespaces]
    kopf_args += [f"--peering={args.peering}", f"--priority={args.priority}"] if args.peering else ["--standalone"]
    if args.liveness:
        kopf_args.append(f"--liveness={args.liveness}")
    if args.verbose:
        kopf_args.append("--verbose")
    return kopf_main(kopf_args, standalone_mode=False) or 0


if __name__ == "__main__":
    sys.exit(main())
