"""The sender's session: its states, the handshake, and what starts and ends
a session (docs/wire.md, the handshake; docs/reliability.md, 2.4 Resume).

Why it exists: what a session is (HELLO, RETRY, ACCEPT, REFUSE, reconnect,
fencing, failure) reads on its own, apart from what the sender does within
one (sender.py, sender_answers.py).  `SenderSession` is a base of `Sender`:
its methods work on the sender's own state, so nothing on the send path
goes through another object.

States (the only legal moves are in `_MOVES`; `_move` refuses the rest):

    CONNECTING --ACCEPT--> OPEN --REFUSE(unknown) or silence--> CONNECTING
        |                   |--REFUSE(fenced)--> FENCED
        |--REFUSE-->FAILED  |--stored went backwards--> FAILED
    OPEN --close()--> CLOSED

A HELLO goes out at once and again after `handshake_rto`, doubled on each
retry up to `max_handshake_rto`; a RETRY's cookie sends the next HELLO at
once, and at the handshake's first RETRY that HELLO's backoff starts where
it would after a first exchange that lost nothing (2 x `handshake_rto`):
the path answered just now, and the second exchange pays nothing for the
first's losses. An ACCEPT opens the session: a fresh link
starts where its producer left off, a reconnecting one re-packs everything
above the listener's `received` seq (the listener deduplicates by producer
and seq). The round trip of a HELLO sent once (not resent) to its RETRY or
ACCEPT is the congestion control's first sample of the path's delay
(`on_path_rtt`); a timed RETRY's is also the RTT estimator's first sample
if it has none (RFC 9002 6.3: a RETRY holds none of the listener's store
work, an ACCEPT may), so the first data's timeouts come from the path.
"""

from __future__ import annotations

import os
from collections import deque
from typing import Final

from . import wire
from .events import Connected, Event, Failed, Fenced, Held, Reconnecting
from .packing import Packer
from .pmtu import PathMtu
from .recovery import InFlight, RttEstimator
from .sender_config import SenderConfig, SenderStats
from .sender_records import SenderRecords

__all__ = ["SenderSession", "SenderState"]


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


