"""What the loss-based windows (NewReno, CUBIC) share: one cut per round trip of loss, and its undo.

Why a module of its own: both keep a window in bytes that grows with what
is acknowledged and is cut when datagrams are lost, and the bookkeeping
around the cut is the same in both (RFC 9002 section 7, RFC 9438 section
4.6):

    a loss            once per round trip: a loss of a datagram sent before the
                      last cut does not cut again.  The state of before is kept
                      (`_saved`) and the policy cuts (`_reduce`); recovery lasts
                      until a datagram sent after the cut is acknowledged, and
                      nothing grows during it
    a spurious loss   once every loss of the cut's round trip proved spurious,
                      the state of before comes back (`_restore`), as TCP's
                      DSACK undo counts its retransmissions
    a probe timeout   ssthresh = cwnd x `TIMEOUT_BETA`, cwnd = the minimum
    an answer         after recovery: slow start below ssthresh (`_slow_start`,
                      cwnd += bytes acked), the policy's avoidance above it
                      (`_avoid`); a sample taken while the sender had too
                      little to send grows nothing where the policy says so
                      (`_grows`)

A policy supplies `_reduce`, `_avoid`, `_saved` and `_restore`, and may
override the others.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from .base import CongestionControl, RateSample

__all__ = ["LossBased"]

S = TypeVar("S")
"""What a policy keeps of its state for an undo."""

NO_THRESHOLD = 1 << 62
"""ssthresh before the first cut: slow start until a loss (or a delay exit)."""


class LossBased(CongestionControl, Generic[S]):
    """A window in bytes, cut once per round trip of loss (see the module docstring)."""

    SLOW_START = "slow_start"
    AVOIDANCE = "congestion_avoidance"
    RECOVERY = "recovery"
    TIMEOUT_BETA = 0.5
    """ssthresh after a probe timeout, as a share of the window before it."""

    def __init__(self, datagram_size: int, *, initial_datagrams: int, maximum: int) -> None:
        super().__init__(datagram_size)
        self.cwnd = initial_datagrams * datagram_size
        self.maximum = maximum
        self.ssthresh = NO_THRESHOLD
        self.recovery_start = -1.0
        """When the last cut happened; datagrams sent before it do not grow the window."""
        self._recovering = False  # cut, and no datagram sent since answered yet
        self._undo: tuple[S, float] | None = None  # the state of before, the first loss's send time
        self._unproven = 0  # losses of the current cut not yet proven spurious
        self.avoidance_cuts = 0
        """Cuts made in congestion avoidance (not at the end of a slow start)."""

    # ------------------------------------------------------------- inputs
    def on_ack(self, sample: RateSample, now: float) -> None:
        """Grow by what was acknowledged, unless still in recovery."""
        nbytes = sample.newly_acked
        if not nbytes or sample.last_sent <= self.recovery_start:
            return  # sent before the last cut: no growth in recovery
        self._recovering = False
        if not self._grows(sample, now):
            return
        if self.cwnd < self.ssthresh:
            self._slow_start(nbytes, now)
        else:
            self._avoid(nbytes, now)
        self.cwnd = min(self.cwnd, self.maximum)

    def on_lost(self, sent_time: float, size: int, now: float) -> None:
        """Cut, once per round trip."""
        self.losses += 1
        if sent_time <= self.recovery_start:
            if self._undo is not None and sent_time >= self._undo[1]:
                self._unproven += 1
            return  # this round trip already cut the window
        self._unproven = 1
        if self.cwnd >= self.ssthresh:
            self.avoidance_cuts += 1
        self._undo = (self._saved(), sent_time)
        self.recovery_start = now
        self._recovering = True
        self._reduce(now)

    def on_spurious(self, sent_time: float, now: float) -> None:
        """Undo the cut that this loss caused, once all its losses proved spurious."""
        undo = self._undo
        if undo is None or not undo[1] <= sent_time <= self.recovery_start:
            return
        self._unproven -= 1
        if self._unproven > 0:
            return
        self._undo = None
        self.undos += 1
        self._restore(undo[0])
        self.recovery_start = -1.0
        self._recovering = False

    def on_timeout(self, now: float) -> None:
        """Nothing came back for a whole (backed-off) timeout: start over small."""
        self._undo = None
        self.recovery_start = now
        self.ssthresh = max(int(self.cwnd * self.TIMEOUT_BETA), self.minimum)
        self.cwnd = self.minimum

    @property
    def state(self) -> str:
        if self._recovering:
            return LossBased.RECOVERY
        return LossBased.SLOW_START if self.cwnd < self.ssthresh else LossBased.AVOIDANCE

    # ------------------------------------------------------------ policy
    def _grows(self, sample: RateSample, now: float) -> bool:
        """Whether this answer may grow the window (default: always)."""
        return True

    def _slow_start(self, nbytes: int, now: float) -> None:
        self.cwnd += nbytes

    def _avoid(self, nbytes: int, now: float) -> None:
        raise NotImplementedError

    def _reduce(self, now: float) -> None:
        raise NotImplementedError

    def _saved(self) -> S:
        """What a spurious loss's undo restores."""
        raise NotImplementedError

    def _restore(self, saved: S) -> None:
        raise NotImplementedError
