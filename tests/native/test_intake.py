"""The compiled intake and the Python intake make the same decisions, datagram by datagram.

Why: the listener's fast intake (src/speedups/intake.c) takes the common
case -- the next DATA of an open session, the next piece of a batch -- in C,
over the core's own state, and declines everything else to the Python path.
If it took one datagram the Python path would not, or took it differently,
a record could be stored twice, lost, or counted under another reason.  So
two listener cores, one with the compiled intake and one with the Python
fast paths (`intake = None`), are fed the same datagrams -- real ones from
the link's Packer, then lost, duplicated, reordered, from another address,
bit-flipped, truncated, extended, and re-sealed with right CRCs over wrong
fields -- and after every datagram their whole state must be equal: the
counters and drop reasons, the producers' seqs, held batches and pieces,
the sessions' packet numbers, the batches to write and the answers.

`drain` is tested on a real socket: a GRO receive split by its segment size,
an empty datagram, the addresses as the socket module gives them.
"""

from __future__ import annotations

import dataclasses
import itertools
import socket
import struct
from array import array
from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.wire import PROFILE
from purelink._udp import SOL_UDP, UDP_GRO, UDP_SEGMENT
from purelink.primitives.pool import BufferPool
from purelink.protocol import wire
from purelink.protocol.core_intake import INTAKE
from purelink.protocol.core_state import SessionState
from purelink.protocol.listener_core import CoreConfig, ListenerCore
from purelink.protocol.packing import Flight, Packer
from purelink.protocol.receiver import Write
from purelink.testing import MemoryStore

pytestmark = pytest.mark.skipif(INTAKE is None, reason="the compiled intake is not in use")

ADDR = ("127.0.0.1", 5000)
OTHER = ("127.0.0.1", 5001)
ANON = (1 << 63) | 12345
NOW = 100.0


# ------------------------------------------------------------------ the pair
def _core(key: bytes, compiled: bool, config: CoreConfig) -> ListenerCore:
    core = ListenerCore(MemoryStore(), config)
    core._cookies._key = key  # the same RETRY cookies from both
    ids = itertools.count(0x1000_0001, 7919)  # the same conn ids from both
    core._new_conn_id = lambda: next(ids)  # type: ignore[method-assign]
    if not compiled:
        core.intake = None
    return core


class Pair:
    """A listener core with the compiled intake (`c`) and one without (`py`)."""

    def __init__(self, config: CoreConfig | None = None) -> None:
        config = config or CoreConfig()
        self.c = _core(b"k" * 32, True, config)
        self.py = _core(b"k" * 32, False, config)

    def feed(self, data: bytes, addr: tuple[str, int] = ADDR, now: float = NOW) -> None:
        self.c.receive_datagram(data, addr, now)
        self.py.receive_datagram(data, addr, now)
        assert state(self.c) == state(self.py)

    def answers(self, now: float = NOW) -> list[tuple[bytes, Any]]:
        out = self.c.datagrams_to_send(now)
        assert out == self.py.datagrams_to_send(now)
        return out

    def drain(self, now: float = NOW) -> list[tuple[bytes, wire.BatchHeader]]:
        """The round's writes (equal from both), stored and synced, and the answers."""
        writes = {s: [(bytes(b), h) for b, h in w] for s, w in self.c.take_writes().items()}
        assert writes == {
            s: [(bytes(b), h) for b, h in w] for s, w in self.py.take_writes().items()
        }
        for core in (self.c, self.py):
            for stream, batches in writes.items():
                core.written(stream, sum(h.count for _, h in batches))  # tickets: any rising number
                core.synced(stream, sum(h.count for _, h in batches))
        self.answers(now)
        assert state(self.c) == state(self.py)
        return [w for batches in writes.values() for w in batches]

    def open(self, producer: str = "", addr: tuple[str, int] = ADDR) -> wire.Accept:
        """A session from `addr` opened on both by the same handshake."""
        pid = 0 if producer else ANON
        self.feed(wire.encode_hello(wire.Hello(7, "s", producer, pid, 1400, b"")), addr)
        ((retry_bytes, _),) = self.answers()
        retry = wire.decode_datagram(retry_bytes)
        assert isinstance(retry, wire.Retry)
        self.feed(wire.encode_hello(wire.Hello(7, "s", producer, pid, 1400, retry.cookie)), addr)
        accepts = [wire.decode_datagram(d) for d, _ in self.answers()]
        (accept,) = [m for m in accepts if isinstance(m, wire.Accept)]
        return accept