class SenderSession(SenderRecords):
    """The handshake and the session's life (a base of Sender)."""

    # the sender's parts, made by Sender.__init__
    config: SenderConfig
    stats: SenderStats
    rtt: RttEstimator
    flight: InFlight
    _pmtu: PathMtu | None
    _packer: Packer
    _events: deque[Event]
    # the answers' state (sender_answers.py)
    _timer: float | None
    _unanswered: int
    _last_answer: float
    _received: int
    _peer_window: int
    _max_record: int

    def __init__(self, config: SenderConfig) -> None:
        super().__init__()
        self.state = SenderState.CONNECTING
        anon = config.anonymous_id
        if not anon:
            anon = int.from_bytes(os.urandom(8), "little") | (1 << 63)
        # sent in every HELLO: an anonymous producer's id, or (named) this link's
        # instance id, which lets the listener tell our own lost-ACCEPT retry from
        # an older, fenced instance of the same producer
        self._anon_id = anon
        self.conn_id = 0
        self.producer_id = 0
        self.epoch = 0
        self._nonce = 0
        self._cookie = b""
        self._hello_due: float | None = 0.0
        self._hello_rto = config.handshake_rto
        self._hello_sends = 0
        self._hello_sent: float | None = None
        """When the one HELLO of this step went out (None: none, or resent)."""
        self._connected_once = False
        self._close_due = False
        self._held = False  # refused for now (disk_full) since the last ACCEPT

    def _arm(self, now: float) -> None:
        """Arm the loss or probe timer (sender_answers.py)."""
        raise NotImplementedError

    # ------------------------------------------------------------ inputs
    def connect(self, now: float) -> None:
        """Start (or restart) the handshake at `now`."""
        self._nonce = int.from_bytes(os.urandom(8), "little") or 1
        self._cookie = b""
        self._hello_due = now
        self._hello_sends = 0
        self.stats.handshakes += 1

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

    # ---------------------------------------------------------- internals
    def _move(self, state: str) -> None:
        if state == self.state:
            return
        if (self.state, state) not in _MOVES:
            raise AssertionError(f"sender: illegal move {self.state} -> {state}")
        self.state = state

    def _hello_datagrams(self, now: float, out: list[bytes]) -> list[bytes]:
        """`out` with the HELLO if one is due (then the retry is scheduled)."""
        if self._hello_due is not None and now >= self._hello_due:
            out.append(self._hello())
            # a round trip to time only if this HELLO is the step's only one (Karn)
            self._hello_sent = now if not self._hello_sends else None
            self._hello_sends += 1
            self._hello_due = now + self._hello_rto
            self._hello_rto = min(self._hello_rto * 2, self.config.max_handshake_rto)
        return out

    def _on_retry(self, msg: wire.Retry, now: float) -> None:
        # a later RETRY (a duplicate, or the listener restarted with a new
        # secret) may answer an earlier HELLO than the last: time neither it
        # nor the HELLO it makes us send, and keep the backoff as it is
        first = not self._cookie
        if first:
            rtt = self._handshake_rtt(now)
            if rtt is not None and not self.rtt.samples:
                self.rtt.on_sample(rtt)  # RFC 9002 6.3: the RETRY's delay, no server work in it
            # the second exchange pays nothing for the first's losses: its HELLO
            # is resent as after a first exchange that lost nothing
            self._hello_rto = min(2 * self.config.handshake_rto, self.config.max_handshake_rto)
        self._hello_sent = None
        self._cookie = msg.cookie
        self._hello_due = now
        self._hello_sends = 0 if first else 1

    def _handshake_rtt(self, now: float) -> float | None:
        """The handshake's round trip, taken before any data queues on the path:
        the congestion control's first sample of the path's delay (returned;
        None when the HELLO answered was resent)."""
        rtt = None
        if self._hello_sent is not None:
            rtt = now - self._hello_sent
            self.flight.cc.on_path_rtt(rtt, now)
            self._hello_sent = None
        return rtt

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
        return wire.encode_hello(msg)

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
        self._handshake_rtt(now)
        self.conn_id = msg.conn_id
        self.producer_id = msg.producer
        self.epoch = msg.epoch
        self._max_record = msg.max_record
        self._peer_window = max(msg.window, self.config.datagram_size)
        if not self._connected_once:
            self._restart_at(msg.stored)
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
        self._held = False
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
            elif reason in wire.RefuseReason.FOR_NOW:
                self._hold(reason)  # the HELLO's timer asks again, on its backoff
            else:
                self._refused(reason)
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
        elif reason in wire.RefuseReason.FOR_NOW:
            # the listener forgot what it had not stored of this session: a new
            # one resends everything after what its ACCEPT says is stored
            self._hold(reason)
            self._reconnect(now, wire.RefuseReason.NAMES[reason])
        else:
            self._refused(reason)

    def _hold(self, reason: int) -> None:
        """Refused for now: count it, and say so once until the next ACCEPT."""
        if reason == wire.RefuseReason.DISK_FULL:
            self.stats.disk_full += 1
        else:
            self.stats.stream_failed += 1
        if not self._held:
            self._held = True
            self._events.append(Held(wire.RefuseReason.NAMES[reason]))

    def _refused(self, reason: int) -> None:
        name = wire.RefuseReason.NAMES.get(reason, f"reason {reason}")
        permanent = reason in wire.RefuseReason.PERMANENT
        self._fail("refused", f"the listener refused the link: {name}", permanent)

    def _fail(self, kind: str, message: str, permanent: bool = False) -> None:
        self._move(SenderState.FAILED)
        self._events.append(Failed(kind, message, permanent))
        self._timer = None

    def _reconnect(self, now: float, reason: str) -> None:
        self._move(SenderState.CONNECTING)
        self.stats.reconnects += 1
        self._events.append(Reconnecting(reason))
        self._timer = None
        self.flight.clear()
        self._hello_rto = min(self.rtt.rto, self.config.max_handshake_rto)
        self.connect(now)
