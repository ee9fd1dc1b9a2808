"""`purelink bench grace`: 10 readers, 1 updater waiting for grace periods (docs/performance.md).

Why it exists: it shows the effect of Paolo Bonzini's liburcu QSBR patch
("avoid useless futex wakeups and burning CPU for long grace periods"; where
rcutorture went from 302 to 408 updates), which src/purelink/primitives/grace.py
follows, against the code before it, in the same process, on the same machine,
back to back.  The patch changed two things and the variants take them apart:

* after: the patch -- the updater parks again after every wake; a reader
  signals only if the parked updater flagged it (still pending), once per
  grace period;
* before: liburcu without the patch, as it was -- the updater parks once per
  grace period, and once woken busy-checks (bare, as caa_cpu_relax()) until
  the last reader is in; any reader's quiescent state wakes it while
  gp_futex == -1 (and resets it, so one wake per park);
* no-flags: the patch's updater with the unpatched readers (any reader, even
  one already counted, wakes the re-parked updater): the flags' share alone;
* always-signal (not in the seed): the patch's updater with readers that
  take the lock and notify at every quiescent state, parked updater or not:
  the plain reading of "without 'wake only a waiter that waits'" (as the
  queue benchmark's "before" writes the eventfd for every record);
* before-yield (not in the seed; only with --variants): `before` with an
  os.sched_yield() between busy checks, which releases the GIL: what the
  busy checks cost when they do not hold the GIL.

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
busy checks per grace period, the median and 99th percentile of one update's
duration (mostly synchronize()), CPU of the whole process per second of wall
time; then the ratios of updates/s: after / before (the whole patch, as the
seed measured it), after / no-flags ("wake only a waiter that waits" as the
patch added it, the toggle the benchmark names; the 1.3 target is held to
this one) and after / always-signal (updates/s, and reader batches/s, where
the readers' signalling shows), and after / each variant within each round.
A reader that ever sees a freed object fails the run (exit 1): the figure
would mean nothing.

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
from collections.abc import Callable, Sequence
from typing import Any

from purelink.primitives.grace import GraceDomain, GraceReader

from ._common import Report, base_parser, percentile, ratio, summarize, summarize_key

__all__ = ["RATIO_TARGET", "VariantDomain", "main", "make_domain", "run_once"]

RATIO_TARGET = 1.3
"""updates/s with the patch / without it, on a 2-core machine (docs/performance.md)."""

VARIANTS: dict[str, dict[str, Any]] = {
    # VariantDomain keywords: the patch (the product's GraceDomain itself), liburcu
    # before it, and the two halves apart
    "after": {},
    "before": {"signal_only_waiting": False, "park_once": True},
    "no-flags": {"signal_only_waiting": False, "park_once": False},
    "always-signal": {"signal_only_waiting": False, "park_once": False, "signal_always": True},
    "before-yield": {"signal_only_waiting": False, "park_once": True, "relax": os.sched_yield},
}
DEFAULT_VARIANTS = ("after", "before", "no-flags", "always-signal")
BATCH_BYTES = 4096


class _NaiveReader(GraceReader):
    """liburcu's reader before the patch: every quiescent state signals whenever
    the waiter may be parked, whether or not this reader was already counted."""

    __slots__ = ()

    def quiescent(self) -> None:
        domain = self._domain
        self.ctr = domain.gp
        if domain.futex == -1:
            domain.wake(self)

    def offline(self) -> None:
        domain = self._domain
        self.ctr = 0
        if domain.futex == -1:
            domain.wake(self)


class _AlwaysReader(GraceReader):
    """In neither version of liburcu: the plain reading of "without 'wake only a
    waiter that waits'" -- every quiescent state takes the lock and notifies,
    parked waiter or not (as the queue benchmark's "before" writes the eventfd
    for every record)."""

    __slots__ = ("_variant",)

    def __init__(self, domain: VariantDomain, name: str, online: bool) -> None:
        super().__init__(domain, name, online)
        self._variant = domain

    def quiescent(self) -> None:
        self.ctr = self._domain.gp
        self._variant.notify_always(self)

    def offline(self) -> None:
        self.ctr = 0
        self._variant.notify_always(self)


class VariantDomain(GraceDomain):
    """The product's GraceDomain with the patch's two changes switchable:
    `park_once=True` is the unpatched waiter (it parks at most once per grace
    period, then busy-checks), `signal_only_waiting=False` the unpatched readers
    (no flags: any reader signals while the waiter is parked), and
    `signal_always=True` the readers of the "always-signal" variant.  Only those
    steps are overridden (`_park`, `_raise_flags`, `reader_type`); everything else,
    the patch's waiter included, is the product's code."""

    def __init__(
        self,
        *,
        signal_only_waiting: bool = True,
        park_once: bool = False,
        signal_always: bool = False,
        spins: int | None = None,
        relax: Callable[[], object] | None = None,
        trace: bool = False,
    ) -> None:
        super().__init__(spins=spins, relax=relax, trace=trace)
        self.signal_only_waiting = signal_only_waiting
        self.park_once = park_once
        self.signal_always = signal_always
        self.flags = signal_only_waiting and not signal_always
        """The readers have the patch's flag (else the waiter has none to raise)."""
        self.reader_type = (
            _AlwaysReader if signal_always else GraceReader if signal_only_waiting else _NaiveReader
        )

    def notify_always(self, reader: GraceReader) -> None:
        """An always-signal reader's quiescent state: the lock and a notify, always."""
        with self._cond:
            if self.futex == -1:
                self._wake_by(reader)  # a parked waiter: woken and counted, as by the others
            else:
                self._cond.notify()  # nobody parked: the notify finds no one

    def _raise_flags(self, pending: list[GraceReader]) -> None:
        """Unpatched readers have no flag: the waiter raises none."""
        if self.flags:
            super()._raise_flags(pending)

    def _park(self, gp: int, pending: list[GraceReader], deadline: float | None) -> bool:
        """The patch's waiter (the product's `_park`), or with `park_once` liburcu's
        before the patch: announce and park once (wait_loops == RCU_QS_ACTIVE_ATTEMPTS),
        then busy-check (bare, as caa_cpu_relax(), or `relax`) until the last reader
        is in."""
        if not self.park_once:
            return super()._park(gp, pending, deadline)
        pending = [r for r in pending if (c := r.ctr) and c != gp]
        if not pending:
            return True
        self.futex = -1  # announce, then check again
        self._raise_flags(pending)
        pending = [r for r in pending if (c := r.ctr) and c != gp]
        if not pending:
            self.futex = 0
            return True
        if not self._wait_gp(gp, deadline):
            return False
        relax = self.relax
        while True:  # every check after the one park is a busy check
            pending = [r for r in pending if (c := r.ctr) and c != gp]
            if not pending:
                return True
            self._spins += 1
            if deadline is not None and time.monotonic() >= deadline:
                return False
            if relax is not None:
                relax()


