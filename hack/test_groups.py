"""The groups `make test` runs side by side (hack/test.sh), longest first: one line each,
`NAME PYTEST-ARGS...`.

Each group is its own pytest process with its own control plane, so groups share nothing
but the machine. tests/e2e stays one group: it owns the one real node; its kind test is a
group of its own (a kind cluster in a Docker engine of its own, nothing of the real node). The reconcile tests
are the longest directory: two groups, its files dealt alternately. Every test file is in
exactly one group (tests/unit/test_suite_shape.py checks it), so a new directory under
tests/ is a new group here or it would never run.

    python hack/test_groups.py [ROOT]
"""

from __future__ import annotations

import sys
from pathlib import Path

RECONCILE = "tests/cluster/reconcile"
KIND = "tests/e2e/test_kind.py"


def groups(root: Path) -> list[tuple[str, list[str]]]:
    reconcile = sorted(p.relative_to(root).as_posix() for p in (root / RECONCILE).glob("test_*.py"))
    return [
        ("reconcile-a", reconcile[0::2]),
        ("reconcile-b", reconcile[1::2]),
        ("e2e", ["tests/e2e", f"--ignore={KIND}"]),
        ("kind", [KIND]),
        ("trainer", ["tests/trainer"]),
        ("cluster", ["tests/cluster", f"--ignore={RECONCILE}"]),
        ("unit", ["tests/unit"]),
    ]


def main(argv: list[str]) -> None:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    for name, args in groups(root):
        print(name, *args)


if __name__ == "__main__":
    main(sys.argv)
