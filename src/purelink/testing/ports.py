"""Loopback ports for a server a test starts on a port it names.

Why it exists: a port taken with bind(0) and closed again is in the kernel's
ephemeral range, so the next outgoing connection of any process may get it
before the server binds it (under CI the three interpreters' suites run side
by side) and the server cannot start.  Below the ephemeral range only a
listener that names its port can take one; a server that lost that race
anyway can be started again on fresh ports (nats.py does).  The same holds
for a listener that restarts on its port (the tests' outages leave it unbound
for as long as a new process takes to start, seconds on a busy machine), and
for a port a test wants nobody to listen on (a refused connection, a silent
peer): one found free here stays free.

`both=True` asks for a port free for TCP and UDP alike, for a listener that
serves udp:// and tcp:// on one port number (`purelink serve --udp H:P --tcp
H:P`, or one that switches transport across restarts).
"""

from __future__ import annotations

import contextlib
import random
import socket
from pathlib import Path

__all__ = ["free_port", "free_ports"]

_BOTH = (socket.SOCK_STREAM, socket.SOCK_DGRAM)


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out to bind(0) and to outgoing
    connections (32768 unless configured otherwise)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _is_free(port: int, kinds: tuple[int, ...]) -> bool:
    """Whether `port` binds on 127.0.0.1 for every one of `kinds` at once, as
    a server binds it (TCP with SO_REUSEADDR, as listener/tcp.py; UDP without)."""
    with contextlib.ExitStack() as held:
        for kind in kinds:
            s = held.enter_context(socket.socket(socket.AF_INET, kind))
            try:
                if kind == socket.SOCK_STREAM:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind(("127.0.0.1", port))
                    s.listen()
                else:
                    s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def free_ports(count: int, kind: int = socket.SOCK_STREAM, *, both: bool = False) -> list[int]:
    """`count` distinct loopback ports of `kind` free now, from below the
    ephemeral range; with `both`, each free for TCP and UDP alike (`kind` is
    then not looked at)."""
    kinds = _BOTH if both else (kind,)
    low, high = 10000, _ephemeral_low()
    chosen: list[int] = []
    rng = random.Random()
    while len(chosen) < count:
        if high - low < 1000:  # an unusual range: let the kernel choose
            with socket.socket(socket.AF_INET, kinds[0]) as s:
                s.bind(("127.0.0.1", 0))
                port = int(s.getsockname()[1])
        else:
            port = rng.randrange(low, high)
        if port not in chosen and _is_free(port, kinds):
            chosen.append(port)
    return chosen


def free_port(kind: int = socket.SOCK_STREAM, *, both: bool = False) -> int:
    """One loopback port of `kind` (or, with `both`, of TCP and UDP) free now
    (see free_ports)."""
    return free_ports(1, kind, both=both)[0]
