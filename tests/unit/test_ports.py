"""Free ports are drawn where no outgoing connection can take them before a server binds
them (outside the kernel's ephemeral range), distinct, and never handed out twice."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from disttrain.local import ports

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("text", "expected"), [
    ("32768\t60999\n", (32768, 60999)),
    ("1024 65000", (1024, 65000)),
    ("", ports.DEFAULT_EPHEMERAL),
    (None, ports.DEFAULT_EPHEMERAL),
    ("40000", ports.DEFAULT_EPHEMERAL),
    ("60999 32768", ports.DEFAULT_EPHEMERAL),  # not ordered
    ("0 100", ports.DEFAULT_EPHEMERAL),
    ("1 70000", ports.DEFAULT_EPHEMERAL),
    ("a b", ports.DEFAULT_EPHEMERAL),
])
def test_the_ephemeral_range_is_read_or_linux_default(text, expected):
    assert ports.ephemeral_range(text) == expected


@pytest.mark.parametrize(("ephemeral", "expected"), [
    ((32768, 60999), range(10000, 32768)),  # Linux's default: below is wider
    ((10500, 40000), range(40001, 65536)),  # below holds 500 only: above
    ((12000, 64999), range(10000, 12000)),  # above holds 536 only: below
    ((10900, 64999), range(0)),  # neither holds 1,000: the kernel's pick
    ((1024, 65535), range(0)),
])
def test_ports_are_drawn_from_the_wider_side_of_the_ephemeral_range(ephemeral, expected):
    assert ports.pool(ephemeral) == expected


def test_free_ports_are_distinct_bindable_outside_the_ephemeral_range_and_never_repeated():
    low, high = ports._read_range()
    seen: set[int] = set()
    for _ in range(20):
        got = ports.free_ports(5)
        assert len(set(got)) == 5 and not seen & set(got)
        seen |= set(got)
        assert all(not low <= p <= high for p in got), (got, low, high)
        for p in got:  # free now: a server can bind each
            with socket.socket() as s:
                s.bind(("127.0.0.1", p))
    assert isinstance(ports.free_port(), int)


def test_a_full_pool_is_an_error_naming_the_address_not_a_spin(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        monkeypatch.setattr(ports, "pool", lambda _: range(port, port + 1))
        with pytest.raises(OSError, match=rf"^no 1 free TCP ports on 127\.0\.0\.1 in {ports.MAX_TRIES} tries$"):
            ports.free_ports(1)


def test_an_empty_pool_falls_back_to_the_kernels_pick(monkeypatch):
    monkeypatch.setattr(ports, "pool", lambda _: range(0))
    got = ports.free_ports(3)
    assert len(set(got)) == 3 and all(p > 0 for p in got)


def test_the_scripts_command_prints_n_ports_on_the_address_asked():
    env = {**os.environ, "PYTHONPATH": str(REPO / "operator")}
    run = subprocess.run([sys.executable, "-m", "disttrain.local.ports", "3", "127.240.0.1"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert len(set(run.stdout.split())) == 3 and all(p.isdigit() for p in run.stdout.split())
    bad = subprocess.run([sys.executable, "-m", "disttrain.local.ports", "three"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert (bad.returncode, bad.stderr) == (1, "usage: python3 -m disttrain.local.ports N [ADDRESS]\n")
