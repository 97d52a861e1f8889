"""The contract inventory (tests/contracts.yaml): every documented promise a user relies on,
each with the tests that exercise it.

The rows come from the sources of truth, never from the tests: the API types (spec and
status fields), the CLI's parser (every flag of every command), docs/cli.md's per-command
exit-code table, the Python client's public methods, the operator's and the trainer's real metric
registries, the trainer's `/status` document, and the chart's values.yaml. A row names the
tests whose source (body and decorators) names the contract the way a test would use it:
a field by its JSON or Python name (with its parent's name where the leaf name is shared,
such as `port`), a flag together with its command, an exit code by a run of its command
whose return code is compared with it, a client method called on a client, a metric or
`/status` key by name, a chart value by its leaf (with its parent where shared). That is a claim the test can keep only by using
the contract: `test_contracts.py` re-checks it on every run, so a row cannot outlive its
tests, and a contract added without any test fails there.

Regenerate after adding a contract or a test: `make contracts` (it writes the file; the
diff is the review)."""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "tests" / "contracts.yaml"
TESTS_PER_ROW = 3  # the most telling few: a row is a pointer for a reader, not a census

KINDS = ("field", "status", "flag", "exit-code", "client-method", "metric", "status-report", "chart-value")


@dataclass(frozen=True)
class Contract:
    kind: str
    id: str                 # unique within its kind: "spec.checkpoint.keep", "logs --tail", ...
    patterns: tuple[str, ...]  # every one must match a test's source for the test to exercise it
    doc: str                # where a user reads about it (a path under the repository)
    use: str = ""           # how a test sets or reads it (a key, a keyword): such tests rank first


# ---- the sources of truth ------------------------------------------------------------------


def _word(*names: str) -> str:
    alts = "|".join(re.escape(n) for n in dict.fromkeys(names))
    return rf"(?<![\w-])(?:{alts})(?![\w-])"


def _as_key(*names: str) -> str:
    """A name used as a mapping key, a keyword argument, a YAML key or an attribute."""
    alts = "|".join(re.escape(n) for n in dict.fromkeys(names))
    return rf"""(?:["']?(?<![\w-])(?:{alts})["']?\s*[:=](?!=)|\.(?:{alts})\b)"""


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _walk_fields(cls: type, prefix: str) -> Iterator[tuple[str, str]]:
    """(path, parent name) of every field under a dataclass of the API."""
    from disttrain.api.meta import fields_of, json_name
    for f, shape in fields_of(cls):
        path = f"{prefix}.{json_name(f)}"
        yield path, prefix.rsplit(".", 1)[-1].removesuffix("[]")
        inner = shape
        while inner.kind in ("list", "map") and inner.inner is not None:
            inner = inner.inner
        if inner.kind == "object" and inner.cls is not None:
            yield from _walk_fields(inner.cls, path + ("[]" if shape.kind == "list" else ""))


def _leaf_contracts(kind: str, paths: list[tuple[str, str]], doc: str) -> list[Contract]:
    """A contract per path, matched by its leaf name and, where that leaf names more than
    one path, by its parent's too."""
    leaves = [p.rsplit(".", 1)[-1].removesuffix("[]") for p, _ in paths]
    out = []
    for (path, parent), leaf in zip(paths, leaves):
        patterns = [_word(leaf, _snake(leaf))]
        if leaves.count(leaf) > 1:
            patterns.append(_word(parent, _snake(parent)))
        out.append(Contract(kind, path, tuple(patterns), doc, use=_as_key(leaf, _snake(leaf))))
    return out


def api_fields() -> list[Contract]:
    from disttrain.api import types as t
    return _leaf_contracts("field", list(_walk_fields(t.DistributedTrainingSpec, "spec")), "docs/api.md")


def status_fields() -> list[Contract]:
    from disttrain.api.status_types import DistributedTrainingStatus
    return _leaf_contracts("status", list(_walk_fields(DistributedTrainingStatus, "status")), "docs/api.md")


def cli_flags() -> list[Contract]:
    """(command, flag) for every option of every subcommand, by its long name; a test uses
    it when it names the command and the flag (long or short). An option every cluster
    command shares (the same names and help: --context, --request-timeout, ...) is one row,
    `* --flag`, used by a test of any command."""
    from disttrain.cli import main as cli
    seen: dict[tuple[tuple[str, ...], str], list[str]] = {}
    for command, parser in cli.parsers()[1].items():
        for option in parser._actions:  # argparse has no public walk of a parser's options
            names = tuple(o for o in option.option_strings if o not in ("-h", "--help"))
            if names:
                seen.setdefault((names, option.help or ""), []).append(command)
    out = []
    for (names, _), commands in seen.items():
        long = max(names, key=len)
        if len(commands) > 2:
            out.append(Contract("flag", f"* {long}", (_word(*names),), "docs/cli.md", use=_word(*names)))
            continue
        for command in commands:
            out.append(Contract("flag", f"{command} {long}",
                                (_word(*names), rf"""["'\s]{re.escape(command)}["'\s]"""), "docs/cli.md",
                                use=_word(*names)))
    return sorted(out, key=lambda c: (c.id.startswith("*"), c.id))


