"""Path MTU discovery for one link: DPLPMTUD (RFC 8899), sans-IO.

Why: datagrams go out with DF set (transport.py), so a datagram larger than
the path can carry is dropped on the way, not fragmented.  This finds the
largest datagram the path carries, between `BASE` (1,200 bytes, the size
every path purelink supports must carry: QUIC's minimum, and an IPv6
minimum-MTU path of 1,280 carries it) and the link's `datagram_size`, and
keeps finding it as the path changes.  Packing (packing.py) makes its
datagrams this size.

Theory of operation (RFC 8899 section 5, with the probe being a padded PROBE
datagram that the listener answers with an MTU_ACK; probes carry no data, so
a lost probe costs nothing to resend):

* **Search.** Data goes out at the largest confirmed size, `BASE` at first.
  The first probe is `datagram_size` itself (most paths carry it: one probe
  and done).  A size is confirmed by one MTU_ACK and given up after
  `MAX_PROBES` probes of it time out (or one EMSGSIZE from the kernel); then
  a binary search between the largest confirmed and the smallest failed size
  runs until they are within `STEP` bytes.  One probe is outstanding at a
  time; its timeout is the caller's (a retransmission timeout, `rto`).
* **Search complete.** When the search ends below `datagram_size`, the path
  is probed again after `RAISE_INTERVAL` (RFC 8899's PMTU_RAISE_TIMER), in
  case it grew.
* **Black hole.** A path that shrinks below the size in use drops every
  datagram of that size while smaller ones still pass.  That is taken as a
  black hole when datagrams larger than `BASE` are lost in `BLACK_HOLE_ROUNDS`
  rounds (an `rto` apart) with none of them delivered meanwhile, each loss
  of a datagram sent before an answer that did come (the listener answers
  the small datagrams and probes that still pass).  An outage (nothing
  passes, whatever its size) makes one such round when it ends, and the
  resends after it are delivered, so it is not taken for a black hole; nor
  is random loss, where most large datagrams are delivered.  On a black
  hole the size drops to `BASE` at once and the search starts again from
  the top.
* **EMSGSIZE** from the kernel (a datagram over the local interface's MTU)
  fails that size at once: the size in use drops below it, and the search
  goes on below it.
* **A router's "too big"** (ICMP, which the kernel reports on the socket
  without the datagram's size, transport.py) fails the probe in flight at
  once (RFC 8899 section 4.6.2): on a path that answers so, the search takes
  a round trip or less per size, instead of `MAX_PROBES` timeouts for each
  size that does not pass.  Only probes are larger than the size in
  use, so a report can only be about one; a forged one can only end the
  search lower, at a size the path carried.
* Probes are never flights: a lost probe is not a congestion signal
  (RFC 8899 section 4.4) and costs the data nothing.

The caller tells it what happened (`probe_sent`, `on_probe_acked`,
`on_acked`, `on_lost`, `on_send_error`), asks what to do (`next_probe`), and
runs `handle_timer` at `get_timer()`; `on_too_big` takes a router's report.
Time is always passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol

__all__ = [
    "BASE",
    "BLACK_HOLE_ROUNDS",
    "MAX_PROBES",
    "RAISE_INTERVAL",
    "STEP",
    "PathMtu",
    "PmtuState",
]

BASE: Final = 1200
"""The datagram size every path is taken to carry (BASE_PLPMTU)."""
MAX_PROBES: Final = 3
"""Probes of one size that may time out before the size is given up."""
STEP: Final = 4
"""The search ends when the largest confirmed and smallest failed sizes are this close."""
RAISE_INTERVAL: Final = 600.0
"""Seconds before a search that ended below the maximum probes the path again."""
BLACK_HOLE_ROUNDS: Final = 3
"""Rounds of lost datagrams larger than BASE, none delivered, that make a black hole."""


class PmtuState:
    """The states of RFC 8899 section 5.2 that this keeps."""

    SEARCHING = "searching"
    COMPLETE = "search_complete"


class _Sent(Protocol):
    """What on_acked needs of a datagram in flight (packing.Flight has it)."""

    size: int
    sent: float


class PathMtu:
    """The path MTU of one link, found by probing."""

    def __init__(self, max_size: int, base: int = BASE) -> None:
        self.max_size = max_size
        """The link's datagram_size: never probed above."""
        self.base = min(base, max_size)
        self.size = self.base
        """The largest datagram to send now (confirmed, or BASE)."""
        self.state = PmtuState.SEARCHING if self.base < max_size else PmtuState.COMPLETE
        self._lo = self.base  # largest size confirmed
        self._hi = max_size  # largest size not known to fail
        self._probe: tuple[int, int, float] | None = None  # (pn, size, deadline)
        self._tries = 0  # probes of the current candidate that timed out
        self._raise_at: float | None = None
        self._started = False
        # black hole detection
        self._answered = 0.0  # when the latest answer came
        self._big_delivered = 0.0  # latest send time of a datagram over BASE delivered
        self._rounds = 0
        self._round_end = 0.0
        self.probes = 0
        """Probes sent."""
        self.black_holes = 0
        """Black holes detected."""
        self.too_big = 0
        """Probes failed at once by a router's report (on_too_big)."""

    # ------------------------------------------------------------ outputs
    def start(self, now: float) -> None:
        """The link has a session: probing may begin (first call only)."""
        self._started = True

    def next_probe(self, now: float) -> int | None:
        """The size of the probe to send now, or None."""
        if not self._started or self._probe is not None:
            return None
        if self.state == PmtuState.COMPLETE:
            if self._raise_at is None or now < self._raise_at:
                return None
            self.state = PmtuState.SEARCHING  # probe again: has the path grown?
            self._hi = self.max_size
            self._tries = 0
        return self._candidate()

    def get_timer(self) -> float | None:
        """When handle_timer must run (a probe's timeout, or the raise timer)."""
        if self._probe is not None:
            return self._probe[2]
        if self.state == PmtuState.COMPLETE:
            return self._raise_at
        return None

    # ------------------------------------------------------------- inputs
    def probe_sent(self, pn: int, size: int, now: float, rto: float) -> None:
        """A probe of `size` bytes went out under packet number `pn`."""
        self._probe = (pn, size, now + rto)
        self.probes += 1

    def on_probe_acked(self, pn: int, size: int, now: float) -> None:
        """The listener answered the probe `pn` (MTU_ACK) having received `size` bytes."""
        probe = self._probe
        if probe is None or probe[0] != pn or size < probe[1]:
            return  # a late answer to a probe given up on, or a forgery: ignored
        self._probe = None
        self._tries = 0
        self._lo = max(self._lo, probe[1])
        self.size = max(self.size, self._lo)
        self._big_delivered = max(self._big_delivered, now)
        self._rounds = 0
        self._settle(now)

    def on_send_error(self, size: int, now: float) -> None:
        """The kernel refused a datagram of `size` bytes as too large (EMSGSIZE)."""
        if size <= self.base:
            return  # nothing smaller to fall back to
        probe = self._probe
        if probe is not None and probe[1] >= size:
            self._probe = None
        self._fail(size - 1, now)

    def on_too_big(self, now: float) -> None:
        """A router reported a datagram too big for the path (ICMP, RFC 8899
        section 4.6), its size unknown.  Only probes are larger than the size
        in use, so it is about the probe in flight: that size fails at once,
        without waiting for its timeouts.  (A forged report can only end the
        search lower, at a size the path carried; the raise timer probes again.)"""
        probe = self._probe
        if probe is None or probe[1] <= self.size:
            return
        self._probe = None
        self.too_big += 1
        self._fail(probe[1] - 1, now)

    def on_acked(self, flights: Sequence[_Sent], now: float) -> None:
        """An answer came at `now`, saying `flights` were delivered (in the order
        they were sent; maybe none).  Call it before the losses the same answer
        reveals."""
        self._answered = now
        base = self.base
        for f in reversed(flights):
            if f.size > base:
                if f.sent > self._big_delivered:
                    self._big_delivered = f.sent
                    self._rounds = 0
                return

    def on_lost(self, size: int, sent: float, now: float, rto: float) -> None:
        """A datagram of `size` bytes sent at `sent` was declared lost."""
        if size <= self.base or self.size <= self.base:
            return
        if sent <= self._big_delivered or sent >= self._answered:
            return  # one that large got through since, or no answer came after it
        if now < self._round_end:
            return  # the same round
        self._rounds += 1
        self._round_end = now + rto
        if self._rounds >= BLACK_HOLE_ROUNDS:
            self.black_holes += 1
            self._rounds = 0
            self._probe = None
            self._lo, self._hi, self.size = self.base, self.max_size, self.base
            self._tries = 0
            self.state = PmtuState.SEARCHING

    def handle_timer(self, now: float) -> None:
        """A probe timed out (or the raise timer fired: next_probe acts on it)."""
        probe = self._probe
        if probe is None or now < probe[2]:
            return
        self._probe = None
        self._tries += 1
        if self._tries >= MAX_PROBES:
            self._tries = 0
            self._hi = probe[1] - 1
            self._settle(now)

    # ---------------------------------------------------------- internals
    def _candidate(self) -> int:
        """The next size to probe: the top first, then halfway up."""
        lo, hi = self._lo, self._hi
        if hi == self.max_size:
            return hi
        return (lo + hi + 1) // 2

    def _fail(self, below: int, now: float) -> None:
        """Sizes above `below` do not pass: use the largest confirmed one under it
        (or BASE) and search again under it."""
        self._hi = max(min(self._hi, below), self.base)
        if self._lo > self._hi:
            self._lo = self.base
        self.size = min(self.size, self._lo)
        self._tries = 0
        self.state = PmtuState.SEARCHING
        self._settle(now)

    def _settle(self, now: float) -> None:
        """End the search once the bounds meet."""
        if self._hi - self._lo < STEP or self._lo >= self.max_size:
            self._hi = self._lo
            self.size = self._lo
            self.state = PmtuState.COMPLETE
            self._raise_at = now + RAISE_INTERVAL if self._lo < self.max_size else None
        else:
            self.state = PmtuState.SEARCHING
