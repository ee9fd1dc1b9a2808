"""The compiled intake's drain decides as the Python intake does, many datagrams per receive.

Why a file of its own: test_intake.py feeds the two cores one datagram per
call, so the C intake never sees two datagrams in one call.  The listener's
drain hands it every datagram of a receive (a GRO buffer: dozens of them) in
one call, and there the C keeps state from one datagram to the next: a run of
DATA of one session, and a run of pieces of one batch, whose changes to the
session and the batch are written back once, when the run ends; and a receive
buffer whose datagrams it took whole goes back to the pool at once.  Here the
link's datagrams -- lost, duplicated, reordered and hurt -- go through a
loopback socket in GSO sends (one GRO receive each) into `Intake.drain` of
one core, and one by one into the Python intake of the other; after every
receive the two cores' whole state must be equal, and at the end every record
is stored once, in order.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.wire import PROFILE
from native.test_intake import NOW, Pair, hurt, packed, state
from purelink._udp import SOL_UDP, UDP_GRO, UDP_SEGMENT
from purelink.primitives.pool import BufferPool
from purelink.protocol import wire
from purelink.protocol.core_intake import INTAKE
from purelink.protocol.listener_core import CoreConfig, ListenerCore

pytestmark = pytest.mark.skipif(INTAKE is None, reason="the compiled intake is not in use")

GSO_BYTES = 65000  # a GSO send's payload at most (an IPv4 datagram's 65,507, less headers)


@contextlib.contextmanager
def gro_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A non-blocking receiver with UDP GRO and a sender, on loopback (skips where
    the kernel has no GSO or GRO)."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with rx, tx:
        rx.bind(("127.0.0.1", 0))
        tx.bind(("127.0.0.1", 0))
        rx.setblocking(False)
        try:
            rx.setsockopt(SOL_UDP, UDP_GRO, 1)
            tx.sendmsg(
                [b"x" * 20], [(SOL_UDP, UDP_SEGMENT, struct.pack("=H", 10))], 0, ("127.0.0.1", 9)
            )
        except OSError:
            pytest.skip("no UDP GSO/GRO here")
        yield rx, tx


def runs(datagrams: list[bytes]) -> Iterator[list[bytes]]:
    """The datagrams in runs of equal sizes that one GSO send may carry."""
    i = 0
    while i < len(datagrams):
        size = len(datagrams[i])
        j = i + 1
        while (
            size
            and j < len(datagrams)
            and len(datagrams[j]) == size
            and (j - i + 1) * size <= GSO_BYTES
        ):
            j += 1
        yield datagrams[i:j]
        i = j


class Drained:
    """The compiled core's side: each run sent in one GSO send and drained."""

    def __init__(self, core: ListenerCore, rx: socket.socket, tx: socket.socket) -> None:
        self.core = core
        self.rx = rx
        self.tx = tx
        self.pool = BufferPool(65536, 64)
        self.used: list[bytearray] = []
        self.declined = 0  # datagrams the C gave to the Python path

    def fallback(self, view: memoryview, addr: Any, now: float) -> None:
        self.declined += 1
        self.core.receive_datagram(view, addr, now)

    def send(self, run: list[bytes]) -> None:
        where = self.rx.getsockname()
        if len(run) == 1:
            self.tx.sendto(run[0], where)
        else:
            size = struct.pack("=H", len(run[0]))
            self.tx.sendmsg([b"".join(run)], [(SOL_UDP, UDP_SEGMENT, size)], 0, where)
        got = 0
        for _ in range(50):  # loopback delivers at once; a few looks cover a busy machine
            if got == len(run):
                break
            select.select([self.rx], [], [], 0.1)
            assert INTAKE is not None
            _calls, datagrams, _ = INTAKE.drain(
                self.core, self.rx.fileno(), self.pool.get, self.pool.put, self.used,
                True, True, 64, NOW, self.fallback,
            )  # fmt: skip
            got += datagrams
        assert got == len(run)


def check(pair: Pair, drained: Drained, where: Any, datagrams: list[bytes]) -> None:
    """The datagrams to both cores: equal state after each GRO receive."""
    for run in runs(datagrams):
        drained.send(run)
        for data in run:
            pair.py.receive_datagram(data, where, NOW)
        assert state(pair.c) == state(pair.py)


@contextlib.contextmanager
def drained_link(
    sizes: list[int], datagram: int
) -> Iterator[tuple[Pair, Drained, Any, list[bytes], list[bytes]]]:
    """Both cores with a session from a GRO pair's sender, the compiled one
    draining the receiver; records of `sizes` and the link's datagrams of them."""
    with gro_pair() as (rx, tx):
        where = tx.getsockname()
        pair = Pair(CoreConfig(max_record=4096, max_reorder=1 << 14))
        accept = pair.open(addr=where)
        records = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
        yield pair, Drained(pair.c, rx, tx), where, records, packed(accept, records, datagram)


record_sizes = st.one_of(st.integers(0, 120), st.integers(300, 3000))


@settings(PROFILE, max_examples=max(PROFILE.max_examples // 4, 10), deadline=None)
@given(
    sizes=st.lists(record_sizes, min_size=1, max_size=40),
    datagram=st.sampled_from([600, 1400]),
    data=st.data(),
)
def test_drain_decides_as_the_python_intake_for_the_links_datagrams(
    sizes: list[int], datagram: int, data: st.DataObject
) -> None:
    with drained_link(sizes, datagram) as (pair, drained, where, records, out):
        sent: list[bytes] = []
        hurt_any = False
        for i, d in enumerate(out):
            what = data.draw(st.sampled_from(["send"] * 10 + ["lose", "twice", "swap", "hurt"]))
            if what == "lose":
                continue
            if what == "swap" and i + 1 < len(out):
                sent += [out[i + 1], d]
                continue
            if what == "hurt":
                hurt_any = True
                sent.append(data.draw(hurt(d))[0])
            sent.append(d)
            if what == "twice":
                sent.append(d)
        check(pair, drained, where, sent)
        stored = pair.drain()
        check(pair, drained, where, out)  # the link resends what it has not heard of
        stored += pair.drain()
    if not hurt_any:  # (a hurt piece may spoil its batch for the session)
        assert [r for b, h in stored for r in wire.batch_records(b, h)] == records


def test_buffers_whose_datagrams_c_took_go_back_to_the_pool_at_once() -> None:
    with gro_pair() as (rx, tx):
        where = tx.getsockname()
        pair = Pair()
        accept = pair.open(addr=where)
        drained = Drained(pair.c, rx, tx)
        check(pair, drained, where, packed(accept, [b"r" * 61] * 3000, 1400))
        stored = pair.drain()
    assert sum(h.count for _, h in stored) == 3000
    assert drained.declined == 0
    assert drained.used == []  # nothing holds a view of them: none waits for the round
    assert drained.pool.misses == 1  # one buffer, received into again and again


def test_a_buffer_python_saw_waits_for_the_round() -> None:
    pair = Pair()
    with gro_pair() as (rx, tx):
        where = tx.getsockname()
        accept = pair.open(addr=where)
        drained = Drained(pair.c, rx, tx)
        out = packed(accept, [b"r" * 61] * 3000, 1400)
        check(pair, drained, where, [out[1], out[0], *out[2:]])  # the first out of order
        assert drained.declined >= 1
        assert len(drained.used) == 1  # the receive with the one Python held
        pair.drain()