def exit_codes() -> list[Contract]:
    """Every (command, code) of docs/cli.md's per-command exit-code table. A test exercises
    one when it runs the command (its name a quoted word of the command line) and compares
    that run's return code with the code: on the same line (`main(["validate", f]) == 1`,
    `cli(c, "wait", ...).returncode == 0`), through the variable it assigned the run to
    (`late = cli(c, "wait", ...)` ... `(late.returncode, late.stderr) == (124, ...)`), or
    in a loop over a tuple of commands that names it (`commands = ("get", "status")` then
    `for command in commands` and a return code compared with the code), or through a
    helper of the test's module that runs the command (`proc = _start_cli(...)`,
    `first = subprocess.Popen(**command(...))`)."""
    text = (ROOT / "docs" / "cli.md").read_text()
    section = text[text.index("## Exit codes and errors"):]
    out = []
    for command, codes in re.findall(r"^\| `([a-z]+)` \| ([\d ]+) \|", section, re.M):
        named = rf"""["']{command}["']"""
        for code in codes.split():
            equals = rf"[^\n]*(?:==|\bin)\s*[(\[{{]?\s*(?:\d+,\s*)*{code}\b"
            inline = rf"\b(?:main|run|cli|cli_command|disttrain)\([^\n]*{named}[^\n]*\)(?:\.returncode)?\s*==\s*{code}\b"
            held = (rf"\b(?P<run>\w+) = [\w.]+\([^\n]*{named}[\s\S]*?"
                    rf"\b(?P=run)\.(?:returncode|(?:finish|wait)\([^)\n]*\)|value\.code){equals}")
            looped = (rf"\A(?=[\s\S]*\bcommands = (?:[^\n]*\n)*?[^\n]*{named})(?=[\s\S]*\bfor \w+ in [^\n]*\bcommands\b)"
                      rf"(?=[\s\S]*(?:\.returncode|\.finish\([^)\n]*\)|value\.code|\bmain\([^\n]*\)){equals})")
            helped = (rf"\b(?P<out>\w+) = (?:[\w.]+\(\**)?(?P<helper>\w+)\([\s\S]*?"
                      rf"\b(?P=out)\.(?:returncode|(?:finish|wait)\([^)\n]*\)){equals}"
                      rf"[\s\S]*\ndef (?P=helper)\((?:(?!\ndef )[\s\S])*?{named}")
            pattern = rf"{inline}|{held}|{looped}|{helped}"
            out.append(Contract("exit-code", f"{command} {code}", (pattern,), "docs/cli.md", use=pattern))
    return out


def client_methods() -> list[Contract]:
    from disttrain.client.client import Client
    # `make mutation` runs this against mutmut's copy, whose Client also holds each method's
    # mutants (named "x«Client»«name»__mutmut_N"): they are not the client's API.
    names = [n for n, _ in inspect.getmembers(Client, inspect.isfunction)
             if not n.startswith("_") and "__mutmut_" not in n]
    return [Contract("client-method", f"Client.{n}", (rf"\.{n}\(", r"\bClient\b|\bclient\b"), "docs/cli.md",
                     use=rf"\bclient\.{n}\(") for n in names]


def metrics() -> list[Contract]:
    from .exported_metrics import exported_families
    out = []
    for name, kind in sorted(exported_families().items()):
        base = name.removesuffix("_total") if kind == "counter" else name
        out.append(Contract("metric", name, (rf"\b{re.escape(base)}(?:_total|_count|_sum|_bucket)?\b",), "docs/operations.md"))
    return out


def status_report_fields() -> list[Contract]:
    """Keys of the trainer's `/status` document (and termination message), read from a real
    StatusSink."""
    from disttrain_trainer.metrics import StatusSink
    sink = StatusSink()
    sink.eval(1, 1.0, {"accuracy": 0.5})  # evalHistory (and evalMetrics) appear with the first evaluation
    keys = sorted(sink.doc)
    return [Contract("status-report", k, (_word(k),), "docs/pod-contract.md", use=_as_key(k)) for k in keys]


