"""Cluster tests: everything under tests/cluster runs against the real control
plane + KWOK from tests/conftest.py (fixtures ``cluster`` and ``namespace``).

Every test collected here gets the ``cluster`` marker, so
``pytest -m "not cluster"`` deselects them even if a test forgets the
decorator; write ``@pytest.mark.cluster`` anyway, for readers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.cluster)
