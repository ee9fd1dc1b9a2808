"""NewReno in bytes (RFC 9002 section 7 / RFC 6582), with undo of spurious reductions.

The loss-based window, kept selectable (`congestion="newreno"`) so that the
benchmarks can show what BBR changes, and used by TCP links (where the
kernel's own TCP does the congestion control and this only bounds the
link's memory in flight).

    slow start:           cwnd < ssthresh:  cwnd += bytes acked
    congestion avoidance: cwnd += datagram_size * bytes acked / cwnd
    a loss:               once per round trip (loss.py): cwnd = ssthresh = cwnd / 2;
                          nothing grows until a datagram sent after it is acked
    a spurious loss:      once every loss of the cut proved spurious: cwnd and
                          ssthresh of before (loss.py)
    a probe timeout:      ssthresh = cwnd / 2, cwnd = the minimum

No pacing: `pacing_rate` stays 0 and the window alone clocks the sender.
"""

from __future__ import annotations

from .loss import LossBased

__all__ = ["NewReno"]


class NewReno(LossBased[tuple[int, int]]):
    """NewReno congestion window in bytes."""

    name = "newreno"

    def __init__(
        self, datagram_size: int, *, initial_datagrams: int = 32, maximum: int = 64 << 20
    ) -> None:
        super().__init__(datagram_size, initial_datagrams=initial_datagrams, maximum=maximum)

    def _avoid(self, nbytes: int, now: float) -> None:
        self.cwnd += max(1, self.datagram_size * nbytes // self.cwnd)

    def _reduce(self, now: float) -> None:
        self.cwnd = max(self.cwnd // 2, self.minimum)
        self.ssthresh = self.cwnd

    def _saved(self) -> tuple[int, int]:
        return self.cwnd, self.ssthresh

    def _restore(self, saved: tuple[int, int]) -> None:
        cwnd, self.ssthresh = saved
        self.cwnd = max(self.cwnd, cwnd)
