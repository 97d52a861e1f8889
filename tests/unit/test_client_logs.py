"""The Python client's `logs` orders the lines of several workers by the kubelet's stamps.
Go writes RFC 3339 with a fraction's trailing zeros trimmed, so the stamps must be compared
as times, not as text. Pure: no cluster (tests/e2e/test_cli_logs.py reads real pods)."""

from __future__ import annotations

import random

from disttrain_operator.client import log_time_order

IN_ORDER = [
    "2026-11-26T14:40:19.999999999Z",
    "2026-11-26T14:40:20Z",
    "2026-11-26T14:40:20.000000001Z",
    "2026-11-26T14:40:20.1Z",
    "2026-11-26T14:40:20.12Z",
    "2026-11-26T14:40:20.123Z",
    "2026-11-26T14:40:20.1234567Z",
    "2026-11-26T14:40:20.5Z",
    "2026-11-26T15:40:21+01:00",  # 14:40:21 UTC
    "2026-11-26T14:40:21.5Z",
]


def test_stamps_with_trimmed_fractions_sort_as_times():
    shuffled = IN_ORDER[:]
    random.Random(7).shuffle(shuffled)
    assert sorted(shuffled, key=log_time_order) == IN_ORDER
    assert sorted(IN_ORDER) != IN_ORDER  # as text they would not


def test_nanoseconds_decide_within_one_microsecond():
    assert log_time_order("2026-11-26T14:40:20.000000998Z") < log_time_order("2026-11-26T14:40:20.000000999Z")


def test_a_stamp_that_does_not_parse_sorts_last_and_keeps_its_place():
    lines = ["garbage-1", "2026-11-26T14:40:21Z", "", "2026-11-26T14:40:20Z"]
    assert sorted(lines, key=log_time_order) == ["2026-11-26T14:40:20Z", "2026-11-26T14:40:21Z", "garbage-1", ""]
