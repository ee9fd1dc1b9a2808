"""The window policies of the simulation's competing TCP flows: Reno, CUBIC, BBR v1.

Why it exists: a congestion-control test that asserts a fair share needs the
other side of the share to behave as the Linux TCP a purelink link will meet
on a real path.  These are models of that behaviour, not ports: each keeps
only what decides how much of a bottleneck the flow takes (its window, its
pacing rate, how it reacts to loss and to delay), written from the papers
and RFCs they cite, in the units the flow works in: **segments** of 1448 B
payload, seconds, segments per second.

The flow (testing/competitors.py) drives a policy through four calls and
reads two numbers back, `cwnd` (segments that may be in flight) and
`pacing_rate` (segments per second, 0: send as the window allows):

    handshake done:          on_established(rtt, now)
    every acknowledgement:   on_ack(ack)          # after its losses were marked
    a loss starts recovery:  on_congestion(now)   # once per recovery episode
    the episode is over:     on_recovery_end(now)
    the RTO fired:           on_timeout(now, recovering)   # in an episode already?

What the models leave out: HyStart (CUBIC's slow start runs to the first
loss, as with `hystart=0`), undoing a reduction that a DSACK or a timestamp
proves spurious, PRR (the window drops to its new value at once and the
flow sends when the data in flight falls below it, as RFC 6675's pipe
does), BBR's long-term bandwidth sampling (policer detection) and its
idle restart, and receive-window autotuning (the flow has a fixed cap).
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass

__all__ = ["INITIAL_WINDOW", "KINDS", "Ack", "Bbr", "Controller", "Cubic", "Reno", "controller"]

INITIAL_WINDOW = 10
"""Segments (RFC 6928, Linux's TCP_INIT_CWND)."""


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
    the fq qdisc, 2 x cwnd / srtt in slow start and 1.2 x in avoidance.
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
            ratio = 2.0 if self.cwnd < self.ssthresh else 1.2
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


class Cubic(Reno):
    """CUBIC (RFC 9438) as Linux's tcp_cubic runs it, without HyStart.

    Slow start as Reno's.  On a loss (once per episode) the window before it
    is W_max, with fast convergence: a flow that lost below its previous
    W_max releases bandwidth, W_max = cwnd x (1 + beta) / 2; then ssthresh =
    cwnd = max(beta x cwnd, 2), beta = 0.7.  An RTO does the same to
    ssthresh and W_max (as Reno, once per episode) and restarts from one
    segment.

    In congestion avoidance, time t runs from the first ACK after the
    reduction (the epoch), when the window is cwnd_epoch; K = cbrt((W_max -
    cwnd_epoch) / C) with C = 0.4 (0 when the window is above W_max, which
    then becomes W_max), and

        W_cubic(t) = C (t - K)^3 + W_max

    is the window the flow aims at: each ACK moves cwnd by (target - cwnd) /
    cwnd per segment acknowledged towards target = W_cubic(t + RTT) (RTT:
    the smallest seen, Linux's delay_min), clamped to [cwnd, 1.5 cwnd].
    The Reno-friendly region (RFC 9438 section 4.3): W_est starts at
    cwnd_epoch and grows by alpha per window acknowledged, alpha = 3 (1 -
    beta) / (1 + beta) until W_est reaches the window before the loss, 1
    after; while W_cubic(t) < W_est the window is W_est.
    """

    kind = "cubic"
    beta = 0.7
    c = 0.4

    def __init__(self, *, paced: bool = False) -> None:
        super().__init__(paced=paced)
        self.w_max = 0.0
        self.cwnd_prior = 0.0
        self.k = 0.0
        self.epoch: float | None = None
        self.w_est = 0.0
        self.min_rtt = math.inf

    def on_ack(self, ack: Ack) -> None:
        """Reno's on_ack, with CUBIC's avoidance; keeps the smallest RTT."""
        if 0.0 < ack.rtt < self.min_rtt:
            self.min_rtt = ack.rtt
        super().on_ack(ack)

    def avoid(self, ack: Ack, acked: int) -> None:
        """The cubic window, or the Reno-friendly one when that is larger."""
        now, cwnd = ack.now, self.cwnd
        if self.epoch is None:
            self.epoch = now
            if cwnd < self.w_max:
                self.k = ((self.w_max - cwnd) / self.c) ** (1.0 / 3.0)
            else:
                self.k, self.w_max = 0.0, cwnd
            self.w_est = cwnd
        t = now - self.epoch
        rtt = self.min_rtt if self.min_rtt < math.inf else ack.srtt
        target = self.c * (t + rtt - self.k) ** 3 + self.w_max
        target = min(max(target, cwnd), 1.5 * cwnd)
        alpha = 3.0 * (1.0 - self.beta) / (1.0 + self.beta) if self.w_est < self.cwnd_prior else 1.0
        self.w_est += alpha * acked / cwnd
        if self.c * (t - self.k) ** 3 + self.w_max < self.w_est:
            self.cwnd = max(cwnd, self.w_est)
        else:
            self.cwnd = cwnd + (target - cwnd) / cwnd * acked

    def reduce(self) -> None:
        """W_max (with fast convergence) and ssthresh; a new epoch starts."""
        cwnd = self.cwnd
        self.cwnd_prior = cwnd
        self.w_max = cwnd * (1.0 + self.beta) / 2.0 if cwnd < self.w_max else cwnd
        self.ssthresh = max(cwnd * self.beta, 2.0)
        self.epoch = None


STARTUP, DRAIN, PROBE_BW, PROBE_RTT = "startup", "drain", "probe_bw", "probe_rtt"
HIGH_GAIN = 2.0 / math.log(2.0)
"""2.89: the smallest gain that doubles the delivery rate each round trip."""
CYCLE = (1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
BW_ROUNDS = 10
MIN_RTT_WINDOW = 10.0
PROBE_RTT_TIME = 0.2
MIN_CWND = 4
PACING_MARGIN = 0.99
"""Linux paces 1 % below the model's rate (bbr_pacing_margin_percent)."""


class Bbr:
    """BBR v1 as Linux's tcp_bbr.c runs it (Cardwell et al., "BBR:
    Congestion-Based Congestion Control", ACM Queue 2016; draft-cardwell-
    iccrg-bbr-congestion-control-00).

    The model: btl_bw, the largest delivery rate sampled in the last 10
    round trips (a round ends when a segment sent after its start is
    delivered), and min_rtt, the smallest RTT of the last 10 s (seeded by
    the handshake).  bdp = btl_bw x min_rtt.  It paces at pacing_gain x
    btl_bw (less a 1 % margin) and keeps at most cwnd_gain x bdp + 3
    segments in flight (+2 more in the probing phase: Linux's quantization
    budget, room for delayed and aggregated ACKs).

    STARTUP: both gains 2/ln 2 = 2.89 (the pacing rate never falls in
    STARTUP); at each round's start, if btl_bw grew less than 25 % over the
    best of the rounds before for 3 rounds, the pipe is full: DRAIN, pacing
    gain 1/2.89, until what is in flight is at most one bdp; then PROBE_BW:
    cwnd_gain 2 and the pacing gain cycles through [1.25, 0.75, 1, 1, 1, 1,
    1, 1], one min_rtt each, starting at a random phase other than 0.75.
    The 1.25 phase lasts until the flight reaches 1.25 bdp or a loss (and
    at least min_rtt); the 0.75 phase ends early once the flight is down
    to one bdp.

    PROBE_RTT: when min_rtt is 10 s old, the window drops to 4 segments
    until the flight is down to 4, then 200 ms and a round trip more; the
    RTT seen then is the new min_rtt, the window goes back to what it was,
    and the mode to PROBE_BW (or STARTUP if the pipe was never full).

    Loss does not enter the model.  A recovery episode saves the window,
    takes away the segments lost, and for its first round trip keeps
    packet conservation (cwnd = in flight + newly delivered); after the
    episode the window is at least the saved one.  An RTO saves it too,
    starts again from one segment (growing by what is delivered), and
    restarts the full-pipe check.
    """

    kind = "bbr"

    def __init__(self, rng: random.Random) -> None:
        self.cwnd = float(INITIAL_WINDOW)
        self.pacing_rate = 0.0
        self.mode = STARTUP
        self.pacing_gain = self.cwnd_gain = HIGH_GAIN
        self.btl_bw = 0.0
        """Segments per second."""
        self._bw: deque[tuple[int, float]] = deque()  # (round, best rate of that round)
        self.min_rtt = math.inf
        self.min_rtt_stamp = 0.0
        self.rounds = 0
        self._next_round = 0
        self._round_start = False
        self.full_bw = 0.0
        self._full_bw_count = 0
        self.filled_pipe = False
        self.cycle = 0
        self._cycle_stamp = 0.0
        self._probe_rtt_done: float | None = None
        self._probe_rtt_round_done = False
        self.prior_cwnd = 0.0
        self._recovering = False
        self._entering = self._exiting = self._conservation = False
        self._rng = rng

    def bdp(self, gain: float) -> float:
        """Segments in flight that `gain` x the model allows (+ the quantization budget)."""
        if self.min_rtt == math.inf:
            return float(INITIAL_WINDOW)
        extra = 5 if self.mode == PROBE_BW and self.cycle == 0 else 3
        return gain * self.btl_bw * self.min_rtt + extra

    def on_established(self, rtt: float, now: float) -> None:
        """The handshake's RTT seeds min_rtt and the first pacing rate."""
        self.min_rtt, self.min_rtt_stamp = rtt, now
        self.pacing_rate = HIGH_GAIN * self.cwnd / rtt

    def on_ack(self, ack: Ack) -> None:
        """Update the model, then the pacing rate and the window."""
        self._update_round(ack)
        self._update_bw(ack)
        if self.mode == PROBE_BW:
            self._update_cycle(ack)
        if not self.filled_pipe and self._round_start:
            self._check_full_pipe()
        if self.mode == STARTUP and self.filled_pipe:
            self.mode, self.pacing_gain = DRAIN, 1.0 / HIGH_GAIN
        if self.mode == DRAIN and ack.in_flight <= self.bdp(1.0):
            self._enter_probe_bw(ack.now)
        self._update_min_rtt(ack)
        rate = self.pacing_gain * self.btl_bw * PACING_MARGIN
        if rate > 0.0 and (self.filled_pipe or rate > self.pacing_rate):
            self.pacing_rate = rate
        if ack.acked:
            self._set_cwnd(ack)
        if self.mode == PROBE_RTT:
            self.cwnd = min(self.cwnd, MIN_CWND)

    def _update_round(self, ack: Ack) -> None:
        self._round_start = ack.acked > 0 and ack.prior_delivered >= self._next_round
        if self._round_start:
            self._next_round = ack.delivered
            self.rounds += 1
            self._conservation = False

    def _update_bw(self, ack: Ack) -> None:
        rate = ack.rate
        if rate <= 0.0:
            return
        bw, rounds = self._bw, self.rounds
        if bw and bw[-1][0] == rounds:
            if rate > bw[-1][1]:
                bw[-1] = (rounds, rate)
        else:
            bw.append((rounds, rate))
        if bw[0][0] <= rounds - BW_ROUNDS:
            while bw[0][0] <= rounds - BW_ROUNDS:
                bw.popleft()
            self.btl_bw = max(r for _, r in bw)
        elif rate > self.btl_bw:
            self.btl_bw = rate

    def _update_cycle(self, ack: Ack) -> None:
        gain = self.pacing_gain
        full = ack.now - self._cycle_stamp > self.min_rtt
        if gain > 1.0:
            advance = full and (ack.lost > 0 or ack.prior_in_flight >= self.bdp(gain))
        elif gain < 1.0:
            advance = full or ack.prior_in_flight <= self.bdp(1.0)
        else:
            advance = full
        if advance:
            self.cycle = (self.cycle + 1) % len(CYCLE)
            self._cycle_stamp = ack.now
            self.pacing_gain = CYCLE[self.cycle]

    def _check_full_pipe(self) -> None:
        if self.btl_bw >= self.full_bw * 1.25:
            self.full_bw, self._full_bw_count = self.btl_bw, 0
            return
        self._full_bw_count += 1
        self.filled_pipe = self._full_bw_count >= 3

    def _enter_probe_bw(self, now: float) -> None:
        self.mode, self.cwnd_gain = PROBE_BW, 2.0
        # a random phase, but never the draining one (Linux: bbr_cycle_rand)
        self.cycle = (len(CYCLE) - self._rng.randrange(len(CYCLE) - 1)) % len(CYCLE)
        self.pacing_gain = CYCLE[self.cycle]
        self._cycle_stamp = now

    def _update_min_rtt(self, ack: Ack) -> None:
        now = ack.now
        expired = now > self.min_rtt_stamp + MIN_RTT_WINDOW
        if ack.rtt > 0.0 and (ack.rtt < self.min_rtt or expired):
            self.min_rtt, self.min_rtt_stamp = ack.rtt, now
        if expired and self.mode != PROBE_RTT:
            self._save_cwnd()
            self.mode, self.pacing_gain, self.cwnd_gain = PROBE_RTT, 1.0, 1.0
            self._probe_rtt_done = None
        if self.mode != PROBE_RTT:
            return
        if self._probe_rtt_done is None:
            if ack.in_flight <= MIN_CWND:
                self._probe_rtt_done = now + PROBE_RTT_TIME
                self._probe_rtt_round_done = False
                self._next_round = ack.delivered
            return
        if self._round_start:
            self._probe_rtt_round_done = True
        if self._probe_rtt_round_done and now >= self._probe_rtt_done:
            self.min_rtt_stamp = now
            self.cwnd = max(self.cwnd, self.prior_cwnd)
            if self.filled_pipe:
                self._enter_probe_bw(now)
            else:
                self.mode, self.pacing_gain, self.cwnd_gain = STARTUP, HIGH_GAIN, HIGH_GAIN

    def _set_cwnd(self, ack: Ack) -> None:
        cwnd = self.cwnd
        if ack.lost:
            cwnd = max(cwnd - ack.lost, 1.0)
        if self._entering:  # packet conservation for the episode's first round trip
            self._entering, self._conservation = False, True
            self._next_round = ack.delivered
            cwnd = float(ack.in_flight + ack.acked)
        elif self._exiting:
            self._exiting = self._conservation = False
            cwnd = max(cwnd, self.prior_cwnd)
        if self._conservation:
            self.cwnd = max(cwnd, float(ack.in_flight + ack.acked))
            return
        target = self.bdp(self.cwnd_gain)
        if self.filled_pipe:
            cwnd = min(cwnd + ack.acked, target)
        elif cwnd < target or ack.delivered < INITIAL_WINDOW:
            cwnd += ack.acked
        self.cwnd = max(cwnd, float(MIN_CWND))

    def _save_cwnd(self) -> None:
        if self._recovering or self.mode == PROBE_RTT:
            self.prior_cwnd = max(self.prior_cwnd, self.cwnd)
        else:
            self.prior_cwnd = self.cwnd

    def on_congestion(self, now: float) -> None:
        """A recovery episode starts: save the window; conserve packets for a round."""
        self._save_cwnd()
        self._recovering = self._entering = True

    def on_recovery_end(self, now: float) -> None:
        """The episode is over: the window goes back up to the saved one."""
        self._recovering, self._exiting = False, True

    def on_timeout(self, now: float, recovering: bool) -> None:
        """The RTO fired: one segment, growing by what is delivered."""
        self._save_cwnd()
        self._recovering = True
        self._entering = self._conservation = False
        self.cwnd = 1.0
        self.full_bw, self._full_bw_count = 0.0, 0


Controller = Reno | Cubic | Bbr

KINDS = ("reno", "cubic", "bbr")


def controller(kind: str, rng: random.Random, *, paced: bool | None = None) -> Controller:
    """The policy of `kind`; `paced` (None: as Linux by default) applies to reno and cubic."""
    if kind == "bbr":
        return Bbr(rng)
    if kind == "cubic":
        return Cubic(paced=bool(paced))
    if kind == "reno":
        return Reno(paced=bool(paced))
    raise ValueError(f"no competitor kind {kind!r}: one of {', '.join(KINDS)}")
