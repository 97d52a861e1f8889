"""Kubernetes quantities as the validator reads them (GPUs, memory, CPU)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("value,expected", [
    ("1e3", 1000), ("2E2", 200), ("1.5e-3", "0.0015"), ("2Ki", 2048), ("3Mi", 3 * 2**20), ("500m", "0.5"),
    ("1.5G", 1_500_000_000), (4, 4), (0.25, "0.25"), (" 8 ", 8),
    ("", None), ("1.5.5", None), ("1Kb", None), ("e3", None), (None, None), ([1], None), (True, None),
])
def test_quantities(value, expected):
    from decimal import Decimal

    from disttrain.api.quantity import parse_quantity

    got = parse_quantity(value)
    assert got == (None if expected is None else Decimal(str(expected)))
