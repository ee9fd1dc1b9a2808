"""The compiled core's send of a GSO run (send_run, src/speedups/gso_send.h), on real
loopback sockets.

send_run hands the kernel each datagram of a run as one iovec of one sendmsg,
with UDP_SEGMENT, instead of joining them: the datagrams on the wire must be
the very ones the pure path's join sends (transport.py, with the compiled
send and without), errors the socket module's, whether the GIL is kept or
given up around the call, and a bad argument must be refused, not sent.
"""

from __future__ import annotations

import errno
import random
import socket
import time
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.udp import datagrams, udp_pair
from purelink import native
from purelink.link import transport

core = native.part("pack")
send_run = getattr(core, "send_run", None)
needs_core = pytest.mark.skipif(
    send_run is None, reason="the compiled core's send_run is not in use"
)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A receiver (no GRO: one datagram per recv) and a sender connected to it."""
    with udp_pair(rcvbuf=4 << 20) as sockets:
        yield sockets


@needs_core
@pytest.mark.parametrize("release", [False, True], ids=["gil-kept", "gil-released"])
def test_a_run_arrives_as_itsdatagrams(
    pair: tuple[socket.socket, socket.socket], release: bool
) -> None:
    assert send_run is not None
    rx, tx = pair
    run = [b"head"] + [bytes([i]) * 300 for i in range(5)] + [b"tail", b"next"]
    assert send_run(tx.fileno(), run, 1, 7, 300, release) == 5 * 300 + 4
    assert datagrams(rx, 6) == run[1:7]
    assert send_run(tx.fileno(), run, 0, 1, 0, release) == 4  # one: a plain datagram
    assert rx.recv(100) == b"head"


@needs_core
def test_errors_are_the_socket_modules(pair: tuple[socket.socket, socket.socket]) -> None:
    assert send_run is not None
    rx, tx = pair
    rx.close()  # nobody at that port now: the kernel answers port unreachable
    send_run(tx.fileno(), [b"to nobody"], 0, 1, 0, False)
    with pytest.raises(ConnectionRefusedError) as refused:
        for _ in range(100):  # the refusal is reported on a later call
            time.sleep(0.01)  # a moment for the ICMP to come back
            send_run(tx.fileno(), [b"again"], 0, 1, 0, False)
    assert refused.value.errno == errno.ECONNREFUSED
    with pytest.raises(OSError) as bad:
        send_run(1 << 20, [b"x"], 0, 1, 0, True)  # no such fd
    assert bad.value.errno == errno.EBADF


@needs_core
@pytest.mark.parametrize(
    "args",
    [
        (-1, [b"x"], 0, 1, 0, False),
        (0, [b"x"], 0, 2, 0, False),
        (0, [b"x"], 1, 1, 0, False),
        (0, [b"x"], -1, 0, 0, False),
        (0, [b"x"] * 65, 0, 65, 1, False),
        (0, [b"x", b"x"], 0, 2, 0, False),
        (0, [b"x", b"x"], 0, 2, 1 << 16, False),
        (0, (b"x",), 0, 1, 0, False),
        (0, [b"x", "not bytes"], 0, 2, 1, False),
        (0, [bytearray(b"x")], 0, 1, 0, False),
        (0, [b"a" * 10, b"b" * 20], 0, 2, 20, False),  # not equal: the kernel would cut 20 + 10
        (0, [b"a" * 20, b"b" * 21], 0, 2, 20, False),  # a last one longer than the rest
        (0, [b"x"], 0, 1, 0),
    ],
)
def test_bad_arguments_are_refused(args: tuple[object, ...]) -> None:
    assert send_run is not None
    with pytest.raises((TypeError, ValueError, OverflowError)):
        send_run(*args)


@needs_core
@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 150), st.integers(100, 1500))
def test_the_transport_sends_the_same_datagrams_both_ways(seed: int, n: int, size: int) -> None:
    """A burst as the sender makes them (runs of equal datagrams, shorter ones
    between): with the compiled send and with the join, the same datagrams."""
    rng = random.Random(seed)
    burst = []
    while len(burst) < n:
        cut = rng.choice((size, size, size, rng.randint(1, size)))
        burst.append(rng.randbytes(cut))
    got = []
    for compiled in (True, False):
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(5.0)
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        link = transport.UdpTransport(*rx.getsockname())
        before = transport._send_run
        transport._send_run = send_run if compiled else None  # type: ignore[misc]
        try:
            link.send(burst)
            got.append((datagrams(rx, len(burst)), link.send_calls, link.send_errors))
        finally:
            transport._send_run = before  # type: ignore[misc]
            link.close()
            rx.close()
    assert got[0] == got[1]
    assert got[0][0] == burst
