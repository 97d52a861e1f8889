"""Golden files: outcomes pinned whole in tests/unit/golden/<name>.json, so a changed word
in what users read is a diff to review, not a silent change. After an intended change:
`DISTTRAIN_UPDATE_GOLDEN=1 pytest <the test file>`, then read the diff."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable

DIR = Path(__file__).parent / "golden"


class Golden:
    def __init__(self, name: str):
        self.path = DIR / f"{name}.json"

    @functools.cached_property
    def recorded(self) -> dict[str, Any]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def update_or_check_keys(self, current: Callable[[], dict[str, Any]], keys: dict[str, Iterable[str]]) -> None:
        """With DISTTRAIN_UPDATE_GOLDEN=1, rewrite the file from `current()`; otherwise each
        section of the file must name exactly the cases of `keys` (none added or left behind)."""
        if os.environ.get("DISTTRAIN_UPDATE_GOLDEN") == "1":
            DIR.mkdir(exist_ok=True)
            self.path.write_text(json.dumps(current(), indent=1, sort_keys=True) + "\n")
            return
        for section, names in keys.items():
            got = set(self.recorded.get(section, {}) if section else self.recorded)
            assert got == set(names), (f"{self.path.name} and the cases differ in {section or 'its keys'}: "
                                       "run with DISTTRAIN_UPDATE_GOLDEN=1 and review the diff")

    def want(self, *keys: str) -> Any:
        node: Any = self.recorded
        for key in keys:
            assert key in node, f"no golden for {'/'.join(keys)}: run with DISTTRAIN_UPDATE_GOLDEN=1 and review the diff"
            node = node[key]
        return node
