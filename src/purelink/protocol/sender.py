"""The link's state machine: records in, datagrams out, answers in, timers.

Sans-IO in the manner of aioquic's QuicConnection: the driver hands in
records (`push`), datagrams (`receive_datagram`) and the time; it takes out
datagrams (`datagrams_to_send`), the next deadline (`get_timer`) and events
(`next_event`).  Nothing here touches a socket, a thread or a clock.

States (the only legal moves are in `_MOVES`):

    CONNECTING --ACCEPT--> OPEN --REFUSE(unknown) or silence--> CONNECTING
        |                   |--REFUSE(fenced)--> FENCED
        |--REFUSE-->FAILED  |--stored went backwards--> FAILED
    OPEN --close()--> CLOSED

Invariants:
* every record pushed stays in `_recs` until the listener says it is stored;
  a reconnect re-packs everything above the listener's `received` seq, so no
  record is lost to a listener restart and none is stored twice (the listener
  deduplicates by producer and seq);
* `stored` never goes backwards; if the listener ever reports less than it
  told before, the sender fails with kind "lost" (SPEC section 2.4);
* each datagram in flight remembers what it carried (a batch, or a byte range
  of a batch larger than one datagram: packing.py builds them) and is resolved
  acked or lost (aioquic's packet_builder/recovery); retransmissions resend
  the same batch bytes under a new packet number, so RTT samples are never
  ambiguous;
* a timer is armed only while something is unstored or a handshake runs: an
  idle link sleeps.
"""

from __future__ import annotations

import os
from array import array
from collections import deque
from typing import Final

from ..errors import ProtocolError
from . import wire
from .events import Connected, Event, Failed, Fenced, Reconnecting, StoredAdvanced
from .packing import Flight, Packer
from .pmtu import PathMtu
from .sender_config import SenderConfig, SenderStats
from .window import CongestionWindow, RttEstimator

__all__ = ["Sender", "SenderConfig", "SenderState", "SenderStats"]

# packet and time thresholds for declaring a datagram lost (QUIC, RFC 9002 6.1)
PACKET_THRESHOLD: Final = 3
TIME_THRESHOLD: Final = 9 / 8
# with nothing in flight, only the "stored" answer after a sync is awaited
STORED_PROBE: Final = 0.1


class SenderState:
    """The sender's states."""

    CONNECTING = "connecting"
    OPEN = "open"
    FENCED = "fenced"
    FAILED = "failed"
    CLOSED = "closed"


_MOVES: Final = {
    (SenderState.CONNECTING, SenderState.OPEN),
    (SenderState.CONNECTING, SenderState.FAILED),
    (SenderState.CONNECTING, SenderState.FENCED),
    (SenderState.CONNECTING, SenderState.CLOSED),
    (SenderState.OPEN, SenderState.CONNECTING),
    (SenderState.OPEN, SenderState.FENCED),
    (SenderState.OPEN, SenderState.FAILED),
    (SenderState.OPEN, SenderState.CLOSED),
    (SenderState.FENCED, SenderState.CLOSED),
    (SenderState.FAILED, SenderState.CLOSED),
}


_Flight = Flight  # what a datagram in flight carried: packing.py


