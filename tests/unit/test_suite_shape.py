"""The suite's own shape (docs/contributing.md): shared builders live in helper modules,
so no test module imports another, and every golden file belongs to a test."""

from __future__ import annotations

import ast
import importlib.util
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


def test_make_test_runs_every_test_file_in_exactly_one_group():
    """hack/test.sh runs the groups of hack/test_groups.py side by side: a test file in no
    group would never run, one in two would run twice at once."""
    spec = importlib.util.spec_from_file_location("test_groups", ROOT / "hack" / "test_groups.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    seen: dict[Path, list[str]] = {}
    for name, args in module.groups(ROOT):
        ignored = [ROOT / a.removeprefix("--ignore=") for a in args if a.startswith("--ignore=")]
        for arg in (a for a in args if not a.startswith("-")):
            path = ROOT / arg
            files = sorted(path.rglob("test_*.py")) if path.is_dir() else [path]
            for file in files:
                if not any(file.is_relative_to(i) for i in ignored):
                    seen.setdefault(file, []).append(name)
    assert {p.relative_to(ROOT).as_posix(): names for p, names in seen.items() if len(names) != 1} == {}
    assert sorted(seen) == suite_modules()


def test_every_test_that_starts_torchrun_is_marked_dist():
    """`-m "not dist"` (make mutation, the quick loops of docs/contributing.md) must leave out
    every test that starts torch.distributed processes: they import the trainer in child
    processes, which a mutation work tree's PYTHONPATH does not reach."""
    offenders = []
    for path in sorted((TESTS / "trainer").glob("test_*.py")):
        tree = ast.parse(path.read_text())
        module_marked = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
                            and "dist" in ast.unparse(n.value) for n in tree.body)
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
                continue
            calls = {c.func.id for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
            marked = any("mark.dist" in ast.unparse(d) for d in node.decorator_list)
            if "run_torchrun" in calls and not (module_marked or marked):
                offenders.append(f"{path.relative_to(ROOT)}::{node.name}")
    assert offenders == []
