"""Token buckets per source, in a bounded table: the handshake rate limit.

Why it exists: a HELLO costs the listener work before the sender has proven
much -- a RETRY (a cookie's keyed hash and a datagram) for one without a cookie, and for one
with a cookie new state, a stream folder, and for a named producer an epoch
written and fdatasynced.  docs/security.md asks for handshakes to be limited
per source, so that one host cannot turn the listener into a reflector or
make it spend its disk on handshakes.

Theory of operation (the classic token bucket, as in RFC 2697's meters and
Linux's `tbf`): each source has a bucket of at most `burst` tokens that
refills at `rate` tokens per second; a handshake takes one token, or is
refused when less than one is left.  A source never seen -- or forgotten --
starts with a full bucket, so a bucket only needs remembering while it is
not full.

The table is bounded: it holds at most `max_sources` buckets, kept in a
dict in order of last use (a lookup moves the entry to the end), and the
least recently used one is forgotten when a new source needs room.  Every
operation is O(1).  Forgetting a bucket can only be generous (the source
comes back with a full one); an attacker who owns more addresses than
`max_sources` is not limited per address -- nothing keyed by address could
be -- but the table, and so the memory, never grows past its bound.

Sans-IO like the rest of `protocol/`: the time comes in as an argument.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TokenBuckets", "TokenBucketsStatistics"]


@dataclass(frozen=True, slots=True)
class TokenBucketsStatistics:
    """A snapshot of a `TokenBuckets`' counters."""

    allowed: int
    """Requests that took a token."""
    refused: int
    """Requests refused for want of a token."""
    sources: int
    """Buckets in the table now."""
    evicted: int
    """Buckets forgotten to make room for a new source."""


class TokenBuckets:
    """One token bucket per source key, at most `max_sources` of them."""

    __slots__ = ("_buckets", "allowed", "burst", "evicted", "max_sources", "rate", "refused")

    def __init__(self, rate: float, burst: float, max_sources: int) -> None:
        if not rate > 0:
            raise ValueError(f"rate must be positive, not {rate!r}")
        if not burst >= 1:
            raise ValueError(f"burst must be at least 1, not {burst!r}")
        if max_sources < 1:
            raise ValueError(f"max_sources must be at least 1, not {max_sources!r}")
        self.rate = float(rate)
        """Tokens added per second."""
        self.burst = float(burst)
        """Most tokens a bucket holds."""
        self.max_sources = max_sources
        """Most buckets remembered."""
        self.allowed = 0
        self.refused = 0
        self.evicted = 0
        # source -> (tokens left, time of that count), least recently used first
        self._buckets: dict[object, tuple[float, float]] = {}

    def allow(self, source: object, now: float) -> bool:
        """Take a token from `source`'s bucket at time `now`; False if it has none."""
        buckets = self._buckets
        entry = buckets.pop(source, None)
        if entry is None:
            tokens = self.burst
            if len(buckets) >= self.max_sources:
                del buckets[next(iter(buckets))]
                self.evicted += 1
        else:
            tokens, then = entry
            if now > then:
                tokens = min(self.burst, tokens + (now - then) * self.rate)
            else:
                now = then  # a clock that steps back refills nothing, later either
        if tokens >= 1.0:
            buckets[source] = (tokens - 1.0, now)
            self.allowed += 1
            return True
        buckets[source] = (tokens, now)
        self.refused += 1
        return False

    def tokens(self, source: object, now: float) -> float:
        """Tokens `source` has at `now` (for tests and stats; changes nothing)."""
        entry = self._buckets.get(source)
        if entry is None:
            return self.burst
        tokens, then = entry
        return min(self.burst, tokens + max(now - then, 0.0) * self.rate)

    def statistics(self) -> TokenBucketsStatistics:
        """A snapshot of the counters."""
        return TokenBucketsStatistics(self.allowed, self.refused, len(self._buckets), self.evicted)
