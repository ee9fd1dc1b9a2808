"""CUBIC (RFC 9438) in bytes, paced, with HyStart++ (RFC 9406) in the first slow start.

The loss-based window of the Internet's default TCP, selectable on UDP
links (`congestion="cubic"`) for paths shared with loss-based TCP flows,
where a delay-based policy yields.  What it takes there was measured, not
assumed (bench/RESULTS.md, "Beside TCP flows"): paced, it loses less than
Linux's unpaced CUBIC where the two overflow one drop-tail buffer, and took
0.55-0.81 of the pair beside it on the path emulator.  The price is the
loss-based one: a path that drops datagrams at random is read as a full
one, and the standing queue of a deep buffer is kept full.

Windows below are in datagrams (`datagram_size` bytes) as the RFC counts
segments; the controller keeps `cwnd` in bytes.  The cut and its undo are
loss.py's, shared with NewReno.

    slow start        cwnd < ssthresh: cwnd += bytes acked.  In the first
                      slow start only, HyStart++: each round trip's smallest
                      RTT, once it has 8 samples, against the last round's;
                      a rise of more than clamp(last / 8, 4 ms, 16 ms) starts
                      Conservative Slow Start (cwnd += bytes acked / 4) at
                      that RTT as a baseline; a round whose smallest RTT falls
                      below the baseline goes back to slow start (the rise was
                      jitter), and 5 rounds of it end slow start at the
                      current cwnd (ssthresh = cwnd), before the buffer
                      overflows
    avoidance         from the first answer to a datagram sent after the cut
                      (the epoch's start; RFC 9438 section 4.2), t = now - the
                      epoch's start, W_max the window before the cut,
                      cwnd_epoch the window after it:
                          K          = cbrt((W_max - cwnd_epoch) / C)
                          W_cubic(t) = C * (t - K)^3 + W_max
                          target     = W_cubic(t + srtt), clamped to [cwnd, 1.5 cwnd]
                          cwnd      += (target - cwnd) / cwnd per datagram acked
                      and the Reno-friendly estimate W_est += alpha_cubic /
                      cwnd per datagram acked (alpha_cubic = 3 (1 - beta) /
                      (1 + beta), 1 once W_est passes the window before the
                      cut); cwnd is never below W_est.  An answer taken while
                      the sender had too little to send grows nothing, and the
                      time the sender spent so does not count in t (section
                      5.8: the epoch's start moves on by it)
    a loss            (once per round trip, loss.py)
                          W_max = cwnd, or cwnd * (1 + beta) / 2 when cwnd is
                                  under the last W_max (fast convergence)
                          cwnd = ssthresh = max(cwnd * beta, the minimum)
    a spurious loss   the window, W_max and the curve of before come back
    a probe timeout   ssthresh = cwnd * beta, cwnd = the minimum, slow start

C = 0.4 and beta = 0.7, as the RFC (`beta=` sets another, and alpha_cubic
follows it; `hystart=False` leaves the first slow start to the first
loss).  Pacing (as Linux paces TCP with fq): 2 x cwnd / srtt in slow
start and 1.2 x cwnd / srtt afterwards, so that a window is spread over
the round trip instead of leaving in one burst;
srtt is the RFC 6298 average of the answers' RTT samples.  `min_rtt`, the
smallest of them and of the handshake's round trip, steers nothing: it is
there for `statistics()` (the link's stats), beside srtt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .base import RateSample
from .loss import NO_THRESHOLD, LossBased

__all__ = ["Cubic"]

C: Final = 0.4
BETA: Final = 0.7
ALPHA: Final = 3 * (1 - BETA) / (1 + BETA)
SLOW_START_PACING: Final = 2.0
AVOIDANCE_PACING: Final = 1.2
HYSTART_SAMPLES: Final = 8
HYSTART_MIN: Final = 0.004
HYSTART_MAX: Final = 0.016
CSS_GROWTH_DIVISOR: Final = 4
CSS_ROUNDS: Final = 5
SRTT_GAIN: Final = 1 / 8


class _Curve:
    """The cubic curve of one congestion-avoidance epoch, in datagrams."""

    __slots__ = ("k", "prior", "start", "w_est", "w_max")

    def __init__(self, start: float, cwnd: float, w_max: float, prior: float) -> None:
        self.start = start
        self.w_max = w_max
        self.k = max(0.0, (w_max - cwnd) / C) ** (1 / 3)
        self.w_est = cwnd
        self.prior = prior
        """The window before the cut (the Reno-friendly alpha is 1 beyond it)."""

    def at(self, t: float) -> float:
        return float(C * (t - self.k) ** 3 + self.w_max)


@dataclass(frozen=True, slots=True)
class _Saved:
    """What a spurious loss's undo brings back."""

    cwnd: int
    ssthresh: int
    w_max: float
    prior: float
    curve: _Curve | None


