"""CUBIC (RFC 9438) in bytes, paced, with HyStart++'s delay exit (RFC 9406).

The loss-based window of the Internet's default TCP, selectable on UDP
links (`congestion="cubic"`): on a path it shares with CUBIC flows a CUBIC
link takes the share another CUBIC flow would, whatever the buffer, where a
delay-based policy yields.  The price is the loss-based one: a path that
drops datagrams at random is read as a full one, and the standing queue of
a deep buffer is kept full.

Windows below are in datagrams (`datagram_size` bytes) as the RFC counts
segments; the controller keeps `cwnd` in bytes.

    slow start        cwnd < ssthresh: cwnd += bytes acked.  HyStart++'s
                      delay exit: each round trip's smallest RTT (of at
                      least 8 samples) against the round before; a rise of
                      more than clamp(last / 8, 4 ms, 16 ms) ends slow start
                      at the current cwnd (ssthresh = cwnd), before the
                      buffer overflows
    avoidance         t = now - the epoch's start, W_max the window before
                      the last reduction:
                          K         = cbrt(W_max * (1 - beta) / C)
                          W_cubic(t) = C * (t - K)^3 + W_max
                          target    = W_cubic(t + srtt), clamped to [cwnd, 1.5 cwnd]
                          cwnd     += (target - cwnd) / cwnd per datagram acked
                      and the Reno-friendly estimate W_est += alpha_cubic /
                      cwnd per datagram acked (alpha_cubic = 3 (1 - beta) /
                      (1 + beta), 1 once W_est passes the window before the
                      reduction); cwnd is never below W_est
    a loss            once per round trip (a loss of a datagram sent before
                      the last reduction does not reduce again):
                          W_max = cwnd, or cwnd * (1 + beta) / 2 when cwnd is
                                  under the last W_max (fast convergence)
                          cwnd = ssthresh = max(cwnd * beta, the minimum)
                      and nothing grows until a datagram sent after the
                      reduction is acknowledged
    a spurious loss   once every loss of the reduction's round trip proved
                      spurious, the window and the curve of before come back
    a probe timeout   ssthresh = cwnd * beta, cwnd = the minimum, slow start

C = 0.4 and beta = 0.7, as the RFC.  Pacing (as Linux paces TCP with fq):
2 x cwnd / srtt in slow start and 1.2 x cwnd / srtt afterwards, so that a
window is spread over the round trip instead of leaving in one burst;
srtt is the RFC 6298 average of the answers' RTT samples.  `min_rtt`, the
smallest of them and of the handshake's round trip, steers nothing: it is
there for `statistics()` (the link's stats), beside srtt.
"""

from __future__ import annotations

from typing import Final

from .base import CongestionControl, RateSample

__all__ = ["Cubic"]

C: Final = 0.4
BETA: Final = 0.7
ALPHA: Final = 3 * (1 - BETA) / (1 + BETA)
SLOW_START_PACING: Final = 2.0
AVOIDANCE_PACING: Final = 1.2
HYSTART_SAMPLES: Final = 8
HYSTART_MIN: Final = 0.004
HYSTART_MAX: Final = 0.016
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
        """The window before the reduction (the Reno-friendly alpha is 1 beyond it)."""

    def at(self, t: float) -> float:
        return float(C * (t - self.k) ** 3 + self.w_max)


