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
the same ACCEPT, never a second session, and once that session has ended a
replay of its HELLO is dropped for as long as its cookie is fresh (a replay
could otherwise open a session that fences the live one).  HELLOs are
rate-limited per source IP by a token bucket in a bounded table
(ratelimit.py), before any of this.  Names are checked by the one rule of
names.py before the store is touched.

Sessions and epochs.  A session is (conn_id, address, producer, epoch).  A
new session of a producer takes a higher epoch (durably, before it is
answered, for a named producer) and fences the old one: the old session
gets REFUSE(fenced) at once, and so does each of its later datagrams.  A
new session is only accepted once its producer's written records are
durable, so the ACCEPT's `stored` is exactly where a restarted application
resumes.

Answers.  One ACK per session per drain (the driver calls
`datagrams_to_send` once per drain), not one per datagram, and one more when
a sync makes records durable.  A PROBE is answered at the next call too.
To a proven peer (a TCP connection: nothing is lost on the way, so an ACK
there only tells progress) an ACK that would say "received" ahead of
"stored" is held while the sync in flight catches up, for at most
`ack_hold` seconds (`timeout()` tells the driver when): the sync's ACK then
says both, and a short link gets one answer to its data instead of two.  The
held time goes out as `ack_delay`, as QUIC's delayed ACKs do, so the link's
RTT samples leave it out; `ack_hold` stays well under the link's smallest
RTO, so no probe is ever sent for it.  After a CLOSE that leaves a proven
peer no session, `finished(addr)` says so once: its connection may go.

Memory.  `memory` (the bytes held out of order or being reassembled, across
all producers) is a running total, brought up to date only where a
producer's held bytes can change -- a "held" result, a "stored" result of a
producer that held something, a new session, a producer forgotten -- so the
check against `max_memory` costs O(1) per datagram, not O(producers).
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from .._crc32c import crc32c
from ..errors import Error, ProtocolError
from . import wire
from .core_parts import (
    COOKIE_SIZE,
    Address,
    Cookies,
    CoreConfig,
    CoreStats,
    StoreView,
    cookie_time,
    named_producer_id,
)
from .names import is_valid_name
from .ratelimit import TokenBuckets
from .receiver import Partial, Producer, Write, largest_record

__all__ = ["CoreConfig", "ListenerCore", "StoreView", "named_producer_id"]

AMPLIFICATION: Final = 3
_NOT_JUNK: Final = frozenset({"session_expired", "unknown_conn", "stale_epoch", "not_accepted"})
"""Drop reasons a real link can cause: a session expired or fenced under it (its
next datagrams, up to the REFUSE, are `unknown_conn` or `stale_epoch`), or a
DATA racing its ACCEPT.  Every other reason means bytes no link sends."""
# a DATA datagram's fixed part: header, packet number, batch header
_DATA_FAST = struct.Struct("<2sBBIQQI2sBBIIQQI")
# a FRAGMENT datagram's fixed part: header, pn, epoch, seq, total, offset
_FRAG_FAST = struct.Struct("<2sBBIQIQII")
_U32 = struct.Struct("<I")
_ZEROS = memoryview(bytes(65536))


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
    replay_until: float = 0.0  # until when a replay of its HELLO could pass the cookie check
    largest_pn: int = 0  # largest packet number of this session since its last answer
    ack_delay_from: float = 0.0  # when that packet arrived
    proven: bool = False  # its transport proved the address (TCP): nothing is lost on the way
    hold_until: float = 0.0  # an ACK held for a sync goes out by then at the latest (0: none held)


