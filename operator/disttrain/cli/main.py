# PYTHON_ARGCOMPLETE_OK
"""`disttrain` (also installed as `kubectl-disttrain`, so `kubectl disttrain` finds it).

Offline: validate, render, crd, docs and `run --local` print the same errors and warnings
the operator writes to status and Events. In a cluster: submit, get/status, logs, wait,
suspend, resume, delete and top, all through the Python client (disttrain.client).

Exit codes: 0 ok; 1 invalid input or a failed operation (an API error, no cluster, a job
that Failed while waited for); 2 usage errors (argparse); 124 `wait` timed out; 130
interrupted. Commands are rows of COMMANDS (registry.py): a command or group of commands
is a module of this package that calls `register(Command(...))` for each of its rows, and
the import below puts it in the table, in the order --help lists them.
"""

from __future__ import annotations

import argparse
import functools
import sys

# Each module registers its commands as it is imported: this order is --help's.
from disttrain.cli import (validate, render, crd, docs, run, submit, get, logs, wait,  # noqa: F401
                           lifecycle, top, version, completion, sweep)
from disttrain.cli.cluster import client_error, cluster_options, program_name
from disttrain.cli.registry import COMMANDS, EXTRAS, Command, needs_package

# The second entry point (pyproject.toml): what kubectl runs to complete `kubectl disttrain`.
kubectl_complete = completion.kubectl_complete


def main(argv: list[str] | None = None) -> int:
    parser, own = parsers()
    completion.autocomplete(parser)
    args, unknown = parser.parse_known_args(argv)
    command = args.command_spec
    if unknown:  # said by the command's own parser, with its usage and the fix
        unrecognized(own[command.name], command, unknown)
    absent = command.missing()
    if absent:  # before anything starts: never a ModuleNotFoundError half-way through
        print(needs_package(command.name, absent), file=sys.stderr)
        return 1
    try:
        return args.func(args)
    except ModuleNotFoundError as exc:  # an optional package a branch of the command needs
        if (exc.name or "").split(".")[0] not in EXTRAS:
            raise
        print(needs_package(command.name, exc.name.split(".")[0]), file=sys.stderr)
        return 1
    except BrokenPipeError:  # `disttrain render x.yaml | head`
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except client_error() as exc:  # one line, kubectl's words, no traceback
        print(exc, file=sys.stderr)
        return exc.exit_code


def unrecognized(parser: argparse.ArgumentParser, command: Command, unknown: list[str]) -> None:
    """`top --once`: the error, its fix and the command's own usage (not the top-level
    one argparse would print); exits 2, as argparse's usage errors do."""
    fix = f"leave it out (`{parser.prog} --help` lists {command.name}'s options)"
    print(f"{parser.prog}: error: unrecognized arguments: {' '.join(unknown)}. Fix: {fix}"
          + (f"; {command.instead}" if command.instead else ""), file=sys.stderr)
    parser.print_usage(sys.stderr)
    parser.exit(2)


def build_parser() -> argparse.ArgumentParser:
    return parsers()[0]


def parsers(prog: str | None = None, columns: int | None = None
            ) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The whole command line and each command's own parser; `columns` fixes the width
    --help wraps at (else the terminal's)."""
    prog = prog or program_name()
    formatter = functools.partial(argparse.RawDescriptionHelpFormatter, width=columns)
    width = max(len(c.name) for c in COMMANDS)
    examples = "\n".join(f"  {c.name:<{width}}  {prog} {c.example}" for c in COMMANDS)
    parser = argparse.ArgumentParser(
        prog=prog, formatter_class=formatter,
        description="Validate, render and run DistributedTraining jobs; submit and follow them in a cluster.",
        epilog=f"examples:\n{examples}\n\nexit codes: 0 ok, 1 failed (invalid file, API error, no cluster, "
               f"job Failed), 2 usage, 124 wait timed out, 130 interrupted.\nMore: docs/cli.md")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    own = {}
    for command in COMMANDS:
        p = own[command.name] = sub.add_parser(command.name, help=command.help,
                           description=f"{command.help}.\n\nexample:\n  {prog} {command.example}",
                           formatter_class=formatter)
        if command.cluster:
            cluster_options(p)
        command.setup(p)
        p.set_defaults(func=command.run, command_spec=command)
    return parser, own


if __name__ == "__main__":
    sys.exit(main())
