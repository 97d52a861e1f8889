"""Aligned text columns, as kubectl prints its tables (pure)."""

from __future__ import annotations

from collections.abc import Sequence


def aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows of cells as columns three spaces apart, each as wide as its widest cell."""
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["   ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