class ListenerCore:
    """Protocol state of a listener across all of its links."""

    def __init__(self, store: StoreView, config: CoreConfig | None = None) -> None:
        self.config = config or CoreConfig()
        self.store = store
        # several listeners may write the store at once (a JetStream cluster):
        # a producer's state is read again at each of its new sessions
        self._shared = bool(getattr(store, "shared", False))
        self.stats = CoreStats()
        self._key = self.config.secret
        self._cookies = Cookies(self.config.cookie_lifetime)
        self._conns: dict[int, _Conn] = {}
        self._gone: dict[int, _Conn] = {}  # fenced or closed sessions, oldest first
        self._producers: dict[tuple[str, int], Producer] = {}
        self._hellos: dict[tuple[Address, int], int] = {}  # (addr, nonce) -> conn_id
        self._writes: dict[str, list[Write]] = {}
        self._write_owners: dict[str, list[tuple[Producer, int]]] = {}
        self._pending_sync: dict[str, deque[tuple[int, list[tuple[Producer, int]]]]] = {}
        self._out: list[tuple[bytes, Address]] = []
        self._ack_due: set[int] = set()
        self._hold_until = 0.0  # the earliest hold_until of a held ACK; 0: none held
        self._finished: set[Address] = set()  # proven peers whose last session said CLOSE
        # anonymous producers whose link said CLOSE before its records were durable
        self._closed_unsynced: set[Producer] = set()
        self._accept_waiting: dict[str, list[_Conn]] = {}
        self._next_sweep = 0.0  # when the HELLO path next looks for idle sessions
        self._by_peer: dict[Address, list[int]] = {}  # proven peer -> its sessions' conn_ids
        self._spent: dict[tuple[Address, int], float] = {}  # ended (addr, nonce) -> fresh until
        self._memory = 0  # sum of p.memory over the producers in _holding
        self._holding: dict[Producer, int] = {}  # producers holding bytes -> their p.memory
        self.junk = 0
        """Datagrams dropped for a reason no link gives (not one of `_NOT_JUNK`):
        a driver compares it before and after feeding a peer's datagrams, to
        tell a peer that is not a link."""
        cfg = self.config
        self._limiter = (
            TokenBuckets(cfg.handshake_rate, cfg.handshake_burst, cfg.handshake_sources)
            if cfg.handshake_rate > 0
            else None
        )

    # ------------------------------------------------------------ inputs
    def receive_datagram(
        self, data: bytes | memoryview, addr: Address, now: float, proven: bool = False
    ) -> None:
        """Take one datagram.  Never raises: bad input is dropped and counted.
        `proven`: the transport proved `addr` itself (a TCP connection), so a
        HELLO from it needs no cookie round trip; call `disconnected(addr)`
        when that connection closes."""
        stats = self.stats
        stats.datagrams += 1
        size = len(data)
        stats.bytes += size
        if size > _DATA_FAST.size and self._key is None and wire.LITTLE_ENDIAN:
            kind = data[3]
            if kind == wire.MsgType.FRAGMENT:
                if self._fast_piece(data, addr, now):
                    return
            elif kind == wire.MsgType.DATA and self._fast_data(data, addr, now):
                return
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
            self._on_hello(msg, addr, now, len(data), proven)
        elif isinstance(msg, wire.Probe):
            conn = self._session(msg.conn_id, msg.epoch, addr, len(data))
            if conn is not None:
                if msg.padding:  # a path MTU probe: say it came, and how large
                    conn.last_seen = now
                    self.stats.mtu_probes += 1
                    answer = wire.MtuAck(conn.conn_id, conn.epoch, msg.pn, min(size, 0xFFFF))
                    self._out.append((wire.encode_mtu_ack(answer, self._key), conn.addr))
                else:
                    self._note_pn(conn, msg.pn, now)
        elif isinstance(msg, wire.Close):
            conn = self._session(msg.conn_id, msg.epoch, addr, len(data))
            if conn is not None:
                self._close(conn, said_close=True)
                if conn.proven and not any(c in self._conns for c in self._by_peer.get(addr, ())):
                    self._finished.add(addr)
        else:
            self._drop("wrong_direction")

    def take_writes(self) -> dict[str, list[Write]]:
        """Batches now in order, per stream, to append to the store in this order.
        Their memoryviews may point into the driver's receive buffers."""
        writes, self._writes = self._writes, {}
        return writes

    def write_failed(self, stream: str) -> None:
        """The writes taken for `stream` could not be stored, nor will any later
        one be (the driver stops writing there): forget whose they were, so that
        nothing ever says they are stored."""
        self._write_owners.pop(stream, None)

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
                    elif producer in self._closed_unsynced:
                        self._forget_closed(producer)
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
        """Answers to send now: at most one ACK per session with news (one to a
        proven peer may be held for a sync in flight: see the module header)."""
        out, self._out = self._out, []
        self._hold_until = 0.0
        if self._ack_due:
            key = self._key
            hold = self.config.ack_hold
            held: set[int] = set()
            hold_until = 0.0
            sent = 0
            for conn_id in self._ack_due:
                conn = self._conns.get(conn_id)
                if conn is None or not conn.accepted:
                    continue
                p = conn.producer
                if conn.proven and p.stored < p.received and hold > 0:
                    until = conn.hold_until or now + hold
                    if now < until:  # the sync's ACK will say "received" and "stored"
                        conn.hold_until = until
                        held.add(conn_id)
                        if not hold_until or until < hold_until:
                            hold_until = until
                        continue
                conn.hold_until = 0.0
                conn.ack_due = False
                sent += 1
                delay = int((now - conn.ack_delay_from) * 1e6) if conn.largest_pn else 0
                ack = wire.Ack(
                    conn.conn_id,
                    conn.epoch,
                    p.stored,
                    p.received,
                    p.window,
                    conn.largest_pn,
                    max(delay, 0),
                    p.ranges(),
                    p.fragment_spans(),
                )
                conn.largest_pn = 0
                out.append((wire.encode_ack(ack, key), conn.addr))
            self.stats.acks += sent
            self._ack_due = held
            self._hold_until = hold_until
        return out

    def timeout(self, now: float) -> float:
        """Seconds until a held ACK is due (the driver calls `datagrams_to_send`
        then); -1 when none is held, so an idle listener keeps no timer."""
        if not self._hold_until:
            return -1.0
        return max(self._hold_until - now, 0.0)

    def finished(self, addr: Address) -> bool:
        """Whether the proven peer `addr` said CLOSE for its last open session since
        this was last asked: its connection carries nothing more and may close."""
        finished = self._finished
        if finished and addr in finished:
            finished.discard(addr)
            return True
        return False

    def has_session(self, addr: Address) -> bool:
        """Whether the proven peer `addr` has a session open (accepted, or waiting
        for its ACCEPT): its connection then owes nothing while it is idle."""
        ids = self._by_peer.get(addr)
        if not ids:
            return False
        conns = self._conns
        for conn_id in ids:
            if conn_id in conns:
                return True
        del self._by_peer[addr]  # every one of them ended: nothing to keep
        return False

    def disconnected(self, addr: Address) -> None:
        """The connection of a proven peer closed: its sessions end (as an expiry
        ends one: the store keeps an anonymous producer's state, since its link
        may come back on a new connection; only a CLOSE lets it go, or the end
        of a session in which the producer never had a record stored)."""
        self._finished.discard(addr)
        for conn_id in self._by_peer.pop(addr, ()):
            conn = self._conns.get(conn_id)
            if conn is None or conn.addr != addr:
                continue
            stream = conn.producer.stream
            waiting = self._accept_waiting.get(stream)
            if waiting and conn in waiting:  # never to be accepted now
                waiting.remove(conn)
                if not waiting:
                    del self._accept_waiting[stream]
            self._close(conn)

    @property
    def links(self) -> int:
        """Sessions open now."""
        return len(self._conns)

    @property
    def memory(self) -> int:
        """Bytes held out of order (or being reassembled) across all producers: a
        running total, O(1) (see the module header)."""
        return self._memory

    def producers(self) -> Iterable[Producer]:
        """Every producer in memory."""
        return self._producers.values()

    # ---------------------------------------------------------- internals
    def _drop(self, reason: str) -> None:
        dropped = self.stats.dropped
        dropped[reason] = dropped.get(reason, 0) + 1
        if reason not in _NOT_JUNK:
            self.junk += 1

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
        if pn > conn.largest_pn:
            conn.largest_pn = pn
            conn.ack_delay_from = now
        conn.last_seen = now
        self._want_ack(conn)

    def _want_ack(self, conn: _Conn) -> None:
        if not conn.ack_due:
            conn.ack_due = True
            self._ack_due.add(conn.conn_id)

    def _fast_data(self, data: bytes | memoryview, addr: Address, now: float) -> bool:
        """The common case in one go: a well-formed DATA datagram of an open
        session whose batch is exactly the next in order.  One unpack of the
        fixed 60 bytes, two CRCs, the length table's sum in C.  Anything else
        (including anything malformed) returns False and takes the general
        path, which decodes step by step and counts drops by reason."""
        view = memoryview(data)
        size = len(view)
        if size < _DATA_FAST.size + 4:
            return False
        (
            magic, version, _kind, conn_id, pn, position, bcrc, bmagic, bversion, flags,
            length, count, producer, first, epoch,
        ) = _DATA_FAST.unpack_from(view)  # fmt: skip
        end = size - 4
        if (
            magic != wire.DATAGRAM_MAGIC
            or bmagic != wire.BATCH_MAGIC
            or version != wire.DATAGRAM_VERSION
            or bversion != wire.VERSION
            or flags
            or not count
            or 16 + length > end
            or length < wire.BATCH_HEADER + 2 * count
        ):
            return False
        conn = self._conns.get(conn_id)
        if conn is None or not conn.accepted or conn.addr != addr or conn.epoch != epoch:
            return False
        p = conn.producer
        if producer != p.pid or first != p.received + 1 or p.held or p.partials:
            return False
        if crc32c(view[:end]) != _U32.unpack_from(view, end)[0]:
            return False
        batch = view[16 : 16 + length]
        if crc32c(batch[12:]) != bcrc:
            return False
        # padding must be zeros (the general path says "malformed"); tobytes() and a
        # bytes compare are twice as fast as comparing the memoryview itself
        if 16 + length < end and view[16 + length : end].tobytes() != _ZEROS[: end - 16 - length]:
            return False
        table_end = wire.BATCH_HEADER + 2 * count
        if sum(batch[wire.BATCH_HEADER : table_end].cast("H")) != length - table_end:
            return False
        if length - table_end > p.max_record:
            return False  # may hold a record over max_record: the general path checks
        last = first + count - 1
        stream = p.stream
        header = wire.BatchHeader(position, bcrc, 0, length, count, producer, first, epoch)
        writes = self._writes.get(stream)
        if writes is None:
            self._writes[stream] = [(batch, header)]
        else:
            writes.append((batch, header))
        p.received = last
        owners = self._write_owners.get(stream)
        if owners is None:
            self._write_owners[stream] = [(p, last)]
        else:
            owners.append((p, last))
        stats = self.stats
        stats.batches += 1
        stats.records += count
        if pn > conn.largest_pn:
            conn.largest_pn = pn
            conn.ack_delay_from = now
        conn.last_seen = now
        if not conn.ack_due:
            conn.ack_due = True
            self._ack_due.add(conn_id)
        return True

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
        if header.length - wire.BATCH_HEADER > p.max_record and largest_record(
            msg.batch, header
        ) > (p.max_record):
            self._drop("too_large")
            return
        if (
            header.first_seq > p.received + 1
            and self._memory + len(msg.batch) > self.config.max_memory
        ):
            # only data that would be held out of order is refused: the batch that
            # fills the gap must always get in, or the held data could never drain
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
        seq = msg.seq
        if (
            seq > p.received
            and seq not in p.partials
            and seq not in p.held
            and msg.total <= p.max_record
            and self._memory + msg.total > self.config.max_memory
            and (seq != p.received + 1 or self._memory > self.config.max_memory)
        ):
            # a new record to put together and no room for it.  The next record
            # of a producer (seq = received + 1) may overshoot by one record while
            # the total is not past the limit: that is what lets held data drain.
            self._drop("memory_limit")
            return
        writes = self._writes.setdefault(p.stream, [])
        before = len(writes)
        try:
            result = p.on_fragment(msg, writes)
        except ProtocolError as exc:  # the batch put together does not verify
            result = exc.reason
        self._after(p, result, writes, before)
        self._note_pn(conn, msg.pn, now)

    def _fast_piece(self, data: bytes | memoryview, addr: Address, now: float) -> bool:
        """The common case of a FRAGMENT in one go: the next piece, in order, of
        the batch that comes next (not its last piece: that one completes the
        batch and takes the general path, which checks it whole).  Anything
        else returns False and takes the general path."""
        view = memoryview(data)
        size = len(view)
        head = _FRAG_FAST.size
        if size <= head + 4:
            return False
        magic, version, _kind, conn_id, pn, epoch, seq, total, offset = _FRAG_FAST.unpack_from(view)
        end = offset + size - head - 4
        if magic != wire.DATAGRAM_MAGIC or version != wire.DATAGRAM_VERSION or end >= total:
            return False
        conn = self._conns.get(conn_id)
        if conn is None or not conn.accepted or conn.addr != addr or conn.epoch != epoch:
            return False
        p = conn.producer
        if seq != p.received + 1:
            return False
        part = p.partials.get(seq)
        if part is None:
            if (
                offset
                or total > p.max_record + wire.BATCH_HEADER
                or total < wire.BATCH_HEADER
                or self._memory + total > self.config.max_memory
            ):
                return False
        elif (
            part.total != total
            or part.epoch != epoch
            or len(part.spans) != 1
            or part.spans[0] != (0, offset)
        ):
            return False
        if crc32c(view[: size - 4]) != _U32.unpack_from(view, size - 4)[0]:
            return False
        if part is None:
            part = Partial(total, False, epoch)
            p.partials[seq] = part
            part.buf[:end] = view[head : size - 4]
            part.spans.append((0, end))
            self._account(p)
        else:
            part.buf[offset:end] = view[head : size - 4]
            part.spans[0] = (0, end)
        self.stats.held += 1
        if pn > conn.largest_pn:
            conn.largest_pn = pn
            conn.ack_delay_from = now
        conn.last_seen = now
        if not conn.ack_due:
            conn.ack_due = True
            self._ack_due.add(conn_id)
        return True

    def _after(self, p: Producer, result: str, writes: list[Write], before: int) -> None:
        if result == "stored":
            added = writes[before:]
            self.stats.batches += len(added)
            self.stats.records += sum(h.count for _, h in added)
            self._write_owners.setdefault(p.stream, []).append((p, p.received))
            if self._holding and p in self._holding:
                self._account(p)  # in-order data may have released held bytes
        elif result == "duplicate":
            self.stats.duplicates += 1
        elif result == "held":
            self.stats.held += 1
            self._account(p)
        else:
            self._drop(result)
            if self._holding and p in self._holding:
                self._account(p)  # a batch put together and refused: its buffer went

    def _account(self, p: Producer) -> None:
        """Bring the running `memory` total up to date with what `p` holds now."""
        held = p.memory
        holding = self._holding
        before = holding.pop(p, 0)
        if held:
            holding[p] = held
        self._memory += held - before

    # --------------------------------------------------------- handshake
    def _refuse_hello(
        self, hello: wire.Hello, addr: Address, size: int, reason: int, counter: str = ""
    ) -> None:
        self._drop(counter or wire.RefuseReason.NAMES.get(reason, "refused"))
        refuse = wire.Refuse(0, hello.nonce, 0, reason)
        self._send_unproven(wire.encode_refuse(refuse, self._key), addr, size)

    def _on_hello(
        self, hello: wire.Hello, addr: Address, now: float, size: int, proven: bool = False
    ) -> None:
        limiter = self._limiter
        if limiter is not None and not limiter.allow(addr[0], now):
            self._drop("handshake_rate_limited")
            return
        known = self._hellos.get((addr, hello.nonce))
        if known is not None:
            conn = self._conns.get(known)
            if conn is not None and conn.accepted:
                self._send_accept(conn)
            return
        if not proven and not self._cookies.check(hello.cookie, addr, now):
            if hello.cookie:
                self._drop("bad_cookie")
            self.stats.retries += 1
            retry = wire.Retry(hello.nonce, self._cookies.make(addr, int(now)))
            self._send_unproven(wire.encode_retry(retry, self._key), addr, size)
            return
        # the address is proven from here on
        spent = self._spent
        if spent:
            while spent and next(iter(spent.values())) < now:  # oldest first
                del spent[next(iter(spent))]
            if (addr, hello.nonce) in spent:
                # the HELLO of a session that ended, played again while its cookie
                # is fresh: an on-path replay (a link never reuses a nonce)
                self._drop("replayed_hello")
                return
        if hello.max_datagram < 128:
            self._refuse_hello(
                hello, addr, size, wire.RefuseReason.BAD_DATAGRAM_SIZE, "bad_request"
            )
            return
        if hello.producer:
            if not is_valid_name(hello.producer):
                self._refuse_hello(hello, addr, size, wire.RefuseReason.BAD_PRODUCER, "bad_request")
                return
            pid = named_producer_id(hello.producer)
        else:
            pid = hello.producer_id
            if not pid >> 63:
                self._refuse_hello(hello, addr, size, wire.RefuseReason.BAD_REQUEST)
                return
        stream = hello.stream
        if not is_valid_name(stream):  # checked here, before the store sees it
            self._refuse_hello(hello, addr, size, wire.RefuseReason.BAD_STREAM)
            return
        if now >= self._next_sweep or len(self._conns) >= self.config.max_links:
            self._expire_idle(now)
        if len(self._conns) >= self.config.max_links:
            self._refuse_hello(hello, addr, size, wire.RefuseReason.MAX_LINKS, "link_limit")
            return
        key = (stream, pid)
        producer = self._producers.get(key)
        if producer is not None and self._shared:
            producer = self._refresh(producer)
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
                producer.owner = self.store.epoch_owner(stream, pid)
        except ValueError:
            self._refuse_hello(hello, addr, size, wire.RefuseReason.BAD_STREAM)
            return
        except Error:  # the store may not open another stream (max_streams)
            self._refuse_hello(hello, addr, size, wire.RefuseReason.MAX_STREAMS, "stream_limit")
            return
        except OSError:  # the store could not open the stream (no descriptors, a disk error)
            self._refuse_hello(hello, addr, size, wire.RefuseReason.STORE_ERROR, "store_error")
            return
        instance = hello.producer_id  # the link instance (an anonymous producer's id)
        if (
            hello.epoch
            and hello.epoch < producer.epoch
            and (not instance or instance != producer.owner)
        ):
            # a session older than the newest one of this producer asks back in: it
            # was fenced (perhaps before this listener restarted), so it stays fenced.
            # Unless the newest epoch went to this very link and its ACCEPT was lost.
            self._refuse_hello(hello, addr, size, wire.RefuseReason.FENCED, "stale_epoch")
            return
        try:
            epoch = self.store.new_epoch(stream, pid, bool(hello.producer), instance)
        except (Error, OSError):  # the epoch is not durable: refuse, never accept
            self._refuse_hello(hello, addr, size, wire.RefuseReason.STORE_ERROR, "store_error")
            return
        self._producers[key] = producer
        epoch = max(epoch, producer.epoch + 1)
        old = producer.conn
        if isinstance(old, _Conn):
            self._fence(old)
        producer.epoch = epoch
        producer.owner = instance
        if producer.partials:  # a new session cuts its records into batches of its own
            producer.reset_partials()
            self._account(producer)
        if hello.producer:
            # another instance of a named producer may hold other records under
            # the same seqs: what the old session left half-sent is not trusted
            producer.reset_volatile()
            self._account(producer)
        conn_id = self._new_conn_id()
        conn = _Conn(conn_id, addr, producer, epoch, hello.nonce, last_seen=now)
        if len(hello.cookie) == COOKIE_SIZE:
            stamp = cookie_time(hello.cookie)
            conn.replay_until = stamp + self.config.cookie_lifetime + 1
        self._conns[conn_id] = conn
        producer.conn = conn
        self._hellos[(addr, hello.nonce)] = conn_id
        if proven:
            conn.proven = True
            self._by_peer.setdefault(addr, []).append(conn_id)
            self._finished.discard(addr)  # a new session: the connection carries it
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
        if conn.replay_until:
            spent = self._spent
            spent[(conn.addr, conn.nonce)] = conn.replay_until
            if len(spent) > self.config.hello_memory:
                del spent[next(iter(spent))]
        self._ack_due.discard(conn.conn_id)
        self._gone[conn.conn_id] = conn
        while len(self._gone) > self.config.fenced_memory:
            del self._gone[next(iter(self._gone))]

    def _expire_idle(self, now: float) -> None:
        """Forget sessions that sent nothing for idle_timeout (no timer: called from
        the HELLO path, at most every idle_timeout / 4, or when sessions run out)."""
        limit = now - self.config.idle_timeout
        self._next_sweep = now + self.config.idle_timeout / 4
        for conn in [c for c in self._conns.values() if c.last_seen < limit]:
            self._drop("session_expired")  # counted, and not junk (see _NOT_JUNK)
            self._close(conn)

    def _forget_closed(self, p: Producer) -> None:
        """An anonymous producer whose link said CLOSE before its records were
        durable: once they are (and no new session took it), forget it."""
        if p.stored < p.received:
            return
        self._closed_unsynced.discard(p)
        if p.conn is None:
            self._producers.pop((p.stream, p.pid), None)
            self._memory -= self._holding.pop(p, 0)
            self.store.forget(p.stream, p.pid)
            self.stats.forgotten += 1

    def _refresh(self, producer: Producer) -> Producer | None:
        """A shared store (several listeners on one cluster) may have moved a
        producer on behind this listener's back, through another listener: if it
        did, the producer here is stale, so its session here is fenced and the
        producer forgotten (None: the caller reads it afresh)."""
        try:
            epoch, last_seq = self.store.producer_state(producer.stream, producer.pid)
        except (Error, OSError, ValueError):
            return producer  # the HELLO's own read below says what is wrong
        if epoch <= producer.epoch and last_seq <= producer.stored:
            return producer
        self.fence_producer(producer.stream, producer.pid)
        return None

    def fence_producer(self, stream: str, pid: int) -> None:
        """A newer session of this producer lives elsewhere (a shared store said
        so): end its session here as fenced and forget the producer, so that a
        later session of it reads its state from the store afresh."""
        producer = self._producers.pop((stream, pid), None)
        if producer is None:
            return
        self._memory -= self._holding.pop(producer, 0)
        self._closed_unsynced.discard(producer)
        conn = producer.conn
        producer.conn = None
        if isinstance(conn, _Conn):
            self._fence(conn)

    def _fence(self, conn: _Conn) -> None:
        """A newer session of its producer replaces `conn`: tell it at once (its
        address was proven by its handshake), so that its application learns it
        now, not at its next datagram (which would get the same REFUSE)."""
        self.stats.fenced += 1
        conn.fenced = True
        waiting = self._accept_waiting.get(conn.producer.stream)
        if waiting and conn in waiting:
            waiting.remove(conn)  # never accept a session that is already fenced
            refuse = wire.Refuse(0, conn.nonce, 0, wire.RefuseReason.FENCED)  # its HELLO's
        else:
            refuse = wire.Refuse(conn.conn_id, 0, conn.epoch, wire.RefuseReason.FENCED)
        self._out.append((wire.encode_refuse(refuse, self._key), conn.addr))
        self._forget(conn)

    def _close(self, conn: _Conn, said_close: bool = False) -> None:
        """End a session: it said CLOSE, it expired, or its connection closed."""
        self._forget(conn)
        p = conn.producer
        if p.conn is conn:
            p.conn = None
            if p.pid >> 63 and p.stored >= p.received:
                # an anonymous producer is not needed in memory between sessions: a
                # link that comes back (after an expiry, or on a new connection)
                # finds its state in the store
                self._producers.pop((p.stream, p.pid), None)
                self._memory -= self._holding.pop(p, 0)
                if said_close or not p.stored:
                    # a link says CLOSE once, when it is closed for good, and its
                    # anonymous id dies with it: the store may forget the producer
                    # (it would otherwise keep one entry per short-lived link).
                    # So may it one that never stored a record, however its session
                    # ended: there is nothing to deduplicate against, and a link that
                    # comes back starts again from seq 1 as it would anyway.  (A flood
                    # of HELLOs that never send data, each under a new anonymous id,
                    # would otherwise grow the stream's producer table without bound.)
                    self.store.forget(p.stream, p.pid)
                    self.stats.forgotten += 1
            elif p.pid >> 63 and said_close:
                # closed with records written but not yet durable (a close() that
                # timed out): let it go when the sync that covers them lands
                self._closed_unsynced.add(p)
