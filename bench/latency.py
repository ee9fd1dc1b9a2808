"""`purelink bench latency`: one record on an idle link, queue -> told stored (docs/performance.md).

Workload: `purelink serve` as its own process (loopback), one link.  Each
sample waits until the link thread sleeps in epoll (so the link is idle and
the record's `queue` must wake it), then times `queue(record)` followed by
`wait_stored(seq)` with `perf_counter_ns`.  `--samples` (2,000) samples per
row; rows for `sync=batch` (told after fdatasync) and `sync=none` (told once
written to the OS), each

* `idle`: nothing else runs in this process;
* `busy`: another application thread keeps running Python (a counting loop)
  the whole time, so the link thread, woken by the kernel, must wait for the
  GIL (CPython hands it over after the switch interval, 5 ms by default),
  and so must the application thread when `wait_stored` returns;
* `busy, remedy`: the same with the product's opt-in GIL remedy on for that
  row only (`purelink.tuning.set_switch_interval()`, a 0.5 ms switch
  interval; restored after) -- see `product_remedy()` below, the one place
  where it is wired in;
* `busy, switchinterval 0.5 ms (reference)`: only where purelink has no
  remedy (older revisions): `sys.setswitchinterval(0.0005)` set by this
  benchmark, to show what such a setting would buy.

`--transports udp,tcp` runs the rows over a udp:// link (the default) and
a tcp:// one (`purelink serve` then listens on TCP too), each in its own
listener; each row's `controller` is what the link's `stats()` says runs
it ("kernel" on a tcp:// link, the UDP link's controller otherwise).

Reported per row: p50, p90, p99 and max in microseconds, the mean, and the
link's parks/unparks (mechanism 2) per sample.  With `--repeat N` each
percentile is the median (min-max) over N runs.  Target: with sync=none,
p50 <= 100 us.

Run from the checkout root: `python -m bench.latency [--samples N] [--json]`.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from purelink.link.link import Link

from ._common import Report, base_parser, percentile, serving, summarize
from ._impl import add_impl_argument, run_elsewhere
from ._links import asleep, open_link

__all__ = ["P50_TARGET_US", "main", "product_remedy", "sample"]

P50_TARGET_US = 100.0
REFERENCE_SWITCH_INTERVAL = 0.0005
RECORD = b"purelink latency record " + b"." * 37  # 61 B
WAIT_TIMEOUT = 10.0


def product_remedy() -> Callable[[Link], contextlib.AbstractContextManager[None]] | None:
    """THE PLACE FOR THE PRODUCT'S GIL REMEDY (issue 4).

    Return a function that, given the connected link, gives a context manager
    inside which the remedy is on; None while purelink offers none.  Today the
    remedy is `purelink.tuning.set_switch_interval()` (opt-in, process-wide,
    returns the previous interval, which is restored after the rows).
    """
    try:
        from purelink import tuning  # noqa: PLC0415 -- absent in older revisions
    except ImportError:
        return None
    setter = getattr(tuning, "set_switch_interval", None)
    if setter is None:
        return None

    @contextlib.contextmanager
    def remedy(link: Link) -> Iterator[None]:
        old = setter()
        try:
            yield
        finally:
            sys.setswitchinterval(old)

    return remedy


class _Busy:
    """Another application thread that keeps running Python until stopped."""

    def __init__(self) -> None:
        self._stop = False
        self.loops = 0
        self._thread = threading.Thread(target=self._run, name="bench-busy", daemon=True)

    def _run(self) -> None:
        n = 0
        while not self._stop:
            n += 1
        self.loops = n

    def __enter__(self) -> _Busy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        self._thread.join(10)


@contextlib.contextmanager
def _switch_interval(seconds: float) -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def sample(link: Link, samples: int) -> dict[str, Any]:
    """`samples` latencies (ns) of queue -> told stored, each on an idle link."""
    queue = link.queue
    wait = link.wait_stored
    clock = time.perf_counter_ns
    out: list[int] = []
    not_idle = 0
    s0 = link.stats()
    for _ in range(samples):
        if not asleep(link, 1.0):
            not_idle += 1
        t0 = clock()
        seq = queue(RECORD)
        if not wait(seq, WAIT_TIMEOUT):
            raise RuntimeError(f"record {seq} was not told stored in {WAIT_TIMEOUT} s")
        out.append(clock() - t0)
    s1 = link.stats()
    out.sort()
    return {
        "p50_us": percentile(out, 50) / 1e3,
        "p90_us": percentile(out, 90) / 1e3,
        "p99_us": percentile(out, 99) / 1e3,
        "max_us": out[-1] / 1e3,
        "mean_us": sum(out) / len(out) / 1e3,
        "parks_per_sample": (s1.parks - s0.parks) / samples,
        "unparks_per_sample": (s1.unparks - s0.unparks) / samples,
        "wakeups_per_sample": (s1.wakeups - s0.wakeups) / samples,
        "not_idle": not_idle,
    }


Modes = list[tuple[str, Callable[[Link], contextlib.AbstractContextManager[Any]]]]
"""(name, what turns the row's condition on around its samples), per row."""


def _modes() -> Modes:
    modes: Modes = [
        ("idle", lambda link: contextlib.nullcontext()),
        ("busy", lambda link: _Busy()),
    ]
    remedy = product_remedy()
    if remedy is not None:
        modes.append(("busy, remedy", lambda link: _stack(remedy(link), _Busy())))
    else:  # what an interpreter setting would buy, until the product offers a remedy
        modes.append(
            (
                "busy, switchinterval 0.5 ms (reference)",
                lambda link: _stack(_switch_interval(REFERENCE_SWITCH_INTERVAL), _Busy()),
            )
        )
    return modes


@contextlib.contextmanager
def _stack(*managers: contextlib.AbstractContextManager[Any]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for manager in managers:
            stack.enter_context(manager)
        yield


def _rows(
    transport: str, sync: str, modes: Modes, samples: int
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each mode's samples over one link of `transport` to its own listener."""
    tcp = ["--tcp", "127.0.0.1:0"] if transport == "tcp" else []
    with serving(sync, tcp) as server:
        link = open_link(server.tcp_url if tcp else server.url, "after")
        try:
            sample(link, min(50, samples))  # warm-up, not reported
            controller = link.stats().congestion  # "kernel": the link runs over tcp://
            for mode, manager in modes:
                with manager(link):
                    yield mode, {**sample(link, samples), "controller": controller}
        finally:
            link.close(timeout=10)
        server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser("latency", "one record on an idle link -> told stored", repeat=1)
    parser.add_argument("--samples", type=int, default=2000, metavar="N")
    parser.add_argument("--syncs", default="none,batch", help="comma-separated sync modes")
    parser.add_argument("--no-reference", action="store_true", help="skip the reference rows")
    parser.add_argument(
        "--transports", default="udp", help="comma-separated of udp,tcp: the link's URL scheme"
    )
    add_impl_argument(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if (code := run_elsewhere("latency", argv, args)) is not None:
        return code
    syncs = [s for s in args.syncs.split(",") if s]
    transports = [t for t in args.transports.split(",") if t]
    if args.samples < 1 or args.repeat < 1 or not syncs:
        parser.error("--samples and --repeat must be at least 1, --syncs not empty")
    if not transports or set(transports) - {"udp", "tcp"}:
        parser.error("--transports: udp, tcp or both")
    for s in syncs:
        if s not in ("batch", "always", "none"):
            parser.error(f"unknown sync mode {s!r}")
    modes = [m for m in _modes() if not (args.no_reference and "reference" in m[0])]

    runs: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for _ in range(args.repeat):
        for transport in transports:
            for sync in syncs:
                for mode, got in _rows(transport, sync, modes, args.samples):
                    runs.setdefault((transport, sync, mode), []).append(got)

    report = Report(
        "latency",
        "one record queued on an idle link, then wait_stored; listener process",
        parameters={"samples": args.samples, "repeat": args.repeat},
    )
    for (transport, sync, mode), rs in runs.items():
        report.add(
            transport=transport,
            controller=rs[0]["controller"],
            sync=sync,
            app_threads=mode,
            **{
                key: summarize((r[key] for r in rs), unit)
                for key, unit in (
                    ("p50_us", "us"),
                    ("p90_us", "us"),
                    ("p99_us", "us"),
                    ("max_us", "us"),
                    ("mean_us", "us"),
                    ("unparks_per_sample", ""),
                )
            },
        )
    report.extra = {"runs": {f"{t}/{s}/{m}": rs for (t, s, m), rs in runs.items()}}
    for transport in transports:
        none_idle = runs.get((transport, "none", "idle"))
        if none_idle:
            p50 = summarize(r["p50_us"] for r in none_idle).median
            report.notes.append(
                f"{transport}:// sync=none idle p50 {p50:.0f} us (target <= "
                f"{P50_TARGET_US:.0f} us): " + ("met" if p50 <= P50_TARGET_US else "NOT met")
            )
    if product_remedy() is None:
        report.notes.append(
            "no GIL remedy in purelink yet: the 'busy, remedy' rows appear once "
            "bench/latency.py product_remedy() is wired to it; the switchinterval row is "
            "a reference set by this benchmark, not a purelink feature"
        )
    else:
        report.notes.append(
            "remedy = purelink.tuning.set_switch_interval() (opt-in), on for that row only"
        )
    if any(r["not_idle"] for rs in runs.values() for r in rs):
        report.notes.append("note: some samples started before the link thread was asleep")
    report.emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
