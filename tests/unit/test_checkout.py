"""The tests test the checkout they live in.

The editable install in the shared virtualenv points at whichever checkout last ran
hack/venv.sh; without `pythonpath` in the pytest configuration a plain `pytest` in
another worktree would import that one and pass against the wrong tree.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("package", ["disttrain.operator", "disttrain.api", "disttrain_trainer"])
def test_packages_are_imported_from_this_checkout(package):
    module = importlib.import_module(package)
    where = Path(module.__file__).resolve()
    assert where.is_relative_to(REPO), (
        f"{package} was imported from {where}, not from the checkout {REPO}: run pytest from "
        "the repository root (pyproject.toml sets pythonpath) or through make")
