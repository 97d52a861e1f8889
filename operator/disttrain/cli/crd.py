"""`disttrain crd`: the CustomResourceDefinitions, generated from the API types."""

from __future__ import annotations

import argparse
import sys

from disttrain.api import schema
from disttrain.api import types as t
from disttrain.cli.output import dump
from disttrain.cli.registry import Command, register


def cmd_crd(args: argparse.Namespace) -> int:
    dump(schema.crd() if args.kind == t.KIND else schema.template_crd(args.kind), args.output, sys.stdout)
    return 0


def _setup_crd(p: argparse.ArgumentParser) -> None:
    from disttrain.api.template_resolution import TEMPLATE_KINDS

    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    p.add_argument("--kind", choices=(t.KIND, *TEMPLATE_KINDS), default=t.KIND,
                   help=f"whose CustomResourceDefinition (default: {t.KIND})")


register(Command("crd", "print the CustomResourceDefinition", "crd | kubectl apply -f -", _setup_crd, cmd_crd))
