"""The compiled core's send of a GSO run (send_run, src/speedups/gso_send.h), on real
loopback sockets.

send_run hands the kernel each datagram of a run as one iovec of one sendmsg,
with UDP_SEGMENT, instead of joining them: the datagrams on the wire must be
the very ones the pure path's join sends (transport.py, with the compiled
send and without), errors the socket module's, whether the GIL is kept or
given up around the call, and a bad argument must be refused, not sent.
send_runs does transport.py's loop over a list's runs in one call, up to the
first run that fails, whose error transport.py then handles as its own: the
same datagrams, calls and counters again, errors included.
"""

from __future__ import annotations

import errno
import random
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.udp import datagrams, udp_pair
from purelink import native
from purelink.link import transport

core = native.part("pack")
send_run = getattr(core, "send_run", None)
send_runs = getattr(core, "send_runs", None)
needs_core = pytest.mark.skipif(
    send_run is None or send_runs is None, reason="the compiled core's send_run is not in use"
)
WAYS = ("runs", "run", "join")


@contextmanager
def sending(way: str) -> Iterator[None]:
    """transport.py's send, one of three ways: "runs" (send_runs, then its own
    loop from a run that failed), "run" (its loop, send_run for each run) or
    "join" (its loop, the pure path's join)."""
    saved = transport._send_run, transport._send_runs
    transport._send_runs = send_runs if way == "runs" else None  # type: ignore[misc]
    transport._send_run = send_run if way != "join" else None  # type: ignore[misc]
    try:
        yield
    finally:
        transport._send_run, transport._send_runs = saved  # type: ignore[misc]


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
    got = [_sent(way, burst, len(burst)) for way in WAYS]
    assert got[0] == got[1] == got[2]
    assert got[0][0] == burst


def _sent(way: str, burst: list[bytes], arrive: int) -> tuple[object, ...]:
    """What a fresh UdpTransport's send(burst) puts on the wire (`arrive`
    datagrams are waited for) and its counters, sent `way`."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(5.0)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    link = transport.UdpTransport(*rx.getsockname())
    try:
        with sending(way):
            link.send(burst)
        return (
            datagrams(rx, arrive), link.send_calls, link.send_errors, link.too_large,
            link.path_too_big, link.gso,
        )  # fmt: skip
    finally:
        link.close()
        rx.close()


@needs_core
@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 3), st.integers(0, 120))
def test_a_run_that_fails_is_handled_as_the_loop_would(seed: int, big: int, n: int) -> None:
    """Datagrams the kernel refuses (larger than any UDP datagram: EMSGSIZE)
    among runs: send_runs stops at each, and transport.py's loop counts it
    and goes on, as without send_runs: the same datagrams, calls, errors."""
    rng = random.Random(seed)
    burst = [rng.randbytes(rng.choice((1200, 1200, 300))) for _ in range(n)]
    for _ in range(big):
        burst.insert(rng.randint(0, len(burst)), bytes(70_000))
    got = [_sent(way, burst, n) for way in WAYS]
    assert got[0] == got[1] == got[2]
    assert got[0][2] == big and got[0][3] == [70_000] * big  # each counted, too large


@needs_core
def test_send_runs_stops_at_the_run_that_fails(pair: tuple[socket.socket, socket.socket]) -> None:
    assert send_runs is not None
    rx, tx = pair
    burst = [b"a" * 500] * 3 + [b"b" * 200] + [bytes(70_000)] + [b"c" * 10]
    assert send_runs(tx.fileno(), burst, 64, 65000, False) == (4, 1, errno.EMSGSIZE)
    assert datagrams(rx, 4) == burst[:4]  # one run: three and a shorter last one
    assert send_runs(tx.fileno(), burst[5:], 64, 65000, True) == (1, 1, 0)
    assert rx.recv(100) == b"c" * 10
    assert send_runs(tx.fileno(), [], 64, 65000, False) == (0, 0, 0)
    assert send_runs(tx.fileno(), [b"x" * 100] * 5, 2, 65000, False) == (5, 3, 0)  # 2 + 2 + 1
    assert send_runs(tx.fileno(), [b"x" * 100] * 5, 64, 250, False) == (5, 3, 0)  # by bytes
    assert datagrams(rx, 10) == [b"x" * 100] * 10


@needs_core
@pytest.mark.parametrize(
    "args",
    [
        (-1, [b"x"], 64, 65000, False),
        (0, [b"x"], 0, 65000, False),
        (0, [b"x"], 65, 65000, False),
        (0, [b"x"], 64, 0, False),
        (0, (b"x",), 64, 65000, False),
        (0, [b"x"], 64, 65000),
    ],
)
def test_send_runs_refuses_bad_arguments(args: tuple[object, ...]) -> None:
    assert send_runs is not None
    with pytest.raises((TypeError, ValueError, OverflowError)):
        send_runs(*args)


class Data(bytes):
    """A bytes subclass: the pure path sends it as bytes."""


@needs_core
def test_send_runs_leaves_a_list_it_cannot_send_whole_to_the_loop(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """Anything but non-empty exact bytes in the list (a subclass, another type,
    an empty datagram: no GSO segment of 0): (0, 0, 0), nothing sent, so that
    transport.py's loop sends the list as the pure path does."""
    assert send_runs is not None
    rx, tx = pair
    for odd in (Data(b"d" * 100), bytearray(b"d" * 100), "not bytes", b""):
        burst = [b"x" * 100] * 3 + [odd] + [b"y" * 100]  # type: ignore[list-item]
        assert send_runs(tx.fileno(), burst, 64, 65000, False) == (0, 0, 0)
    rx.setblocking(False)
    with pytest.raises(BlockingIOError):
        rx.recv(100)


@needs_core
def test_a_bytes_subclass_is_sent_as_the_pure_path_sends_it() -> None:
    burst = [b"a" * 500] * 3 + [Data(b"b" * 500), Data(b"c" * 200)] + [b"d" * 500] * 2
    got = [_sent(way, burst, len(burst)) for way in WAYS]
    assert got[0] == got[1] == got[2]
    assert got[0][0] == burst and got[0][2] == 0
