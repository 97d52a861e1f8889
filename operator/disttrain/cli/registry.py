"""The rows of the command table: a `Command` is one subcommand, and `register` adds it.
Each command module registers its own rows; cli/main.py imports them in the order
`disttrain --help` lists them."""

from __future__ import annotations

import argparse
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Command:
    """One subcommand: its arguments (setup), what it does (run), and the example the
    top-level --help shows."""

    name: str
    help: str
    example: str
    setup: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    cluster: bool = False  # takes -n, --context, --kubeconfig
    needs: tuple[str, ...] = ()  # optional packages (EXTRAS) it cannot start without
    instead: str = ""  # what to run for what users try and it does not do (an option it lacks)

    def missing(self) -> str | None:
        """The first package this command needs that is not installed."""
        wanted = ("kubernetes",) * self.cluster + self.needs
        return next((m for m in wanted if importlib.util.find_spec(m) is None), None)


# The optional packages and the pyproject extra that installs each.
EXTRAS = {"kubernetes": "cli", "optuna": "sweep", "torch": "local", "numpy": "local",
          "prometheus_client": "local", "tqdm": "local"}


def needs_package(command: str, module: str) -> str:
    return (f"error: disttrain {command} needs the Python package {module!r}, which this installation "
            f"lacks: pip install 'disttrain[{EXTRAS[module]}]'")


COMMANDS: list[Command] = []


def register(command: Command) -> Command:
    COMMANDS.append(command)
    return command
