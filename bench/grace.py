"""`purelink bench grace`: 10 readers, 1 updater waiting for grace periods (SPEC section 8).

Why it exists: it shows the effect of "signal only a waiter that waits, once
per grace period" (src/purelink/primitives/grace.py, after the liburcu QSBR
patch, where rcutorture went from 302 to 408 updates) against the naive
signalling kept as the "before" variant, in the same process, on the same
machine, back to back.

Workload (rcutorture's shape, nreaders=10, nupdaters=1, duration=10):

* 10 reader threads, each registered with one GraceDomain, loop: take a
  reference to the current shared object, read a 4 KiB "batch" with
  `os.pread` from a file in the page cache (what a Store reader does between
  two quiescent states; the call releases the GIL as real I/O does), check
  the object they hold was not freed, then announce a quiescent state;
* 1 updater loops: publish a new object, `synchronize()`, mark the old one
  freed, count one update.

Reported per variant (median and min-max of `--repeat` runs of `--seconds`):
updates/s, reader batches/s, parks and unparks (signals) per grace period,
CPU of the whole process per second of wall time; then the ratio
after / before of updates/s (target >= 1.3).  A reader that ever sees a
freed object fails the run (exit 1): the figure would mean nothing.

Run from the checkout root: `python -m bench.grace [--seconds S] [--json]`,
or `purelink bench grace`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

from purelink.primitives import GraceDomain

from ._common import Report, Summary, base_parser, ratio, summarize

__all__ = ["RATIO_TARGET", "main", "run_once"]

RATIO_TARGET = 1.3
"""updates/s with the patch / without it, on a 2-core machine (SPEC section 8)."""

VARIANTS = {
    "after": True,  # signal only a waiter that waits, once per grace period
    "before": False,  # every quiescent state signals while the waiter may be parked
}
BATCH_BYTES = 4096


class _Shared:
    """The thing readers hold between quiescent states; freed once retired."""

    __slots__ = ("freed", "serial")

    def __init__(self, serial: int) -> None:
        self.serial = serial
        self.freed = False


def run_once(
    only_waiting: bool, seconds: float, readers: int, spins: int | None = None
) -> dict[str, Any]:
    """One run of the workload; a dict of raw counts and rates."""
    domain = GraceDomain(signal_only_waiting=only_waiting, spins=spins)
    with tempfile.TemporaryFile() as f:
        f.write(b"\x5a" * (64 << 10))
        f.flush()
        fd = f.fileno()
        holder = [_Shared(0)]
        stop = threading.Event()
        batches = [0] * readers
        violations = [0] * readers
        started = threading.Barrier(readers + 1)

        def reader(k: int) -> None:
            me = domain.register(f"reader-{k}")
            pread, quiescent, stopped = os.pread, me.quiescent, stop.is_set
            n = bad = 0
            started.wait()
            try:
                while not stopped():
                    shared = holder[0]
                    pread(fd, BATCH_BYTES, (n & 15) * BATCH_BYTES)
                    if shared.freed:
                        bad += 1
                    n += 1
                    quiescent()
            finally:
                me.unregister()
                batches[k], violations[k] = n, bad

        threads = [threading.Thread(target=reader, args=(k,), daemon=True) for k in range(readers)]
        for t in threads:
            t.start()
        started.wait()
        updates = 0
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        end = t0 + seconds
        try:
            while time.perf_counter() < end:
                old = holder[0]
                holder[0] = _Shared(updates + 1)
                domain.synchronize()
                old.freed = True
                updates += 1
        finally:
            wall = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
            stop.set()
            for t in threads:
                t.join(30)
    stats = domain.statistics()
    periods = max(1, stats.grace_periods)
    return {
        "updates": updates,
        "updates_per_s": updates / wall,
        "batches_per_s": sum(batches) / wall,
        "parks_per_gp": stats.parks / periods,
        "unparks_per_gp": stats.unparks / periods,
        "cpu_per_s": cpu / wall,
        "violations": sum(violations),
        "wall_s": wall,
        "parks": stats.parks,
        "unparks": stats.unparks,
        "spins": stats.spins,
    }


def _s(runs: list[dict[str, Any]], key: str, unit: str = "") -> Summary:
    return summarize((r[key] for r in runs), unit)


def build_report(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]) -> Report:
    report = Report(
        "grace",
        f"{args.readers} readers, 1 updater waiting for grace periods, {args.seconds:g} s a run",
        parameters={
            "readers": args.readers,
            "seconds": args.seconds,
            "repeat": args.repeat,
            "spins": args.spins if args.spins is not None else "default",
            "batch": f"pread {BATCH_BYTES} B",
        },
    )
    for name, rs in runs.items():
        report.add(
            variant=name,
            updates_per_s=_s(rs, "updates_per_s", "updates/s"),
            reader_batches_per_s=_s(rs, "batches_per_s", "batches/s"),
            parks_per_gp=_s(rs, "parks_per_gp"),
            unparks_per_gp=_s(rs, "unparks_per_gp"),
            cpu_cores=_s(rs, "cpu_per_s", "CPU s/s"),
        )
    report.extra = {"runs": runs}
    if "after" in runs and "before" in runs:
        x = ratio(_s(runs["after"], "updates_per_s"), _s(runs["before"], "updates_per_s"))
        report.notes.append(
            f"updates/s after / before: x{x:.2f} (target >= {RATIO_TARGET}): "
            + ("met" if x >= RATIO_TARGET else "NOT met")
        )
        # each "after" run and the "before" run right behind it shared the machine's
        # load: the ratio within a pair is steadier than the ratio of the medians
        pairs = summarize(
            a["updates_per_s"] / b["updates_per_s"]
            for a, b in zip(runs["after"], runs["before"], strict=False)
        )
        report.extra["pair_ratios"] = list(pairs.values)
        report.notes.append(f"after / before within each back-to-back pair: x{pairs}")
    report.notes.append(
        "after = signal only a parked waiter, once per grace period (the liburcu patch); "
        "before = every quiescent state signals while the waiter may be parked"
    )
    report.notes.append("cells are median (min-max) over the runs; unparks = reader signals")
    return report


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = base_parser("grace", __doc__.splitlines()[0] if __doc__ else "grace", repeat=1)
    parser.add_argument("--seconds", type=float, default=10.0, metavar="S", help="per run")
    parser.add_argument("--readers", type=int, default=10, metavar="N")
    parser.add_argument(
        "--spins", type=int, default=None, metavar="N", help="checks before parking"
    )
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma-separated: after,before"
    )
    args = parser.parse_args(list(argv))
    args.variant_list = [v for v in args.variants.split(",") if v]
    for v in args.variant_list:
        if v not in VARIANTS:
            parser.error(f"unknown variant {v!r}")
    if args.seconds <= 0 or args.readers < 1 or args.repeat < 1:
        parser.error("--seconds, --readers and --repeat must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in args.variant_list}
    for _ in range(args.repeat):  # interleaved, so a noisy minute hurts both variants
        for name in args.variant_list:
            runs[name].append(run_once(VARIANTS[name], args.seconds, args.readers, args.spins))
    build_report(args, runs).emit(args.json)
    bad = sum(r["violations"] for rs in runs.values() for r in rs)
    if bad:
        print(f"purelink bench grace: {bad} reads saw a freed object", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
