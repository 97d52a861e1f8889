"""`disttrain version`: disttrain's version, the API version it speaks, and Python's."""

from __future__ import annotations

import argparse
import sys

from disttrain.api import types as t
from disttrain.cli.output import dump
from disttrain.cli.registry import Command, register


def cmd_version(args: argparse.Namespace) -> int:
    from disttrain import __version__

    info = {"disttrain": __version__, "api": f"{t.GROUP}/{t.VERSION}",
            "python": ".".join(map(str, sys.version_info[:3]))}
    if args.output == "text":
        print(f"disttrain {info['disttrain']} (API {info['api']}, Python {info['python']})")
    else:
        dump(info, args.output, sys.stdout)
    return 0


def _setup_version(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=("text", "yaml", "json"), default="text",
                   help="yaml, json: the same three fields as one object")


register(Command("version", "print disttrain's version and the API version it speaks", "version", _setup_version,
                 cmd_version))
