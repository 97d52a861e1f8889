"""`disttrain sweep SWEEP.yaml`: the row of the command table; the command is
disttrain.sweep's (sweep/command.py)."""

from __future__ import annotations

from disttrain.cli.registry import Command, register
from disttrain.sweep import command as sweep_command

register(Command("sweep", sweep_command.HELP, "sweep sweep.yaml", sweep_command.setup_parser, sweep_command.cmd_sweep,
                 needs=("optuna",)))
