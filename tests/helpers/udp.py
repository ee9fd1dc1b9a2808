"""A connected pair of UDP sockets on loopback, for the tests of the send paths
(link/nogil.py's and the compiled core's): one place that makes them."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def udp_pair(rcvbuf: int | None = None) -> Iterator[tuple[socket.socket, socket.socket]]:
    """A receiver (no GRO: one datagram per recv, 5 s timeout) and a non-blocking
    sender connected to it; `rcvbuf`: the receiver's SO_RCVBUF."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with rx, tx:
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(5.0)
        if rcvbuf is not None:
            rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        tx.setblocking(False)
        tx.connect(rx.getsockname())
        yield rx, tx


def datagrams(rx: socket.socket, n: int) -> list[bytes]:
    """The next `n` datagrams `rx` receives."""
    return [rx.recv(65536) for _ in range(n)]
