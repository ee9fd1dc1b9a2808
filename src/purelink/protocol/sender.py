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

What it decides, and who decides it:

* how much may be in flight and how fast it goes out: the congestion
  controller (`congestion/`, injected: BBR or NewReno), through `cwnd` and
  `pacing_rate`; the sender keeps bytes in flight under min(cwnd, the
  listener's window) and releases them through a token bucket (`Pacer`,
  window.py) in bursts of one pacing quantum;
* what is lost, and when to probe: RACK-TLP (recovery.py), fed with the send
  time of the transmission each answer names (`largest_pn`), and with the
  retransmissions the listener reports it got twice (spurious losses);
* what goes in each datagram: packing.py; how large datagrams are: path MTU
  discovery (pmtu.py), which the ledger tells what each answer delivered and
  what was lost;
* what each answer delivered, for BBR's model: delivery-rate samples
  (`congestion/rate.py`), stamped on every datagram as it goes out.

Invariants:
* every record pushed stays in `_recs` until the listener says it is stored;
  a reconnect re-packs everything above the listener's `received` seq, so no
  record is lost to a listener restart and none is stored twice (the listener
  deduplicates by producer and seq);
* `stored` never goes backwards; if the listener ever reports less than it
  told before, the sender fails with kind "lost" (docs/reliability.md, 2.4 Resume);
