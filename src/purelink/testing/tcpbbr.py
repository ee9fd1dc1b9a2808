"""BBR v1 as Linux's tcp_bbr.c runs it: the policy of the simulation's BBR competitors.

Why a module of its own: BBR shares nothing with the loss-based policies of
tcpcc.py but the interface they all have (tcpcc.py's docstring: the calls a
flow makes, the `Ack` it fills in), and the two together were past the
length a module should have.

Checked against Linux 6.18 on the TUN path emulator (bench/paths): alone
through 20 Mbit/s, 40 ms and a one-bdp buffer, Linux's window in PROBE_BW
is 2.16-2.28 bdps (144-152 segments: 2 bdps, the quantization budget of 6
and 2-10 of ACK aggregation); the model's, 2.19-2.22.  Left out: the
long-term bandwidth sampling (policer detection) and the idle restart.
"""

from __future__ import annotations

import math
import random
from collections import deque

from .tcpcc import INITIAL_WINDOW, Ack, tso_segments

__all__ = ["Bbr"]

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
EXTRA_ACKED_ROUNDS = 5
"""Round trips of each of the two halves of the ACK-aggregation max filter."""
EXTRA_ACKED_MAX = 0.1
"""Seconds of btl_bw the aggregation allowance is capped at (bbr_extra_acked_max_us)."""


class Bbr:
    """BBR v1 as Linux's tcp_bbr.c runs it (Cardwell et al., "BBR:
    Congestion-Based Congestion Control", ACM Queue 2016; draft-cardwell-
    iccrg-bbr-congestion-control-00).

    The model: btl_bw, the largest delivery rate sampled in the last 10
    round trips (a round ends when a segment sent after its start is
    delivered), and min_rtt, the smallest RTT of the last 10 s (seeded by
    the handshake).  bdp = btl_bw x min_rtt.  It paces at pacing_gain x
    btl_bw (less a 1 % margin) and keeps at most cwnd_gain x bdp in
    flight, plus room for delayed and aggregated ACKs: the ACK aggregation
    seen (below) and Linux's quantization budget, 3 GSO packets of 1 ms at
    the pacing rate (at least 2 segments each: 6 at 20 Mbit/s, 12 at 50),
    rounded up to an even number, +2 in the probing phase.

    ACK aggregation (bbr_update_ack_aggregation): an epoch starts when the
    segments acknowledged since the last one fall to what btl_bw would have
    delivered in that time; the excess over it, at most cwnd, is kept as
    the largest of the last 5-10 round trips, and once the pipe is full it
    adds to the window (at most 100 ms of btl_bw).

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
        self.extra_acked = [0.0, 0.0]
        """The ACK aggregation filter's two halves, segments."""
        self._extra_half = self._extra_rounds = 0
        self._epoch_stamp = 0.0
        self._epoch_acked = 0

    def inflight(self, gain: float, extra: float = 0.0) -> float:
        """Segments in flight that `gain` x the model allows, plus `extra` and the
        quantization budget (bbr_inflight, bbr_quantization_budget)."""
        if self.min_rtt == math.inf:
            window = INITIAL_WINDOW
        else:
            window = math.ceil(gain * self.btl_bw * self.min_rtt)
        window += int(extra) + 3 * tso_segments(self.pacing_rate)
        window += window & 1
        if self.mode == PROBE_BW and self.cycle == 0:
            window += 2
        return float(window)

    def on_established(self, rtt: float, now: float) -> None:
        """The handshake's RTT seeds min_rtt and the first pacing rate."""
        self.min_rtt, self.min_rtt_stamp = rtt, now
        self.pacing_rate = HIGH_GAIN * self.cwnd / rtt
        self._epoch_stamp = now

    def on_ack(self, ack: Ack) -> None:
        """Update the model, then the pacing rate and the window."""
        self._update_round(ack)
        self._update_bw(ack)
        self._update_ack_aggregation(ack)
        if self.mode == PROBE_BW:
            self._update_cycle(ack)
        if not self.filled_pipe and self._round_start:
            self._check_full_pipe()
        if self.mode == STARTUP and self.filled_pipe:
            self.mode, self.pacing_gain = DRAIN, 1.0 / HIGH_GAIN
        if self.mode == DRAIN and ack.in_flight <= self.inflight(1.0):
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

    def _update_ack_aggregation(self, ack: Ack) -> None:
        """The excess of what ACKs deliver over btl_bw since the epoch began."""
        if ack.acked <= 0 or ack.rate <= 0.0:
            return
        if self._round_start:
            self._extra_rounds = min(self._extra_rounds + 1, 31)
            if self._extra_rounds >= EXTRA_ACKED_ROUNDS:
                self._extra_rounds = 0
                self._extra_half ^= 1
                self.extra_acked[self._extra_half] = 0.0
        expected = self.btl_bw * (ack.now - self._epoch_stamp)
        if self._epoch_acked <= expected or self._epoch_acked + ack.acked >= 1 << 20:
            self._epoch_acked, self._epoch_stamp, expected = 0, ack.now, 0.0
        self._epoch_acked += ack.acked
        extra = min(self._epoch_acked - expected, self.cwnd)
        self.extra_acked[self._extra_half] = max(self.extra_acked[self._extra_half], extra)

    def _aggregation(self) -> float:
        """Segments the window holds for ACK aggregation, once the pipe is full."""
        if not self.filled_pipe:
            return 0.0
        return min(max(self.extra_acked), self.btl_bw * EXTRA_ACKED_MAX)

    def _update_cycle(self, ack: Ack) -> None:
        gain = self.pacing_gain
        full = ack.now - self._cycle_stamp > self.min_rtt
        if gain > 1.0:
            advance = full and (ack.lost > 0 or ack.prior_in_flight >= self.inflight(gain))
        elif gain < 1.0:
            advance = full or ack.prior_in_flight <= self.inflight(1.0)
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
        target = self.inflight(self.cwnd_gain, self._aggregation())
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
