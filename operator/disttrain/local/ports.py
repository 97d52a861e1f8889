"""Free TCP ports for servers this machine is about to start (`disttrain run --local`'s
rendezvous and metrics ports; the local cluster's etcd, API server and node; the tests).

The usual trick, bind port 0 and close, hands out a port from the kernel's ephemeral range
(net.ipv4.ip_local_port_range). Until the server binds it, any outgoing connection on the
machine may take that port as its local end, and the server then fails with "Address already
in use". On a busy machine (a control plane, torchrun agents, kubectl calls) that happens.
So ports here are drawn at random from below (or above) that range, where the kernel never
puts an outgoing connection, checked bindable, and never handed out twice by one process.
Two processes drawing the same port in the second before one binds it stays possible, at
odds of about one in twenty thousand.

`python3 -m disttrain.local.ports N [ADDRESS]` prints N such ports (hack/cluster.sh).
"""

from __future__ import annotations

import contextlib
import random
import socket
import sys

RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
DEFAULT_EPHEMERAL = (32768, 60999)  # Linux's default
LOWEST = 10000  # below: well-known and registered services' usual ports
MAX_TRIES = 1000  # then the address is full: say so rather than spin
MIN_POOL = 1000  # a pool smaller than this makes collisions likely: fall back to the kernel's pick

_handed_out: set[int] = set()


def ephemeral_range(text: str | None) -> tuple[int, int]:
    """The kernel's ephemeral range from RANGE_FILE's text ("32768\\t60999"); Linux's
    default when the text is missing or not two ordered ports."""
    try:
        low, high = (int(x) for x in (text or "").split())
    except ValueError:
        return DEFAULT_EPHEMERAL
    return (low, high) if 0 < low <= high <= 65535 else DEFAULT_EPHEMERAL


def pool(ephemeral: tuple[int, int]) -> range:
    """The ports to draw from: the wider of [LOWEST, low) and (high, 65535]; empty when
    neither holds MIN_POOL ports (the caller then asks the kernel)."""
    low, high = ephemeral
    below, above = range(LOWEST, low), range(high + 1, 65536)
    wider = max(below, above, key=len)
    return wider if len(wider) >= MIN_POOL else range(0)


def _read_range() -> tuple[int, int]:
    try:
        with open(RANGE_FILE, encoding="ascii") as f:
            return ephemeral_range(f.read())
    except OSError:  # not Linux, or no /proc
        return DEFAULT_EPHEMERAL


def free_ports(n: int, address: str = "127.0.0.1") -> list[int]:
    """N distinct ports free on ADDRESS now, none handed out before by this process."""
    candidates = pool(_read_range())
    socks: list[socket.socket] = []
    try:
        for _ in range(MAX_TRIES):
            if len(socks) == n:
                break
            sock = socket.socket()
            try:
                sock.bind((address, random.choice(candidates) if candidates else 0))
            except OSError:  # in use
                sock.close()
                continue
            if sock.getsockname()[1] in _handed_out:
                sock.close()
                continue
            _handed_out.add(sock.getsockname()[1])
            socks.append(sock)
        if len(socks) < n:
            raise OSError(f"no {n} free TCP ports on {address} in {MAX_TRIES} tries")
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:  # held until all N are found, so they are distinct
            with contextlib.suppress(OSError):
                s.close()


def free_port(address: str = "127.0.0.1") -> int:
    return free_ports(1, address)[0]


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or not args[0].isdigit() or len(args) > 2:
        sys.exit("usage: python3 -m disttrain.local.ports N [ADDRESS]")
    print(" ".join(str(p) for p in free_ports(int(args[0]), *args[1:])))
