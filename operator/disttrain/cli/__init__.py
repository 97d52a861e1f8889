"""`disttrain` / `kubectl disttrain`: the command line. `main` is the table of commands and
the entry point; each command or group of commands is a module beside it that registers
its rows. `python -m disttrain.cli` runs it."""

# The table of commands is built as its modules are imported, in main's order: importing
# any of them first (a test, a completer) must not put it first.
from disttrain.cli import main as _main  # noqa: E402,F401
