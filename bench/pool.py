"""`purelink bench pool`: buffer get+put with many buffers held, free list vs scan.

Workload (docs/design.md, mechanism 4; the SMC-R free-list patch): a pool has
handed out N buffers that are still in use ("held": 10, 200, 10,000 and
100,000), and one more buffer goes round: `put(get())`, over and over.

* `BufferPool` (the product, purelink/primitives/pool.py): a free list used as
  a stack, `get` is one `list.pop`, `put` one `list.append`: O(1) whatever N;
* `ScanningPool` (the "before"): every buffer ever made stays in one list
  with an in-use flag, and `get` walks the flags for a free one, as SMC-R
  walked its smc_buf_descs before the patch (5-6 us with 200 of them).  The
  walk is `list.index(False)`, in C, and the free buffer is the last one made,
  so every get walks past the N held ones: the growth shows even at C speed.

Timing: `--calls` get+put pairs (fewer for the scan at large N, at least
`--min-calls`), in a plain `for` loop with the methods bound to locals, timed
with perf_counter_ns; the median of `--repeat` runs.  The cost of the empty
loop is measured too and reported, not subtracted: an application pays it.
So is the floor, `put(get())` on two methods that do nothing: two Python
calls cost about as much as the 150 ns target on a slow machine, so the free
list's own work is its figure less that floor.

Target (docs/performance.md): flat, <= 150 ns per get+put at every N.

Run from the checkout root: `python -m bench.pool [--json]`, or
`purelink bench pool`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from purelink.primitives.pool import BufferPool, PoolStatistics

from ._common import Report, Summary, base_parser, summarize

__all__ = ["HELD", "TARGET_NS", "ScanningPool", "main", "measure"]

HELD = (10, 200, 10_000, 100_000)
"""Buffers held (in use) while one more goes round."""
TARGET_NS = 150.0
"""docs/performance.md: get+put at or under this, at every size."""
BUFFER = 64
"""Bytes per buffer: the size does not matter to either pool, memory does."""


class ScanningPool:
    """The naive way: the "before" variant this benchmark measures BufferPool against.

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


def _empty_loop_ns(calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        pass
    return (time.perf_counter_ns() - start) / calls


class _Nothing:
    __slots__ = ()

    def get(self) -> None:
        return None

    def put(self, item: None) -> None:
        return None


def _call_floor_ns(calls: int) -> float:
    """ns per `put(get())` of methods that do nothing: what any pool written in
    Python pays before it does any work (the floor under the free list)."""
    nothing = _Nothing()
    get, put = nothing.get, nothing.put
    start = time.perf_counter_ns()
    for _ in range(calls):
        put(get())
    return (time.perf_counter_ns() - start) / calls


def measure(kind: type[BufferPool | ScanningPool], held: int, calls: int) -> float:
    """ns per `put(get())` with `held` buffers out of the pool."""
    pool = kind(BUFFER, held + 1)
    out = [pool.get() for _ in range(held + 1)]
    pool.put(out.pop())  # the one that goes round; the scan finds it last
    get, put = pool.get, pool.put
    start = time.perf_counter_ns()
    for _ in range(calls):
        put(get())
    elapsed = time.perf_counter_ns() - start
    stats = pool.statistics()
    assert stats.misses == held + 1 and stats.hits == calls, stats  # every get a hit
    del out
    return elapsed / calls


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser("pool", "buffer get+put with N buffers held: free list vs scan", 5)
    parser.add_argument("--calls", type=int, default=1_000_000, help="get+put pairs per run")
    parser.add_argument(
        "--min-calls", type=int, default=200, help="fewest pairs per run (the scan at large N)"
    )
    args = parser.parse_args(argv)
    report = Report(
        "pool",
        "ns per get+put with N buffers held (median of runs)",
        parameters={"calls": args.calls, "repeat": args.repeat, "buffer": BUFFER},
        columns=["held", "free list ns", "scan ns", "scan / free list", "empty loop ns"],
    )
    loop = summarize(_empty_loop_ns(args.calls) for _ in range(args.repeat))
    floor = summarize(_call_floor_ns(args.calls) for _ in range(args.repeat))
    free_list: dict[int, Summary] = {}
    for held in HELD:
        free_list[held] = summarize(
            measure(BufferPool, held, args.calls) for _ in range(args.repeat)
        )
        scan_calls = max(args.min_calls, min(args.calls, args.calls * 100 // held))
        scan = summarize(measure(ScanningPool, held, scan_calls) for _ in range(args.repeat))
        report.add(
            **{
                "held": held,
                "free list ns": free_list[held],
                "scan ns": scan,
                "scan / free list": scan.median / free_list[held].median,
                "empty loop ns": loop,
            }
        )
    worst = max(s.median for s in free_list.values())
    flat = worst / min(s.median for s in free_list.values())
    report.notes.append(
        f"free list: worst {worst:.0f} ns (target <= {TARGET_NS:.0f}: "
        f"{'met' if worst <= TARGET_NS else 'NOT met'}); "
        f"largest / smallest = {flat:.2f} (flat = 1)"
    )
    report.notes.append(
        f"ns include the Python for loop that calls them (the empty loop's cost); "
        f"two method calls that do nothing cost {floor} ns a pair here (the floor)"
    )
    report.extra["call_floor_ns"] = floor
    report.emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
