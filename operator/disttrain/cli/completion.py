"""Shell completion: `disttrain completion SHELL` prints the script a shell sources; the
same parser completes `disttrain` (argcomplete) and, through `kubectl_complete`, `kubectl
disttrain` (kubectl 1.26+ runs kubectl_complete-disttrain)."""

from __future__ import annotations

import argparse
import os
import sys

from disttrain.cli.registry import Command, register


def autocomplete(parser: argparse.ArgumentParser) -> None:
    """Shell completion (docs/cli.md); does nothing unless the shell asks for it."""
    if "_ARGCOMPLETE" in os.environ:
        import argcomplete

        argcomplete.autocomplete(parser)


# Cobra's shell-completion directives, which kubectl reads from a plugin's completer.
NO_SPACE, NO_FILE_COMPLETION = 2, 4


def kubectl_complete(argv: list[str] | None = None) -> int:
    """`kubectl_complete-disttrain ARG... WORD`: kubectl (1.26+) runs it on `kubectl
    disttrain ARG... WORD<TAB>` and offers what it prints: one candidate a line, then
    `:DIRECTIVE` (Cobra's). The candidates are argcomplete's, from the same parser the
    shell completion of `disttrain` uses, driven through argcomplete's documented
    environment (COMP_LINE, COMP_POINT, _ARGCOMPLETE)."""
    import io
    import shlex

    import argcomplete
    import argcomplete.io

    from disttrain.cli.main import build_parser  # the table, complete once this module is imported

    class _QuietFinder(argcomplete.CompletionFinder):
        def _init_debug_stream(self) -> None:
            """argcomplete's hook for this (its docstring): its default opens file descriptor
            9 for debug output, which here is no shell's, and may be any file of a process
            that calls this function (a test's, an IDE's). Its debug lines (_ARC_DEBUG) go
            to the stderr of now."""
            argcomplete.io.debug_stream = sys.stderr

    words = list(sys.argv[1:] if argv is None else argv) or [""]
    # Quoted, each word stays one word (" y", "it's"); argcomplete reads a quoted word as the word.
    line = " ".join(["disttrain", *map(shlex.quote, words)])
    out = io.StringIO()
    saved = {k: os.environ.get(k) for k in ("_ARGCOMPLETE", "COMP_LINE", "COMP_POINT", "_ARGCOMPLETE_IFS")}
    os.environ.update(_ARGCOMPLETE="1", COMP_LINE=line, COMP_POINT=str(len(line)), _ARGCOMPLETE_IFS="\n")
    try:
        _QuietFinder()(build_parser(), output_stream=out, exit_method=lambda code: None)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    candidates = [c.rstrip(" ") for c in out.getvalue().split("\n") if c.strip()]
    # `-o jsonpath=`, a directory: the word goes on, so the shell must not add a space.
    directive = NO_FILE_COMPLETION | (NO_SPACE if any(c.endswith(("=", "/")) for c in candidates) else 0)
    for candidate in candidates:
        print(candidate)
    print(f":{directive}")
    return 0


COMPLETION_SHELLS = ("bash", "zsh", "fish")


def cmd_completion(args: argparse.Namespace) -> int:
    import argcomplete

    sys.stdout.write(argcomplete.shellcode(["disttrain", "kubectl-disttrain"], shell=args.shell))
    return 0


def _setup_completion(p: argparse.ArgumentParser) -> None:
    p.add_argument("shell", choices=COMPLETION_SHELLS, help="the shell to print the completion script for")


register(Command("completion", "print the shell completion script (bash, zsh or fish)",
                 'completion bash > ~/.local/share/bash-completion/completions/disttrain', _setup_completion, cmd_completion))
