"""The listener's protocol core: every datagram from every address, no I/O.

The driver (listener.py) feeds it datagrams with their source address and
the time, then asks for what to write (`take_writes`), tells it what was
written and what became durable (`written`, `synced`), and sends what it
returns (`datagrams_to_send`).  The store is reached through the small
`StoreView` protocol so that tests can pass a dict-backed fake.

Handshake (QUIC Retry style).  A HELLO without a valid cookie gets a RETRY
with a cookie that binds the source address and a time (keyed BLAKE2b under
a per-process key) and expires after `cookie_lifetime`.  Only a HELLO that
echoes a valid cookie creates state.  Until an address has proven itself,
no answer larger than 3x the datagram that caused it is sent
(anti-amplification).  A retransmitted HELLO (same address and nonce) gets
the same ACCEPT, never a second session.

Sessions and epochs.  A session is (conn_id, address, producer, epoch).  A
new session of a producer takes a higher epoch (durably, before it is
answered, for a named producer) and fences the old one: datagrams of the
old session get REFUSE(fenced).  A new session is only accepted once its
producer's written records are durable, so the ACCEPT's `stored` is exactly
where a restarted application resumes.

Answers.  One ACK per session per drain (the driver calls
`datagrams_to_send` once per drain), not one per datagram, and one more when
a sync makes records durable.  A PROBE is answered at the next call too.
"""

from __future__ import annotations

import hmac
import os
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from hashlib import blake2b
from typing import Final, Protocol

from ..errors import Error, ProtocolError
from . import wire
from .receiver import Producer, Write

__all__ = ["CoreConfig", "ListenerCore", "StoreView", "named_producer_id"]

Address = tuple[str, int] | tuple[str, int, int, int]
AMPLIFICATION: Final = 3
_COOKIE_TIME = struct.Struct("<I")


def named_producer_id(name: str) -> int:
    """The stable id of a named producer (top bit clear; anonymous ids have it set)."""
    digest = blake2b(name.encode("utf-8"), digest_size=8, person=b"purelink.prod").digest()
    return (int.from_bytes(digest, "little") & ~(1 << 63)) or 1


class StoreView(Protocol):
    """What the core needs of the store."""

    def producer_state(self, stream: str, pid: int) -> tuple[int, int]:
        """(highest epoch, last seq written) of a producer; (0, 0) if unknown.
        Opens (creating) the stream: raises ValueError for a bad name and
        purelink.Error when a limit forbids a new stream."""

    def new_epoch(self, stream: str, pid: int, durable: bool) -> int:
        """The next epoch of a producer; persisted before it returns when durable."""


@dataclass(frozen=True)
class CoreConfig:
    """How a listener's protocol core behaves."""

    secret: bytes | None = None
    """Key for every datagram's MAC, or None."""
    max_links: int = 100_000
    """Most sessions at once; a HELLO past it is refused (limit)."""
    max_record: int = 16 << 20
    """Largest record accepted."""
    max_reorder: int = 4 << 20
    """Bytes of out-of-order batches and partial records held per producer."""
    max_memory: int = 1 << 30
    """Bytes held out of order across all producers; past it, out-of-order data is dropped."""
    cookie_lifetime: float = 30.0
    """Seconds a RETRY cookie stays valid."""
    fenced_memory: int = 10_000
    """Fenced or closed sessions remembered (so their datagrams get a precise refusal)."""


@dataclass
class _Conn:
    conn_id: int
    addr: Address
    producer: Producer
    epoch: int
    nonce: int
    accepted: bool = False
    ack_due: bool = False
    last_seen: float = 0.0
    fenced: bool = False


@dataclass
class CoreStats:
    """Counters of the core (plain ints)."""

    datagrams: int = 0
    bytes: int = 0
    batches: int = 0
    records: int = 0
    duplicates: int = 0
    held: int = 0
    acks: int = 0
    retries: int = 0
    accepts: int = 0
    fenced: int = 0
    dropped: dict[str, int] = field(default_factory=dict)


