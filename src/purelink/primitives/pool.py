# O(1) reuse of buffers (docs/design.md, mechanism 4).
#
# Prior art: the SMC-R free-list patch (liqiang, 2024, and Dust Li's review): the kernel
# found a reusable smc_buf_desc by walking every descriptor for one whose `used` flag
# was 0, 5-6 us with 200 of them, and replaced the walk with a list of free ones:
# 75-150 ns whatever the count. Here the free list is a plain Python list used as a
# stack: list.pop() and list.append() are O(1), each one C call, and atomic under the
# GIL, so get() and put() need no lock. get() is the pop and nothing else: every pop is
# a hit, so hits are counted as the buffers put in minus those still there. trio's
# `_thread_cache.py` for the idea of a small, bounded, observable cache of reusable
# things.
#
# The naive "before" the `pool` benchmark compares this with, ScanningPool, lives in
# bench/pool.py.

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BufferPool", "PoolStatistics"]


@dataclass(frozen=True, slots=True)
class PoolStatistics:
    """A snapshot of a pool's counters."""

    size: int
    """Bytes in every buffer of the pool."""
    limit: int
    """Free buffers kept at most."""
    hits: int
    """get() calls served from the pool (`stats().pool_hits`)."""
    misses: int
    """get() calls that allocated a fresh buffer (`stats().pool_misses`)."""
    dropped: int
    """put() calls whose buffer was let go because the pool held `limit` free already."""
    rejected: int
    """put() calls whose buffer had the wrong length (or, bench/pool.py's ScanningPool,
    was free already)."""
    free: int
    """Free buffers held right now."""


class BufferPool:
    """A free list of `bytearray(size)`: get() pops one or allocates, put() pushes one back.

    A buffer from get() holds whatever its last user left in it. Put a buffer back
    once: the pool cannot tell a buffer that is in it already from a new one (that
    would need a scan or a set, the cost this class exists to avoid). With several
    threads putting at once the free count may pass `limit` by one per thread.
    """

    __slots__ = ("_free", "_kept", "dropped", "limit", "misses", "rejected", "size")

    def __init__(self, size: int, limit: int) -> None:
        if size <= 0:
            raise ValueError(f"size must be positive, not {size}")
        if limit < 0:
            raise ValueError(f"limit must not be negative, not {limit}")
        self.size = size
        self.limit = limit
        self._free: list[bytearray] = []
        self._kept = 0  # buffers put into the free list, ever
        self.misses = 0
        self.dropped = 0
        self.rejected = 0

    @property
    def hits(self) -> int:
        """get() calls served from the pool: every buffer kept and taken out again."""
        return self._kept - len(self._free)

    def get(self) -> bytearray:
        """A buffer of `size` bytes: the last one put back, or a fresh one."""
        try:
            return self._free.pop()  # try, not `if`: another thread may empty it between
        except IndexError:
            self.misses += 1
            return bytearray(self.size)

    def put(self, buffer: bytearray) -> None:
        """Give `buffer` back; kept if it has the pool's size and the pool is not full."""
        if len(buffer) == self.size and len(self._free) < self.limit:
            self._free.append(buffer)
            self._kept += 1
        elif len(buffer) != self.size:
            self.rejected += 1
        else:
            self.dropped += 1

    def statistics(self) -> PoolStatistics:
        return PoolStatistics(
            size=self.size,
            limit=self.limit,
            hits=self.hits,
            misses=self.misses,
            dropped=self.dropped,
            rejected=self.rejected,
            free=len(self._free),
        )

    def __repr__(self) -> str:
        return f"<BufferPool size={self.size} limit={self.limit} free={len(self._free)}>"
