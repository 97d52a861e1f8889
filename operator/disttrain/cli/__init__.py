"""`disttrain` / `kubectl disttrain`: the command line. `main` is the table of commands and
the entry point; each command or group of commands is a module beside it that registers
its rows. `python -m disttrain.cli` runs it."""