def make_domain(variant: str, spins: int | None = None, **kwargs: Any) -> GraceDomain:
    """The domain of one of VARIANTS: the product's GraceDomain for "after"."""
    options = VARIANTS[variant]
    if not options:
        return GraceDomain(spins=spins, **kwargs)
    return VariantDomain(spins=spins, **options, **kwargs)


class _Shared:
    """The thing readers hold between quiescent states; freed once retired."""

    __slots__ = ("freed", "serial")

    def __init__(self, serial: int) -> None:
        self.serial = serial
        self.freed = False


def run_once(
    variant: str, seconds: float, readers: int, spins: int | None = None
) -> dict[str, Any]:
    """One run of the workload with one of VARIANTS; a dict of raw counts and rates."""
    domain = make_domain(variant, spins)
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
        waits: list[float] = []  # seconds each update took (publish, synchronize, free)
        clock = time.perf_counter
        cpu0 = time.process_time()
        t0 = now = clock()
        end = t0 + seconds
        try:
            while now < end:
                old = holder[0]
                holder[0] = _Shared(updates + 1)
                domain.synchronize()
                old.freed = True
                updates += 1
                done = clock()
                waits.append(done - now)
                now = done
        finally:
            wall = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
            stop.set()
            for t in threads:
                t.join(30)
    stats = domain.statistics()
    periods = max(1, stats.grace_periods)
    waits.sort()
    return {
        "updates": updates,
        "updates_per_s": updates / wall,
        "batches_per_s": sum(batches) / wall,
        "parks_per_gp": stats.parks / periods,
        "unparks_per_gp": stats.unparks / periods,
        "spins_per_gp": stats.spins / periods,
        "gp_p50_us": percentile(waits, 50) * 1e6,
        "gp_p99_us": percentile(waits, 99) * 1e6,
        "cpu_per_s": cpu / wall,
        "violations": sum(violations),
        "wall_s": wall,
        "parks": stats.parks,
        "unparks": stats.unparks,
        "spins": stats.spins,
    }


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
            updates_per_s=summarize_key(rs, "updates_per_s", "updates/s"),
            reader_batches_per_s=summarize_key(rs, "batches_per_s", "batches/s"),
            parks_per_gp=summarize_key(rs, "parks_per_gp"),
            unparks_per_gp=summarize_key(rs, "unparks_per_gp"),
            checks_per_gp=summarize_key(rs, "spins_per_gp"),
            gp_p50_us=summarize_key(rs, "gp_p50_us", "us"),
            gp_p99_us=summarize_key(rs, "gp_p99_us", "us"),
            cpu_cores=summarize_key(rs, "cpu_per_s", "CPU s/s"),
        )
    report.extra = {"runs": runs}

    def of(name: str, key: str = "updates_per_s") -> float:
        return ratio(summarize_key(runs["after"], key), summarize_key(runs[name], key))

    def verdict(x: float) -> str:
        return f"(target >= {RATIO_TARGET}: " + ("met" if x >= RATIO_TARGET else "NOT met") + ")"

    if "after" in runs and "before" in runs:
        x = of("before")
        report.notes.append(
            f"updates/s after / before (the whole patch, as the seed measured it): x{x:.2f}"
            f" (>= {RATIO_TARGET}: " + ("yes" if x >= RATIO_TARGET else "no") + ")"
        )
    if "after" in runs and "no-flags" in runs:
        x = of("no-flags")
        report.notes.append(
            f"updates/s after / no-flags ('wake only a waiter that waits' alone, the benchmark's "
            f"toggle): x{x:.2f} {verdict(x)}"
        )
    if "after" in runs and "always-signal" in runs:
        x, y = of("always-signal"), of("always-signal", "batches_per_s")
        report.notes.append(
            f"after / always-signal (readers signal at every quiescent state): updates/s "
            f"x{x:.2f} {verdict(x)}; reader batches/s x{y:.2f}"
        )
    if "after" in runs:
        # each "after" run and the other runs of the same round shared the machine's
        # load: the ratio within a round is steadier than the ratio of the medians
        report.extra["round_ratios"] = {}
        for name, rs in runs.items():
            if name == "after":
                continue
            rounds = summarize(
                a["updates_per_s"] / b["updates_per_s"]
                for a, b in zip(runs["after"], rs, strict=False)
            )
            report.extra["round_ratios"][name] = list(rounds.values)
            report.notes.append(f"after / {name} within each round: x{rounds}")
    report.notes.append(
        "after = the patch (re-park after each wake; only flagged, still pending readers "
        "signal); before = liburcu before it (park once, then busy checks; any reader "
        "wakes a parked updater); no-flags = the patch's updater, unpatched readers; "
        "always-signal = the patch's updater, readers that notify at every quiescent state; "
        "before-yield = before with os.sched_yield() between busy checks"
    )
    report.notes.append(
        "cells are median (min-max) over the runs; unparks = reader signals; checks = busy "
        "checks; gp_p50/p99 = one update's duration, percentiles within a run"
    )
    return report


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = base_parser("grace", __doc__.splitlines()[0] if __doc__ else "grace", repeat=1)
    parser.add_argument("--seconds", type=float, default=10.0, metavar="S", help="per run")
    parser.add_argument("--readers", type=int, default=10, metavar="N")
    parser.add_argument(
        "--spins", type=int, default=None, metavar="N", help="checks before parking"
    )
    parser.add_argument(
        "--variants",
        default=",".join(DEFAULT_VARIANTS),
        help="comma-separated, run in this order each round: " + ",".join(VARIANTS),
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
            runs[name].append(run_once(name, args.seconds, args.readers, args.spins))
    build_report(args, runs).emit(args.json)
    bad = sum(r["violations"] for rs in runs.values() for r in rs)
    if bad:
        print(f"purelink bench grace: {bad} reads saw a freed object", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
