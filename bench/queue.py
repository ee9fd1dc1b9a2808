"""`purelink bench queue`: one app thread queues records as fast as it can (docs/performance.md).

Workload: `purelink serve --sync batch` runs as its own process (loopback, a
temporary store); this process connects one link and one application thread
queues 200,000 distinct records of 61 B one at a time, as fast as it can.
The records are built before the clock starts.

What is reported, per variant, as the median (and min-max) of `--repeat` runs:

* queue ns (median block): the loop is timed in blocks of `--block` calls
  (1,000) with `perf_counter_ns`, so the timer costs < 0.1 ns a call; the
  median over blocks is the typical cost of one `queue()` call (including the
  `for` loop that makes it, as an application's would), and blocks in which
  the link thread took the GIL show up only in the mean;
* empty call ns: the same loop timed the same way, calling an empty Python
  function instead of `queue()` (just before the run, on the same records),
  and queue / empty call, the ratio the compiled core's target is set in
  (`queue()` <= 2x an empty call); which path runs (compiled core or pure
  Python) is in the title;
* queue ns (mean): the whole loop's time / records;
* records/s: records / (first queue -> the link is told the last one stored),
  the time taken from `on_stored`, which runs on the link thread;
* wakeups, wakeups per 1,000 records, datagrams and send calls (the link's
  counters), syncs and datagrams received (the listener's, from the counters
  `purelink serve` prints when it stops);
* CPU ns per record of this process (all threads) and of the listener process;
* peak RSS of this process during the run (VmHWM, reset before each run).

Variants (bench/_links.py): `after` (the product), `wake-every-record` (the
eventfd written for every record: before mechanism 1), `send-per-datagram`
(no UDP GSO).  A last row, `held backlog`, queues all records while the link
thread is held (bench/_links.py `held`), so all 200,000 are unstored at once,
and reports the peak RSS of that worst case (target <= 100 MB).

Run from the checkout root: `python -m bench.queue [--records N] [--json]`,
or `purelink bench queue`.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from purelink import Full
from purelink.link.link import Link
from purelink.native import IMPLEMENTATION

from ._common import (
    Report,
    base_parser,
    make_records,
    peak_rss_bytes,
    ratio,
    reset_peak_rss,
    rss_bytes,
    self_cpu_ns,
    serving,
    summarize_key,
)
from ._impl import add_impl_argument, run_elsewhere
from ._links import VARIANTS, held, open_link

__all__ = [
    "QUEUE_NS_TARGET",
    "QUEUE_PER_CALL_TARGET",
    "RATE_TARGET",
    "RSS_TARGET",
    "main",
    "run_queue",
]

QUEUE_NS_TARGET = 100.0
QUEUE_PER_CALL_TARGET = 2.0
RATE_TARGET = 2_000_000.0
RSS_TARGET = 100 << 20
TOLD_TIMEOUT = 120.0


class _Told:
    """on_stored: the time the link was told that seq `last` is stored."""

    def __init__(self, last: int) -> None:
        self.last = last
        self.at = 0
        self.calls = 0

    def __call__(self, seq: int) -> None:
        self.calls += 1
        if seq >= self.last and not self.at:
            self.at = time.perf_counter_ns()


def _empty(record: bytes) -> None:
    """The baseline: a Python function call that does nothing."""


def _empty_blocks(records: list[bytes], block: int) -> float:
    """The median ns per call of `_empty` over blocks: the loop of _queue_blocks,
    timed the same way, with the empty function in place of queue()."""
    call = _empty
    clock = time.perf_counter_ns
    per_call: list[float] = []
    for start in range(0, len(records), block):
        chunk = records[start : start + block]
        it = iter(chunk)
        t0 = clock()
        while True:
            try:
                for record in it:
                    call(record)
                break
            except Full:  # never: the same loop as queue()'s, try block and all
                continue
        per_call.append((clock() - t0) / len(chunk))
    per_call.sort()
    return per_call[len(per_call) // 2]


def _queue_blocks(link: Link, records: list[bytes], block: int) -> tuple[list[float], int, int]:
    """Queue every record, timing blocks; (ns per call of each block, total ns, Full count)."""
    queue = link.queue
    clock = time.perf_counter_ns
    per_call: list[float] = []
    total = 0
    full = 0
    for start in range(0, len(records), block):
        chunk = records[start : start + block]
        it = iter(chunk)
        t0 = clock()
        while True:
            try:
                for record in it:
                    queue(record)
                break
            except Full:
                # never with the default capacity (1,000,000); kept so that a small
                # capacity measures waiting for room instead of crashing.  `record`
                # was refused: wait for room, queue it, go on (never drop).
                full += 1
                while True:
                    link.wait_stored(min(link.stored + 1, link.queued), timeout=0.1)
                    try:
                        queue(record)
                        break
                    except Full:
                        continue
        t1 = clock()
        total += t1 - t0
        per_call.append((t1 - t0) / len(chunk))
    return per_call, total, full


def run_queue(url: str, variant: str, records: list[bytes], block: int) -> dict[str, Any]:
    """One run against a listener at `url`: the link's figures (not the listener's)."""
    n = len(records)
    told = _Told(n)
    link = open_link(url, variant, on_stored=told)
    try:
        empty_ns = _empty_blocks(records, block)
        reset_peak_rss()
        cpu0 = self_cpu_ns()
        t_first = time.perf_counter_ns()
        per_call, loop_ns, full = _queue_blocks(link, records, block)
        if not link.wait_stored(n, timeout=TOLD_TIMEOUT):
            raise RuntimeError(f"only {link.stored:,} of {n:,} records stored in {TOLD_TIMEOUT} s")
        t_told = told.at or time.perf_counter_ns()
        cpu1 = self_cpu_ns()
        stats = link.stats()
    finally:
        link.close(timeout=10)
    per_call.sort()
    return {
        "queue_ns": per_call[len(per_call) // 2],
        "empty_call_ns": empty_ns,
        "queue_per_empty_call": per_call[len(per_call) // 2] / empty_ns,
        "queue_ns_mean": loop_ns / n,
        "rate": n / ((t_told - t_first) / 1e9),
        "seconds": (t_told - t_first) / 1e9,
        "wakeups": stats.wakeups,
        "datagrams": stats.datagrams,
        "send_calls": stats.send_calls,
        "gso": stats.gso,
        "sleeps": stats.sleeps,
        "retransmits": stats.retransmits,
        "on_stored_calls": told.calls,
        "full": full,
        "cpu_ns_per_record": (cpu1 - cpu0) / n,
        "peak_rss": peak_rss_bytes(),
    }


def run_backlog(url: str, records: list[bytes]) -> dict[str, Any]:
    """All records queued while the link thread is held: the peak RSS with all unstored."""
    n = len(records)
    link = open_link(url, "after")
    try:
        reset_peak_rss()
        before = rss_bytes()
        with held(link) as taken:
            queue = link.queue
            for record in records:
                queue(record)
            early = link._taken != taken
            queued_rss = rss_bytes()
        t0 = time.perf_counter_ns()
        if not link.wait_stored(n, timeout=TOLD_TIMEOUT):
            raise RuntimeError(f"only {link.stored:,} of {n:,} records stored in {TOLD_TIMEOUT} s")
        seconds = (time.perf_counter_ns() - t0) / 1e9
    finally:
        link.close(timeout=10)
    return {
        "rss_before": before,
        "rss_queued": queued_rss,
        "peak_rss": peak_rss_bytes(),
        "taken_early": early,
        "drain_rate": n / seconds,
    }


def measure(
    records: int, size: int, repeat: int, variants: Sequence[str], block: int, backlog_run: bool
) -> dict[str, Any]:
    """Run every variant `repeat` times (interleaved) and the backlog once per repeat."""
    data = make_records(records, size)
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    backlog: list[dict[str, Any]] = []
    for _ in range(repeat):
        for variant in variants:
            with serving("batch") as server:
                run = run_queue(server.url, variant, data, block)
                listener = server.stop()
            run["syncs"] = int(listener.get("syncs", 0))
            run["datagrams_received"] = int(listener.get("datagrams", 0))
            run["recv_calls"] = int(listener.get("recv_calls", 0))
            runs[variant].append(run)
        if backlog_run:
            with serving("batch") as server:
                backlog.append(run_backlog(server.url, data))
                server.stop()
    return {"runs": runs, "backlog": backlog}


def build_report(args: argparse.Namespace, measured: dict[str, Any]) -> Report:
    report = Report(
        "queue",
        f"one app thread queues {args.records:,} records of {args.size} B one at a time; "
        f"listener process, sync=batch; {IMPLEMENTATION}",
        parameters={
            "records": args.records,
            "size": args.size,
            "block": args.block,
            "repeat": args.repeat,
        },
    )
    runs: dict[str, list[dict[str, Any]]] = measured["runs"]
    n = args.records
    for variant, rs in runs.items():
        report.add(
            variant=variant,
            queue_ns=summarize_key(rs, "queue_ns", "ns"),
            empty_call_ns=summarize_key(rs, "empty_call_ns", "ns"),
            queue_per_call=summarize_key(rs, "queue_per_empty_call", "x"),
            queue_ns_mean=summarize_key(rs, "queue_ns_mean", "ns"),
            records_per_s=summarize_key(rs, "rate", "records/s"),
            wakeups=summarize_key(rs, "wakeups"),
            wakeups_per_1000=summarize_key(rs, "wakeups", "per 1,000 records", 1000 / n),
            datagrams=summarize_key(rs, "datagrams"),
            send_calls=summarize_key(rs, "send_calls"),
            syncs=summarize_key(rs, "syncs"),
            send_cpu_ns=summarize_key(rs, "cpu_ns_per_record", "ns/record"),
            peak_rss_mb=summarize_key(rs, "peak_rss", "MB", 1 / (1 << 20)),
        )
    backlog = measured["backlog"]
    if backlog:
        report.add(
            variant="held backlog",
            records_per_s=summarize_key(backlog, "drain_rate", "records/s"),
            peak_rss_mb=summarize_key(backlog, "peak_rss", "MB", 1 / (1 << 20)),
        )
    report.columns = [
        "variant", "queue_ns", "empty_call_ns", "queue_per_call", "queue_ns_mean", "records_per_s",
        "wakeups", "wakeups_per_1000", "datagrams", "send_calls", "syncs", "send_cpu_ns",
        "peak_rss_mb",
    ]  # fmt: skip
    report.extra = {"runs": runs, "backlog": backlog}
    after = runs.get("after")
    if after:
        q = summarize_key(after, "queue_ns").median
        rate = summarize_key(after, "rate").median
        report.notes.append(
            f"queue() median {q:.0f} ns (target <= {QUEUE_NS_TARGET:.0f}): "
            + ("met" if q <= QUEUE_NS_TARGET else "NOT met")
        )
        per_call = summarize_key(after, "queue_per_empty_call").median
        report.notes.append(
            f"queue() / an empty Python call in the same loop: x{per_call:.2f} "
            f"(target <= x{QUEUE_PER_CALL_TARGET:.0f}, {IMPLEMENTATION}): "
            + ("met" if per_call <= QUEUE_PER_CALL_TARGET else "NOT met")
        )
        report.notes.append(
            f"first queue -> last told {rate:,.0f} records/s (target >= {RATE_TARGET:,.0f}): "
            + ("met" if rate >= RATE_TARGET else "NOT met")
        )
        for before in ("wake-every-record", "send-per-datagram"):
            if before in runs:
                rate_x = ratio(summarize_key(after, "rate"), summarize_key(runs[before], "rate"))
                ns_x = ratio(
                    summarize_key(after, "queue_ns"), summarize_key(runs[before], "queue_ns")
                )
                report.notes.append(
                    f"after / {before}: records/s x{rate_x:.2f}, queue ns x{ns_x:.2f}"
                )
    if backlog:
        peak = summarize_key(backlog, "peak_rss").median
        report.notes.append(
            f"peak RSS with all {n:,} records queued and unstored: {peak / (1 << 20):.1f} MB "
            f"(target <= {RSS_TARGET >> 20} MB): " + ("met" if peak <= RSS_TARGET else "NOT met")
        )
        if any(b["taken_early"] for b in backlog):
            report.notes.append("note: in some backlog runs the link thread took records early")
    report.notes.append(
        "queue_ns = median over blocks of the per-call time; queue_ns_mean = whole loop / records;"
        " cells are median (min-max) over the runs"
    )
    return report


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = base_parser("queue", __doc__.splitlines()[0] if __doc__ else "queue")
    parser.add_argument("--records", type=int, default=200_000, metavar="N")
    parser.add_argument("--size", type=int, default=61, metavar="B", help="bytes per record")
    parser.add_argument("--block", type=int, default=1000, metavar="N", help="calls per timing")
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated, of: {', '.join(VARIANTS)} (default all)",
    )
    parser.add_argument("--no-backlog", action="store_true", help="skip the held-backlog RSS run")
    add_impl_argument(parser)
    args = parser.parse_args(list(argv))
    args.variant_list = [v for v in args.variants.split(",") if v]
    for v in args.variant_list:
        if v not in VARIANTS:
            parser.error(f"unknown variant {v!r}")
    if args.records < 1 or args.block < 1 or args.repeat < 1:
        parser.error("--records, --block and --repeat must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if (code := run_elsewhere("queue", argv, args)) is not None:
        return code
    measured = measure(
        args.records, args.size, args.repeat, args.variant_list, args.block, not args.no_backlog
    )
    build_report(args, measured).emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
