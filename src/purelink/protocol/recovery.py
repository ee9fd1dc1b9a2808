"""Loss recovery: the RTT estimate, RACK-TLP loss detection and the probe timer.

Why a module of its own: deciding *that* a datagram is lost and *when* to ask
for an answer is one concern (aioquic's `quic/recovery.py`); how fast to send
is another (`congestion/`).  The sender feeds both and owns neither.

`RttEstimator` follows RFC 6298: the first sample R sets SRTT = R and
RTTVAR = R/2; each later sample sets RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R| and
SRTT = 7/8 SRTT + 1/8 R; RTO = SRTT + max(G, 4 RTTVAR), clamped to
[min_rto, max_rto].  The listener reports how long it held an answer back
(ack_delay) and that is taken off the sample, as QUIC does.  Every
transmission has its own packet number, so every sample is unambiguous
(Karn's rule without its cost).  It also keeps the smallest RTT seen
(`min_rtt`, RFC 9002 section 5.2), which sizes the reordering window.

`Rack` is RACK-TLP (RFC 8985) in the form QUIC uses (RFC 9002 section 6):

* **Time-based loss.**  `sent` is the send time of the most recently sent
  datagram known delivered, `rtt` the RTT it measured.  A datagram still
  unanswered that was sent before it is lost once

      now >= its send time + rtt + reo_wnd

  and until then the sender arms a timer for exactly that moment.  There is
  no packet-count threshold: a datagram overtaken by a hundred others under
  jitter is still not lost before its time is up.
* **Adaptive reordering window.**  reo_wnd = min(mult * min_rtt / 4, srtt)
  (RFC 8985 section 6.2.1).  When the listener reports that a retransmission
  brought nothing new (the original arrived after all), the loss was
  spurious: `mult` grows by one, at most once per round trip, so the window
  widens to the reordering the path really has; after 16 loss recoveries
  (episodes: at most one per round trip) with no spurious one it falls
  back to 1.
* **Tail-loss probe.**  While datagrams are in flight and no answer comes,
  a probe is due PTO = max(2 * srtt, min_pto) after the last transmission
  (before any sample: the initial RTO), backed off by doubling while probes
  go unanswered, capped at max(0.25 s, the PTO before backoff) and at
  most `max_pto` (1 s), so that after an outage the link finds the path
  open again within a quarter of a second on most paths.  When nothing more
  waits to be sent (the tail of a transfer, or a pause of the application),
  the probe is due sooner: srtt + max(4 rttvar, G) + the listener's answer
  delay after the last send (RFC 9002 6.2.1's PTO; `tail_pto`), since no
  later datagram's answer will show the last ones lost: on a steady path
  about 1.1 srtt after the last send instead of 2 srtt after the last answer
  (which itself came about a round trip after it).  The sender's probe
  carries data (new records if it has any, else the newest datagram again),
  so a lost tail is repaired by the probe itself, and its answer lets the
  time-based rule find every earlier loss at once.

`InFlight` is the ledger of datagrams in flight (aioquic's sent-packet
space): the only place where bytes in flight change (`sent`, `remove`,
`clear`).  On each answer (`on_ack`) it takes the send time of the
transmission the answer names by packet number (`largest_pn`: surely
delivered, so RACK's reference and an unambiguous RTT sample; a datagram
sent again keeps its old packet number's send time for this, in
`superseded`), resolves every flight the answer's seqs cover, turns the
overtaken and old ones lost (RACK), proves losses spurious (the listener
reports the retransmissions it got twice; a flight declared lost that the
answer shows delivered before it was resent), and hands the congestion
controller one `RateSample`.

Where the compiled core has its "ledger" part (purelink.native), the loops
over flights run in C on this very state (src/speedups/ledger.c): the stamps
of the flights a fill sent (`sent_all`), the walk of an answer over the
flights with their removal and delivery counts (`on_ack`), RACK's walk
(`detect_losses`); each policy it feeds is called as here.  And the compiled
packer stamps each flight as it makes it and files it here at once
(`stamps`, `stamped`): the sender's fill then makes no dict of new flights
for `sent_all` to walk; and `flights` is then the core's `Flights`, a ring
indexed by packet number with a dict's methods (src/speedups/flights.c).  The loops below
are the reference, and run wherever the C declines (a flight of another type).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final, cast

from .. import native
from .congestion import CongestionControl, DeliveryRate, RateSample
from .messages import Ack
from .packing import Flight, FlightMap, Stamps
from .pmtu import PathMtu
from .sender_config import SenderStats

__all__ = ["Flight", "InFlight", "Rack", "RttEstimator"]

_core = native.part("ledger")
_ring = native.part("flights")  # (the ledger's C loops take a dict where there is no ring)

ANSWER_DELAY: Final = 0.005
"""What the listener may take to answer a datagram, on top of the RTT: one
drain, or its thread waiting for the GIL (the switch interval, 5 ms)."""
MEMORY: Final = 1024
"""Transmissions remembered by packet number after they were sent again."""


@dataclass
class RttEstimator:
    """Smoothed RTT and retransmission timeout (RFC 6298), in seconds."""

    initial_rto: float = 0.2
    """RTO before the first sample (RFC 6298 says 1 s for TCP; a link's first
    exchange is a handshake that is retried with backoff anyway)."""
    min_rto: float = 0.02
    """Floor.  Above a loaded interpreter's GIL switch interval (5 ms), so a link
    thread that waits for the GIL does not look like a lost datagram."""
    max_rto: float = 1.0
    """Ceiling of the backed-off RTO."""
    granularity: float = 0.001
    """G of RFC 6298: the clock's granularity."""
    outage_pto: float = 0.25
    """Unanswered probes back off no further than max(this, the probe timeout
    before backoff) (and never past max_rto): an outage ends at a moment that
    has nothing to do with the backoff's schedule, and on a 50 ms path a 1 s
    interval left the link dark for up to a second after the path came back,
    0.4 to 1.0 x Linux TCP BBR's goodput through the same blackouts depending
    on where the last probe fell.  Two small datagrams each 0.25 s cost nothing."""

    srtt: float = 0.0
    rttvar: float = 0.0
    min_rtt: float = 0.0
    samples: int = 0
    _backoff: int = 0

    def on_sample(self, rtt: float, ack_delay: float = 0.0) -> None:
        """Take one RTT measurement (seconds)."""
        if rtt <= 0:
            return
        if not self.samples or rtt < self.min_rtt:
            self.min_rtt = rtt  # before ack_delay comes off (RFC 9002 5.2)
        if rtt - ack_delay >= max(self.granularity, self.min_rtt):
            rtt -= ack_delay
        if self.samples == 0:
            self.srtt = rtt
            self.rttvar = rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.samples += 1

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
    def pto(self) -> float:
        """The probe timeout (RFC 8985 7.2: 2 SRTT), backed off up to
        max(outage_pto, the timeout before backoff), capped at max_rto."""
        base = self.initial_rto if not self.samples else max(2 * self.srtt, self.min_rto)
        if not self._backoff:
            return min(base, self.max_rto)
        cap = min(max(self.outage_pto, base), self.max_rto)
        return min(base * (1 << self._backoff), cap)

    @property
    def tail_pto(self) -> float:
        """The probe timeout after the last datagram of a flight with nothing more
        to send (RFC 9002 6.2.1: srtt + max(4 rttvar, G) + the peer's answer
        delay, counted from that send), backed off as `pto` is and never later
        than it.  Only a probe can find such a datagram lost: nothing sent after
        it will be acknowledged and overtake it."""
        if not self.samples:
            return self.pto
        base = max(self.srtt + max(4 * self.rttvar, self.granularity) + ANSWER_DELAY, self.min_rto)
        return min(base * (1 << self._backoff), self.pto)

    def backoff(self) -> None:
        """A probe went unanswered: double the timeout (up to max_rto)."""
        self._backoff = min(self._backoff + 1, 30)

    def reset_backoff(self) -> None:
        """An answer came: stop backing off."""
        self._backoff = 0


