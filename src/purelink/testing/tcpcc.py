"""The window policies of the simulation's loss-based TCP flows: Reno and CUBIC.

Why it exists: a congestion-control test that asserts a fair share needs the
other side of the share to behave as the Linux TCP a purelink link will meet
on a real path.  These are models of that behaviour, not ports: each keeps
only what decides how much of a bottleneck the flow takes (its window, its
pacing rate, how it reacts to loss and to delay), written from the papers,
RFCs and Linux sources they cite, in the units the flow works in:
**segments** of 1448 B payload, seconds, segments per second.  BBR v1,
the model-based one, is tcpbbr.py; both take the calls below.

The flow (testing/competitors.py) drives a policy through four calls and
reads two numbers back, `cwnd` (segments that may be in flight) and
`pacing_rate` (segments per second, 0: send as the window allows):

    handshake done:          on_established(rtt, now)
    every acknowledgement:   on_ack(ack)          # after its losses were marked
    a loss starts recovery:  on_congestion(now)   # once per recovery episode
    the episode is over:     on_recovery_end(now)
    the RTO fired:           on_timeout(now, recovering)   # in an episode already?

Checked against Linux 6.18 on the TUN path emulator (bench/paths): CUBIC
alone through 20 Mbit/s, 40 ms leaves slow start on HyStart's ACK train at
75 segments (Linux: 76), through 50 Mbit/s, 100 ms at 531 (Linux: 533);
beside a paced flow that already queues, on the delay at 48 (Linux: 49)
and 328 (Linux: 329); alone behind 10 bdps of buffer it loses 47 segments
in 2 recoveries in 20 s (Linux: 48 in 2).

What the models leave out: undoing a reduction that a DSACK or a
timestamp proves spurious, PRR (the window drops to its new value at once
and the flow sends when the data in flight falls below it, as RFC 6675's
pipe does), Linux's once-a-jiffy update of CUBIC's growth, and
receive-window autotuning (the flow has a fixed cap).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["INITIAL_WINDOW", "MSS", "Ack", "Cubic", "Reno", "tso_segments"]

INITIAL_WINDOW = 10
"""Segments (RFC 6928, Linux's TCP_INIT_CWND)."""
MSS = 1448
"""Payload bytes of a segment (1500-B packets, IPv4 and TCP with timestamps)."""
PACING_SHIFT = 1024
"""A paced GSO packet holds about 1/1024 s of the pacing rate (sk_pacing_shift 10)."""
MIN_TSO_RATE = 1.2e6 / 8
"""Bytes/s: below this a paced flow sends single segments, else at least 2
(bbr_min_tso_rate; tcp_min_tso_segs is 2)."""
GSO_LEGACY_MAX = 65536 - 1 - 320
"""Bytes a GSO packet holds at most (GSO_LEGACY_MAX_SIZE - 1 - MAX_TCP_HEADER)."""


def tso_segments(pacing_rate: float) -> int:
    """Segments a paced Linux flow sends back to back at each pacing release (its
    GSO packet: tcp_tso_autosize, bbr_tso_segs_goal): 1 ms of `pacing_rate`
    (segments/s), at least 2 (1 below 1.2 Mbit/s)."""
    rate = pacing_rate * MSS
    least = 1 if rate < MIN_TSO_RATE else 2
    return min(max(int(min(rate / PACING_SHIFT, GSO_LEGACY_MAX)) // MSS, least), 127)


@dataclass(slots=True)
class Ack:
    """What one acknowledgement told the flow (the flow fills one in place per ACK)."""

    now: float = 0.0
    """When it arrived."""
    acked: int = 0
    """Segments it newly delivered (cumulatively or selectively)."""
    lost: int = 0
    """Segments it declared lost."""
    rtt: float = 0.0
    """RTT of the transmission whose arrival it reports, seconds (0: none)."""
    srtt: float = 0.0
    """The flow's smoothed RTT after it."""
    in_flight: int = 0
    """Segments in flight after it (sent, not delivered, not lost)."""
    prior_in_flight: int = 0
    """Segments in flight before it."""
    una: int = 0
    """The oldest segment not cumulatively acknowledged after it (snd_una)."""
    next_seq: int = 0
    """The next new segment the flow will send (snd_nxt)."""
    delivered: int = 0
    """Segments the flow has had delivered, this ACK's included."""
    prior_delivered: int = -1
    """The flow's delivered count when the newest segment it delivered was
    sent (-1: it delivered none)."""
    rate: float = 0.0
    """Delivery rate over that segment's flight, segments/s (0: no valid sample)."""
    recovering: bool = False
    """The flow is in fast recovery: a window reduction is under way (not after
    an RTO: then the window grows again at once, as in Linux's Loss state)."""


class Reno:
    """Reno as Linux runs it (RFC 5681 with RFC 6928's initial window).

    Slow start: from 10 segments the window grows by one segment per segment
    acknowledged until it reaches ssthresh (unbounded at first), so it
    doubles every round trip.  Congestion avoidance: one segment per window
    acknowledged, so +1 segment per round trip.  A loss (once per recovery
    episode, however many segments that round trip lost) sets ssthresh =
    max(cwnd / 2, 2) and the window to it; the window does not grow during
    the episode.  An RTO sets the window to one segment, and ssthresh as a
    loss does unless the episode it fired in already did: slow start again,
    up to ssthresh.

    Unpaced (ack-clocked bursts) unless `paced`: then at Linux's rates with
    the fq qdisc, 2 x cwnd / srtt below half of ssthresh (slow start) and
    1.2 x above.
    """

    kind = "reno"
    beta = 0.5
    """The window kept on a loss."""

    def __init__(self, *, paced: bool = False) -> None:
        self.cwnd = float(INITIAL_WINDOW)
        self.ssthresh = math.inf
        self.pacing_rate = 0.0
        self.paced = paced

    def on_established(self, rtt: float, now: float) -> None:
        """The handshake's round trip took `rtt`."""
        if self.paced:
            self.pacing_rate = 2.0 * self.cwnd / rtt

    def on_ack(self, ack: Ack) -> None:
        """Grow the window (not during recovery)."""
        if not ack.recovering and ack.acked:
            acked = ack.acked
            if self.cwnd < self.ssthresh:  # slow start, up to ssthresh; the rest avoids
                grown = min(self.cwnd + acked, self.ssthresh)
                acked -= int(grown - self.cwnd)
                self.cwnd = grown
            if acked > 0 and self.cwnd >= self.ssthresh:
                self.avoid(ack, acked)
        if self.paced and ack.srtt:
            ratio = 2.0 if self.cwnd < self.ssthresh / 2.0 else 1.2
            self.pacing_rate = ratio * self.cwnd / ack.srtt

    def avoid(self, ack: Ack, acked: int) -> None:
        """Congestion avoidance: +1 segment per window acknowledged."""
        self.cwnd += acked / self.cwnd

    def reduce(self) -> None:
        """ssthresh after a loss: `beta` of the window."""
        self.ssthresh = max(self.cwnd * self.beta, 2.0)

    def on_congestion(self, now: float) -> None:
        """A recovery episode starts: cut the window once."""
        self.reduce()
        self.cwnd = self.ssthresh

    def on_recovery_end(self, now: float) -> None:
        """The episode is over (the window is ssthresh already)."""

    def on_timeout(self, now: float, recovering: bool) -> None:
        """The RTO fired: slow start from one segment (ssthresh as for a loss,
        unless the episode it fired in cut it already)."""
        if not recovering:
            self.reduce()
        self.cwnd = 1.0


HYSTART_LOW_WINDOW = 16
"""Segments: HyStart looks for the exit only from this window on (hystart_low_window)."""
HYSTART_ACK_DELTA = 0.002
"""ACKs this close together are a train (hystart_ack_delta_us)."""
HYSTART_MIN_SAMPLES = 8
"""RTT samples at the start of a round whose smallest is the round's delay."""
HYSTART_DELAY_MIN = 0.004
HYSTART_DELAY_MAX = 0.016
GSO_MAX_SIZE = 65536
"""Bytes: the largest GSO packet of the emulator's TUN devices (and of most NICs)."""
CUBIC_FRIENDLY = 15 / 8
"""Windows acknowledged per segment of Linux's Reno estimate (8 (1 + beta) / 3 / (1 - beta)
in its integer arithmetic: 15, over 8), so it grows by 0.53 a round trip (RFC 9438's alpha)."""


class Cubic(Reno):
    """CUBIC (RFC 9438) as Linux's tcp_cubic.c runs it, with its HyStart.

    Slow start as Reno's, ended early by HyStart (Ha and Rhee, "Taming the
    Elephants: New TCP Slow Start", 2011, as Linux has it, on by default:
    hystart=1, hystart_detect=3).  Each round trip (it starts when an ACK
    covers the first segment sent after the last round began) it watches,
    from a window of 16 segments on:

    - the ACK train: ACKs that come at most 2 ms apart since the round
      began, for longer than (delay_min + ack_delay) / 2 -- half the
      smallest RTT, plus a cushion of min(1 ms, 4 GSO packets at the pacing
      rate), not halved for a paced flow -- mean the flight fills the pipe;
    - the delay: the smallest of the round's first 8 RTT samples above
      delay_min + clamp(delay_min / 8, 4 ms, 16 ms) means a queue is building.

    Either sets ssthresh to the window: congestion avoidance from there,
    with no W_max yet.  delay_min is the smallest RTT sample, but for those
    in the first second of an avoidance epoch (after a reduction the queue
    is still draining).

    On a loss (once per episode) W_max is the window before it, with fast
    convergence: a flow that lost below its previous W_max releases
    bandwidth, W_max = cwnd x (1 + beta) / 2; then ssthresh = cwnd =
    max(beta x cwnd, 2), beta = 0.7 (717 / 1024).  An RTO sets ssthresh so
    too, then forgets everything (Linux's Loss state resets the module: no
    W_max, no delay_min, HyStart armed again) and slow-starts from one segment.

    In congestion avoidance, time t runs from the first ACK after the
    reduction (the epoch), when the window is cwnd_epoch; K = cbrt((W_max -
    cwnd_epoch) / C) with C = 0.4 and origin W_max (K = 0 and origin
    cwnd_epoch when the window is at or above W_max), and

        W_cubic(t) = C (t - K)^3 + origin

    is the window the flow aims at: each segment acknowledged grows cwnd by
    (target - cwnd) / cwnd towards target = W_cubic(t + delay_min), at least
    1/20 of a segment while there is no W_max (5 % a round trip after
    HyStart).  The Reno-friendly estimate starts at cwnd_epoch and grows by
    one segment per 15/8 windows acknowledged (0.53 a round trip); while it
    is above cwnd, cwnd grows by (estimate - cwnd) / cwnd per segment if
    that is faster.  Never more than half a segment per segment
    acknowledged (1.5 x a round trip).
    """

    kind = "cubic"
    beta = 0.7
    c = 0.4

    def __init__(self, *, paced: bool = False, hystart: bool = True) -> None:
        super().__init__(paced=paced)
        self.hystart = hystart
        """HyStart on (Linux's default)."""
        self._reset()
        self.hystart_exit = ""
        """How the last slow start ended: "train", "delay", "loss" (or "" while in it)."""

    def _reset(self) -> None:
        """Linux's bictcp_reset: the module's state as at the connection's start."""
        self.w_max = 0.0
        """The window before the last reduction (with fast convergence; 0: none yet)."""
        self.origin = 0.0
        self.k = 0.0
        self.epoch: float | None = None
        self.w_est = 0.0
        self.delay_min = math.inf
        """The smallest RTT sample (s), as HyStart and the cubic's time offset use it."""
        self.found = False
        """HyStart ended this slow start."""
        self._end_seq = -1
        self._round_start = self._last_ack = 0.0
        self._curr_rtt = math.inf
        self._samples = 0

    def on_established(self, rtt: float, now: float) -> None:
        """Reno's; HyStart's first round starts now."""
        super().on_established(rtt, now)
        self._hystart_reset(now, 0)

    def on_ack(self, ack: Ack) -> None:
        """The RTT sample (Linux's pkts_acked, HyStart), then Reno's on_ack with
        CUBIC's avoidance."""
        delay = ack.rtt
        if ack.acked and delay > 0.0 and (self.epoch is None or ack.now - self.epoch >= 1.0):
            self.delay_min = min(self.delay_min, delay)
            if self.hystart and not self.found and self.cwnd < self.ssthresh:
                self._hystart_update(ack, delay)
        super().on_ack(ack)

    def _hystart_reset(self, now: float, next_seq: int) -> None:
        self._round_start = self._last_ack = now
        self._end_seq = next_seq
        self._curr_rtt = math.inf
        self._samples = 0

    def _hystart_update(self, ack: Ack, delay: float) -> None:
        """Linux's hystart_update: a new round, the ACK train, the delay."""
        now = ack.now
        if ack.una > self._end_seq:
            self._hystart_reset(now, ack.next_seq)
        if self.cwnd < HYSTART_LOW_WINDOW:
            return
        if now - self._last_ack <= HYSTART_ACK_DELTA:
            self._last_ack = now
            threshold = self.delay_min + self._ack_delay(ack)
            if not self.paced:
                threshold /= 2.0  # unpaced: a flight goes out at twice the rate it came in
            if now - self._round_start > threshold:
                self._exit_slow_start("train")
        self._curr_rtt = min(self._curr_rtt, delay)
        if self._samples < HYSTART_MIN_SAMPLES:
            self._samples += 1
        else:
            margin = min(max(self.delay_min / 8.0, HYSTART_DELAY_MIN), HYSTART_DELAY_MAX)
            if self._curr_rtt > self.delay_min + margin:
                self._exit_slow_start("delay")

    def _ack_delay(self, ack: Ack) -> float:
        """hystart_ack_delay: min(1 ms, 4 GSO packets at the pacing rate Linux keeps
        whether or not it paces: 2 x cwnd / srtt in slow start)."""
        if not ack.srtt:
            return 0.0
        rate = 2.0 * self.cwnd * MSS / ack.srtt
        return min(0.001, 4.0 * GSO_MAX_SIZE / rate)

    def _exit_slow_start(self, how: str) -> None:
        self.found = True
        self.hystart_exit = how
        self.ssthresh = self.cwnd

    def avoid(self, ack: Ack, acked: int) -> None:
        """Grow towards the cubic window, or the Reno-friendly one when that is faster."""
        now, cwnd = ack.now, self.cwnd
        if self.epoch is None:
            self.epoch = now
            if cwnd < self.w_max:
                self.k = ((self.w_max - cwnd) / self.c) ** (1.0 / 3.0)
                self.origin = self.w_max
            else:
                self.k, self.origin = 0.0, cwnd
            self.w_est = cwnd
        rtt = self.delay_min if self.delay_min < math.inf else ack.srtt
        target = self.c * (now - self.epoch + rtt - self.k) ** 3 + self.origin
        grow = (target - cwnd) / cwnd if target > cwnd else 0.01 / cwnd
        if not self.w_max and grow < 0.05:
            grow = 0.05
        self.w_est += acked / (CUBIC_FRIENDLY * cwnd)
        if self.w_est > cwnd and (self.w_est - cwnd) / cwnd > grow:
            grow = (self.w_est - cwnd) / cwnd
        self.cwnd = cwnd + min(grow, 0.5) * acked

    def reduce(self) -> None:
        """W_max (with fast convergence) and ssthresh; a new epoch starts."""
        cwnd = self.cwnd
        self.w_max = cwnd * (1.0 + self.beta) / 2.0 if cwnd < self.w_max else cwnd
        self.ssthresh = max(cwnd * self.beta, 2.0)
        self.epoch = None
        if not self.hystart_exit:  # the slow start ended with a loss, not HyStart
            self.hystart_exit = "loss"

    def on_timeout(self, now: float, recovering: bool) -> None:
        """Reno's (ssthresh, one segment); then Linux's Loss state resets the module."""
        super().on_timeout(now, recovering)
        self._reset()
        self._hystart_reset(now, 0)
        self.hystart_exit = ""
