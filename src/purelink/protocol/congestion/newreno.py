"""NewReno in bytes (RFC 9002 section 7 / RFC 6582), with undo of spurious reductions.

The loss-based window, kept selectable (`congestion="newreno"`) so that the
benchmarks can show what BBR changes, and used by TCP links (where the
kernel's own TCP does the congestion control and this only bounds the
link's memory in flight).

    slow start:           cwnd < ssthresh:  cwnd += bytes acked
    congestion avoidance: cwnd += datagram_size * bytes acked / cwnd
    a loss:               once per round trip (a loss of a datagram sent before
                          the last reduction does not reduce again):
                          remember (cwnd, ssthresh); cwnd = ssthresh = cwnd / 2;
                          recovery lasts until a datagram sent after it is acked,
                          and nothing grows during it
    a spurious loss:      once every loss of the current reduction's round trip
                          proved spurious: cwnd, ssthresh = the remembered ones
                          (undo, as TCP's DSACK undo counts its retransmissions)
    a probe timeout:      ssthresh = cwnd / 2, cwnd = the minimum

No pacing: `pacing_rate` stays 0 and the window alone clocks the sender.
Its `state` is the phase, as CUBIC's: "slow_start", "congestion_avoidance",
or "recovery" from a reduction until a datagram sent after it is acked.
"""

from __future__ import annotations

from .base import CongestionControl, RateSample

__all__ = ["NewReno"]


class NewReno(CongestionControl):
    """NewReno congestion window in bytes."""

    name = "newreno"
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
        self.recovery_start = -1.0
        """When the last reduction happened; datagrams sent before it do not grow the window."""
        self._undo: tuple[int, int, float] | None = None  # cwnd, ssthresh, first loss's send time
        self._unproven = 0  # losses of the current reduction not yet proven spurious
        self._recovering = False  # reduced, and no datagram sent since answered yet

    def on_ack(self, sample: RateSample, now: float) -> None:
        """Grow by what was acknowledged, unless still in recovery."""
        nbytes = sample.newly_acked
        if not nbytes or sample.last_sent <= self.recovery_start:
            return  # sent before the last reduction: no growth in recovery
        self._recovering = False
        if self.cwnd < self.ssthresh:
            self.cwnd += nbytes
        else:
            self.cwnd += max(1, self.datagram_size * nbytes // self.cwnd)
        self.cwnd = min(self.cwnd, self.maximum)

    def on_lost(self, sent_time: float, size: int, now: float) -> None:
        """Halve, once per round trip."""
        self.losses += 1
        if sent_time <= self.recovery_start:
            if self._undo is not None and sent_time >= self._undo[2]:
                self._unproven += 1
            return  # this round trip already reduced the window
        self._unproven = 1
        self._undo = (self.cwnd, self.ssthresh, sent_time)
        self.recovery_start = now
        self._recovering = True
        self.cwnd = max(self.cwnd // 2, self.minimum)
        self.ssthresh = self.cwnd

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
        self.cwnd = max(self.cwnd, undo[0])
        self.ssthresh = undo[1]
        self.recovery_start = -1.0
        self._recovering = False

    def on_timeout(self, now: float) -> None:
        """Nothing came back for a whole (backed-off) timeout: start over small."""
        self._undo = None
        self.recovery_start = now
        self.ssthresh = max(self.cwnd // 2, self.minimum)
        self.cwnd = self.minimum

    @property
    def state(self) -> str:
        if self._recovering:
            return NewReno.RECOVERY
        return NewReno.SLOW_START if self.cwnd < self.ssthresh else NewReno.AVOIDANCE