class Cubic(LossBased[_Saved]):
    """CUBIC congestion window in bytes (see the module docstring)."""

    name = "cubic"
    CONSERVATIVE = "conservative_slow_start"
    TIMEOUT_BETA = BETA

    def __init__(
        self,
        datagram_size: int,
        *,
        initial_datagrams: int = 32,
        maximum: int = 64 << 20,
        beta: float = BETA,
        hystart: bool = True,
    ) -> None:
        super().__init__(datagram_size, initial_datagrams=initial_datagrams, maximum=maximum)
        self.beta = beta
        """The share of the window a cut keeps (the RFC's 0.7 unless told)."""
        self._alpha = 3 * (1 - beta) / (1 + beta)  # the Reno-friendly growth (section 4.3)
        self.hystart = hystart
        """HyStart++ in the first slow start (off: slow start until the first loss)."""
        self.srtt = 0.0
        self.min_rtt = 0.0
        """The smallest RTT sample (the handshake's included), seconds; 0.0: none yet."""
        self.w_max = 0.0
        """The window (datagrams) before the last cut: the curve's plateau (0: no cut yet)."""
        self._prior = 0.0  # the window (datagrams) before the last cut
        self._curve: _Curve | None = None  # None: the epoch starts at the next answer in avoidance
        self._limited_since = -1.0  # when the sender became application-limited (-1: it is not)
        self._round_end = 0  # total delivered at which the current round ends
        self._round_min = 0.0  # the round's smallest RTT so far
        self._round_samples = 0
        self._last_round_min = 0.0
        self._css_baseline = 0.0  # HyStart++'s baseline RTT (0: not in Conservative Slow Start)
        self._css_rounds = 0

    # ------------------------------------------------------------- inputs
    def on_ack(self, sample: RateSample, now: float) -> None:
        """Take the RTT (HyStart++), grow (loss.py), then pace."""
        if sample.rtt > 0:
            self._take_rtt(sample)
        super().on_ack(sample, now)
        self._set_pacing_rate()

    def on_path_rtt(self, rtt: float, now: float) -> None:
        """The handshake's round trip: a sample of min_rtt (the window ignores it)."""
        self._take_min_rtt(rtt)

    def on_timeout(self, now: float) -> None:
        """Slow start from the minimum, the window of before as the plateau."""
        self.w_max = self._prior = self.cwnd / self.datagram_size
        self._curve = None
        self._css_baseline = 0.0
        super().on_timeout(now)

    @property
    def state(self) -> str:
        if self._css_baseline and not self._recovering:
            return Cubic.CONSERVATIVE
        return super().state

    # ------------------------------------------------------------ policy
    def _grows(self, sample: RateSample, now: float) -> bool:
        """Not on an application-limited answer; and the time spent so is not
        the curve's (its epoch's start moves on by it)."""
        if sample.is_app_limited:
            if self._limited_since < 0:
                self._limited_since = now
            return False
        if self._limited_since >= 0:
            if self._curve is not None:
                self._curve.start += now - self._limited_since
            self._limited_since = -1.0
        return True

    def _slow_start(self, nbytes: int, now: float) -> None:
        self.cwnd += nbytes // CSS_GROWTH_DIVISOR if self._css_baseline else nbytes

    def _avoid(self, nbytes: int, now: float) -> None:
        size = self.datagram_size
        cwnd = self.cwnd / size
        curve = self._curve
        if curve is None:  # the epoch starts: after a cut's recovery, or at HyStart's exit
            plateau = self.w_max or cwnd
            curve = self._curve = _Curve(now, cwnd, plateau, self._prior or cwnd)
        acked = nbytes / size
        target = curve.at(now - curve.start + self.srtt)
        target = min(max(target, cwnd), 1.5 * cwnd)
        grown = cwnd + (target - cwnd) * acked / cwnd
        curve.w_est += (self._alpha if curve.w_est < curve.prior else 1.0) * acked / cwnd
        self.cwnd = int(max(grown, curve.w_est) * size)

    def _reduce(self, now: float) -> None:
        cwnd = self.cwnd / self.datagram_size
        self._prior = cwnd
        self.w_max = cwnd * (1 + self.beta) / 2 if cwnd < self.w_max else cwnd  # fast convergence
        self.cwnd = max(int(self.cwnd * self.beta), self.minimum)
        self.ssthresh = self.cwnd
        self._curve = None  # the epoch starts once recovery is over
        self._css_baseline = 0.0

    def _saved(self) -> _Saved:
        return _Saved(self.cwnd, self.ssthresh, self.w_max, self._prior, self._curve)

    def _restore(self, saved: _Saved) -> None:
        self.cwnd = max(self.cwnd, saved.cwnd)
        self.ssthresh = saved.ssthresh
        self.w_max, self._prior, self._curve = saved.w_max, saved.prior, saved.curve

    # ---------------------------------------------------------- internals
    def _take_min_rtt(self, rtt: float) -> None:
        if rtt > 0 and (not self.min_rtt or rtt < self.min_rtt):
            self.min_rtt = rtt

    def _take_rtt(self, sample: RateSample) -> None:
        rtt = sample.rtt
        self.srtt = rtt if not self.srtt else self.srtt + (rtt - self.srtt) * SRTT_GAIN
        self._take_min_rtt(rtt)
        self._round_min = min(self._round_min, rtt) if self._round_samples else rtt
        self._round_samples += 1
        if self.ssthresh == NO_THRESHOLD and self.hystart:
            self._hystart()
        if sample.prior_delivered >= self._round_end:  # a round trip ended
            self._end_round(sample.total_delivered)

    def _hystart(self) -> None:
        """RFC 9406 on each answer of the first slow start, once the round has its samples."""
        last, current = self._last_round_min, self._round_min
        if not last or self._round_samples < HYSTART_SAMPLES or self.cwnd >= self.ssthresh:
            return
        if not self._css_baseline:
            if current >= last + min(max(last / 8, HYSTART_MIN), HYSTART_MAX):
                self._css_baseline = current  # a queue is building: slow down
                self._css_rounds = -1  # CSS_ROUNDS whole rounds from the next one
        elif current < self._css_baseline:
            self._css_baseline = 0.0  # the rise was jitter: slow start again

    def _end_round(self, delivered: int) -> None:
        if self._css_baseline:
            self._css_rounds += 1
            if self._css_rounds >= CSS_ROUNDS:  # the queue held: slow start is over
                self.ssthresh = self.cwnd
                self._css_baseline = 0.0
        self._last_round_min = self._round_min
        self._round_end = delivered
        self._round_samples = 0
        self._round_min = 0.0

    def _set_pacing_rate(self) -> None:
        if not self.srtt:
            return
        gain = SLOW_START_PACING if self.cwnd < self.ssthresh else AVOIDANCE_PACING
        self.pacing_rate = gain * self.cwnd / self.srtt
