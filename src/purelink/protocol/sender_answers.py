"""What the sender does with the listener's answers and with its one timer:
the ACK that feeds recovery, congestion control and pacing; loss detection
and probes when answers do not come.

Why it exists: the decisions themselves live in their own rooms (RACK-TLP
and RTT in recovery.py, the window in congestion/, pacing in window.py);
this is the glue that hands each answer and each timeout to them, apart
from the send path (sender.py).  `SenderAnswers` is a base of `Sender`, so
its state is the sender's own attributes and the send path reads it with
no call between.

One timer, while OPEN (`_timer`, `_arm`): the loss deadline of RACK when a
datagram waits for its reordering window, else the probe timeout counted
from the last send or answer (with nothing more waiting to go out, the
shorter tail probe timeout from the last send: recovery.py); with nothing
in flight but records unstored,
the wait for the "stored" answer that a sync completes (longer than a round
trip).  An idle link arms nothing.  A probe timeout sends up to two
datagrams (sender.py) whatever the window, and the second timeout in a row
tells congestion control; `silence_timeout` without any answer ends the
session (reconnect).
"""

from __future__ import annotations

from typing import Final

from . import wire
from .events import StoredAdvanced
from .packing import Flight
from .sender_config import SenderConfig
from .sender_session import SenderSession, SenderState
from .window import Pacer

__all__ = ["PACING_MIN_RTT", "STORED_PROBE", "SenderAnswers"]

# with nothing in flight, only the "stored" answer after a sync is awaited
STORED_PROBE: Final = 0.1
# below this min RTT (loopback, a LAN) the sender does not pace: twice the
# thread's timer granularity, since on a loaded machine a loopback answer that
# waits for the scheduler and the GIL measures 0.7-1 ms
PACING_MIN_RTT: Final = 0.002


class SenderAnswers(SenderSession):
    """Answers in, the timer, resends and probes (a base of Sender)."""

    pacer: Pacer

    def __init__(self, config: SenderConfig) -> None:
        super().__init__(config)
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

    @property
    def window(self) -> int:
        """Bytes that may be in flight now."""
        return min(self.flight.cc.cwnd, self._peer_window)

    @property
    def _next(self) -> int:
        """The next seq to put in a first transmission (packing's)."""
        return self._packer.next_seq

    @property
    def _waiting(self) -> bool:
        """First transmissions wait: an open batch's pieces, or records."""
        return self._packer.open or self._packer.next_seq <= self.pushed

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
            self.flight.cc.on_timeout(now)
        self._timer = now + self.rtt.pto

    # ---------------------------------------------------------- internals
    def _sync_size(self) -> None:
        """Packing follows the path's datagram size."""
        pmtu = self._pmtu
        if pmtu is not None and pmtu.size != self._packer.size:
            self._packer.size = pmtu.size

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
        self.pacer.set_rate(0.0 if fast else self.flight.cc.pacing_rate)
        self._arm(now)

    def _arm(self, now: float) -> None:
        """Arm the loss timer or the probe timer while anything is unstored, else
        disarm.  With nothing in flight the listener has everything and owes only
        the answer that a sync completes, which takes longer than a round trip."""
        if self.flight.flights:
            if self._waiting or self.flight.lost:
                timer = max(self._last_sent, self._last_answer) + self.rtt.pto
            else:  # the tail: only a probe can find the last datagrams lost
                timer = self._last_sent + self.rtt.tail_pto
            if self.flight.loss_time is not None and self.flight.loss_time < timer:
                timer = self.flight.loss_time
            self._timer = timer
        elif self.flight.lost:
            self._timer = now + self.rtt.pto
        elif self.pushed > self.stored:
            self._timer = now + max(self.rtt.rto, STORED_PROBE)
        else:
            self._timer = None

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
        out.append(wire.encode_probe(self.conn_id, self._pn, self.epoch))
        return out