def _plain(writes: dict[str, list[Write]]) -> dict[str, list[tuple[bytes, wire.BatchHeader]]]:
    return {s: [(bytes(b), h) for b, h in w] for s, w in writes.items()}


def state(core: ListenerCore) -> dict[str, Any]:
    """Everything the intake may change, as plain values."""
    producers = {}
    for p in core.producers():
        producers[(p.stream, p.pid)] = (
            p.epoch, p.received, p.stored, p.held_bytes,
            {s: (bytes(b), h) for s, (b, h) in p.held.items()},
            # (a batch's bytes where no piece came are not defined: the C leaves them)
            {s: (x.total, x.counted, x.epoch, list(x.spans),
                 [bytes(x.buf[a:b]) for a, b in x.spans])
             for s, x in p.partials.items()},
        )  # fmt: skip
    sessions = {
        c.conn_id: (
            c.state, c.addr, c.epoch, c.largest_pn, c.ack_delay_from, c.last_seen,
            c.ack_due, list(c.duplicates),
        )
        for c in list(core._conns.values()) + list(core._gone.values())
    }  # fmt: skip
    return {
        "stats": dataclasses.asdict(core.stats),
        "junk": core.junk,
        "memory": core.memory,
        "holding": [((p.stream, p.pid), n) for p, n in core._holding.items()],
        "producers": producers,
        "sessions": sessions,
        "ack_due": set(core._ack_due),
        "writes": _plain(core._writes),
        "owners": {s: [(p.pid, n) for p, n in w] for s, w in core._write_owners.items()},
        "out": list(core._out),
    }


# ------------------------------------------------------- the link's datagrams
def packed(accept: wire.Accept, records: list[bytes], size: int, first: int = 1) -> list[bytes]:
    """The datagrams the link's Packer makes of `records` (seqs from `first`, packet
    numbers from `first` too) in this session."""
    packer = Packer(size)
    packer.start(accept.conn_id, accept.producer, accept.epoch, first)
    lens = array("H", (min(len(r), 0xFFFF) for r in records))
    out: list[bytes] = []
    flights: dict[int, Flight] = {}
    last = first + len(records) - 1
    packer.fill(records, lens, first, last, first, 0.0, 1 << 30, 1 << 40, out, flights)
    return out


def reseal(data: bytes | bytearray) -> bytes:
    """`data` with its datagram CRC (and a DATA's batch CRC, where its length
    lies within the datagram) made right again: the fields stay as they are."""
    raw = bytearray(data)
    if len(raw) >= 16 + wire.BATCH_HEADER + 4 and raw[3] == wire.MsgType.DATA:
        (length,) = struct.unpack_from("<I", raw, 32)
        if length >= 12 and 16 + length <= len(raw) - 4:
            struct.pack_into("<I", raw, 24, crc32c(bytes(raw[28 : 16 + length])))
    if len(raw) >= 12:
        struct.pack_into("<I", raw, len(raw) - 4, crc32c(bytes(raw[:-4])))
    return bytes(raw)


# offsets of the fields a fuzzer should hit: DATA (pn, batch header), FRAGMENT head
FIELDS = [
    (3, "<B"), (4, "<I"), (8, "<Q"), (16, "<Q"), (31, "<B"), (32, "<I"), (36, "<I"),
    (40, "<Q"), (48, "<Q"), (56, "<I"), (60, "<H"),
    (16, "<I"), (20, "<Q"), (28, "<I"), (32, "<I"),
]  # fmt: skip
EDGES = [0, 1, 2, 43, 44, 45, 0xFF, 0xFFFF, 1 << 16, 1 << 20, 0x7FFF_FFFF, 0xFFFF_FFFF, 1 << 63]


