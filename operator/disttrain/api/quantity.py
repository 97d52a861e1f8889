"""Kubernetes resource quantities ("500m", "16Gi", 4) as exact Decimals."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))([eE][+-]?\d+|[KMGTPE]i|[numkMGTPE])?$")
_SUFFIX = {"": 1, "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
           "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def parse_quantity(value: int | float | str) -> Decimal | None:
    """The quantity's value, or None when it is not a valid Kubernetes quantity."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    match = _QUANTITY.match(value.strip()) if isinstance(value, str) else None
    if not match:
        return None
    number, suffix = match.group(1), match.group(2) or ""
    try:
        if suffix[:1] in ("e", "E"):
            return Decimal(number + suffix)
        return Decimal(number) * Decimal(_SUFFIX[suffix])
    except InvalidOperation:
        return None
