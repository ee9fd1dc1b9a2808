"""What the queue does after an overflow: whether the other flows back off.

Why a module of its own: bbr.py's cooperative rules let each flow keep
QUEUE_SHARE (16) datagrams of its own in a standing queue.  Beside a
loss-based flow (CUBIC, Reno) on a buffer of a bdp or less those 16
datagrams are half the buffer or more: the other flow overflows it at a
fraction of the window it would have, halves, and the link keeps 0.8 of
the path (20 Mbit/s, 40 ms, 0.5 bdp beside CUBIC, in virtual time and on
the path emulator).  By the queue, its own rate and its losses the link
cannot tell that flow from a BBR v1 flow or from other purelink links
(docs/performance.md, ccshare); it can by what the queue does after an
overflow, as Nimbus asks whether the cross traffic is elastic:

* a loss-based flow cuts its window at the overflow, and on a shallow
  buffer the standing queue falls to a small part of it within a round
  trip or two;
* a model-based one (BBR v1) keeps its 2 bdp in flight, and the queue
  stands about where it was;
* purelink links keep their shares, and their loss bounds cut by 0.3 of
  the flight at most: the queue stands, or falls by what their own
  flights fell.

So each overflow (bbr.py: a round trip that lost more than the path's own
loss rate and 2 % of its bytes, at least 2 datagrams) notes the deepest
queue delay of its round, about the buffer's (the buffer: the deepest of
the last OVERFLOWS), and is judged by the FALL_ROUNDS rounds after it: did
a round's standing queue (its smallest RTT above min_rtt) fall under FALL
of the buffer, once what our own flight's fall since the overflow took off
it (those bytes at btl_bw) is added back?  Purelink links that overfill a
buffer shallower than their shares all cut their bounds at the overflow,
and the queue falls by what each one's flight fell; a loss-based flow's
cut is not ours.  An overflow before the judgement counts as no fall.
When most of the last OVERFLOWS overflows (at least 2 judged) were
followed by a fall, the other flows back off (`elastic`), and the link
keeps no more than SHARE_OF_BUFFER of the buffer of its own in the queue
(`share`), room for a loss-based flow to grow into between its cuts.

The share is in bytes: the buffer's delay at the largest btl_bw the link
has measured (about the path's rate, from its startup), never under
MIN_SHARE datagrams nor over the cooperative 16.  A share that is a
constant number of bytes has a resting point beside a flow that keeps the
queue at a delay q: the link gets share / q of the path (Little's law), at
least SHARE_OF_BUFFER of it however full the other flow keeps the buffer.
At the link's own btl_bw instead, the share is a constant delay, and a
queue that stands above it makes the link yield round after round, its
rate and so its share falling together: with the TCP flow 5 s first on
20 Mbit/s, 40 ms, 0.5 bdp, one seed of four fell to 0.29 of the pair.

Under "model" (crosstraffic.py: a flow that keeps a queue and does not
yield to one) the link keeps BBR v1's 2 bdp, and on a buffer shallower
than the one bdp of queue that BBR v1 keeps, two such flows overfill it
round after round.  Where the overflows have stopped instead (at most
CALM of the last OVERFLOWS round trips overflowed, of those `round` is
told of: in PROBE_BW and not app-limited, bbr.py; on a buffer of under
SHALLOW min RTTs known from 2 overflows or more) the other flow is not
keeping 2 bdp in it: a loss-based flow judged "model" whose cuts are too
small to see against the link's flight.  There the link keeps one bdp
and SHALLOW_SHARE of the buffer (`shallow_part`, in bytes at `peak_bw`,
as the share above), and the other flow has room to grow into.  Whether
the buffer is that shallow at all, calm or not (`shallow`), sets bbr.py's
loss bound's floor under "none": what carries the link's rate at the
round trip of the standing queue, up to the bdp and half its share.

Why these figures: docs/performance.md, ccshare ("Beside a flow that backs
off"), has each variant's shares at eight seeds.  In short, on 20 Mbit/s,
40 ms, 0.5 bdp beside CUBIC: with the 16 datagrams 0.76-0.83 of the pair,
as kept 0.40-0.57; a fall judged under 0.15 of the buffer missed the
halving of a CUBIC flow already pushed down to a small window (0.77 at one
seed); without our own fall added back, two purelink links 1-3 s apart on
a one-bdp buffer capped their shares at the rates their startups
measured and split 0.37/0.63; over the last 6 overflows instead of 16, a
few seconds of falls after the simulation's BBR v1 overflows (around its
ProbeRTT) capped the link beside it; 0.25 and 0.4 of the buffer took
0.35-0.55 and 0.52-0.77.
"""

from __future__ import annotations

from collections import deque
from typing import Final

