"""The receiver of a competing TCP flow: what it delivers, and when it acknowledges.

Why it exists: how often and when a TCP receiver sends its ACKs shapes the
sender's bursts, and so what the flow loses at a drop-tail queue beside a
paced flow.  Linux's receiver (tcp_input.c: __tcp_ack_snd_check,
tcp_event_data_recv, the delayed-ACK and compressed-SACK timers) does not
acknowledge every segment, and an unpaced Linux sender answers each ACK
with as many segments as it covered: measured through the path emulator
(bench/paths, `--shared`), 72-84 % of a CUBIC flow's ACKs cover two
segments and 79-86 % of its segments leave in bursts of two, at 20 and
50 Mbit/s.  This is that receiver, sans-IO: segments and `now` in, ACKs
and the next deadline out.

When an arriving segment is acknowledged:

- **at once** when it is the second in-order segment not yet acknowledged
  (Linux acknowledges when more than one full segment arrived since its
  last ACK); in quick-ACK mode: the first `QUICKACKS` ACKs of the
  connection, again after a duplicate arrived, and while the receive
  window grows -- here, for one receiver RTT after one that delivered more
  than any before (Linux's autotuning grows the window as the rate grows,
  and each growth step sets quick-ACK mode: on the emulator a slow start's
  ACKs mostly cover one segment each, which times HyStart's exit);
  when it is a duplicate (a D-SACK); when it fills a hole; and for the
  first three out-of-order segments after the cumulative point last moved
  (the duplicate ACKs that start the sender's recovery);
- **compressed**, for later out-of-order segments: one ACK for all that
  arrived within min(1 ms, RTT / 20) (tcp_comp_sack_delay_ns), or at the
  44th (tcp_comp_sack_nr) -- or, here, once 6 are waiting, all an ACK can
  report;
- **delayed**, a lone in-order segment: 40 ms later (TCP_DELACK_MIN) unless
  another arrives first.

The receiver's RTT (for the compression delay and the autotuning's
periods) is the time from its answer to the SYN to the first segment, as
Linux's receiver first measures it.

An ACK is 52 bytes on the wire (as a TCP ACK with timestamps; SACK blocks
would add to it, ignored): the cumulative point, the send time of the
newest segment it reports (TCP timestamps: every ACK is an RTT sample),
and the numbers of the segments that arrived since the last ACK, with the
two newest of those the last ACK reported (SACK-like, and one lost ACK
costs no knowledge).  The receive window is the sender's fixed cap
(competitors.py), so it is not advertised.

What is left out: Linux's receive-window growth itself (it paces the
single ACKs of a slow start more finely: runs of 20-odd, then a few
pairs), and GRO, which the emulator's TUN devices do not do.
"""

from __future__ import annotations

import struct

from .tcpcc import MSS

__all__ = [
    "ACK_SIZE",
    "CHARGED",
    "REPORTED",
    "SEGMENT",
    "UDP_IP",
    "TcpSink",
    "ack_struct",
    "head_struct",
    "segment_struct",
]

SEGMENT = 1500
"""Bytes of a segment on the wire (IPv4 + TCP with timestamps: 52 B of headers)."""
UDP_IP = 28
"""Bytes of an IPv4 and a UDP header: what a link's datagram on FakeNet leaves
out of its packet, and so what a flow's segment leaves out too (competitors.py)."""
CHARGED = SEGMENT - UDP_IP
"""Bytes of a segment's datagram on FakeNet: what the bottleneck charges it."""
ACK_SIZE = 52
"""Bytes of an acknowledgement on the wire."""
REPORTED = 8
"""Segment numbers an ACK carries: at most 6 new arrivals and 2 the ACK before carried."""
QUICKACKS = 16
"""ACKs sent at once in quick-ACK mode (TCP_MAX_QUICKACKS)."""
DELAYED_ACK = 0.04
"""Seconds a lone in-order segment waits for its ACK (TCP_DELACK_MIN, TCP_ATO_MIN)."""
COMPRESS_DELAY = 0.001
"""Seconds at most that out-of-order segments wait to share an ACK (tcp_comp_sack_delay_ns)."""
COMPRESS_MAX = 44
"""Out-of-order segments at most in one compressed ACK (tcp_comp_sack_nr)."""
DUPACKS = 3
"""Out-of-order segments acknowledged at once after the cumulative point moved."""

ack_struct = struct.Struct(f"!qdB{REPORTED}i{ACK_SIZE - 17 - 4 * REPORTED}x")
"""An ACK: cumulative point (-1: the SYN's answer), echoed send time, how many
segment numbers follow, the numbers (-1 past that count)."""
head_struct = struct.Struct("!qd")
"""The head of a segment: its number (-1: the SYN) and its send time."""
segment_struct = struct.Struct(f"!qd{CHARGED - head_struct.size}x")
"""A whole segment: the head and the payload (zeros: only its size matters)."""