REORDER_RESET: int = 16
"""Loss recoveries without a spurious one after which reo_wnd falls back to
min_rtt / 4 (RFC 8985 section 6.2.1).  A recovery is an episode, as TCP's
fast recovery is: it begins with the loss of a datagram sent after the
previous one began, so at most one per round trip however many losses an
answer reveals (counting every answer that declared a loss, a path with 10 %
loss reset the window within one round trip, and under jitter of a quarter
RTT each way one datagram in ten was resent for nothing)."""


class Rack:
    """RACK-TLP's state: the most recent delivery and the reordering window."""

    __slots__ = (
        "_episode", "_last_widen", "_recoveries", "mult", "pn", "rtt", "sent", "spurious",
    )  # fmt: skip

    def __init__(self) -> None:
        self.sent = -1.0
        """Send time of the most recently sent datagram known delivered (-1: none)."""
        self.pn = 0
        """Its packet number: only datagrams sent before it (lower pns) can be
        overtaken by it (datagrams sent in one burst share a send time)."""
        self.rtt = 0.0
        """The RTT that datagram measured."""
        self.mult = 1
        """reo_wnd in units of min_rtt / 4."""
        self.spurious = 0
        """Losses proven spurious."""
        self._recoveries = 0
        self._episode = -1.0  # when the current recovery episode began
        self._last_widen = -1.0

    def on_delivered(self, pn: int, sent: float, now: float) -> None:
        """Transmission `pn`, sent at `sent`, is known delivered at `now`."""
        if pn > self.pn:
            self.pn = pn
            self.sent = sent
            self.rtt = now - sent

    def reo_wnd(self, rtt: RttEstimator) -> float:
        """The reordering window, seconds."""
        return min(self.mult * rtt.min_rtt / 4, rtt.srtt)

    def loss_delay(self, rtt: RttEstimator) -> float:
        """How long after its send time an overtaken datagram counts as lost."""
        return max(self.rtt, rtt.granularity) + self.reo_wnd(rtt)

    def on_recovery(self, lost_sent: float, now: float) -> None:
        """Datagrams were declared lost, the newest sent at `lost_sent`: a new
        recovery episode if it was sent after the current one began."""
        if lost_sent <= self._episode:
            return
        self._episode = now
        self._recoveries += 1
        if self._recoveries >= REORDER_RESET:
            self._recoveries = 0
            self.mult = 1

    def on_spurious(self, now: float, rtt: RttEstimator) -> None:
        """A loss was proven spurious: widen the window, once per round trip."""
        self.spurious += 1
        self._recoveries = 0
        if now - self._last_widen < max(rtt.srtt, rtt.granularity):
            return
        self._last_widen = now
        if rtt.min_rtt > 0 and self.mult * rtt.min_rtt / 4 < rtt.srtt:
            self.mult += 1

    def reset(self) -> None:
        """A new session: no delivery known yet (the window's width is kept)."""
        self.sent = -1.0
        self.pn = 0
        self.rtt = 0.0


