"""Delivery-rate estimation (draft-cheng-iccrg-delivery-rate-estimation).

Why a module of its own: BBR's model is built from these samples, and NewReno
does not need them; the sender stamps every datagram and this turns answers
into one `RateSample` each.

Per connection: `delivered` (bytes acknowledged so far), `delivered_time`
(when the last of them was), `first_sent` (send time of the datagram that
started the current sending interval) and `app_limited` (the delivered count
below which samples are app-limited; 0: not app-limited).

Each datagram, as it is sent, remembers the connection's `delivered`,
`delivered_time` and `first_sent`, and whether the connection was
app-limited.  When a datagram is sent with nothing in flight, the interval
restarts there (first_sent = delivered_time = now).

On each answer, the most recently sent datagram it acknowledges, P, gives
the sample:

    delivered    = C.delivered - P.delivered
    send_elapsed = P.sent - P.first_sent
    ack_elapsed  = C.delivered_time - P.delivered_time
    interval     = max(send_elapsed, ack_elapsed)
    rate         = delivered / interval

(taking the larger interval keeps an ACK compression from inflating the
rate; `first_sent` only moves forward, as Linux's first_tx_mstamp does for
a newer P, so reordered answers do not stretch send_elapsed); a sample
over less than min_rtt is dropped (draft section 3.3.4), and one whose P
was app-limited is marked so.
"""

from __future__ import annotations

from typing import Protocol

from .base import RateSample

__all__ = ["DeliveryRate", "Stamped"]


class Stamped(Protocol):
    """What a datagram in flight carries for the estimator."""

    size: int
    sent: float
    delivered: int
    delivered_time: float
    first_sent: float
    app_limited: bool


class DeliveryRate:
    """The connection's side of delivery-rate estimation."""

    __slots__ = ("_best", "_newly", "app_limited", "delivered", "delivered_time", "first_sent")

    def __init__(self) -> None:
        self.delivered = 0
        self.delivered_time = 0.0
        self.first_sent = 0.0
        self.app_limited = 0
        """Samples are app-limited until `delivered` passes this (0: not limited)."""
        self._best: Stamped | None = None
        self._newly = 0

    def on_sent(self, f: Stamped, now: float, in_flight_before: int) -> None:
        """Stamp a datagram as it goes out."""
        if not in_flight_before:
            self.first_sent = self.delivered_time = now
        f.delivered = self.delivered
        f.delivered_time = self.delivered_time
        f.first_sent = self.first_sent
        f.app_limited = self.app_limited != 0

    def set_app_limited(self, in_flight: int) -> None:
        """The sender has nothing more to send and its window is not full."""
        self.app_limited = max(self.delivered + in_flight, 1)

    def on_acked(self, f: Stamped, now: float) -> None:
        """One datagram of the current answer was acknowledged."""
        self.delivered += f.size
        self.delivered_time = now
        self._newly += f.size
        best = self._best
        if (
            best is None
            or f.sent > best.sent
            or (f.sent == best.sent and f.delivered > best.delivered)
        ):
            self._best = f

    def sample(self, rs: RateSample, min_rtt: float) -> None:
        """Fill in `rs` from the datagrams acknowledged since the last call."""
        f = self._best
        self._best = None
        rs.newly_acked = self._newly
        self._newly = 0
        rs.total_delivered = self.delivered
        if self.app_limited and self.delivered > self.app_limited:
            self.app_limited = 0
        if f is None:
            return
        # the next interval starts at P's send time, never earlier than it did: an
        # answer that covers only datagrams the network held back (reordering) has
        # an old P, and moving back would stretch every later sample's send_elapsed
        self.first_sent = max(self.first_sent, f.sent)
        rs.prior_delivered = f.delivered
        rs.is_app_limited = f.app_limited
        rs.last_sent = f.sent
        rs.rtt = self.delivered_time - f.sent
        rs.delivered = self.delivered - f.delivered
        interval = max(f.sent - f.first_sent, self.delivered_time - f.delivered_time)
        rs.interval = interval
        if interval <= 0 or interval < min_rtt:
            return
        rs.delivery_rate = rs.delivered / interval
