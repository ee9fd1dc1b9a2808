"""The GIL-keeping socket calls and the UDP options, on real loopback sockets.

nogil.py fills in a control message's header by hand and passes flags to libc
itself; _udp.py writes down two option numbers the socket module does not
name.  A wrong header layout, level, option number or flag makes the kernel
refuse the call or mis-cut the datagrams, and purelink would quietly fall back
to one system call per datagram: these tests fail instead, the day that
happens on this machine.  The socket module's way (taken where the header
layout differs) is tested the same way.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import socket
import struct
from collections.abc import Iterator

import pytest

from helpers.udp import datagrams, udp_pair
from purelink import _udp
from purelink.link import nogil


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A receiver (no GRO: one datagram per recv) and a sender connected to it."""
    with udp_pair() as sockets:
        yield sockets


def test_the_control_message_header_is_the_c_librarys() -> None:
    # x86_64 and aarch64 glibc: a size_t and two ints, the data right after
    assert nogil.native_cmsg
    assert ctypes.sizeof(nogil._CmsgHdr) == socket.CMSG_LEN(0)
    assert socket.CMSG_LEN(2) == socket.CMSG_LEN(0) + 2


@pytest.mark.parametrize("native", [True, False], ids=["ctypes", "socket-module"])
def test_send_gso_cuts_equaldatagrams(
    pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    monkeypatch.setattr(nogil, "native_cmsg", native)
    rx, tx = pair
    fast = nogil.NoGilSocket(tx)
    segments = [bytes([i]) * 300 for i in range(5)] + [b"tail"]  # a shorter last one
    assert fast.send_gso(b"".join(segments), 300) == 5 * 300 + 4
    assert datagrams(rx, 6) == segments
    assert fast.send_gso(b"a" * 1000 + b"b" * 1000, 1000) == 2000  # the size changes
    assert datagrams(rx, 2) == [b"a" * 1000, b"b" * 1000]


def test_send_and_recv(pair: tuple[socket.socket, socket.socket]) -> None:
    rx, tx = pair
    fast = nogil.NoGilSocket(tx)
    assert fast.send(b"one datagram") == 12
    assert rx.recv(100) == b"one datagram"
    rx.sendto(b"an answer", tx.getsockname())
    select.select([tx], [], [], 5.0)
    assert fast.recv() == b"an answer"


def test_errors_are_the_socket_modules(pair: tuple[socket.socket, socket.socket]) -> None:
    rx, tx = pair
    fast = nogil.NoGilSocket(tx)
    with pytest.raises(BlockingIOError) as empty:
        fast.recv()
    assert empty.value.errno == errno.EAGAIN
    assert empty.value.strerror == os.strerror(errno.EAGAIN)
    rx.close()  # nobody at that port now: the kernel answers port unreachable
    fast.send(b"to nobody")
    poller = select.poll()
    poller.register(tx, select.POLLIN)
    assert poller.poll(5000)  # POLLERR: the refusal is pending
    with pytest.raises(ConnectionRefusedError) as refused:
        fast.recv()
    assert refused.value.errno == errno.ECONNREFUSED


def test_a_gro_socket_takes_a_gso_burst_in_one_receive(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    rx, tx = pair
    rx.setsockopt(_udp.SOL_UDP, _udp.UDP_GRO, 1)
    assert rx.getsockopt(_udp.SOL_UDP, _udp.UDP_GRO) == 1
    nogil.NoGilSocket(tx).send_gso(b"x" * 4000, 1000)
    data, ancdata, _flags, _addr = rx.recvmsg(65536, socket.CMSG_SPACE(4))
    assert data == b"x" * 4000  # one buffer for four datagrams
    [(level, kind, value)] = ancdata
    assert (level, kind) == (_udp.SOL_UDP, _udp.UDP_GRO)
    assert struct.unpack("=H", value[:2]) == (1000,)  # the segment size, as it was sent