@st.composite
def hurt(draw: st.DrawFn, data: bytes) -> tuple[bytes, tuple[str, int]]:
    """`data` mutated one way (or not), and the address it comes from."""
    how = draw(
        st.sampled_from(
            ["as is"] * 6 + ["flip", "truncate", "extend", "splice", "field", "field", "other"]
        )
    )
    raw = bytearray(data)
    if how == "flip":
        for _ in range(draw(st.integers(1, 3))):
            bit = draw(st.integers(0, 8 * len(raw) - 1))
            raw[bit // 8] ^= 1 << (bit % 8)
    elif how == "truncate":
        raw = raw[: draw(st.integers(0, len(raw) - 1))]
    elif how == "extend":
        raw += draw(st.binary(min_size=1, max_size=64))
    elif how == "splice":
        at = draw(st.integers(0, len(raw)))
        raw[at : at + draw(st.integers(0, 16))] = draw(st.binary(max_size=16))
    elif how == "field":  # CRC right, a field wrong
        offset, fmt = draw(st.sampled_from(FIELDS))
        size = struct.calcsize(fmt)
        if offset + size <= len(raw):
            value = draw(st.one_of(st.sampled_from(EDGES), st.integers(0, 50)))
            struct.pack_into(fmt, raw, offset, value % (1 << (8 * size)))
        raw = bytearray(reseal(raw))
    if how in ("flip", "truncate", "extend", "splice") and draw(st.booleans()):
        raw = bytearray(reseal(raw))  # past the datagram CRC, to the fields
    return bytes(raw), OTHER if how == "other" else ADDR


record_sizes = st.one_of(st.integers(0, 120), st.integers(300, 3000))


@settings(PROFILE, max_examples=PROFILE.max_examples // 2)
@given(
    sizes=st.lists(record_sizes, min_size=1, max_size=24),
    datagram=st.sampled_from([200, 600, 1400]),
    data=st.data(),
)
def test_same_decisions_for_the_links_datagrams_lost_reordered_and_hurt(
    sizes: list[int], datagram: int, data: st.DataObject
) -> None:
    pair = Pair(CoreConfig(max_record=4096, max_reorder=1 << 14))
    accept = pair.open()
    records = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    out = packed(accept, records, datagram)
    order = data.draw(st.permutations(range(len(out)))) if data.draw(st.booleans()) else None
    stored = []
    hurt_any = False
    for i in order if order is not None else range(len(out)):
        what = data.draw(st.sampled_from(["send"] * 8 + ["lose", "twice", "hurt", "drain"]))
        if what == "lose":
            continue
        if what == "hurt":
            hurt_any = True
            pair.feed(*data.draw(hurt(out[i])))
        pair.feed(out[i])
        if what == "twice":
            pair.feed(out[i])
        if what == "drain":
            stored += pair.drain()
    for datagram_ in out:  # the link resends what it has not heard of: all of it
        pair.feed(datagram_)
    stored += pair.drain()
    if not hurt_any:  # (a hurt piece may spoil its batch for the session: the link reconnects)
        got = [r for b, h in stored for r in wire.batch_records(b, h)]
        assert got == records  # whole, once, in order


@settings(PROFILE)
@given(st.data())
def test_same_decisions_for_anything_at_all(data: st.DataObject) -> None:
    pair = Pair()
    accept = pair.open()
    out = packed(accept, [b"r" * 50] * 30 + [b"L" * 2000], 600)
    for _ in range(data.draw(st.integers(1, 12))):
        kind = data.draw(st.sampled_from(["bytes", "sealed", "hurt", "valid"]))
        if kind == "bytes":
            pair.feed(data.draw(st.binary(max_size=200)))
        elif kind == "sealed":  # a right header and CRC over anything
            body = struct.pack(
                "<2sBBI", b"PL", 2, data.draw(st.sampled_from([4, 5])), accept.conn_id
            )
            pair.feed(reseal(body + data.draw(st.binary(max_size=120)) + b"\0" * 4))
        elif kind == "hurt":
            pair.feed(*data.draw(hurt(data.draw(st.sampled_from(out)))))
        else:
            pair.feed(data.draw(st.sampled_from(out)))
    pair.drain()


def test_other_sessions_and_messages_are_declined_the_same() -> None:
    pair = Pair()
    accept = pair.open()
    out = packed(accept, [b"x" * 61] * 50, 1400)
    pair.feed(wire.encode_probe(accept.conn_id, 1000, accept.epoch))
    pair.feed(wire.encode_probe(accept.conn_id, 1001, accept.epoch, pad_to=1200))
    pair.feed(out[0], OTHER)  # wrong address
    pair.feed(reseal(out[0][:4] + struct.pack("<I", 99) + out[0][8:]))  # unknown session
    stale = bytearray(out[0])
    struct.pack_into("<I", stale, 56, accept.epoch + 1)
    pair.feed(reseal(stale))  # another epoch
    for datagram in out:
        pair.feed(datagram)
    pair.drain()
    pair.feed(wire.encode_close(accept.conn_id, accept.epoch))
    pair.feed(out[-1])  # after the CLOSE: an ended session
    pair.drain()


def test_data_racing_its_accept_is_declined_the_same() -> None:
    """A named producer back before its records are durable: its new session
    waits for the sync to answer the HELLO, and a DATA for it (a link that
    sends before its ACCEPT) is the Python path's to drop as "not_accepted"."""
    pair = Pair()
    accept = pair.open("p")
    for datagram in packed(accept, [b"x" * 61] * 40, 1400):
        pair.feed(datagram)
    writes = pair.c.take_writes()
    assert _plain(writes) == _plain(pair.py.take_writes())
    for core in (pair.c, pair.py):
        core.written("s", sum(h.count for w in writes.values() for _, h in w))  # not synced
    hello = wire.Hello(7, "s", "p", accept.producer, 1400, b"")
    pair.feed(wire.encode_hello(hello), OTHER)
    answered = [wire.decode_datagram(d) for d, _ in pair.answers()]
    (retry,) = [m for m in answered if isinstance(m, wire.Retry)]
    pair.feed(wire.encode_hello(dataclasses.replace(hello, cookie=retry.cookie)), OTHER)
    answered = [wire.decode_datagram(d) for d, _ in pair.answers()]
    assert not [m for m in answered if isinstance(m, wire.Accept)]  # it waits for the sync
    (waiting,) = [s for s in pair.c._conns.values() if s.state is SessionState.WAITING]
    early = dataclasses.replace(accept, conn_id=waiting.conn_id, epoch=waiting.epoch)
    before = pair.c.stats.dropped.get("not_accepted", 0)
    pair.feed(packed(early, [b"y" * 61], 1400, first=41)[0], OTHER)
    assert pair.c.stats.dropped.get("not_accepted", 0) == before + 1


# ------------------------------------------------------ the fast path is used
def test_in_order_data_and_pieces_are_taken_in_c() -> None:
    core = ListenerCore(MemoryStore())
    assert core.intake is INTAKE is not None
    pair = Pair()
    accept = pair.open()
    records = [b"a" * 61] * 40 + [b"B" * 5000] + [b"c" * 61] * 3
    out = packed(accept, records[:40], 1400)
    out += packed(accept, records[40:41], 1400, 41) + packed(accept, records[41:], 1400, 42)
    kinds = []
    for datagram in out:
        kinds.append(datagram[3])
        assert INTAKE.take(pair.c, datagram, ADDR, NOW), "declined"
        pair.py.receive_datagram(datagram, ADDR, NOW)
    assert wire.MsgType.FRAGMENT in kinds and wire.MsgType.DATA in kinds
    c_writes = [(bytes(b), h) for b, h in pair.c.take_writes()["s"]]
    py_writes = [(bytes(b), h) for b, h in pair.py.take_writes()["s"]]
    assert c_writes == py_writes
    assert [r for b, h in c_writes for r in wire.batch_records(b, h)] == records
    assert pair.c._conns[accept.conn_id].producer.received == len(records)


def test_take_declines_without_changing_anything() -> None:
    pair = Pair()
    accept = pair.open()
    out = packed(accept, [b"x" * 61] * 60, 600)
    before = state(pair.c)
    assert not INTAKE.take(pair.c, out[1], ADDR, NOW)  # out of order: held by Python
    assert not INTAKE.take(pair.c, out[0], OTHER, NOW)
    assert not INTAKE.take(pair.c, out[0][:-1] + bytes([out[0][-1] ^ 1]), ADDR, NOW)
    assert not INTAKE.take(pair.c, b"", ADDR, NOW)
    assert state(pair.c) == before


# ------------------------------------------------------------------- drain
def _sockets(family: int, host: str) -> tuple[socket.socket, socket.socket]:
    rx = socket.socket(family, socket.SOCK_DGRAM)
    tx = socket.socket(family, socket.SOCK_DGRAM)
    rx.bind((host, 0))
    tx.bind((host, 0))
    rx.setblocking(False)
    return rx, tx


def _drain(rx: socket.socket, gro: bool) -> tuple[tuple[int, int, int], list[tuple[bytes, Any]]]:
    assert INTAKE is not None
    pool = BufferPool(65536, 8)
    got: list[tuple[bytes, Any]] = []
    used: list[bytearray] = []
    counts = INTAKE.drain(
        object(), rx.fileno(), pool.get, pool.put, used, gro, False, 64, NOW,
        lambda view, addr, now: got.append((bytes(view), addr)),
    )  # fmt: skip
    assert len(used) == counts[0]
    return counts, got


def test_drain_splits_a_gro_receive_by_its_segment_size() -> None:
    rx, tx = _sockets(socket.AF_INET, "127.0.0.1")
    where = tx.getsockname()
    with rx, tx:
        try:
            rx.setsockopt(SOL_UDP, UDP_GRO, 1)
            segments = [bytes([i]) * 100 for i in range(5)] + [b"z" * 40]
            tx.sendmsg(
                [b"".join(segments)],
                [(SOL_UDP, UDP_SEGMENT, struct.pack("=H", 100))],
                0,
                rx.getsockname(),
            )
        except OSError:
            pytest.skip("no UDP GSO/GRO here")
        tx.sendto(b"", rx.getsockname())  # an empty datagram is one too
        tx.sendto(b"single", rx.getsockname())
        counts, got = _drain(rx, True)
    assert [d for d, _ in got] == [*segments, b"", b"single"]
    assert all(addr == where for _, addr in got)
    assert counts[1:] == (8, 540 + 6)


def test_drain_gives_addresses_as_the_socket_module_does() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        rx, tx = _sockets(socket.AF_INET6, "::1")
    except OSError:
        pytest.skip("no IPv6 loopback")
    where = tx.getsockname()
    with rx, tx:
        tx.sendto(b"one", rx.getsockname())
        tx.sendto(b"two", rx.getsockname())
        _, got = _drain(rx, False)
        tx.sendto(b"three", rx.getsockname())
        _, reference = rx.recvfrom(100)
    assert [d for d, _ in got] == [b"one", b"two"]
    assert got[0][1] == got[1][1] == reference == where


def test_drain_stops_at_eagain_and_puts_the_buffer_back() -> None:
    rx, tx = _sockets(socket.AF_INET, "127.0.0.1")
    with rx, tx:
        counts, got = _drain(rx, False)
    assert counts == (0, 0, 0) and got == []
