"""docs/cli.md's table of kubectl conventions and Kubeflow SDK methods: every "yes" row
names a test, and that test exists (a renamed or deleted test fails here)."""

from __future__ import annotations

import ast
import re

from .helpers import ROOT


def rows() -> list[list[str]]:
    text = (ROOT / "docs" / "cli.md").read_text()
    start = text.index("<!-- conventions table")
    table = text[start:text.index("\n\n", text.index("| --- |", start))]
    out = []
    for line in table.splitlines()[3:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        out.append(cells)
    return out


def test_every_row_that_says_yes_names_a_test_that_exists():
    checked = 0
    for convention, status, test in rows():
        if status.startswith("not yet"):
            assert test == "—", convention
            continue
        node = test.strip("`")
        path, _, name = node.partition("::")
        tree = ast.parse((ROOT / path).read_text())
        names = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        assert name in names, f"{convention}: {node} does not exist"
        checked += 1
    assert checked >= 10
