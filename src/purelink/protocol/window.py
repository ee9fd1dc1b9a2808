"""Pacing: when the next datagram may go out, at the congestion controller's rate.

A token bucket in bytes, refilled at `rate` bytes per second, at most
`depth` deep.  The sender may send while the bucket holds anything (one
datagram may take it below zero); then it waits until one **pacing quantum**
has accrued, so datagrams go out in bursts of one quantum, which the link
thread hands the kernel in one GSO call:

    quantum = rate * 1 ms, at least 2 datagrams, at most 64 KiB (BBR's send quantum)
    depth   = 4 quanta or 10 ms of the rate, whichever is more (a thread woken
              late, by poll's 1 ms granularity or by an interpreter whose other
              threads hold the GIL for its 5 ms switch interval, catches up what
              accrued meanwhile instead of losing it)

`next_time()` is the sender's pacing deadline (its `get_timer()`), so the
link thread sleeps in poll until then, as it sleeps for any timer; there is
no pacing loop of its own.  A rate of 0 means no pacing (NewReno, or a path
whose min RTT is below 2 ms, twice the timer's own granularity: loopback, a
LAN, where there is no router queue to spare, a window of two bdps is small
next to any router's buffer, and pacing would only cost wake-ups):
the window alone clocks the sender.
"""

from __future__ import annotations

from typing import Final

__all__ = ["Pacer"]

QUANTUM_TIME: Final = 0.001
MAX_QUANTUM: Final = 64 << 10
DEPTH: Final = 4
DEPTH_TIME: Final = 0.010


class Pacer:
    """A token bucket that paces a sender."""

    __slots__ = ("_last", "datagram_size", "depth", "quantum", "rate", "tokens")

    def __init__(self, datagram_size: int) -> None:
        self.datagram_size = datagram_size
        self.rate = 0.0
        """Bytes per second (0: not paced)."""
        self.quantum = 2 * datagram_size
        self.depth = DEPTH * self.quantum
        self.tokens = float(self.depth)
        self._last = 0.0

    def set_rate(self, rate: float) -> None:
        """Pace at `rate` bytes per second from now on (0: stop pacing)."""
        if rate == self.rate:
            return
        if not self.rate:
            self.tokens = float(self.depth)  # the first burst goes at once
        self.rate = rate
        if rate:
            self.quantum = int(min(max(rate * QUANTUM_TIME, 2 * self.datagram_size), MAX_QUANTUM))
            self.depth = int(max(DEPTH * self.quantum, rate * DEPTH_TIME))
            self.tokens = min(self.tokens, self.depth)

    def allowance(self, now: float, held: bool = False) -> float:
        """Bytes that may go out at `now` (refilling the bucket first).  `held`:
        the window held the sender back since the last send, and time spent
        waiting for the window earns one quantum at most (else an answer that
        opens the window would let a burst of the whole depth out)."""
        elapsed = now - self._last
        if elapsed > 0:
            depth = self.quantum if held else self.depth
            self.tokens = min(self.tokens + elapsed * self.rate, max(depth, self.tokens))
            self._last = now
        return self.tokens

    def spend(self, nbytes: int) -> None:
        """`nbytes` went out."""
        self.tokens -= nbytes

    def next_time(self) -> float:
        """When a whole quantum will have accrued (now, if it has)."""
        missing = self.quantum - self.tokens
        if missing <= 0 or not self.rate:
            return self._last
        return self._last + missing / self.rate