class ListenerCore:
    """Protocol state of a listener across all of its links."""

    def __init__(self, store: StoreView, config: CoreConfig | None = None) -> None:
        self.config = config or CoreConfig()
        self.store = store
        self.stats = CoreStats()
        self._key = self.config.secret
        self._cookie_key = os.urandom(32)
        self._conns: dict[int, _Conn] = {}
        self._gone: dict[int, _Conn] = {}  # fenced or closed sessions, oldest first
        self._producers: dict[tuple[str, int], Producer] = {}
        self._hellos: dict[tuple[Address, int], int] = {}  # (addr, nonce) -> conn_id
        self._writes: dict[str, list[Write]] = {}
        self._write_owners: dict[str, list[tuple[Producer, int]]] = {}
        self._pending_sync: dict[str, deque[tuple[int, list[tuple[Producer, int]]]]] = {}
        self._out: list[tuple[bytes, Address]] = []
        self._ack_due: set[int] = set()
        self._accept_waiting: dict[str, list[_Conn]] = {}

    # ------------------------------------------------------------ inputs
    def receive_datagram(self, data: bytes | memoryview, addr: Address, now: float) -> None:
        """Take one datagram.  Never raises: bad input is dropped and counted."""
        stats = self.stats
        stats.datagrams += 1
        stats.bytes += len(data)
        try:
            msg = wire.decode_datagram(data, self._key)
        except ProtocolError as exc:
            self._drop(exc.reason)
            return
        if isinstance(msg, wire.Data):
            self._on_data(msg, addr, now, len(data))
        elif isinstance(msg, wire.Fragment):
            self._on_fragment(msg, addr, now, len(data))
        elif isinstance(msg, wire.Hello):
            self._on_hello(msg, addr, now, len(data))
        elif isinstance(msg, wire.Probe):
            conn = self._session(msg.conn_id, msg.epoch, addr, len(data))
            if conn is not None:
                self._note_pn(conn, msg.pn, now)
        elif isinstance(msg, wire.Close):
            conn = self._session(msg.conn_id, msg.epoch, addr, len(data))
            if conn is not None:
                self._close(conn)
        else:
            self._drop("wrong_direction")

    def take_writes(self) -> dict[str, list[Write]]:
        """Batches now in order, per stream, to append to the store in this order.
        Their memoryviews may point into the driver's receive buffers."""
        writes, self._writes = self._writes, {}
        return writes

    def written(self, stream: str, last_position: int) -> None:
        """The writes taken for `stream` are in the log, up to `last_position`."""
        owners = self._write_owners.pop(stream, None)
        if owners:
            self._pending_sync.setdefault(stream, deque()).append((last_position, owners))

    def synced(self, stream: str, position: int) -> None:
        """Everything of `stream` up to `position` is durable."""
        queue = self._pending_sync.get(stream)
        while queue and queue[0][0] <= position:
            _, owners = queue.popleft()
            for producer, last_seq in owners:
                if last_seq > producer.stored:
                    producer.stored = last_seq
                    conn = producer.conn
                    if isinstance(conn, _Conn) and conn.accepted:
                        self._want_ack(conn)
        waiting = self._accept_waiting.get(stream)
        if waiting:
            still = []
            for conn in waiting:
                if conn.producer.stored >= conn.producer.received:
                    self._accept(conn)
                else:
                    still.append(conn)
            if still:
                self._accept_waiting[stream] = still
            else:
                del self._accept_waiting[stream]

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Address]]:
        """Answers to send now: at most one ACK per session with news."""
        out, self._out = self._out, []
        if self._ack_due:
            key = self._key
            for conn_id in self._ack_due:
                conn = self._conns.get(conn_id)
                if conn is None or not conn.accepted:
                    continue
                conn.ack_due = False
                p = conn.producer
                delay = int((now - p.ack_delay_from) * 1e6) if p.largest_pn else 0
                ack = wire.Ack(
                    conn.conn_id,
                    conn.epoch,
                    p.stored,
                    p.received,
                    p.window,
                    p.largest_pn,
                    max(delay, 0),
                    p.ranges(),
                    p.fragment_spans(),
                )
                p.largest_pn = 0
                out.append((wire.encode_ack(ack, key), conn.addr))
            self.stats.acks += len(self._ack_due)
            self._ack_due.clear()
        return out

    @property
    def links(self) -> int:
        """Sessions open now."""
        return len(self._conns)

    @property
    def memory(self) -> int:
        """Bytes held out of order across all producers."""
        return sum(p.memory for p in self._producers.values())

    def producers(self) -> Iterable[Producer]:
        """Every producer in memory."""
        return self._producers.values()

    # ---------------------------------------------------------- internals
    def _drop(self, reason: str) -> None:
        dropped = self.stats.dropped
        dropped[reason] = dropped.get(reason, 0) + 1

    def _send_unproven(self, data: bytes, addr: Address, received: int) -> None:
        """Send to an address that has not proven itself: never more than 3x what came."""
        if len(data) > AMPLIFICATION * received:
            self._drop("amplification_limit")
            return
        self._out.append((data, addr))

    def _session(self, conn_id: int, epoch: int, addr: Address, size: int) -> _Conn | None:
        conn = self._conns.get(conn_id)
        if conn is None:
            gone = self._gone.get(conn_id)
            if gone is not None and gone.addr == addr and gone.fenced:
                self._drop("stale_epoch")
                refuse = wire.Refuse(conn_id, 0, gone.epoch, wire.RefuseReason.FENCED)
                self._send_unproven(wire.encode_refuse(refuse, self._key), addr, size)
                return None
            self._drop("unknown_conn")
            refuse = wire.Refuse(conn_id, 0, epoch, wire.RefuseReason.UNKNOWN)
            self._send_unproven(wire.encode_refuse(refuse, self._key), addr, size)
            return None
        if conn.addr != addr:
            self._drop("wrong_address")
            return None
        if epoch != conn.epoch:
            self._drop("stale_epoch")
            return None
        if not conn.accepted:
            self._drop("not_accepted")
            return None
        return conn

    def _note_pn(self, conn: _Conn, pn: int, now: float) -> None:
        p = conn.producer
        if pn > p.largest_pn:
            p.largest_pn = pn
            p.ack_delay_from = now
        conn.last_seen = now
        self._want_ack(conn)

    def _want_ack(self, conn: _Conn) -> None:
        if not conn.ack_due:
            conn.ack_due = True
            self._ack_due.add(conn.conn_id)

    def _on_data(self, msg: wire.Data, addr: Address, now: float, size: int) -> None:
        try:
            header = wire.verify_batch(msg.batch)
        except ProtocolError as exc:
            self._drop(exc.reason)
            return
        conn = self._session(msg.conn_id, header.epoch, addr, size)
        if conn is None:
            return
        p = conn.producer
        if header.producer != p.pid:
            self._drop("malformed")
            return
        if header.flags & wire.FLAG_LARGE and header.length - wire.BATCH_HEADER > p.max_record:
            self._drop("too_large")
            return
        if p.held_bytes and self.memory > self.config.max_memory:
            self._drop("memory_limit")
            return
        writes = self._writes.setdefault(p.stream, [])
        before = len(writes)
        try:
            result = p.on_batch(msg.batch, header, writes)
        except ProtocolError as exc:
            self._drop(exc.reason)
            return
        self._after(p, result, writes, before)
        self._note_pn(conn, msg.pn, now)

    def _on_fragment(self, msg: wire.Fragment, addr: Address, now: float, size: int) -> None:
        conn = self._session(msg.conn_id, msg.epoch, addr, size)
        if conn is None:
            return
        p = conn.producer
        writes = self._writes.setdefault(p.stream, [])
        before = len(writes)
        result = p.on_fragment(msg, writes)
        self._after(p, result, writes, before)
        self._note_pn(conn, msg.pn, now)

    def _after(self, p: Producer, result: str, writes: list[Write], before: int) -> None:
        if result == "stored":
            added = writes[before:]
            self.stats.batches += len(added)
            self.stats.records += sum(h.count for _, h in added)
            self._write_owners.setdefault(p.stream, []).append((p, p.received))
        elif result == "duplicate":
            self.stats.duplicates += 1
        elif result == "held":
            self.stats.held += 1
        else:
            self._drop(result)

    # --------------------------------------------------------- handshake
    def _cookie(self, addr: Address, stamp: int) -> bytes:
        mac = blake2b(
            repr(addr[:2]).encode() + _COOKIE_TIME.pack(stamp), key=self._cookie_key, digest_size=16
        ).digest()
        return _COOKIE_TIME.pack(stamp) + mac

    def _cookie_ok(self, cookie: bytes, addr: Address, now: float) -> bool:
        if len(cookie) != 20:
            return False
        (stamp,) = _COOKIE_TIME.unpack_from(cookie)
        age = int(now) - stamp
        if age < -1 or age > self.config.cookie_lifetime:
            return False
        return hmac.compare_digest(self._cookie(addr, stamp), cookie)

    def _refuse_hello(self, hello: wire.Hello, addr: Address, size: int, reason: int) -> None:
        self._drop(wire.RefuseReason.NAMES.get(reason, "refused"))
        refuse = wire.Refuse(0, hello.nonce, 0, reason)
        self._send_unproven(wire.encode_refuse(refuse, self._key), addr, size)

    def _on_hello(self, hello: wire.Hello, addr: Address, now: float, size: int) -> None:
        known = self._hellos.get((addr, hello.nonce))
        if known is not None:
            conn = self._conns.get(known)
            if conn is not None and conn.accepted:
                self._send_accept(conn)
            return
        if not self._cookie_ok(hello.cookie, addr, now):
            if hello.cookie:
                self._drop("bad_cookie")
            self.stats.retries += 1
            retry = wire.Retry(hello.nonce, self._cookie(addr, int(now)))
            self._send_unproven(wire.encode_retry(retry, self._key), addr, size)
            return
        # the address is proven from here on
        if hello.max_datagram < 128:
            self._refuse_hello(hello, addr, size, wire.RefuseReason.BAD_REQUEST)
            return
        if hello.producer:
            if not _valid_name(hello.producer):
                self._refuse_hello(hello, addr, size, wire.RefuseReason.BAD_REQUEST)
                return
            pid = named_producer_id(hello.producer)
        else:
            pid = hello.producer_id
            if not pid >> 63:
                self._refuse_hello(hello, addr, size, wire.RefuseReason.BAD_REQUEST)
                return
        if len(self._conns) >= self.config.max_links:
            self._refuse_hello(hello, addr, size, wire.RefuseReason.LIMIT)
            return
        stream = hello.stream
        key = (stream, pid)
        producer = self._producers.get(key)
        try:
            if producer is None:
                epoch, last_seq = self.store.producer_state(stream, pid)
                producer = Producer(
                    stream,
                    pid,
                    epoch,
                    last_seq,
                    max_reorder=self.config.max_reorder,
                    max_record=self.config.max_record,
                )
            epoch = self.store.new_epoch(stream, pid, bool(hello.producer))
        except ValueError:
            self._refuse_hello(hello, addr, size, wire.RefuseReason.BAD_STREAM)
            return
        except Error:
            self._refuse_hello(hello, addr, size, wire.RefuseReason.LIMIT)
            return
        self._producers[key] = producer
        epoch = max(epoch, producer.epoch + 1)
        old = producer.conn
        if isinstance(old, _Conn):
            self._fence(old)
        producer.epoch = epoch
        if hello.producer:
            # another instance of a named producer may hold other records under
            # the same seqs: what the old session left half-sent is not trusted
            producer.reset_volatile()
        conn_id = self._new_conn_id()
        conn = _Conn(conn_id, addr, producer, epoch, hello.nonce, last_seen=now)
        self._conns[conn_id] = conn
        producer.conn = conn
        self._hellos[(addr, hello.nonce)] = conn_id
        if producer.stored >= producer.received:
            self._accept(conn)
        else:
            self._accept_waiting.setdefault(stream, []).append(conn)

    def _accept(self, conn: _Conn) -> None:
        conn.accepted = True
        self.stats.accepts += 1
        self._send_accept(conn)

    def _send_accept(self, conn: _Conn) -> None:
        p = conn.producer
        accept = wire.Accept(
            conn.conn_id,
            conn.nonce,
            p.pid,
            conn.epoch,
            p.stored,
            p.received,
            p.window,
            p.max_record,
        )
        self._out.append((wire.encode_accept(accept, self._key), conn.addr))

    def _new_conn_id(self) -> int:
        while True:
            conn_id = int.from_bytes(os.urandom(4), "little")
            if conn_id and conn_id not in self._conns and conn_id not in self._gone:
                return conn_id

    def _forget(self, conn: _Conn) -> None:
        self._conns.pop(conn.conn_id, None)
        self._hellos.pop((conn.addr, conn.nonce), None)
        self._ack_due.discard(conn.conn_id)
        self._gone[conn.conn_id] = conn
        while len(self._gone) > self.config.fenced_memory:
            del self._gone[next(iter(self._gone))]

    def _fence(self, conn: _Conn) -> None:
        self.stats.fenced += 1
        conn.fenced = True
        self._forget(conn)

    def _close(self, conn: _Conn) -> None:
        self._forget(conn)
        p = conn.producer
        if p.conn is conn:
            p.conn = None
            if p.pid >> 63 and p.stored >= p.received:
                # an anonymous producer is never seen again once its link closed
                self._producers.pop((p.stream, p.pid), None)


def _valid_name(name: str) -> bool:
    if not 1 <= len(name) <= 200 or name.startswith("."):
        return False
    return all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