def chart_values() -> list[Contract]:
    values = yaml.safe_load((ROOT / "charts" / "disttrain" / "values.yaml").read_text())
    paths: list[tuple[str, str]] = []

    def walk(node: Any, path: list[str]) -> None:
        if isinstance(node, dict) and node:
            for key, child in node.items():
                walk(child, [*path, key])
        else:
            paths.append((".".join(path), path[-2] if len(path) > 1 else "values"))
    walk(values, [])
    return _leaf_contracts("chart-value", paths, "charts/disttrain/README.md")


_ACTION = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}", re.S)
_VALUE = re.compile(r"\.Values((?:\.\w+)+)")
_INCLUDE = re.compile(r'\binclude\s+"([\w.]+)"')
_ASSIGN = re.compile(r"(\$\w+)\s*:?=\s*(.*)", re.S)
_VARIABLE = re.compile(r"\$\w+")
MODE_VALUE = "watchNamespaces"  # empty: the cluster-wide install; set: the namespaced one


def _template_actions() -> Iterator[tuple[str, list[str]]]:
    for path in sorted((ROOT / "charts" / "disttrain" / "templates").glob("*")):
        actions = [a for a in (m.group(1) for m in _ACTION.finditer(path.read_text()))
                   if a.split() and not a.startswith("/*")]
        yield path.name, actions


def values_by_install_mode() -> list[str]:
    """The chart values whose rendering differs between the install modes: those a template
    reads inside a branch on watchNamespaces (directly, through a helper it includes or a
    variable it assigned), and those of the conditions around such a branch."""
    helpers: dict[str, set[str]] = {}
    for _, actions in _template_actions():  # what each `define` reads: values and other helpers
        inside: list[str | None] = []
        for action in actions:
            head = action.split()[0]
            if head in ("if", "range", "with", "block", "define"):
                inside.append(re.search(r'"([\w.]+)"', action).group(1) if head == "define" else None)  # type: ignore[union-attr]
            for name in filter(None, inside):
                helpers.setdefault(name, set()).update(_VALUE.findall(action),
                                                       (f"@{h}" for h in _INCLUDE.findall(action)))
            if head == "end":
                inside.pop()

    def reads(expression: str, variables: dict[str, set[str]]) -> set[str]:
        found = set(_VALUE.findall(expression))
        pending = _INCLUDE.findall(expression)
        while pending:
            for ref in helpers.get(pending.pop(), ()):
                (pending.append(ref[1:]) if ref.startswith("@") else found.add(ref))
        for variable in _VARIABLE.findall(expression):
            found |= variables.get(variable, set())
        return found

    found: set[str] = set()
    for _, actions in _template_actions():
        frames: list[tuple[bool, set[str]]] = []  # (a branch on the mode, what its condition reads)
        variables: dict[str, set[str]] = {}
        for action in actions:
            head = action.split()[0]
            if assigned := _ASSIGN.match(action):
                variables[assigned.group(1)] = reads(assigned.group(2), variables)
            if head in ("if", "range", "with", "block", "define"):
                on_mode = MODE_VALUE in action
                if on_mode:
                    for _, condition in frames:
                        found |= condition
                frames.append((on_mode, reads(action, variables)))
            if any(on_mode for on_mode, _ in frames):
                found |= reads(action, variables)
            if head == "end":
                frames.pop()
    return sorted(v.lstrip(".") for v in found if v.lstrip(".") != MODE_VALUE)


def chart_values_namespaced() -> list[Contract]:
    """A row per value that renders differently in the namespaced install: a test exercises
    it when it sets that value together with watchNamespaces (the cluster-wide install is
    the default, which the plain rows cover)."""
    mode = _word(MODE_VALUE)
    out = []
    for contract in chart_values():
        if contract.id in values_by_install_mode():
            out.append(Contract("chart-value", f"{contract.id} [namespaced]", (*contract.patterns, mode),
                                contract.doc, use=contract.use))
    return out


@cache  # the sources import torch and build real registries: read them once per run
def contracts() -> tuple[Contract, ...]:
    return (*api_fields(), *status_fields(), *cli_flags(), *exit_codes(), *client_methods(), *metrics(),
            *status_report_fields(), *chart_values(), *chart_values_namespaced())


# ---- the tests -------------------------------------------------------------------------------


@dataclass(frozen=True)
class TestSource:
    id: str      # pytest's node id: tests/unit/test_x.py::test_y (or ::Class::test_y)
    name: str
    text: str    # decorators and body


_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
_GOLDEN = re.compile(r"""\bGolden\(["'](\w+)["']\)""")


def _defined_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("test"):
        return [node.name]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [t.id for t in targets if isinstance(t, ast.Name)]
    return []


