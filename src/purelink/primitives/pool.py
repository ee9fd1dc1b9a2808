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
# ScanningPool is the "before" variant the `pool` benchmark (docs/performance.md) compares
# against. It is not used by the link or the listener.

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BufferPool", "PoolStatistics", "ScanningPool"]


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
    """put() calls whose buffer had the wrong length (or, ScanningPool, was free already)."""
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


class ScanningPool:
    """The naive way, kept as the "before" variant of the `pool` benchmark only.

    Every buffer the pool ever handed out stays in one list, with an in-use flag
    beside it, the way SMC-R kept its smc_buf_descs before the free-list patch; get()
    scans the flags for a free one, so it costs O(buffers held). The scan is
    `list.index(False)`, in C, so the benchmark shows the growth even at C speed.
    put() finds the slot through a dict keyed by id(), O(1), as the kernel's
    descriptor carried its own flag. Same interface and counters as BufferPool; not
    thread-safe.
    """

    __slots__ = (
        "_buffers",
        "_free_count",
        "_in_use",
        "_slot",
        "dropped",
        "hits",
        "limit",
        "misses",
        "rejected",
        "size",
    )

    def __init__(self, size: int, limit: int) -> None:
        if size <= 0:
            raise ValueError(f"size must be positive, not {size}")
        if limit < 0:
            raise ValueError(f"limit must not be negative, not {limit}")
        self.size = size
        self.limit = limit
        self._buffers: list[bytearray] = []
        self._in_use: list[bool] = []
        self._slot: dict[int, int] = {}  # id(buffer) -> index; the list keeps buffers alive
        self._free_count = 0
        self.hits = 0
        self.misses = 0
        self.dropped = 0
        self.rejected = 0

    def get(self) -> bytearray:
        """Scan for a free buffer; allocate (and remember) a fresh one if none is."""
        if self._free_count:
            index = self._in_use.index(False)  # the scan
            self._in_use[index] = True
            self._free_count -= 1
            self.hits += 1
            return self._buffers[index]
        self.misses += 1
        buffer = bytearray(self.size)
        self._slot[id(buffer)] = len(self._buffers)
        self._buffers.append(buffer)
        self._in_use.append(True)
        return buffer

    def put(self, buffer: bytearray) -> None:
        """Mark `buffer` free; let it go if `limit` are free already."""
        if len(buffer) != self.size:
            self.rejected += 1
            return
        index = self._slot.get(id(buffer))  # ids of live buffers: the list keeps them alive
        if index is None:  # a buffer this pool did not make: adopt it
            index = len(self._buffers)
            self._slot[id(buffer)] = index
            self._buffers.append(buffer)
            self._in_use.append(True)
        elif not self._in_use[index]:
            self.rejected += 1  # free already: a double put
            return
        if self._free_count >= self.limit:
            self._remove(index)
            self.dropped += 1
            return
        self._in_use[index] = False
        self._free_count += 1

    def _remove(self, index: int) -> None:
        """Drop slot `index`: move the last slot into it (O(1))."""
        buffers, in_use = self._buffers, self._in_use
        del self._slot[id(buffers[index])]
        last = len(buffers) - 1
        if index != last:
            buffers[index] = buffers[last]
            in_use[index] = in_use[last]
            self._slot[id(buffers[index])] = index
        buffers.pop()
        in_use.pop()

    def statistics(self) -> PoolStatistics:
        return PoolStatistics(
            size=self.size,
            limit=self.limit,
            hits=self.hits,
            misses=self.misses,
            dropped=self.dropped,
            rejected=self.rejected,
            free=self._free_count,
        )

    def __repr__(self) -> str:
        return f"<ScanningPool size={self.size} limit={self.limit} free={self._free_count}>"
