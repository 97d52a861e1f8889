"""`disttrain render FILE...`: the children the operator would create for each job."""

from __future__ import annotations

import argparse
import os
import sys

from disttrain.cli.job_files import TEMPLATE_HELP, print_report, report, template_of, validated_jobs
from disttrain.cli.output import dump
from disttrain.cli.registry import Command, register
from disttrain.integrations.registry import owned_children, render_pod


def cmd_render(args: argparse.Namespace) -> int:
    from disttrain.render.network_policy import network_policy_from_env

    objects, failed = [], False
    environ = {**os.environ, "DISTTRAIN_OPERATOR_NAMESPACE": args.operator_namespace}
    if args.no_network_policy:
        environ["DISTTRAIN_NETWORK_POLICY"] = "false"
    try:  # the operator's own settings, read from the same variables (docs/operations.md)
        network_policy = network_policy_from_env(environ)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    template = template_of(args)
    if template is False:
        return 1
    for doc, result in validated_jobs(args.files, args.namespace, template):
        if not result.ok:
            failed = True
            if doc is not None:
                print_report(report(doc, result), sys.stderr)
            continue
        for w in report(doc, result)["warnings"]:
            print(f"{doc.path}:{w['line']}: warning [{w['reason']}] {w['field']}: {w['message']}",
                  file=sys.stderr)
        job, resolved = result.job, result.resolved
        objects.extend(owned_children(job, resolved, network_policy))  # the operator's order, then its pods
        objects.extend(render_pod(job, resolved, i) for i in range(resolved.nodes))
    if failed:
        return 1
    dump(objects, args.output, sys.stdout, multi=True)
    return 0


def _setup_render(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("-n", "--namespace", help="namespace to render into (default: the "
                   "object's own, else default)")
    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    p.add_argument("--operator-namespace", default=os.environ.get("DISTTRAIN_OPERATOR_NAMESPACE") or "disttrain-system",
                   help="where the operator runs: its NetworkPolicy admits the operator from there to read "
                        "/status (default: $DISTTRAIN_OPERATOR_NAMESPACE, else disttrain-system)")
    p.add_argument("--no-network-policy", action="store_true",
                   help="leave out the NetworkPolicy, as an operator with DISTTRAIN_NETWORK_POLICY=false does")
    p.add_argument("--template", metavar="FILE", help=TEMPLATE_HELP)


register(Command("render", "print the Service, NetworkPolicy, PodDisruptionBudget and Pods the operator would create",
                 "render job.yaml", _setup_render, cmd_render))
