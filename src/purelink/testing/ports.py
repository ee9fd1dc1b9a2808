"""Loopback ports for a server a test starts on a port it names.

Why it exists: a port taken with bind(0) and closed again is in the kernel's
ephemeral range, so the next outgoing connection of any process may get it
before the server binds it (under CI the three interpreters' suites run side
by side) and the server cannot start.  Below the ephemeral range only a
listener that names its port can take one; a server that lost that race
anyway can be started again on fresh ports (nats.py does).
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_port", "free_ports"]


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out to bind(0) and to outgoing
    connections (32768 unless configured otherwise)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count: int, kind: int = socket.SOCK_STREAM) -> list[int]:
    """`count` distinct loopback ports of `kind` free now, from below the
    ephemeral range."""
    low, high = 10000, _ephemeral_low()
    chosen: list[int] = []
    rng = random.Random()
    while len(chosen) < count:
        if high - low < 1000:  # an unusual range: let the kernel choose
            with socket.socket(socket.AF_INET, kind) as s:
                s.bind(("127.0.0.1", 0))
                port = int(s.getsockname()[1])
        else:
            port = rng.randrange(low, high)
        if port in chosen:
            continue
        with socket.socket(socket.AF_INET, kind) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind
            try:
                s.bind(("127.0.0.1", port))
                if kind == socket.SOCK_STREAM:
                    s.listen()
            except OSError:
                continue
        chosen.append(port)
    return chosen


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """One loopback port of `kind` free now (see free_ports)."""
    return free_ports(1, kind)[0]
