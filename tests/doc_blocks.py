"""The console blocks of README.md and docs/*.md, as the docs test runs them (pure).

Conventions (docs/contributing.md explains them to writers):

- A ```console block is run. If some lines start with `$ `, those are the commands (a
  trailing `\\` continues one onto the next line) and the other lines are shown output;
  otherwise every line is a command. Comment lines (`# ...`) are kept: bash skips them.
- `<!-- not-run: REASON -->` on the lines just before a block: the block is not run, and
  the test lists it with REASON. `<!-- not-run `COMMAND`: REASON -->` skips only the
  command that starts with COMMAND.
- `<!-- check-output -->` before a `$ ` block: the shown output is what the command prints,
  line for line; a `...` line stands for any number of lines the doc leaves out.
- `<!-- illustrative: REASON -->` before a `$ ` block whose shown output cannot be compared
  (ages, times, a long build's progress): its commands still run, and REASON says why the
  output is not compared. Every other run block that shows output is check-output.
- A sample session (a ```text block of `$ ` lines and their output, for commands the docs
  test cannot run: a real training job, another user) is either compared by a unit test,
  `<!-- compared-by: tests/unit/FILE.py::TEST -->` (that test names the block's first
  command), or `<!-- illustrative: REASON -->`.
- `<!-- file: NAME -->` before a ```yaml block: its text is written to NAME in the
  directory the doc's commands run in (so `disttrain validate job.yaml` finds the job the
  doc just showed).
- A command ending in ` -w` (a watch) is stopped after WATCH_SECONDS; that is a success.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

WATCH_SECONDS = 5
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
_MARKER = re.compile(r"^<!--\s*(not-run|check-output|illustrative|compared-by|file)\b(.*?)-->\s*$")
_NOT_RUN = re.compile(r"^(?:\s*`([^`]+)`)?\s*:\s*(.+?)\s*$", re.S)


@dataclass(kw_only=True)
class Block:
    doc: str
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    not_run: str = ""  # reason, when the whole block is not run
    skip: dict[str, str] = field(default_factory=dict)  # command prefix -> reason
    check_output: bool = False
    illustrative: str = ""  # why its shown output is not compared
    compared_by: str = ""  # the unit test that compares a sample session with the code's output
    file: str = ""

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


@dataclass(kw_only=True)
class Command:
    text: str
    output: list[str]  # the output the doc shows after it


def _markers(lines_before: list[str]) -> list[tuple[str, str]]:
    """The marker comments directly above a fence (blank lines between are allowed)."""
    found = []
    for line in reversed(lines_before):
        if not line.strip():
            continue
        match = _MARKER.match(line.strip())
        if not match:
            break
        found.append((match.group(1), match.group(2).strip()))
    return list(reversed(found))


def parse_blocks(doc: str, text: str) -> list[Block]:
    """Every fenced block of a Markdown file with its markers. Bad markers raise ValueError."""
    blocks = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        block = Block(doc=doc, line=line, lang=match.group(1), text=match.group(2))
        for kind, arg in _markers(text[:match.start()].splitlines()):
            if kind == "check-output":
                block.check_output = True
            elif kind == "compared-by":
                block.compared_by = arg.lstrip(":").strip()
                if "::" not in block.compared_by:
                    raise ValueError(f"{block.where}: write <!-- compared-by: tests/unit/FILE.py::TEST --> (got {arg!r})")
            elif kind == "illustrative":
                block.illustrative = arg.lstrip(":").strip()
                if not arg.startswith(":") or not block.illustrative:
                    raise ValueError(f"{block.where}: write <!-- illustrative: REASON --> (got {arg!r})")
            elif kind == "file":
                block.file = arg.lstrip(":").strip()
                if not block.file or "/" in block.file:
                    raise ValueError(f"{block.where}: <!-- file: NAME --> needs a plain file name")
            else:
                parsed = _NOT_RUN.match(arg)
                if not parsed:
                    raise ValueError(f"{block.where}: write <!-- not-run: REASON --> (got {arg!r})")
                if parsed.group(1):
                    block.skip[parsed.group(1)] = parsed.group(2)
                else:
                    block.not_run = parsed.group(2)
        blocks.append(block)
    return blocks


def commands(block: Block) -> list[Command]:
    """The commands of a console block, each with the output the doc shows for it."""
    lines = block.text.splitlines()
    prompted = any(line.startswith("$ ") for line in lines)
    result: list[Command] = []
    pending = ""
    for line in lines:
        if pending:
            pending += "\n" + line
        elif prompted and not line.startswith("$ "):
            if result:
                result[-1].output.append(line)
            continue
        else:
            pending = line[2:] if prompted else line
        if pending.endswith("\\"):
            continue
        if pending.strip():
            result.append(Command(text=pending, output=[]))
        pending = ""
    if pending.strip():
        result.append(Command(text=pending, output=[]))
    return result


def skip_reason(block: Block, command: Command) -> str:
    """Why this command is not run ('' when it is)."""
    for prefix, reason in block.skip.items():
        if command.text.lstrip().startswith(prefix):
            return reason
    return ""


def shell_line(command: Command) -> str:
    """The command as bash runs it: a watch (` -w` at the end, before any comment) is
    stopped after WATCH_SECONDS and counts as a success."""
    code = command.text
    bare = re.sub(r"\s+#[^\n]*$", "", code).rstrip()
    if bare.endswith(" -w"):
        return f"timeout {WATCH_SECONDS} {bare} || [ $? -eq 124 ]"
    return code


def output_matches(shown: list[str], actual: str) -> str:
    """'' when the shown lines are what `actual` prints, line for line (whitespace-normalised,
    blank lines aside), where a `...` line stands for any number of lines; else the first
    shown line that is not where it should be (or a note of what follows the last one)."""
    norm = [want for line in actual.splitlines() if (want := " ".join(line.split()))]
    wanted = [(line, want) for line in shown if (want := " ".join(line.split()))]
    position, skipping = 0, False
    for index, (line, want) in enumerate(wanted):
        if want == "...":
            skipping = True
            continue
        if skipping:  # the next run of shown lines, wherever it begins
            rest = [w for _, w in wanted[index:]]
            run = rest[:rest.index("...")] if "..." in rest else rest
            last_run = "..." not in rest
            starts = [p for p in range(position, len(norm) - len(run) + 1) if norm[p:p + len(run)] == run]
            if not starts:
                return line
            position = starts[-1] if last_run else starts[0]  # the last run ends the output
            skipping = False
        if position >= len(norm) or norm[position] != want:
            return line
        position += 1
    if not skipping and position < len(norm):
        return f"(nothing after {wanted[-1][0]!r}, but it printed {norm[position]!r})" if wanted else \
            f"(nothing, but it printed {norm[position]!r})"
    return ""


@dataclass(frozen=True)
class OutputCounts:
    run: int  # commands the docs test runs
    compared: int  # of those, with shown output it compares
    illustrative: int  # with shown output marked illustrative
    samples: int  # sample sessions (text blocks of `$ ` lines), each compared-by a test or illustrative
    unmarked: tuple[str, ...]  # 'where: command' with shown output and no marker


def is_sample(block: Block) -> bool:
    return block.lang == "text" and block.text.lstrip().startswith("$ ")


def output_counts(blocks: list[Block]) -> OutputCounts:
    """How the shown output of the docs is treated: of the commands the docs test runs,
    and of the sample sessions it cannot run."""
    run = samples = 0
    shown: list[tuple[Block, bool, str]] = []  # (block, compared, its first line)
    for block in blocks:
        if is_sample(block):
            samples += 1
            shown.append((block, bool(block.compared_by), block.text.lstrip().splitlines()[0]))
        if block.lang != "console" or block.not_run:
            continue
        for command in commands(block):
            if skip_reason(block, command):
                continue
            run += 1
            if any(line.strip() not in ("", "...") for line in command.output):
                shown.append((block, block.check_output, command.text.splitlines()[0]))
    compared = sum(1 for _b, is_compared, _l in shown if is_compared)
    illustrative = sum(1 for b, is_compared, _l in shown if not is_compared and b.illustrative)
    unmarked = tuple(f"{b.where}: {line}" for b, is_compared, line in shown if not is_compared and not b.illustrative)
    return OutputCounts(run, compared, illustrative, samples, unmarked)
