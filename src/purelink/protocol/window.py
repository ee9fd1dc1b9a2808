"""Pacing: how much a link may have in flight, and when to give up on an answer.

Two small policies, injectable into the sender (STYLE practice 6):

`RttEstimator` follows RFC 6298: the first sample R sets SRTT = R and
RTTVAR = R/2; each later sample sets RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R| and
SRTT = 7/8 SRTT + 1/8 R; RTO = SRTT + max(G, 4 RTTVAR), clamped to
[min_rto, max_rto].  The listener reports how long it held an answer back
(ack_delay) and that is taken off the sample, as QUIC does.  Samples come
only from packet numbers sent once (every retransmission has a new packet
number), which is Karn's rule without the ambiguity.  `backoff()` doubles
the RTO after a probe goes unanswered (RFC 6298 section 5.5); a new sample
resets it.

`CongestionWindow` is NewReno in bytes: slow start doubles the window each
round trip (window += bytes acked) up to ssthresh, then congestion avoidance
adds about one datagram per round trip.  A loss halves it (once per round
trip: losses of datagrams sent before the last reduction do not reduce it
again); a probe timeout that finds nothing answered collapses it to the
minimum.  The sender sends only while bytes in flight stay under
min(cwnd, the listener's advertised window).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CongestionWindow", "RttEstimator"]


@dataclass
class RttEstimator:
    """Smoothed RTT and retransmission timeout (RFC 6298), in seconds."""

    initial_rto: float = 0.2
    """RTO before the first sample (RFC 6298 says 1 s for TCP; a link's first
    exchange is a handshake that is retried with backoff anyway)."""
    min_rto: float = 0.02
    """Floor.  Above a loaded interpreter's GIL switch interval (5 ms), so a link
    thread that waits for the GIL does not look like a lost datagram."""
    max_rto: float = 2.0
    """Ceiling of the backed-off RTO."""
    granularity: float = 0.001
    """G of RFC 6298: the clock's granularity."""

    srtt: float = 0.0
    rttvar: float = 0.0
    latest: float = 0.0
    samples: int = 0
    _backoff: int = 0

    def on_sample(self, rtt: float, ack_delay: float = 0.0) -> None:
        """Take one RTT measurement (seconds)."""
        if rtt <= 0:
            return
        if rtt - ack_delay >= self.granularity:
            rtt -= ack_delay
        self.latest = rtt
        if self.samples == 0:
            self.srtt = rtt
            self.rttvar = rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.samples += 1
        self._backoff = 0

    @property
    def base_rto(self) -> float:
        """The RTO before backoff."""
        if self.samples == 0:
            rto = self.initial_rto
        else:
            rto = self.srtt + max(self.granularity, 4 * self.rttvar)
        return min(max(rto, self.min_rto), self.max_rto)

    @property
    def rto(self) -> float:
        """The RTO with backoff applied."""
        return min(self.base_rto * (1 << self._backoff), self.max_rto)

    @property
    def backoffs(self) -> int:
        """How many times in a row the RTO was backed off."""
        return self._backoff

    def backoff(self) -> None:
        """A probe went unanswered: double the RTO (up to max_rto)."""
        self._backoff = min(self._backoff + 1, 30)

    def reset_backoff(self) -> None:
        """An answer came: stop backing off."""
        self._backoff = 0


@dataclass
class CongestionWindow:
    """NewReno congestion window in bytes."""

    datagram_size: int = 1400
    """Largest datagram; the unit of growth."""
    initial_datagrams: int = 32
    """Initial window, in datagrams."""
    minimum_datagrams: int = 2
    """The window never goes below this."""
    maximum: int = 64 << 20
    """The window never goes above this (bytes)."""

    cwnd: int = 0
    ssthresh: int = 1 << 62
    recovery_start: float = -1.0
    losses: int = 0

    def __post_init__(self) -> None:
        if self.cwnd == 0:
            self.cwnd = self.initial_datagrams * self.datagram_size

    @property
    def minimum(self) -> int:
        """The smallest window, in bytes."""
        return self.minimum_datagrams * self.datagram_size

    def on_acked(self, nbytes: int, sent_time: float) -> None:
        """`nbytes` of datagrams sent at `sent_time` were acknowledged."""
        if sent_time <= self.recovery_start:
            return  # sent before the last reduction: no growth in recovery
        if self.cwnd < self.ssthresh:
            self.cwnd += nbytes
        else:
            self.cwnd += max(1, self.datagram_size * nbytes // self.cwnd)
        self.cwnd = min(self.cwnd, self.maximum)

    def on_lost(self, sent_time: float, now: float) -> None:
        """A datagram sent at `sent_time` was declared lost at `now`."""
        self.losses += 1
        if sent_time <= self.recovery_start:
            return  # this round trip already reduced the window
        self.recovery_start = now
        self.cwnd = max(self.cwnd // 2, self.minimum)
        self.ssthresh = self.cwnd

    def on_timeout(self, now: float) -> None:
        """Nothing came back for a whole (backed-off) RTO: start over small."""
        self.recovery_start = now
        self.ssthresh = max(self.cwnd // 2, self.minimum)
        self.cwnd = self.minimum
