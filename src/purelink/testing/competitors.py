"""Bulk TCP flows that compete with purelink links for a FakeNet bottleneck.

Why it exists: SPEC asks a link to take a fair share of a path it shares
with Linux TCP (CUBIC or BBR) at any buffer depth.  The TUN benchmark
measures that with real kernels, slowly and never twice the same; these
models let a congestion-control test assert it in virtual time, seeded, in
a second.  A `Competitor` is a sans-IO sender of an endless bulk transfer:
segments and `now` in, segments, the next deadline and counters out; its
`TcpSink` is the receiver on the listener's side.  The Simulation
(testing/sim.py, `add_competitor`) puts both on the same FakeNet as its
links, so they share the up direction's bottleneck and drop-tail queue.

What is modelled (the policies that set the window live in tcpcc.py and
tcpbbr.py, the receiver in tcpsink.py); where a figure of Linux is given it
was measured on the TUN path emulator (Linux 6.18, bench/paths; `python -m
bench.paths.calibrate` runs its `--shared` cells here too, side by side):

- **Segments** carry 1448 B of payload in 1500-B datagrams and are numbered
  1 by 1 (not by byte).  The sink acknowledges as Linux's receiver does:
  every second in-order segment, at once in quick-ACK mode and while its
  receive window grows (in slow start most segments), at once for a
  segment out of order, a hole filled or a duplicate, and one compressed
  ACK for later out-of-order ones.  An ACK carries the cumulative point,
  the segments that arrived since the last ACK and two before (SACK-like:
  one lost ACK costs no knowledge), and the send time of the newest of
  them (TCP timestamps: every ACK is an RTT sample, retransmissions too).
- **What the bottleneck charges**: FakeNet charges a datagram its length,
  and a link hands it a UDP payload, without the 28 B of IPv4 and UDP
  headers its packet carries on a wire.  So a flow's segments go on FakeNet
  28 B short of their wire size too (`UDP_IP`): as 1472 B (`CHARGED`), and a
  link and a flow pay alike for the bytes they put on the path.  (Charging
  the links their 28 B instead would move every run of links alone that has
  a bottleneck.)  An ACK goes as 52 B: it carries segment numbers a real
  one's SACK blocks would, and the down path is no bottleneck.
- **Bursts**: an unpaced flow answers each ACK with as many segments as it
  covered -- two, mostly (Linux on the emulator: 79-86 % of an unpaced
  CUBIC flow's segments leave in back-to-back pairs, 81-90 % here); a
  drop-tail queue beside a paced flow takes more from it than from that one.
  TSO deferral, which would make the bursts larger, is not modelled: at 20
  and 50 Mbit/s the emulator shows pairs.
- **A handshake**: a SYN and its answer give the first RTT, as Linux has
  one before its first segment (BBR seeds min_rtt and pacing with it).
- **Loss detection** as Linux's SACK scoreboard: a transmission is lost once
  3 transmissions sent after it were delivered (dupthresh 3, which with
  RACK's ordering by send time also catches a lost retransmission).  The
  flow keeps the third-newest delivered transmission number, so the check
  is O(1) per ACK.  Else the RTO: RFC 6298's srtt + 4 rttvar, at least
  200 ms, doubled at each expiry until an ACK delivers new data; it marks
  everything in flight lost and the policy restarts from one segment.
- **Recovery episodes**: the first loss starts one and tells the policy
  (one window reduction); it ends when everything sent before it is
  cumulatively acknowledged.  Lost segments go first, new ones after,
  whenever the pipe (in flight = sent - delivered - lost) is below cwnd.
  Linux's PRR spreads the same reduction over the episode's round trip
  instead; not modelled.
- **Delivery-rate samples** (draft-cheng-iccrg-delivery-rate-estimation,
  Linux's tcp_rate.c): each transmission remembers the delivered count and
  time when it left; an ACK's sample is over the newest transmission it
  delivered, interval = max(send elapsed, ack elapsed), and is invalid
  below min_rtt.
- **Pacing**: a flow whose policy gives a pacing rate (BBR always, Reno and
  CUBIC when `paced`, as with the fq qdisc) sends a GSO packet at each
  release -- 1 ms of the rate, at least 2 segments (tcp_tso_autosize) --
  and the next release is that packet's size / rate later; the others send
  as ACKs open the window.
- The receive window is a fixed cap of `window` segments: on the emulator
  Linux's autotuned window stayed above the congestion window throughout
  (1.3-1.6 x it in slow start, up to 20 MB after).

Cost: the simulation steps once per datagram arrival, pacing release and
delayed-ACK timer, at about 8 us a step.  One flow alone through
200 Mbit/s, 40 ms and a one-bdp buffer for 20 s of virtual time (330k
segments, 165k ACKs) took 4.0 s of real time for CUBIC (494k steps),
3.7 s for Reno and 4.6 s for BBR (508k steps), on a shared two-core machine.
"""