class Sender:
    """The sending side of one link."""

    def __init__(self, config: SenderConfig) -> None:
        if config.datagram_size < 128 or config.datagram_size > 65507:
            raise ValueError("datagram_size must be between 128 and 65507")
        wire.encode_hello(wire.Hello(0, config.stream, config.producer, 0, 0, b""))  # validates
        self.config = config
        self.stats = SenderStats()
        self.state = SenderState.CONNECTING
        self.rtt = RttEstimator(max_rto=config.max_probe_interval)
        self.cc = CongestionWindow(datagram_size=config.datagram_size)
        self._key = config.secret
        self._pmtu = PathMtu(config.datagram_size) if config.pmtu else None
        """The path's datagram size, probed (UDP links; None: datagram_size)."""
        self._packer = Packer(
            config.datagram_size if self._pmtu is None else self._pmtu.size, config.secret
        )
        self.stored_bytes = 0
        """Payload bytes of the records released as stored."""
        anon = config.anonymous_id
        if not anon:
            anon = int.from_bytes(os.urandom(8), "little") | (1 << 63)
        # sent in every HELLO: an anonymous producer's id, or (named) this link's
        # instance id, which lets the listener tell our own lost-ACCEPT retry from
        # an older, fenced instance of the same producer
        self._anon_id = anon
        self._events: deque[Event] = deque()
        # records: _recs[i] has seq _base + i; _recs[:_head] are stored and released
        # lazily.  _lens[i] is len(_recs[i]) clamped to 65,535, in the very layout of
        # a batch's length table, so a batch's table is a slice of it (the link's
        # queue() writes the lengths as records arrive: no len() per record here).
        self._recs: list[bytes] = []
        self._lens = array("H")
        self._head = 0
        self._base = 1
        self.stored = 0
        """Last seq the listener said is stored."""
        self.pushed = 0
        """Last seq handed in with push()."""
        self._received = 0  # last seq the listener has in order
        self._flights: dict[int, _Flight] = {}
        self._lost: deque[_Flight] = deque()
        self._in_flight = 0
        self._peer_window = 1 << 20
        self._max_record = 16 << 20
        self._pn = 0
        self._largest_acked_pn = 0
        self._probe_due = False
        self._probe_sent: dict[int, float] = {}
        self._unanswered = 0
        self._last_answer = 0.0
        self._timer: float | None = None  # the loss/probe deadline while OPEN
        # handshake
        self.conn_id = 0
        self.producer_id = 0
        self.epoch = 0
        self._nonce = 0
        self._cookie = b""
        self._hello_due: float | None = 0.0
        self._hello_rto = config.handshake_rto
        self._connected_once = False
        self._close_due = False

    # ------------------------------------------------------------ inputs
    def connect(self, now: float) -> None:
        """Start (or restart) the handshake at `now`."""
        self._nonce = int.from_bytes(os.urandom(8), "little") or 1
        self._cookie = b""
        self._hello_due = now
        self.stats.handshakes += 1

    def push(self, records: list[bytes], lengths: array[int] | None = None) -> None:
        """Hand in records with seqs pushed+1, pushed+2, ... (the list is copied;
        `lengths`, their lengths as array("H") each clamped to 65,535, if known,
        may be kept as it is).

        `_recs` stays one list object for the sender's life (extended and cut,
        never replaced): a long-lived list settles in the collector's oldest
        generation, where it is traversed only by the rare full collection; a
        fresh list of every backlog was young, and every young collection walked
        all its items (measured: ~10 % of the sending process's CPU)."""
        if not records:
            return
        if lengths is None:
            lengths = array("H", (min(len(r), 0xFFFF) for r in records))
        if not self._recs:
            self._head = 0
            self._base = self.stored + 1
            self._lens = lengths
        else:
            self._lens.extend(lengths)
        self._recs.extend(records)
        self.pushed += len(records)

    def close(self) -> None:
        """Say goodbye (one CLOSE datagram) and stop."""
        if self.state == SenderState.OPEN:
            self._close_due = True
        self._move(SenderState.CLOSED)

    def reset_session(self, now: float, reason: str) -> None:
        """The driver knows the session is gone (e.g. its TCP connection broke):
        start a new handshake now, keeping every record."""
        if self.state == SenderState.OPEN:
            self._reconnect(now, reason)

    def receive_datagram(self, data: bytes | memoryview, now: float) -> None:
        """Take one datagram from the listener.  Anything malformed, forged or
        stale is dropped and counted; nothing raises."""
        try:
            msg = wire.decode_datagram(data, self._key)
        except ProtocolError:
            self.stats.dropped += 1
            return
        if isinstance(msg, wire.Ack):
            if (
                self.state == SenderState.OPEN
                and msg.conn_id == self.conn_id
                and (msg.epoch == self.epoch)
            ):
                self._on_ack(msg, now)
            else:
                self.stats.dropped += 1
        elif isinstance(msg, wire.Retry):
            if self.state == SenderState.CONNECTING and msg.nonce == self._nonce:
                self._cookie = msg.cookie
                self._hello_due = now
            else:
                self.stats.dropped += 1
        elif isinstance(msg, wire.Accept):
            if self.state == SenderState.CONNECTING and msg.nonce == self._nonce:
                self._on_accept(msg, now)
            else:
                self.stats.dropped += 1
        elif isinstance(msg, wire.Refuse):
            self._on_refuse(msg, now)
        elif (
            isinstance(msg, wire.MtuAck)
            and self._pmtu is not None
            and self.state == SenderState.OPEN
            and msg.conn_id == self.conn_id
            and msg.epoch == self.epoch
        ):
            self._pmtu.on_probe_acked(msg.pn, msg.size, now)
            self._sync_size()
        else:
            self.stats.dropped += 1

    def on_send_error(self, size: int, now: float) -> None:
        """The kernel refused to send a datagram of `size` bytes as larger than
        the path (EMSGSIZE): a path MTU signal.  (The datagram is lost; loss
        detection resends its bytes, cut smaller if the path size dropped.)"""
        if self._pmtu is not None:
            self._pmtu.on_send_error(size, now)
            self._sync_size()

    @property
    def datagram_size(self) -> int:
        """The largest datagram sent now (the path MTU's, at most datagram_size)."""
        return self._packer.size

    def _sync_size(self) -> None:
        """Packing follows the path's datagram size."""
        pmtu = self._pmtu
        if pmtu is not None and pmtu.size != self._packer.size:
            self._packer.size = pmtu.size

    # ----------------------------------------------------------- outputs
    def next_event(self) -> Event | None:
        """The next event, or None."""
        return self._events.popleft() if self._events else None

    def get_timer(self) -> float | None:
        """When handle_timer must run next, or None (nothing to wait for)."""
        if self.state == SenderState.CONNECTING:
            return self._hello_due
        if self.state != SenderState.OPEN:
            return None
        pmtu = self._pmtu.get_timer() if self._pmtu is not None else None
        if pmtu is not None and (self._timer is None or pmtu < self._timer):
            return pmtu
        return self._timer

    @property
    def unstored(self) -> int:
        """Records pushed and not yet stored."""
        return self.pushed - self.stored

    @property
    def in_flight(self) -> int:
        """Bytes of datagrams in flight."""
        return self._in_flight

    @property
    def _next(self) -> int:
        """The next seq to put in a first transmission (packing's)."""
        return self._packer.next_seq

    @property
    def payload_bytes(self) -> int:
        """Bytes of records sent (first transmissions only)."""
        return self._packer.payload

    @property
    def window(self) -> int:
        """Bytes that may be in flight now."""
        return min(self.cc.cwnd, self._peer_window)

    def handle_timer(self, now: float) -> None:
        """Run what is due at `now`."""
        if self.state == SenderState.CONNECTING:
            if self._hello_due is not None and now >= self._hello_due:
                pass  # datagrams_to_send sends the HELLO
            return
        if self._pmtu is not None and self.state == SenderState.OPEN:
            self._pmtu.handle_timer(now)
            self._sync_size()
        if self.state != SenderState.OPEN or self._timer is None or now < self._timer:
            return
        self._detect_time_losses(now)
        if self._timer is not None and now >= self._timer:
            # probe timeout: data outstanding, no answers for an RTO
            if now - self._last_answer >= self.config.silence_timeout:
                self._reconnect(now, "silent")
                return
            self._probe_due = True
            self._unanswered += 1
            self.rtt.backoff()
            if self._unanswered > 1:
                self.cc.on_timeout(now)
            self._timer = now + self.rtt.rto

    def datagrams_to_send(self, now: float) -> list[bytes]:
        """Datagrams to put on the wire now, at most config.burst of them."""
        out: list[bytes] = []
        if self._close_due:
            self._close_due = False
            out.append(wire.encode_close(self.conn_id, self.epoch, self._key))
            return out
        if self.state == SenderState.CONNECTING:
            if self._hello_due is not None and now >= self._hello_due:
                out.append(self._hello())
                self._hello_due = now + self._hello_rto
                self._hello_rto = min(self._hello_rto * 2, self.config.max_handshake_rto)
            return out
        if self.state != SenderState.OPEN:
            return out
        key = self._key
        conn_id = self.conn_id
        burst = self.config.burst
        window = self.window
        flights = self._flights
        stats = self.stats
        packer = self._packer
        while len(out) < burst and self._in_flight < window:
            if self._lost:
                f = self._lost.popleft()
                if f.last <= self._received:
                    continue
                self._pn, resent = packer.resend(f, self._pn, now)
                for g in resent:
                    flights[g.pn] = g
                    self._in_flight += g.size
                    out.append(g.data)
                stats.retransmits += len(resent)
            elif packer.open or packer.next_seq <= self.pushed:
                self._pn, used = packer.fill(
                    self._recs, self._lens, self._base, self.pushed, self._pn, now,
                    burst - len(out), window - self._in_flight, out, flights,
                )  # fmt: skip
                self._in_flight += used
                stats.batches, stats.fragments = packer.batches, packer.pieces
                stats.payload = packer.payload
            else:
                break
        if self._probe_due:
            self._probe_due = False
            if not out:
                self._pn += 1
                self._probe_sent[self._pn] = now
                stats.probes += 1
                out.append(wire.encode_probe(conn_id, self._pn, self.epoch, key))
        pmtu = self._pmtu
        if pmtu is not None:
            size = pmtu.next_probe(now)
            if size is not None:  # a path MTU probe: outside the window, not a flight
                self._pn += 1
                pmtu.probe_sent(self._pn, size, now, min(self.rtt.rto, 1.0))
                out.append(wire.encode_probe(conn_id, self._pn, self.epoch, key, size))
        if out:
            self.stats.datagrams += len(out)
            self.stats.bytes += sum(map(len, out))
            if self._timer is None:
                self._timer = now + self.rtt.rto
        return out

    # ---------------------------------------------------------- internals
    def _move(self, state: str) -> None:
        if state == self.state:
            return
        if (self.state, state) not in _MOVES:
            raise AssertionError(f"sender: illegal move {self.state} -> {state}")
        self.state = state

    def _hello(self) -> bytes:
        msg = wire.Hello(
            self._nonce,
            self.config.stream,
            self.config.producer,
            self._anon_id,
            self.config.datagram_size,
            self._cookie,
            self.epoch,
        )
        return wire.encode_hello(msg, self._key)

    def _on_accept(self, msg: wire.Accept, now: float) -> None:
        if msg.stored < self.stored:
            self._fail("lost", f"the listener has seq {msg.stored} stored but told {self.stored}")
            return
        if self._connected_once and msg.stored > self.pushed:
            self._fail(
                "conflict",
                f"another session of producer {self.config.producer!r} stored up to seq "
                f"{msg.stored}, past this link's {self.pushed}",
            )
            return
        self.conn_id = msg.conn_id
        self.producer_id = msg.producer
        self.epoch = msg.epoch
        self._max_record = msg.max_record
        self._peer_window = max(msg.window, self.config.datagram_size)
        if not self._connected_once:
            # a fresh link starts where its producer left off
            self.stored = self.pushed = msg.stored
            self._base = msg.stored + 1
            self._recs.clear()
            self._lens = array("H")
            self._head = 0
        self._connected_once = True
        self._release(msg.stored)
        self._received = max(msg.received, self.stored)
        self._packer.start(msg.conn_id, msg.producer, msg.epoch, self._received + 1)
        self._flights.clear()
        self._lost.clear()
        self._in_flight = 0
        self._probe_sent.clear()
        self._unanswered = 0
        self._last_answer = now
        self._timer = None
        self._hello_due = None
        self._hello_rto = self.config.handshake_rto
        self._move(SenderState.OPEN)
        if self._pmtu is not None:
            self._pmtu.start(now)
        self._events.append(Connected(msg.producer, msg.epoch, msg.stored, msg.max_record))
        self._arm(now)

    def _on_refuse(self, msg: wire.Refuse, now: float) -> None:
        reason = msg.reason
        if self.state == SenderState.CONNECTING:
            if msg.nonce != self._nonce:
                self.stats.dropped += 1
                return
            if reason == wire.RefuseReason.FENCED:
                self._move(SenderState.FENCED)
                self._events.append(Fenced(self.epoch))
            else:
                name = wire.RefuseReason.NAMES.get(reason, f"reason {reason}")
                self._fail("refused", f"the listener refused the link: {name}")
            return
        if self.state != SenderState.OPEN or msg.conn_id != self.conn_id:
            self.stats.dropped += 1
            return
        if msg.epoch != self.epoch:
            self.stats.dropped += 1
            return
        if reason == wire.RefuseReason.FENCED:
            self._move(SenderState.FENCED)
            self._events.append(Fenced(self.epoch))
        elif reason == wire.RefuseReason.UNKNOWN:
            self._reconnect(now, "unknown")
        else:
            name = wire.RefuseReason.NAMES.get(reason, f"reason {reason}")
            self._fail("refused", f"the listener refused the link: {name}")

    def _fail(self, kind: str, message: str) -> None:
        self._move(SenderState.FAILED)
        self._events.append(Failed(kind, message))
        self._timer = None

    def _reconnect(self, now: float, reason: str) -> None:
        self._move(SenderState.CONNECTING)
        self.stats.reconnects += 1
        self._events.append(Reconnecting(reason))
        self._timer = None
        self._flights.clear()
        self._lost.clear()
        self._in_flight = 0
        self._hello_rto = min(self.rtt.rto, self.config.max_handshake_rto)
        self.connect(now)

    def _release(self, stored: int) -> None:
        """Forget records up to `stored` (compacting the list now and then)."""
        if stored <= self.stored:
            return
        self.stored = stored
        head = stored - self._base + 1
        lens = self._lens[self._head : head]
        self.stored_bytes += sum(lens)
        if 0xFFFF in lens:  # a clamped length: count the large records' real size
            big = self._recs[self._head : head]
            self.stored_bytes += sum(
                len(r) - 0xFFFF for r, n in zip(big, lens, strict=True) if n == 0xFFFF
            )
        if head >= len(self._recs):
            self._recs.clear()
            self._lens = array("H")
            self._head = 0
            self._base = stored + 1
        elif head > 4096 and head * 2 > len(self._recs):
            del self._recs[:head]
            del self._lens[:head]
            self._base = stored + 1
            self._head = 0
        else:
            self._head = head

    def _on_ack(self, ack: wire.Ack, now: float) -> None:
        self.stats.acks += 1
        self._unanswered = 0
        self._last_answer = now
        self.rtt.reset_backoff()
        # Within a session the listener's stored seq never goes back; a lower one
        # is an older answer that the network reordered (stale, so max() below).
        # Data loss by a restarted listener shows in the ACCEPT of the next session.
        if ack.received > self.pushed:
            self.stats.dropped += 1
            return
        self._peer_window = max(ack.window, self.config.datagram_size)
        if ack.stored > self.stored:
            self._release(ack.stored)
            self._events.append(StoredAdvanced(ack.stored))
        self._received = max(self._received, ack.received)
        received = self._received
        largest = ack.largest_pn
        sent = self._probe_sent.pop(largest, None)
        if sent is not None:
            self.rtt.on_sample(now - sent, ack.ack_delay / 1e6)
        self._largest_acked_pn = max(self._largest_acked_pn, largest)
        if self._probe_sent and largest:
            for pn in [p for p in self._probe_sent if p <= largest]:
                del self._probe_sent[pn]
        ranges = ack.ranges
        frags = dict(ack.fragments) if ack.fragments else None
        flights = self._flights
        largest_acked = self._largest_acked_pn
        loss_delay = TIME_THRESHOLD * max(self.rtt.srtt, self.rtt.latest, 0.001)
        # Flights are in packet-number order; none above the largest packet number
        # the listener has seen can be resolved yet, so the walk stops there.
        acked: list[_Flight] = []
        lost: list[_Flight] = []
        for pn, f in flights.items():
            if pn > largest_acked:
                break
            if (
                f.last <= received
                or (ranges and _in_ranges(f, ranges))
                or (frags is not None and f.end and _in_spans(f, frags.get(f.first)))
            ):
                acked.append(f)
            elif pn + PACKET_THRESHOLD <= largest_acked or now - f.sent > loss_delay:
                lost.append(f)
        if len(acked) + len(lost) < len(flights) and received >= self._next - 1:
            # everything sent is received: copies whose own answer never came are done too
            seen = {id(f) for f in acked} | {id(f) for f in lost}
            acked.extend(f for f in flights.values() if f.last <= received and id(f) not in seen)
        cc = self.cc
        recovery_start = cc.recovery_start
        grown = 0
        for f in acked:
            del flights[f.pn]
            self._in_flight -= f.size
            if f.sent > recovery_start:  # sent before the last reduction: no growth
                grown += f.size
            if f.pn == largest:
                self.rtt.on_sample(now - f.sent, ack.ack_delay / 1e6)
        if grown:
            cc.on_acked(grown, now)  # one step for the whole answer
        if self._pmtu is not None:
            self._pmtu.on_acked(acked, now)
        for f in lost:
            self._declare_lost(f.pn, f, now)
        if self._lost:
            self._lost = deque(f for f in self._lost if f.last > received)
        self._arm(now)

    def _declare_lost(self, pn: int, f: _Flight, now: float) -> None:
        del self._flights[pn]
        self._in_flight -= f.size
        self.stats.lost += 1
        self.cc.on_lost(f.sent, now)
        self._lost.append(f)
        if self._pmtu is not None:
            self._pmtu.on_lost(f.size, f.sent, now, self.rtt.rto)
            self._sync_size()

    def _detect_time_losses(self, now: float) -> None:
        largest = self._largest_acked_pn
        if not largest:
            return
        loss_delay = TIME_THRESHOLD * max(self.rtt.srtt, self.rtt.latest, 0.001)
        for pn, f in list(self._flights.items()):
            if pn >= largest:
                break
            if now - f.sent > loss_delay:
                self._declare_lost(pn, f, now)

    def _arm(self, now: float) -> None:
        """Arm the probe timer while anything is unstored, else disarm.  With
        nothing in flight the listener has everything and owes only the answer
        that a sync completes, which takes longer than a round trip."""
        if self._flights or self._lost:
            self._timer = now + self.rtt.rto
        elif self.pushed > self.stored:
            self._timer = now + max(self.rtt.rto, STORED_PROBE)
        else:
            self._timer = None


def _in_ranges(f: _Flight, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(a <= f.first and f.last <= b for a, b in ranges)


def _in_spans(f: _Flight, spans: tuple[tuple[int, int], ...] | None) -> bool:
    if not spans:
        return False
    return any(a <= f.offset and f.end <= b for a, b in spans)