__all__ = ["Overflows"]

OVERFLOWS: Final = 16
FALL: Final = 0.4
FALL_ROUNDS: Final = 3
SHARE_OF_BUFFER: Final = 0.3
MIN_SHARE: Final = 4
SHALLOW: Final = 0.8  # min RTTs of buffer, under which a model-based flow's queue does not fit
SHALLOW_SHARE: Final = 0.5  # of such a buffer, the link's own part under "model" ...
CALM: Final = 1  # ... once at most this many of the last OVERFLOWS round trips overflowed


class Overflows:
    """The overflows of the last while, each judged by whether the queue fell after it."""

    __slots__ = (
        "_calm",
        "_depths",
        "_falls",
        "_flight",
        "_pending",
        "_rounds",
        "datagram_size",
        "peak_bw",
    )

    def __init__(self, datagram_size: int) -> None:
        self.datagram_size = datagram_size
        self.peak_bw = 0.0
        """The largest btl_bw reported, bytes/s: about the path's rate."""
        self._depths: deque[float] = deque(maxlen=OVERFLOWS)
        self._falls: deque[bool] = deque(maxlen=OVERFLOWS)
        self._pending = -1  # the round of the last overflow not yet judged
        self._rounds: deque[bool] = deque(maxlen=OVERFLOWS)  # whether each round overflowed
        self._calm = 0.0  # the buffer while the overflows have calmed (else 0), per round
        self._flight = 0  # our bytes in flight at its end

    @property
    def elastic(self) -> bool:
        """Most of the last overflows (at least 2 judged) were followed by a fall
        of the queue: the others back off."""
        falls = self._falls
        return len(falls) >= 2 and 2 * sum(falls) > len(falls)

    @property
    def buffer(self) -> float:
        """The deepest queue delay at the last OVERFLOWS overflows, seconds (0: none yet)."""
        return max(self._depths, default=0.0)

    def round(
        self,
        *,
        round_count: int,
        overflow: bool,
        queue_min: float | None,
        queue_max: float,
        flight: int,
        btl_bw: float,
    ) -> None:
        """At a round trip's end in PROBE_BW: whether it overflowed, its
        smallest and largest queue delay (RTT above min_rtt; `queue_min`
        None: the round timed no datagram), our bytes in flight at its end
        and the model's btl_bw."""
        self.peak_bw = max(self.peak_bw, btl_bw)
        self._rounds.append(overflow)
        falls = self._falls
        if overflow:
            self._depths.append(queue_max)
            if self._pending >= 0:
                falls.append(False)  # overflowed again before the queue fell
            self._pending = round_count
            self._flight = flight
        elif self._pending >= 0 and queue_min is not None:
            # what our own flight's fall since the overflow took off the queue
            # is not another flow's backing off: added back
            ours = max(self._flight - flight, 0) / btl_bw if btl_bw else 0.0
            if queue_min + ours < FALL * self.buffer:
                falls.append(True)
                self._pending = -1
            elif round_count - self._pending > FALL_ROUNDS:
                falls.append(False)
                self._pending = -1
        rounds = self._rounds
        calm = len(self._depths) >= 2 and len(rounds) == OVERFLOWS and sum(rounds) <= CALM
        self._calm = self.buffer if calm else 0.0  # read on every ACK under "model" (bbr.py)

    def shallow(self, min_rtt: float) -> bool:
        """The buffer, known from 2 overflows or more, is under SHALLOW min RTTs:
        a model-based flow's queue of one min RTT does not fit in it."""
        return len(self._depths) >= 2 and 0.0 < self.buffer < SHALLOW * min_rtt

    def shallow_part(self, min_rtt: float) -> int | None:
        """Under "model": on a buffer of under SHALLOW min RTTs (from 2
        overflows or more) that has calmed (at most CALM of the last
        OVERFLOWS round trips overflowed), the bytes of our own it may
        hold, SHALLOW_SHARE of it at `peak_bw` (at least MIN_SHARE
        datagrams); else None (module docstring)."""
        if not self._calm or not self.shallow(min_rtt) or not self.peak_bw:
            return None
        least = MIN_SHARE * self.datagram_size
        return max(least, int(SHALLOW_SHARE * self.peak_bw * self._calm))

    def share(self, most: int) -> int:
        """Bytes of our own a standing queue may hold: `most` (the cooperative
        share), or beside flows that back off SHARE_OF_BUFFER of the buffer
        at `peak_bw`, at least MIN_SHARE datagrams."""
        buffer = self.buffer
        if not self.elastic or not self.peak_bw or not buffer:
            return most
        least = MIN_SHARE * self.datagram_size
        return min(most, max(least, int(SHARE_OF_BUFFER * self.peak_bw * buffer)))