from __future__ import annotations

import math
import random
import struct
from collections import deque

from .tcpbbr import Bbr
from .tcpcc import MSS, Ack, Cubic, Reno, tso_segments
from .tcpsink import ACK_SIZE, CHARGED, SEGMENT, UDP_IP, TcpSink, ack_struct, segment_struct

__all__ = [
    "ACK_SIZE",
    "CHARGED",
    "KINDS",
    "MSS",
    "SEGMENT",
    "UDP_IP",
    "WINDOW",
    "Competitor",
    "TcpSink",
]

MIN_RTO = 0.2
MAX_BACKOFF = 64
INITIAL_RTO = 1.0
WINDOW = 4096
"""Segments: the receive window's cap by default (about 6 MB, Linux's tcp_rmem
maximum); a path that holds more needs a larger `window` (sharing.window)."""

SYN_SIZE = 60
"""Bytes of the SYN on the wire."""

_SYN = struct.Struct(f"!qd{SYN_SIZE - UDP_IP - 16}x")  # seq -1, send time
_IN_FLIGHT, _LOST, _DELIVERED = 0, 1, 2

Controller = Reno | Cubic | Bbr
"""A flow's window policy (tcpcc.py, tcpbbr.py)."""
KINDS = ("reno", "cubic", "bbr")
"""The competitor kinds, by Linux's names."""


def controller(kind: str, rng: random.Random, *, paced: bool | None = None) -> Controller:
    """The policy of `kind`; `paced` (None: as Linux by default) applies to reno and cubic."""
    if kind == "bbr":
        return Bbr(rng)
    if kind == "cubic":
        return Cubic(paced=bool(paced))
    if kind == "reno":
        return Reno(paced=bool(paced))
    raise ValueError(f"no competitor kind {kind!r}: one of {', '.join(KINDS)}")


class _Segment:
    """One segment's last transmission and what it is now."""

    __slots__ = ("first_sent", "prior_delivered", "prior_time", "sent", "seq", "state", "tx")

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.tx = 0
        """Transmission number of its last transmission."""
        self.state = _IN_FLIGHT
        self.sent = 0.0
        self.prior_delivered = 0
        self.prior_time = 0.0
        self.first_sent = 0.0