class Cubic(CongestionControl):
    """CUBIC congestion window in bytes (see the module docstring)."""

    name = "cubic"
    SLOW_START = "slow_start"
    AVOIDANCE = "congestion_avoidance"
    RECOVERY = "recovery"

    def __init__(
        self, datagram_size: int, *, initial_datagrams: int = 32, maximum: int = 64 << 20
    ) -> None:
        super().__init__(datagram_size)
        self.cwnd = initial_datagrams * datagram_size
        self.maximum = maximum
        self.ssthresh = 1 << 62
        self.srtt = 0.0
        self.min_rtt = 0.0
        """The smallest RTT sample (the handshake's included), seconds; 0.0: none yet."""
        self.recovery_start = -1.0
        """When the last reduction happened; datagrams sent before it do not grow the window."""
        self._recovering = False  # reduced, and no datagram sent since answered yet
        self._curve: _Curve | None = None  # None: no loss yet, or a new slow start
        self.w_max = 0.0
        """The window (datagrams) before the last reduction: the curve's plateau."""
        self._undo: tuple[int, int, float, _Curve | None, float] | None = None
        self._unproven = 0  # losses of the current reduction not yet proven spurious
        self._round_end = 0  # total delivered at which the current round ends
        self._round_min = 0.0  # the round's smallest RTT so far
        self._round_samples = 0
        self._last_round_min = 0.0

    # ------------------------------------------------------------- inputs
    def on_ack(self, sample: RateSample, now: float) -> None:
        """Grow by what was acknowledged (unless still in recovery), then pace."""
        if sample.rtt > 0:
            self._take_rtt(sample)
        nbytes = sample.newly_acked
        if nbytes and sample.last_sent > self.recovery_start:
            self._recovering = False
            if self.cwnd < self.ssthresh:
                self.cwnd += nbytes
            else:
                self._avoid(nbytes, now)
            self.cwnd = min(self.cwnd, self.maximum)
        self._set_pacing_rate()

    def on_lost(self, sent_time: float, size: int, now: float) -> None:
        """Reduce by beta, once per round trip."""
        self.losses += 1
        if sent_time <= self.recovery_start:
            if self._undo is not None and sent_time >= self._undo[2]:
                self._unproven += 1
            return  # this round trip already reduced the window
        self._unproven = 1
        self._undo = (self.cwnd, self.ssthresh, sent_time, self._curve, self.w_max)
        self.recovery_start = now
        self._recovering = True
        self._reduce(now)

    def on_spurious(self, sent_time: float, now: float) -> None:
        """Undo the reduction that this loss caused."""
        undo = self._undo
        if undo is None or not undo[2] <= sent_time <= self.recovery_start:
            return
        self._unproven -= 1
        if self._unproven > 0:
            return
        self._undo = None
        self.undos += 1
        cwnd, self.ssthresh, _, self._curve, self.w_max = undo
        self.cwnd = max(self.cwnd, cwnd)
        self.recovery_start = -1.0
        self._recovering = False

    def on_path_rtt(self, rtt: float, now: float) -> None:
        """The handshake's round trip: a sample of min_rtt (the window ignores it)."""
        self._take_min_rtt(rtt)

    def on_timeout(self, now: float) -> None:
        """Nothing came back for a whole (backed-off) timeout: slow start from the minimum."""
        self._undo = None
        self.recovery_start = now
        self.ssthresh = max(int(self.cwnd * BETA), self.minimum)
        self.w_max = self.cwnd / self.datagram_size
        self._curve = None
        self.cwnd = self.minimum

    @property
    def state(self) -> str:
        if self._recovering:
            return Cubic.RECOVERY
        return Cubic.SLOW_START if self.cwnd < self.ssthresh else Cubic.AVOIDANCE

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
        if sample.prior_delivered < self._round_end:
            return
        # a round trip ended: HyStart++'s delay exit, in slow start only
        last, current = self._last_round_min, self._round_min
        if (
            self.cwnd < self.ssthresh
            and last
            and self._round_samples >= HYSTART_SAMPLES
            and current >= last + min(max(last / 8, HYSTART_MIN), HYSTART_MAX)
        ):
            self.ssthresh = self.cwnd
        self._last_round_min = current
        self._round_end = sample.total_delivered
        self._round_samples = 0
        self._round_min = 0.0

    def _avoid(self, nbytes: int, now: float) -> None:
        size = self.datagram_size
        cwnd = self.cwnd / size
        curve = self._curve
        if curve is None:  # avoidance without a reduction (HyStart's exit): a plateau here
            curve = self._curve = _Curve(now, cwnd, cwnd, cwnd)
        acked = nbytes / size
        target = curve.at(now - curve.start + self.srtt)
        target = min(max(target, cwnd), 1.5 * cwnd)
        grown = cwnd + (target - cwnd) * acked / cwnd
        curve.w_est += (ALPHA if curve.w_est < curve.prior else 1.0) * acked / cwnd
        self.cwnd = int(max(grown, curve.w_est) * size)

    def _reduce(self, now: float) -> None:
        size = self.datagram_size
        cwnd = self.cwnd / size
        prior = cwnd
        w_max = cwnd * (1 + BETA) / 2 if cwnd < self.w_max else cwnd  # fast convergence
        self.w_max = w_max
        self.cwnd = max(int(self.cwnd * BETA), self.minimum)
        self.ssthresh = self.cwnd
        self._curve = _Curve(now, self.cwnd / size, w_max, prior)

    def _set_pacing_rate(self) -> None:
        if not self.srtt:
            return
        gain = SLOW_START_PACING if self.cwnd < self.ssthresh else AVOIDANCE_PACING
        self.pacing_rate = gain * self.cwnd / self.srtt