* each datagram in flight remembers what it carried (a batch, or a byte range
  of a batch larger than one datagram: packing.py builds them) and is resolved
  acked or lost (aioquic's packet_builder/recovery); retransmissions resend
  the same batch bytes under a new packet number, so RTT samples are never
  ambiguous;
* bytes in flight change in the ledger's `sent` and `remove` only
  (recovery.py; zeroed with the flights when a session starts or ends);
* a timer is armed only while something is unstored or a handshake runs: an
  idle link sleeps.  A pacing deadline is a timer only while something is
  waiting to go out and the window has room.
"""

from __future__ import annotations

import os
import zlib
from array import array
from collections import deque
from typing import Final

from ..errors import ProtocolError
from . import wire
from .congestion import CongestionControl, create
from .events import Connected, Event, Failed, Fenced, Reconnecting, StoredAdvanced
from .packing import Flight, Packer
from .pmtu import PathMtu
from .recovery import InFlight, RttEstimator
from .sender_config import SenderConfig, SenderStats
from .window import Pacer

__all__ = ["Sender", "SenderConfig", "SenderState", "SenderStats"]

# with nothing in flight, only the "stored" answer after a sync is awaited
STORED_PROBE: Final = 0.1
# datagrams a probe timeout sends (RFC 9002 section 6.2.4 allows two)
PROBE_DATAGRAMS: Final = 2
# below this min RTT (loopback, a LAN) the sender does not pace: twice the
# thread's timer granularity, since on a loaded machine a loopback answer that
# waits for the scheduler and the GIL measures 0.7-1 ms
PACING_MIN_RTT: Final = 0.002


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


class Sender:
    """The sending side of one link."""

    def __init__(self, config: SenderConfig, cc: CongestionControl | None = None) -> None:
        if config.datagram_size < 128 or config.datagram_size > 65507:
            raise ValueError("datagram_size must be between 128 and 65507")
        wire.encode_hello(wire.Hello(0, config.stream, config.producer, 0, 0, b""))  # validates
        self.config = config
        self.stats = SenderStats()
        self.state = SenderState.CONNECTING
        self.rtt = RttEstimator(max_rto=config.max_probe_interval)
        if cc is None:
            seed = zlib.crc32(f"{config.stream}/{config.producer}/{config.anonymous_id}".encode())
            cc = create(config.congestion, config.datagram_size, seed)
        self.flight = InFlight(cc, self.rtt, self.stats)
        """The datagrams in flight, loss detection and rate samples (recovery.py)."""
        self.pacer = Pacer(config.datagram_size)
        self._key = config.secret
        self._pmtu = PathMtu(config.datagram_size) if config.pmtu else None
        """The path's datagram size, probed (UDP links; None: datagram_size)."""
        self.flight.path = self._pmtu
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
        self._peer_window = 1 << 20
        self._max_record = 16 << 20
        self._pn = 0
        self._probe_due = False
        self._window_held = False  # the window held data back at the last send
        self._unanswered = 0
        self._last_answer = 0.0
        self._last_sent = 0.0  # when data last went out (the probe timeout counts from it)
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

    def on_path_too_big(self, now: float) -> None:
        """A router said a datagram was too big for the path (an ICMP report the
        kernel passed on, without its size): the path MTU probe in flight failed."""
        if self._pmtu is not None and self.state == SenderState.OPEN:
            self._pmtu.on_too_big(now)
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
        """When handle_timer (or datagrams_to_send, for pacing) must run next, or
        None (nothing to wait for)."""
        if self.state == SenderState.CONNECTING:
            return self._hello_due
        if self.state != SenderState.OPEN:
            return None
        timer = self._timer
        pmtu = self._pmtu.get_timer() if self._pmtu is not None else None
        if pmtu is not None and (timer is None or pmtu < timer):
            timer = pmtu
        if (
            self.pacer.rate
            and self.flight.bytes < self.window
            and (self.flight.lost or self._waiting)
        ):
            due = self.pacer.next_time()
            if timer is None or due < timer:
                return due
        return timer

    def resume_time(self, now: float) -> float | None:
        """When the window or the pacer holds back whatever would go out now: the
        time to look again (the timer or the next send time; an answer may come
        first), so the driver can sleep even with more records to take.  None
        when nothing holds the sender back."""
        if self.state != SenderState.OPEN:
            return None
        if self.flight.bytes >= self.window:
            timer = self.get_timer()
        elif self.pacer.rate and self.pacer.allowance(now) <= 0:
            timer = self.pacer.next_time()
        else:
            return None
        return timer if timer is not None and timer > now else None

    @property
    def cc(self) -> CongestionControl:
        """The congestion controller (injected, or made from config.congestion)."""
        return self.flight.cc

    @property
    def unstored(self) -> int:
        """Records pushed and not yet stored."""
        return self.pushed - self.stored

    @property
    def in_flight(self) -> int:
        """Bytes of datagrams in flight."""
        return self.flight.bytes

    @property
    def _next(self) -> int:
        """The next seq to put in a first transmission (packing's)."""
        return self._packer.next_seq

    @property
    def _waiting(self) -> bool:
        """First transmissions wait: an open batch's pieces, or records."""
        return self._packer.open or self._packer.next_seq <= self.pushed

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
            return  # datagrams_to_send sends the HELLO when it is due
        if self._pmtu is not None and self.state == SenderState.OPEN:
            self._pmtu.handle_timer(now)
            self._sync_size()
        if self.state != SenderState.OPEN or self._timer is None or now < self._timer:
            return
        if self.flight.loss_time is not None and now >= self.flight.loss_time:
            self.flight.detect_losses(now)
            self._sync_size()
            self._arm(now)
            return
        # probe timeout: data outstanding, no answers
        if now - self._last_answer >= self.config.silence_timeout:
            self._reconnect(now, "silent")
            return
        self._probe_due = True
        self._unanswered += 1
        self.rtt.backoff()
        if self._unanswered > 1 and self.flight.flights:
            self.cc.on_timeout(now)
        self._timer = now + self.rtt.pto

    def datagrams_to_send(self, now: float) -> list[bytes]:
        """Datagrams to put on the wire now: at most config.burst of them, and at
        most one pacing quantum's worth."""
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
        probe = self._probe_due
        window = self.window
        burst = self.config.burst
        pacer = self.pacer
        packer = self._packer
        if pacer.rate:
            allowed = pacer.allowance(now, self._window_held)
            if allowed > 0 or probe:
                burst = min(burst, max(PROBE_DATAGRAMS if probe else 1,
                                       -(-int(allowed) // packer.size)))  # fmt: skip
            elif self._pmtu is None:
                return out
            else:
                burst = 0  # nothing but a path MTU probe, if one is due
        if probe:
            self._probe_due = False
            # a probe goes out whatever the window: two datagrams (RFC 9002 6.2.4),
            # so that one lost on a lossy path does not cost another probe interval
            window = max(window, self.flight.bytes + (PROBE_DATAGRAMS - 1) * packer.size + 1)
        flight = self.flight
        stats = self.stats
        new: dict[int, Flight] = {}
        while len(out) < burst and flight.bytes < window:
            if flight.lost:
                f = flight.lost.popleft()
                if f.last <= self._received:
                    continue
                out.extend(self._resend(f, now, True))
            elif self._waiting:
                self._pn, _ = packer.fill(
                    self._recs, self._lens, self._base, self.pushed, self._pn, now,
                    burst - len(out), window - flight.bytes, out, new,
                )  # fmt: skip
                for f in new.values():
                    flight.sent(f, now)
                new.clear()
                stats.batches, stats.fragments = packer.batches, packer.pieces
                stats.payload = packer.payload
            else:
                break
        if probe:
            stats.probes += 1
            if not out:
                out.extend(self._probe_datagrams(now))
        pmtu = self._pmtu
        if pmtu is not None:
            size = pmtu.next_probe(now)
            if size is not None:  # a path MTU probe: outside the window, not a flight
                self._pn += 1
                pmtu.probe_sent(self._pn, size, now, min(self.rtt.rto, 1.0))
                out.append(wire.encode_probe(self.conn_id, self._pn, self.epoch, self._key, size))
        if out:
            nbytes = sum(map(len, out))
            stats.datagrams += len(out)
            stats.bytes += nbytes
            if pacer.rate:
                pacer.spend(nbytes)
            self._last_sent = now
            if self._timer is None or probe:
                self._arm(now)
        waiting = bool(flight.lost) or self._waiting
        self._window_held = waiting and flight.bytes >= window
        if not waiting and flight.bytes < window:
            flight.rate.set_app_limited(flight.bytes)
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

    def _resend(self, f: Flight, now: float, repair: bool) -> list[bytes]:
        """`f` (no longer in flight) again under new packet numbers: one datagram,
        or smaller pieces if the path shrank (packing.py); `repair`: it was
        declared lost."""
        old_pn, old_sent = f.pn, f.sent
        self._pn, resent = self._packer.resend(f, self._pn, now)
        out = []
        for g in resent:
            self.flight.resent(old_pn, old_sent, g, now, repair)
            out.append(g.data)
            self.stats.retransmit_bytes += g.size
        self.stats.retransmits += len(resent)
        return out

    def _probe_datagrams(self, now: float) -> list[bytes]:
        """A tail-loss probe when no new data waits: the newest datagram in flight
        again (its answer shows what else was lost), and a bare PROBE."""
        flight = self.flight
        f = next(reversed(flight.flights.values()), None)
        out: list[bytes] = []
        if f is not None:
            flight.remove(f)
            if f.last > self._received:
                out = self._resend(f, now, False)
                # and a bare PROBE: a second chance on a lossy path (RFC 9002 6.2.4),
                # and it passes a path that shrank: its answer shows the large ones
                # lost, which path MTU discovery needs to see
        self._pn += 1
        flight.probes[self._pn] = now
        out.append(wire.encode_probe(self.conn_id, self._pn, self.epoch, self._key))
        return out

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
        self.flight.clear()
        self.rtt.reset_backoff()
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
        self.flight.clear()
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
        if self._unanswered:
            self._unanswered = 0
            self.rtt.reset_backoff()
        self._last_answer = now
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
        self.flight.on_ack(ack, self._received, self._received >= self._next - 1, now)
        self._sync_size()
        # a path shorter than the thread's own timer granularity has no queue to
        # spare by pacing, only the wake-ups it would cost
        fast = self.rtt.min_rtt < PACING_MIN_RTT
        self.pacer.set_rate(0.0 if fast else self.cc.pacing_rate)
        self._arm(now)

    def _arm(self, now: float) -> None:
        """Arm the loss timer or the probe timer while anything is unstored, else
        disarm.  With nothing in flight the listener has everything and owes only
        the answer that a sync completes, which takes longer than a round trip."""
        if self.flight.flights:
            timer = max(self._last_sent, self._last_answer) + self.rtt.pto
            if self.flight.loss_time is not None and self.flight.loss_time < timer:
                timer = self.flight.loss_time
            self._timer = timer
        elif self.flight.lost:
            self._timer = now + self.rtt.pto
        elif self.pushed > self.stored:
            self._timer = now + max(self.rtt.rto, STORED_PROBE)
        else:
            self._timer = None