@cache
def test_sources() -> tuple[TestSource, ...]:
    out = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if path.name == "test_contracts.py":  # it names contracts to check the inventory, it uses none
            continue
        source = path.read_text()
        lines = source.splitlines(keepends=True)
        rel = path.relative_to(ROOT).as_posix()

        tree = ast.parse(source)

        def text_of(node: ast.stmt) -> str:
            start = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno]) - 1
            return "".join(lines[start:node.end_lineno])

        # Module-level helpers and constants a test names (ALL_ON = ["--set", ...], def _node(...)):
        # what they use, the test uses. One level deep: a helper's helpers are the helper's.
        helpers = {name: text_of(node) for node in tree.body for name in _defined_names(node)}

        def add(node: ast.FunctionDef | ast.AsyncFunctionDef, prefix: str) -> None:
            own = text_of(node)
            used = [helpers[n] for n in sorted({m.group() for m in _IDENT.finditer(own)}) if n in helpers]
            text = "\n".join([own, *used])
            # A golden file pins outcomes whole: what it holds, the tests that check it use.
            pinned = [(ROOT / "tests" / "unit" / "golden" / f"{g}.json").read_text() for g in _GOLDEN.findall(text)]
            out.append(TestSource(f"{rel}::{prefix}{node.name}", node.name, "\n".join([text, *pinned])))

        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                add(node, "")
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                        add(item, f"{node.name}::")
    return tuple(out)


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def exercises(contract: Contract, test: TestSource) -> bool:
    return all(_compiled(p).search(test.text) for p in contract.patterns)


def tests_of(contract: Contract) -> list[str]:
    """The few tests that exercise a contract most directly: those that set or read it
    (`use`) first, then those that name it in their own name, then the shortest (a focused
    test before one that touches everything)."""
    leaf = re.sub(r"\W+", "_", contract.id.rsplit(".", 1)[-1].split()[-1].lstrip("-")).lower()
    found = [t for t in test_sources() if exercises(contract, t)]
    use = _compiled(contract.use) if contract.use else None
    found.sort(key=lambda t: (bool(use) and not use.search(t.text), _snake(leaf) not in t.name, len(t.text)))
    return [t.id for t in found[:TESTS_PER_ROW]]


@cache
def _doc_text(path: str) -> str:
    return (ROOT / path).read_text()


def doc_of(contract: Contract) -> str | None:
    """The document a user reads about the contract in: its own (docs/api.md for a field),
    else the first page of docs/, README.md or the chart's README that names it; None when
    nothing does. It is found by the flag's or the metric's name, an exit code's table row,
    a chart value's name or top-level key, and anything else's last part."""
    if contract.kind == "flag":
        pattern = contract.patterns[0]
    elif contract.kind == "exit-code":  # the command's row of the per-command table
        pattern = rf"^\| `{contract.id.split()[0]}` \|"
    elif contract.kind == "metric":
        pattern = contract.patterns[0]
    elif contract.kind == "chart-value":  # the chart's README has a row per top-level value
        leaf, top = contract.id.rsplit(".", 1)[-1], contract.id.split(".", 1)[0]
        pattern = rf"(?<![\w-])(?:{re.escape(leaf)}|{re.escape(top)})(?![\w-])"
    else:
        pattern = rf"(?<![\w-]){re.escape(contract.id.rsplit('.', 1)[-1].removesuffix('[]'))}(?![\w-])"
    pages = [contract.doc, *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")),
             "README.md", "charts/disttrain/README.md"]
    return next((p for p in dict.fromkeys(pages) if re.search(pattern, _doc_text(p), re.M)), None)


def inventory() -> dict[str, dict[str, dict[str, Any]]]:
    """{kind: {id: {"doc": ..., "tests": [...]}}} as tests/contracts.yaml holds it."""
    out: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in KINDS}
    for c in contracts():
        out[c.kind][c.id] = {"doc": doc_of(c), "tests": tests_of(c)}
    return out


HEADER = """\
# The contract inventory: every documented promise, with the tests that exercise it.
# Generated by `make contracts` from the sources of truth (tests/unit/contracts.py says
# which and how a test is matched); tests/unit/test_contracts.py fails when a contract has
# no row, a row names a test that is gone or no longer uses it, or a contract has no test.
"""


def write() -> dict[str, int]:
    rows = inventory()
    INVENTORY.write_text(HEADER + yaml.safe_dump(rows, sort_keys=False, width=120))
    return {kind: len(r) for kind, r in rows.items()}


if __name__ == "__main__":  # python -m tests.unit.contracts, operator/ and trainer/ on PYTHONPATH
    counts = write()
    untested = sum(not row["tests"] for rows in yaml.safe_load(INVENTORY.read_text()).values() for row in rows.values())
    print(f"wrote {INVENTORY.relative_to(ROOT)}: {sum(counts.values())} contracts "
          f"({', '.join(f'{n} {k}' for k, n in counts.items())}); {untested} without a test")
