"""`purelink bench since`: find where `since=T` starts, by seeking vs by reading from 1.

Why it exists: docs/store.md promises that `Store.read(since=T)`,
`purelink read --since` and `tail --since` seek -- a binary search over the
segments' times files, then over one segment's entries -- instead of reading
the stream from position 1 and looking at each record's time.  This measures
both on one large stream of many segments, so the page quotes a figure.

Workload: a data directory with one stream of `--records` records of 61 B,
21 to a batch, 16 batches per append, written with a clock that moves 1 ms
per append (so every chunk has a time entry of its own: the densest times
files), in segments of `--segment-bytes`.  The target time is that of the
record at 3/4 of the stream.  Each run opens a fresh `Store` (no index
learned before) and times, with `time.perf_counter_ns`:

* seek: `store.position_at(stream, T)` and the first record read from there
  (`read_timed(start=...)`), as `read --since` does;
* scan: `read_timed` from position 1 up to the first record whose stored time
  is at or after T, as a reader without the times files' seek would.

Both must land on the same position (else the run fails, exit 1).  The data
is in the page cache after it is written.  Reported: the median and spread of
`--repeat` runs of each, and scan / seek.

Run from the checkout root: `python -m bench.since [--records N] [--json]`,
or `purelink bench since`.
"""

from __future__ import annotations

import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from purelink.protocol.wire import encode_batch, verify_batch
from purelink.store import DataDir, Store

from ._common import Report, base_parser, ratio, summarize

__all__ = ["fill", "main"]

PER_BATCH = 21
PER_APPEND = 16
T0 = 1_700_000_000.0


def fill(path: Path, records: int, segment_bytes: int) -> tuple[int, int]:
    """Write the stream; return (segments, batches)."""
    clock = [T0]
    record = b"x" * 61
    with DataDir(path, segment_bytes=segment_bytes, clock=lambda: clock[0]) as data:
        log = data.stream("s")
        seq, batches, chunk = 1, 0, []
        while seq <= records:
            raw = encode_batch(7, 1, seq, [record] * min(PER_BATCH, records - seq + 1))
            header = verify_batch(raw)
            chunk.append((raw, header))
            seq += header.count
            batches += 1
            if len(chunk) == PER_APPEND or seq > records:
                log.append(chunk)
                chunk = []
                clock[0] += 0.001
        log.sync()
    return len(list((path / "streams" / "s").glob("*.seg"))), batches


def _seek(path: Path, when: datetime) -> tuple[int, float]:
    t = time.perf_counter_ns()
    with Store(path) as store:
        start = store.position_at("s", when)
        position = next(store.read_timed("s", start))[0]
    return position, (time.perf_counter_ns() - t) / 1e6


def _scan(path: Path, when: float) -> tuple[int, float]:
    t = time.perf_counter_ns()
    with Store(path) as store:
        position = next(p for p, at, _ in store.read_timed("s") if at is not None and at >= when)
    return position, (time.perf_counter_ns() - t) / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = base_parser("since", __doc__ or "", repeat=5)
    parser.add_argument("--records", type=int, default=2_000_000, metavar="N")
    parser.add_argument("--segment-bytes", type=int, default=1 << 20, metavar="B")
    args = parser.parse_args(argv)
    report = Report(
        "since",
        "time to find the first record stored at or after T: seek vs read from 1",
        {"records": args.records, "segment_bytes": args.segment_bytes, "repeat": args.repeat},
    )
    with tempfile.TemporaryDirectory(prefix="purelink-bench-since-") as tmp:
        path = Path(tmp)
        segments, batches = fill(path, args.records, args.segment_bytes)
        target = 3 * args.records // 4
        with Store(path) as store:
            when = next(at for _, at, _ in store.read_timed("s", target, target + 1))
        assert when is not None
        moment = datetime.fromtimestamp(when, UTC)
        seeks, scans = [], []
        for _ in range(args.repeat):
            found, ms = _seek(path, moment)
            seeks.append(ms)
            scanned, ms_scan = _scan(path, when)
            scans.append(ms_scan)
            if found != scanned:
                print(f"seek found {found}, the scan {scanned}", file=sys.stderr)
                return 1
        report.parameters.update(segments=segments, batches=batches, position=found)
        seek, scan = summarize(seeks, "ms"), summarize(scans, "ms")
        report.add(way="seek (position_at + first record)", ms=seek)
        report.add(way="scan from position 1", ms=scan)
        report.notes.append(
            f"{args.records:,} records in {segments} segments; T = the time of position "
            f"{found:,}; scan / seek = {ratio(scan, seek):,.0f}x"
        )
    report.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
