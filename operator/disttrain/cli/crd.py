"""`disttrain crd`: the CustomResourceDefinitions, generated from the API types: every
kind the operator serves (the job and both template kinds) in one stream, so that one
`disttrain crd | kubectl apply -f -` installs them all; `--kind` prints one."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from disttrain.api import schema
from disttrain.api import types as t
from disttrain.api.template_resolution import TEMPLATE_KINDS
from disttrain.cli.output import dump
from disttrain.cli.registry import Command, register

KINDS = (t.KIND, *TEMPLATE_KINDS)


def crd_of(kind: str) -> dict[str, Any]:
    return schema.crd() if kind == t.KIND else schema.template_crd(kind)


def cmd_crd(args: argparse.Namespace) -> int:
    if args.kind is not None:
        dump(crd_of(args.kind), args.output, sys.stdout)
    elif args.output == "json":
        dump({"apiVersion": "v1", "kind": "List", "items": [crd_of(kind) for kind in KINDS]}, "json", sys.stdout)
    else:
        dump([crd_of(kind) for kind in KINDS], "yaml", sys.stdout, multi=True)
    return 0


def _setup_crd(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    p.add_argument("--kind", choices=KINDS, default=None,
                   help=f"print only this kind's CustomResourceDefinition (default: all of them: {', '.join(KINDS)})")


register(Command("crd", "print the CustomResourceDefinitions the operator serves", "crd | kubectl apply -f -", _setup_crd, cmd_crd))