class InFlight:
    """The datagrams in flight of one session, and what answers make of them."""

    def __init__(self, cc: CongestionControl, rtt: RttEstimator, stats: SenderStats) -> None:
        self.cc = cc
        self.rtt = rtt
        self.stats = stats
        self.rack = Rack()
        self.rate = DeliveryRate()
        self.flights: FlightMap = (
            {} if _core is None or _ring is None else cast(FlightMap, _ring.Flights())
        )
        """By packet number, in sending order (the compiled core's ring of them,
        where it is in use: no dict entry and no int key per datagram)."""
        self.lost: deque[Flight] = deque()
        """Declared lost, waiting to be sent again."""
        self.bytes = 0
        """Bytes in flight."""
        self.loss_time: float | None = None
        """When the oldest overtaken flight turns lost (RACK's timer), or None."""
        self.probes: dict[int, float] = {}
        """Bare PROBEs in flight: pn -> send time."""
        self._retx = 0  # flights in flight that are retransmissions
        self._repairs: dict[
            int, float
        ] = {}  # pn of a loss's retransmission -> lost one's send time
        self._superseded: dict[int, float] = {}  # pn of a transmission sent again -> its send time
        self._largest_pn = 0
        self.path: PathMtu | None = None
        """Path MTU discovery, told what each answer delivered (before the losses
        it reveals) and each loss (None: no discovery)."""

    # ------------------------------------------------ bytes in flight
    def sent(self, f: Flight, now: float) -> None:
        """`f` went out at `now`."""
        self.rate.on_sent(f, now, self.bytes)
        self.flights[f.pn] = f
        self.bytes += f.size
        if f.retx:
            self._retx += 1
        self.cc.on_sent(f.size, now, self.bytes)

    def sent_all(self, new: dict[int, Flight], now: float) -> None:
        """Every flight of `new` (by packet number, in sending order) went out at `now`."""
        stamps = self.stamps(now) if new else None
        if stamps is not None:  # the loop below in C (the controller has no on_sent)
            delivered, delivered_time, first_sent, app_limited = stamps
            assert _core is not None
            total = _core.ledger_sent(
                new, self.flights, self.bytes, delivered, delivered_time, first_sent, app_limited
            )
            if total is not NotImplemented:
                self.rate.first_sent, self.rate.delivered_time = first_sent, delivered_time
                self.bytes = total
                return
        for f in new.values():
            self.sent(f, now)

    def unfile(self, pn: int, nbytes: int) -> None:
        """A fill, or sent_all, that failed part-way: the flights above packet
        number `pn` it filed out again, and `bytes` back to `nbytes`."""
        for above in [k for k, _ in self.flights.items() if k > pn]:
            del self.flights[above]
        self.bytes = nbytes

    def stamps(self, now: float) -> Stamps | None:
        """The delivery-rate stamps of flights going out at `now`, for a packer
        that stamps each flight it makes and files it in `flights` itself (the
        compiled core's: sent_all's work without a dict of the new flights in
        between; `stamped` then counts them); None where sent_all must run:
        pure Python, or a controller with an on_sent of its own."""
        if _core is None or type(self.cc).on_sent is not CongestionControl.on_sent:
            return None
        rate = self.rate
        if not self.bytes:  # the first: rate.on_sent restarts the interval
            return (rate.delivered, now, now, rate.app_limited != 0)
        return (rate.delivered, rate.delivered_time, rate.first_sent, rate.app_limited != 0)

    def stamped(self, nbytes: int, now: float) -> None:
        """The packer filed flights of `nbytes` bytes with stamps(now)'s stamps."""
        if nbytes:
            if not self.bytes:
                self.rate.first_sent = self.rate.delivered_time = now
            self.bytes += nbytes

    def remove(self, f: Flight) -> None:
        """`f` is resolved (acked, lost, or about to be sent again)."""
        del self.flights[f.pn]
        self.bytes -= f.size
        if f.retx:
            self._retx -= 1

    def clear(self) -> None:
        """A session starts or ends: nothing of it is in flight any more."""
        self.flights.clear()
        self.lost.clear()
        self.bytes = 0
        self._retx = 0
        self._repairs.clear()
        self._superseded.clear()
        self.probes.clear()
        self.loss_time = None
        self._largest_pn = 0
        self.rack.reset()

    def resent(self, old_pn: int, old_sent: float, f: Flight, now: float, repair: bool) -> None:
        """A datagram sent as `old_pn` at `old_sent` goes out again as `f` (the
        same flight renumbered, or a smaller piece of it: packing.py);
        `repair`: because it was declared lost."""
        _remember(self._superseded, old_pn, old_sent)
        if repair:
            _remember(self._repairs, f.pn, old_sent)
        f.retx = True
        self.sent(f, now)

    # --------------------------------------------------------- answers
    def on_ack(self, ack: Ack, received: int, all_received: bool, now: float) -> None:
        """Resolve what `ack` covers (`received`: the highest in-order seq known;
        `all_received`: it covers everything sent so far)."""
        rtt_sample = self._sample_rtt(ack, now)
        for pn in ack.duplicates:
            lost_sent = self._repairs.pop(pn, None)
            if lost_sent is not None:
                self._spurious(lost_sent, now)
        sample = RateSample(prior_in_flight=self.bytes)
        rate = self.rate
        resolved = None
        if _core is not None:  # the walk, remove() and rate.on_acked() of each, in C
            resolved = _core.ledger_acked(self, ack, received, all_received, now)
        if resolved is None or resolved is NotImplemented:
            acked = self._acked(ack, received, all_received)
            for f in acked:
                self.remove(f)
                rate.on_acked(f, now)
        else:
            acked = resolved
        if self.path is not None:
            self.path.on_acked(acked, now)
        if self.lost:
            self._drop_delivered(received, ack.ranges, now)
        self.detect_losses(now, sample)
        rate.sample(sample, self.rtt.min_rtt)
        sample.rtt = rtt_sample
        sample.in_flight = self.bytes
        self.cc.on_ack(sample, now)

    def _sample_rtt(self, ack: Ack, now: float) -> float:
        """The RTT sample of `ack`'s largest packet number, if this sender knows
        when it went (a flight, a superseded copy or a loss probe; else 0), fed
        to the estimator and to RACK; the largest pn the listener has seen moves
        up, and loss probes at or below it are resolved."""
        largest = ack.largest_pn
        rtt_sample = 0.0
        named = self.flights.get(largest)
        if named is not None:
            sent: float | None = named.sent
        else:
            sent = self._superseded.pop(largest, None) or self.probes.pop(largest, None)
        if sent is not None:
            rtt_sample = now - sent
            self.rtt.on_sample(rtt_sample, ack.ack_delay / 1e6)
            self.rack.on_delivered(largest, sent, now)
        if largest > self._largest_pn:
            self._largest_pn = largest
            if self.probes:
                for pn in [p for p in self.probes if p <= largest]:
                    del self.probes[pn]
        return rtt_sample

    def _acked(self, ack: Ack, received: int, all_received: bool) -> list[Flight]:
        """The flights `ack` covers: up to its seq `received`, in its ranges, or
        (pieces) in its fragment spans."""
        flights = self.flights
        ranges = ack.ranges
        frags = dict(ack.fragments) if ack.fragments else None
        largest_pn = self._largest_pn
        # None above the largest packet number the listener has seen can be
        # resolved yet, so the walk stops there.  Without ranges and with no
        # retransmission in flight, only a prefix can be acked.
        full = bool(ranges or frags or self._retx)
        acked: list[Flight] = []
        for pn, f in flights.items():
            if pn > largest_pn:
                break
            if (
                f.last <= received
                or (ranges and _in_ranges(f, ranges))
                or (frags is not None and f.end and _in_spans(f, frags.get(f.first)))
            ):
                acked.append(f)
            elif not full:
                break
        if len(acked) < len(flights) and all_received:
            # everything sent is received: copies whose own answer never came are done too
            seen = {id(f) for f in acked}
            acked.extend(f for f in flights.values() if f.last <= received and id(f) not in seen)
        return acked

    def detect_losses(self, now: float, sample: RateSample | None = None) -> None:
        """RACK: a flight sent before the newest delivered one is lost once it is
        older than RACK's rtt + reo_wnd; the first one not yet that old sets
        `loss_time`."""
        self.loss_time = None
        rack = self.rack
        if not rack.pn or not self.flights:
            return
        delay = rack.loss_delay(self.rtt)
        walked = None
        if _core is not None:
            walked = _core.ledger_lost(self.flights, rack.pn, delay, now)
        if walked is not None and walked is not NotImplemented:
            lost, self.loss_time = walked
        else:
            lost = self._overtaken(rack.pn, delay, now)
        if not lost:
            return
        cc = self.cc
        before = cc.losses
        for f in lost:
            self.remove(f)
            self.stats.lost += 1
            if sample is not None:
                sample.newly_lost += f.size
            cc.on_lost(f.sent, f.size, now)
            self.lost.append(f)
            if self.path is not None:
                self.path.on_lost(f.size, f.sent, now, self.rtt.rto)
        if cc.losses > before:
            rack.on_recovery(lost[-1].sent, now)

    def _overtaken(self, reference: int, delay: float, now: float) -> list[Flight]:
        """RACK's walk: the flights sent before packet number `reference` that
        are `delay` old at `now`; the first one that is not sets `loss_time`."""
        lost: list[Flight] = []
        for f in self.flights.values():
            if f.pn >= reference:
                break
            if f.sent + delay <= now:
                lost.append(f)
            else:
                self.loss_time = f.sent + delay
                break
        return lost

    def _spurious(self, lost_sent: float, now: float) -> None:
        self.stats.spurious += 1
        self.rack.on_spurious(now, self.rtt)
        self.cc.on_spurious(lost_sent, now)

    def _drop_delivered(
        self, received: int, ranges: tuple[tuple[int, int], ...], now: float
    ) -> None:
        """Flights declared lost and not resent yet that the answer shows
        delivered: their loss was spurious (only the original can have arrived)."""
        keep: deque[Flight] = deque()
        for f in self.lost:
            if f.last <= received or (ranges and _in_ranges(f, ranges)):
                if not f.retx:
                    self._spurious(f.sent, now)
            else:
                keep.append(f)
        self.lost = keep


def _remember(memory: dict[int, float], pn: int, sent: float) -> None:
    memory[pn] = sent
    if len(memory) > MEMORY:
        del memory[next(iter(memory))]


def _in_ranges(f: Flight, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(a <= f.first and f.last <= b for a, b in ranges)


def _in_spans(f: Flight, spans: tuple[tuple[int, int], ...] | None) -> bool:
    if not spans:
        return False
    return any(a <= f.offset and f.end <= b for a, b in spans)
