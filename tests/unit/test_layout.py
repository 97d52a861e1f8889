"""The packages import only what docs/architecture.md's "Packages" table lets them: the
table is the rule, this test reads it, so the two cannot drift apart."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = {"disttrain": REPO / "operator" / "disttrain", "disttrain_trainer": REPO / "trainer" / "disttrain_trainer"}


def rules() -> dict[str, set[str]]:
    """package -> the packages it may import, from the table."""
    text = (REPO / "docs" / "architecture.md").read_text()
    table = text[text.index("| package | owns | may import |"):].split("\n\n", 1)[0]
    found = {}
    for row in table.splitlines()[2:]:
        package, _, allowed = (cell.strip() for cell in row.strip("|").split(" | "))
        found[package.strip("`")] = set(re.findall(r"`(disttrain[\w.]*)`", allowed))
    return found


def owner(module: str, packages: set[str]) -> str | None:
    """The most specific package of the table that holds module."""
    holders = [p for p in packages if module == p or module.startswith(p + ".")]
    return max(holders, key=len) if holders else None


def modules() -> list[tuple[str, Path]]:
    out = []
    for name, root in ROOTS.items():
        for path in root.rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            out.append((".".join((name, *parts)).removesuffix(".__init__"), path))
    return out


def imported(path: Path, module: str) -> set[str]:
    """Every module of ours the file imports, at the top or inside a function."""
    names = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            names.add(base)
    return {n for n in names if n.split(".")[0] in ROOTS}


def test_every_module_belongs_to_a_package_of_the_table():
    packages = set(rules())
    homeless = [m for m, _ in modules() if m != "disttrain" and owner(m, packages) is None]
    assert homeless == [], f"add their package to docs/architecture.md's Packages table: {homeless}"


def test_each_package_imports_only_what_the_table_allows():
    allowed = rules()
    offences = []
    for module, path in modules():
        home = owner(module, set(allowed))
        if home is None:
            continue
        # A row may also name one module of another package (the trainer reads only the pod
        # contract of disttrain.api): that module, and nothing else of its package.
        modules_named = {a for a in allowed[home] if a not in allowed}
        for target in sorted(imported(path, module)):
            there = owner(target, set(allowed))
            if target != "disttrain" and there != home and there not in allowed[home] and target not in modules_named:
                offences.append(f"{path.relative_to(REPO)} ({home}) imports {target} ({there})")
    assert offences == []


def test_the_table_names_the_layering_that_keeps_the_images_apart():
    """The operator never reaches the user's side, and the trainer nothing of ours but the
    pod contract, which imports nothing of ours: the operator image has no Kubernetes
    client, the trainer image no kopf."""
    allowed = rules()
    for side in ("disttrain.operator", "disttrain.operator.core"):
        assert not allowed[side] & {"disttrain.client", "disttrain.cli", "disttrain.sweep", "disttrain_trainer"}
    assert allowed["disttrain_trainer"] == {"disttrain.api.pod_contract"} and allowed["disttrain.api"] == set()
    contract = REPO / "operator" / "disttrain" / "api" / "pod_contract.py"
    assert imported(contract, "disttrain.api.pod_contract") == set()