class TcpSink:
    """A competitor's receiver: counts unique payload and acknowledges as Linux does
    (module docstring).  `receive` answers a segment with an ACK or None;
    `next_timer` and `on_timer` send the delayed and compressed ones."""

    def __init__(self) -> None:
        self.cum = 0
        """Segments 0 .. cum - 1 all arrived."""
        self.above: set[int] = set()
        """Segments above `cum` that arrived."""
        self.delivered = 0
        """Unique payload bytes that arrived."""
        self.segments = 0
        """Segments that arrived, duplicates included."""
        self.acks = 0
        """ACKs sent (the SYN's answer included)."""
        self.rtt = 0.0
        """The receiver's RTT estimate: from the SYN's answer to the first segment."""
        self._answered: float | None = None
        self._new: list[int] = []  # arrived since the last ACK, oldest first
        self._old: list[int] = []  # the two newest the last ACK reported
        self._echo = 0.0
        self._in_order = 0  # segments the cumulative point moved since the last ACK
        self._quick = QUICKACKS
        self._delayed_at: float | None = None
        self._compress_at: float | None = None
        self._compressed = 0
        self._dupacks = 0
        self._dupacks_at = -1  # the cumulative point the duplicate ACKs counted at
        self._period_start = 0.0  # the receive-window growth, one receiver RTT at a time
        self._period_cum = 0
        self._best = 0
        self.growing = False
        """The last RTT delivered more than any before: the receive window grows,
        every segment is acknowledged (Linux's autotuning sets quick-ACK mode)."""

    def receive(self, data: bytes, now: float) -> bytes | None:
        """A segment arrived: the ACK to send back now, if any."""
        seq, sent = head_struct.unpack_from(data)
        if seq < 0:
            if self._answered is None:
                self._answered = now
            self.acks += 1
            return ack_struct.pack(-1, sent, 0, *([-1] * REPORTED))
        if not self.segments:
            self._period_start = now
            if self._answered is not None:
                self.rtt = now - self._answered
        elif now - self._period_start >= self.rtt:
            self._autotune(now)
        self.segments += 1
        self._echo = sent
        self._new.append(seq)
        cum, above = self.cum, self.above
        if seq < cum or seq in above:  # a duplicate: a D-SACK at once, and quick ACKs
            self._quick = QUICKACKS
            return self._ack()
        self.delivered += MSS
        if seq > cum:
            above.add(seq)
            return self._out_of_order(now)
        holes = bool(above)
        cum += 1
        while cum in above:
            above.remove(cum)
            cum += 1
        self._in_order += cum - self.cum
        self.cum = cum
        if holes or self._in_order >= 2 or self._quick or self.growing:
            return self._ack()
        if self._delayed_at is None:
            self._delayed_at = now + DELAYED_ACK
        return None

    def _autotune(self, now: float) -> None:
        """A receiver RTT is over: did it deliver more than any before?"""
        delivered = self.cum - self._period_cum
        self.growing = delivered > self._best
        self._best = max(self._best, delivered)
        self._period_start, self._period_cum = now, self.cum

    def _out_of_order(self, now: float) -> bytes | None:
        """Linux's SACK compression: the first DUPACKS at once, then one per delay."""
        if self._in_order >= 2 or self._quick or self._compressed >= COMPRESS_MAX:
            return self._ack()
        if self._dupacks_at != self.cum:
            self._dupacks_at, self._dupacks = self.cum, 0
        if self._dupacks < DUPACKS:
            self._dupacks += 1
            return self._ack()
        self._compressed += 1
        if len(self._new) >= REPORTED - 2:
            return self._ack()
        if self._compress_at is None:
            self._compress_at = now + min(COMPRESS_DELAY, self.rtt / 20.0)
        return None

    def _ack(self) -> bytes:
        new = self._new
        report = new + self._old
        self._old = new[-2:]
        self._new = []
        self._in_order = self._compressed = 0
        self._delayed_at = self._compress_at = None
        if self._quick:
            self._quick -= 1
        self.acks += 1
        report += [-1] * (REPORTED - len(report))
        return ack_struct.pack(self.cum, self._echo, len(new), *report)

    def next_timer(self) -> float | None:
        """When `on_timer` has an ACK to send (None: none waits)."""
        delayed, compress = self._delayed_at, self._compress_at
        if delayed is None:
            return compress
        return delayed if compress is None or delayed < compress else compress

    def on_timer(self, now: float) -> bytes | None:
        """The delayed or compressed ACK, if it is due at `now`."""
        due = self.next_timer()
        if due is None or now < due:
            return None
        return self._ack()
