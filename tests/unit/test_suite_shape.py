"""The suite's own shape (docs/contributing.md): shared builders live in helper modules,
so no test module imports another, and every golden file belongs to a test."""

from __future__ import annotations

import ast
from pathlib import Path

from .helpers import ROOT

TESTS = ROOT / "tests"


def suite_modules():
    return sorted(p for p in TESTS.rglob("test_*.py"))


def test_no_test_module_imports_another():
    offenders = []
    for path in suite_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1].startswith("test_"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {node.module}")
            if isinstance(node, ast.Import) and any(a.name.split(".")[-1].startswith("test_") for a in node.names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_every_golden_file_is_written_by_a_test():
    sources = "\n".join(p.read_text() for p in suite_modules())
    golden = sorted(p.stem for p in (TESTS / "unit" / "golden").glob("*.json"))
    assert golden and [name for name in golden if f'Golden("{name}")' not in sources] == []