class Competitor:
    """One bulk TCP flow (module docstring): sender, scoreboard and RTO; the
    window and pacing come from its policy `cc` (tcpcc.py)."""

    def __init__(
        self,
        name: str,
        kind: str,
        *,
        start: float,
        seed: int = 0,
        paced: bool | None = None,
        window: int = WINDOW,
    ) -> None:
        self.name = name
        """The simulation's name for it ("tcp:1"); its ACKs go to "tcpack:1"."""
        self.cc: Controller = controller(kind, random.Random(f"{seed}/{name}"), paced=paced)
        self.kind = kind
        """"reno", "cubic" or "bbr"."""
        self.sink = TcpSink()
        """Its receiver, beside the listener."""
        self.start = start
        """When it sends its SYN."""
        self.window = window
        """The receive window: segments in flight at most, whatever cwnd says."""
        self.established = False
        """The SYN was answered."""
        self._syn_due: float | None = start
        self.next_seq = 0
        """The next new segment's number (segments are numbered from 0)."""
        self.una = 0
        """The oldest segment not cumulatively acknowledged."""
        self._segments: dict[int, _Segment] = {}  # not yet cumulatively acknowledged
        self._order: deque[tuple[int, _Segment]] = deque()  # transmissions, oldest first
        self._lost: deque[_Segment] = deque()  # to retransmit, in the order found
        self.in_flight = 0
        """Segments sent and neither delivered nor declared lost (RFC 6675's pipe)."""
        self._tx = 0
        self._t1 = self._t2 = self._t3 = -1  # the three newest delivered transmissions
        self.srtt = 0.0
        """Smoothed RTT, seconds (RFC 6298); 0 before the handshake's answer."""
        self.rttvar = 0.0
        self.min_rtt = math.inf
        """The smallest RTT seen."""
        self.rto = INITIAL_RTO
        """The retransmission timeout before backoff, seconds."""
        self._backoff = 1
        self._rto_at: float | None = None
        self._recovery_point: int | None = None
        self._timed_out = False  # the episode began with an RTO (Linux's Loss state)
        self.acked = 0
        """Segments delivered, as the sender knows it."""
        self._delivered_time = start
        self._first_sent = start
        self._next_send = start
        self._ack = Ack()
        self.sent = 0
        """Segments sent, retransmissions included."""
        self.losses = 0
        """Segments declared lost (by the scoreboard or an RTO)."""
        self.retransmits = 0
        """Segments sent again."""
        self.recoveries = 0
        """Recovery episodes (window reductions) after loss."""
        self.timeouts = 0
        """RTO expiries."""

    @property
    def delivered(self) -> int:
        """Unique payload bytes that reached the sink."""
        return self.sink.delivered

    @property
    def cwnd(self) -> float:
        """The congestion window, segments."""
        return self.cc.cwnd

    @property
    def recovering(self) -> bool:
        """In a recovery episode."""
        return self._recovery_point is not None

    def next_timer(self) -> float | None:
        """When `on_timer` or `datagrams_to_send` next has work (None: at the next ACK)."""
        if not self.established:
            return self._syn_due if self._syn_due is not None else self._rto_at
        due = self._rto_at
        if self.cc.pacing_rate and self.in_flight < self._limit():
            nxt = self._next_send
            if due is None or nxt < due:
                return nxt
        return due

    def _limit(self) -> float:
        cwnd = self.cc.cwnd
        return cwnd if cwnd < self.window else self.window

    def datagrams_to_send(self, now: float) -> list[bytes]:
        """The segments to send at `now`: lost ones first, then new ones."""
        if not self.established:
            if self._syn_due is None or now < self._syn_due:
                return []
            self._syn_due = None
            self._rto_at = now + self.rto * self._backoff
            return [_SYN.pack(-1, now)]
        out: list[bytes] = []
        limit, rate = self._limit(), self.cc.pacing_rate
        while self.in_flight < limit:
            burst = limit  # unpaced: all the window allows
            if rate:
                if now < self._next_send:
                    break
                burst = min(tso_segments(rate), math.ceil(limit - self.in_flight))
                self._next_send = max(self._next_send, now) + burst / rate
            while burst > 0 and self.in_flight < limit:
                out.append(self._send_one(now))
                burst -= 1
        return out

    def _send_one(self, now: float) -> bytes:
        """The next segment: the oldest lost one, else a new one."""
        lost = self._lost
        while lost and lost[0].state != _LOST:
            lost.popleft()
        if lost:
            seg = lost.popleft()
            self.retransmits += 1
        else:
            if not self._segments:  # nothing out: a new rate-sampling interval
                self._first_sent = self._delivered_time = now
            seg = self._segments[self.next_seq] = _Segment(self.next_seq)
            self.next_seq += 1
        self._transmit(seg, now)
        return segment_struct.pack(seg.seq, now)

    def _transmit(self, seg: _Segment, now: float) -> None:
        self._tx += 1
        seg.tx = self._tx
        seg.state = _IN_FLIGHT
        seg.sent = now
        seg.prior_delivered = self.acked
        seg.prior_time = self._delivered_time
        seg.first_sent = self._first_sent
        self.in_flight += 1
        self.sent += 1
        self._order.append((seg.tx, seg))
        if self._rto_at is None:
            self._rto_at = now + self.rto * self._backoff

    def receive_ack(self, data: bytes, now: float) -> None:
        """An ACK arrived: mark what it delivered, find losses, tell the policy."""
        cum, echoed, _, *reported = ack_struct.unpack(data)
        if cum < 0:
            self._established(now - echoed, now)
            return
        if not self.established:
            return
        ack = self._ack
        ack.now, ack.prior_in_flight = now, self.in_flight
        ack.rtt = rtt = now - echoed
        self._rtt_sample(rtt)
        count, newest = self._deliver(cum, reported)
        ack.acked, ack.prior_delivered, ack.rate = count, -1, 0.0
        if newest is not None:
            self._sample(newest, ack, now)
            self._backoff = 1
            self._rto_at = now + self.rto if self.una < self.next_seq else None
        ack.lost = lost = self._find_losses()
        point = self._recovery_point
        if point is not None and self.una >= point:
            self._recovery_point = None
            self._timed_out = False
            self.cc.on_recovery_end(now)
        if lost and self._recovery_point is None:
            self._recovery_point = self.next_seq
            self.recoveries += 1
            self.cc.on_congestion(now)
        ack.in_flight, ack.delivered, ack.srtt = self.in_flight, self.acked, self.srtt
        ack.una, ack.next_seq = self.una, self.next_seq
        ack.recovering = self._recovery_point is not None and not self._timed_out
        self.cc.on_ack(ack)

    def _established(self, rtt: float, now: float) -> None:
        if self.established:
            return
        self.established = True
        self._rto_at = None
        self._backoff = 1
        self._rtt_sample(rtt)
        self._delivered_time = self._first_sent = self._next_send = now
        self.cc.on_established(rtt, now)

    def _deliver(self, cum: int, seqs: list[int]) -> tuple[int, _Segment | None]:
        """Mark the segments an ACK covers delivered: how many, and the newest sent."""
        segments, una = self._segments, self.una
        found = [seg for s in seqs if s >= una and (seg := segments.get(s)) is not None]
        if cum > una:
            found += [segments.pop(s) for s in range(una, cum)]
            self.una = cum
        count, newest = 0, None
        for seg in found:
            if seg.state == _DELIVERED:
                continue
            if seg.state == _IN_FLIGHT:
                self.in_flight -= 1
            seg.state = _DELIVERED
            count += 1
            if newest is None or seg.sent > newest.sent:
                newest = seg
            tx = seg.tx
            if tx > self._t3:  # keep the three newest delivered transmissions
                if tx > self._t1:
                    self._t3, self._t2, self._t1 = self._t2, self._t1, tx
                elif tx > self._t2:
                    self._t3, self._t2 = self._t2, tx
                else:
                    self._t3 = tx
        self.acked += count
        return count, newest

    def _sample(self, newest: _Segment, ack: Ack, now: float) -> None:
        """The delivery-rate sample over the newest transmission delivered."""
        self._delivered_time = now
        send_elapsed = newest.sent - newest.first_sent
        ack_elapsed = now - newest.prior_time
        self._first_sent = newest.sent
        interval = send_elapsed if send_elapsed > ack_elapsed else ack_elapsed
        ack.prior_delivered = newest.prior_delivered
        if interval >= self.min_rtt and interval > 0.0:
            ack.rate = (self.acked - newest.prior_delivered) / interval

    def _find_losses(self) -> int:
        """Transmissions with three later ones delivered are lost: how many now."""
        order, t3, lost = self._order, self._t3, 0
        while order and order[0][0] < t3:
            tx, seg = order.popleft()
            if seg.tx == tx and seg.state == _IN_FLIGHT:
                seg.state = _LOST
                self.in_flight -= 1
                self._lost.append(seg)
                lost += 1
        self.losses += lost
        return lost

    def _rtt_sample(self, rtt: float) -> None:
        """RFC 6298's estimators; the RTO at least MIN_RTO."""
        if rtt <= 0.0:
            return
        self.min_rtt = min(self.min_rtt, rtt)
        if not self.srtt:
            self.srtt, self.rttvar = rtt, rtt / 2.0
        else:
            self.rttvar += 0.25 * (abs(self.srtt - rtt) - self.rttvar)
            self.srtt += 0.125 * (rtt - self.srtt)
        rto = self.srtt + 4.0 * self.rttvar
        self.rto = rto if rto > MIN_RTO else MIN_RTO

    def on_timer(self, now: float) -> None:
        """The RTO: everything in flight is lost, the policy starts from one segment."""
        due = self._rto_at
        if due is None or now < due:
            return
        self._rto_at = None
        self.timeouts += 1
        self._backoff = min(self._backoff * 2, MAX_BACKOFF)
        if not self.established:
            self._syn_due = now
            return
        lost = 0
        for seg in self._segments.values():
            if seg.state == _IN_FLIGHT:
                lost += 1
            if seg.state != _DELIVERED:
                seg.state = _LOST
        self._lost = deque(s for s in self._segments.values() if s.state == _LOST)
        self._order.clear()
        self.in_flight = 0
        self.losses += lost
        recovering = self._recovery_point is not None
        self._recovery_point = self.next_seq
        self._timed_out = True
        self.cc.on_timeout(now, recovering)
