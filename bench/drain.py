"""`purelink bench drain`: a backlog drains from a link to a listener in ONE process.

Workload: a real `purelink.Listener` (its drain loop, GRO, buffer pool,
protocol core, answers; `sync="none"`) and a real link, both in this process,
on loopback.  200,000 distinct records of 61 B are queued while the link
thread is held asleep (bench/_links.py `held`), so the whole backlog is
there before the link may send; then the link thread is woken and the clock
runs until the link is told the last record is stored.

What is and is not measured:

* measured: the link thread taking the ring, packing batches and datagrams,
  pacing by its window, sending (GSO or not); the listener thread receiving
  until EAGAIN, splitting GRO buffers, decoding and checking every datagram
  (CRC-32C), ordering and deduplicating, handing in-order batches to the
  store, answering; the link thread reading answers and telling the owner.
  Both threads share one interpreter and so one GIL, as the workload says;
* not measured: the store.  `Listener.start` is given a null data directory
  (`NullDataDir` below, patched in only while `start` runs): `append` only
  counts the records and returns the last position, nothing is written, and
  with `sync="none"` "stored" follows at once.  The disk is measured by
  `queue` (a listener process with `sync=batch`).

Reported per variant, as median (min-max) of `--repeat` runs: records/s
(release of the backlog -> told the last one stored), CPU ns per record of
the link thread and of the listener thread (each thread's own CPU clock,
`pthread_getcpuclockid`), of the whole process, datagrams, send calls,
listener receive calls.  Variants: `after` (UDP GSO on the link, GRO on the
listener), `send-per-datagram` (no GSO), `no-gro` (GSO, but the listener
socket without UDP_GRO, so one receive per datagram).

`--calls` counts the Python-level calls of the link and listener threads
while the backlog drains (bench/_calls.py), per datagram and per batch,
and names each thread's most called functions; the count slows the run, so
its other figures are not the workload's.  `--burst N` sets the most
datagrams the link's sender puts out per round (its `datagrams_to_send`
call; the product's is 64): fewer rounds, fewer calls of the send path's
Python, the same datagrams.  `--warmup N` runs each variant N times before
the measured runs and reports nothing of them: a fresh process's first runs
also pay for memory its threads touch for the first time (each run starts a
new listener and link thread, and the allocator's per-thread arenas grow to
their peak over the first few).

`--parts` also splits the link thread's CPU by what it was doing (each
part's own thread CPU clock, summed over its calls; see `PARTS`): the take
from the ring, packing (`datagrams_to_send`), the send, the answers
(`receive_datagram`) and, within them, freeing the stored records.  The
clocks cost a system call each, a few ns per record in all: compare runs
with `--parts` among themselves.

Run from the checkout root: `python -m bench.drain [--records N] [--json]`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import purelink.listener.listener as listener_module
from purelink import Listener
from purelink._udp import SOL_UDP, UDP_GRO
from purelink.link.thread import LinkThread
from purelink.protocol.sender import Sender
from purelink.protocol.sender_records import SenderRecords
from purelink.protocol.wire import BatchHeader
from purelink.store.format import ProducerState

from ._calls import CallCounter
from ._common import (
    Report,
    base_parser,
    make_records,
    ratio,
    self_cpu_ns,
    summarize_key,
    thread_cpu_ns,
)
from ._impl import add_impl_argument, run_elsewhere
from ._links import held, no_gso, open_link

__all__ = ["PARTS", "RATE_TARGET", "VARIANTS", "NullDataDir", "main", "run_drain", "timed_parts"]

RATE_TARGET = 3_000_000.0
TOLD_TIMEOUT = 120.0

VARIANTS: dict[str, str] = {
    "after": "UDP GSO on the link, UDP GRO on the listener",
    "send-per-datagram": "one send() per datagram (no GSO)",
    "no-gro": "GSO on the link, the listener socket without UDP_GRO",
}


PARTS: dict[str, tuple[type, str]] = {
    "take": (LinkThread, "_take"),
    "pack": (Sender, "datagrams_to_send"),
    "send": (LinkThread, "_send"),
    "answers": (Sender, "receive_datagram"),
    "release": (SenderRecords, "_release"),  # (within the answers)
}
"""`--parts`: each part of the link thread's work, as the method that does it
(on the class that defines it); only the link thread calls them."""


@contextlib.contextmanager
def timed_parts(spent: dict[str, int]) -> Iterator[None]:
    """While in the block, each method of PARTS adds its calling thread's CPU
    time to spent[part] (ns)."""
    saved: list[tuple[type, str, Callable[..., Any]]] = []

    def timed(method: Callable[..., Any], part: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time_ns()
            try:
                return method(*args, **kwargs)
            finally:
                spent[part] += time.thread_time_ns() - t0

        return call

    try:
        for part, (cls, name) in PARTS.items():
            method = cls.__dict__[name]
            saved.append((cls, name, method))
            spent.setdefault(part, 0)
            setattr(cls, name, timed(method, part))
        yield
    finally:
        for cls, name, method in saved:
            setattr(cls, name, method)


class NullLog:
    """A stream log that stores nothing: positions are counted, nothing is written."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.producers: dict[int, ProducerState] = {}
        self.last_position = 0
        self.appends = 0

    def append(self, batches: Sequence[tuple[bytes | memoryview, BatchHeader]]) -> int:
        self.appends += 1
        self.last_position += sum(h.count for _, h in batches)
        return self.last_position

    def sync(self) -> int:
        return self.last_position

    def new_epoch(self, producer: int, *, durable: bool, owner: int = 0) -> int:
        state = self.producers.get(producer)
        epoch = (state.epoch if state is not None else 0) + 1
        self.producers[producer] = ProducerState(epoch, state.last_seq if state else 0)
        return epoch

    def forget(self, producer: int) -> None:
        self.producers.pop(producer, None)

    def close(self) -> None:
        pass


class NullDataDir:
    """What `Listener` needs of a `DataDir`, with `NullLog` streams."""

    def __init__(self, path: str | os.PathLike[str], **options: object) -> None:  # keywords ignored
        self.path = Path(path)  # the free space the listener looks at (--min-free)
        self._logs: dict[str, NullLog] = {}

    def open_log(self, name: str) -> None:
        """No folder of its own: the free space is the directory's."""
        return

    def stream(self, name: str, *, create: bool = True) -> NullLog:
        log = self._logs.get(name)
        if log is None:
            if not create:
                raise KeyError(name)
            log = self._logs[name] = NullLog(name)
        return log

    def streams(self) -> list[str]:
        return sorted(self._logs)

    def close(self) -> None:
        pass


def start_null_listener() -> Listener:
    """A started Listener on 127.0.0.1 (any port), sync="none", with a NullDataDir."""
    if not hasattr(listener_module, "DataDir"):
        raise RuntimeError("purelink.listener.listener.DataDir moved: update bench/drain.py")
    listener = Listener(
        Path(tempfile.gettempdir()) / "purelink-null-store", udp="127.0.0.1:0", sync="none"
    )
    real = listener_module.DataDir
    listener_module.DataDir = NullDataDir  # patched for start() only
    try:
        listener.start()
    finally:
        listener_module.DataDir = real
    return listener


class _Told:
    def __init__(self, last: int) -> None:
        self.last = last
        self.at = 0

    def __call__(self, seq: int) -> None:
        if seq >= self.last and not self.at:
            self.at = time.perf_counter_ns()


def run_drain(
    variant: str,
    records: list[bytes],
    parts: bool = False,
    calls: CallCounter | None = None,
    burst: int = 0,
) -> dict[str, Any]:
    """One run: a fresh listener and link, the backlog queued held, then drained
    (with `parts`, the link thread's CPU split by PARTS too; with `calls`, the
    two threads' calls counted into it; `burst`: the sender's datagrams per
    round, 0 = the product's)."""
    spent: dict[str, int] = {}
    with contextlib.ExitStack() as stack:
        if parts:
            stack.enter_context(timed_parts(spent))
        if calls is not None:
            threading.setprofile(calls)  # the threads started from here on
            stack.callback(threading.setprofile, None)
        return _run_drain(variant, records, spent, calls, burst)


def _run_drain(
    variant: str,
    records: list[bytes],
    spent: dict[str, int],
    calls: CallCounter | None,
    burst: int,
) -> dict[str, Any]:
    n = len(records)
    listener = start_null_listener()
    try:
        assert listener.udp_address is not None
        host, port = listener.udp_address
        told = _Told(n)
        link = open_link(f"udp://{host}:{port}", "after", on_stored=told)
        try:
            if burst:
                sender = link._sender
                sender.config = dataclasses.replace(sender.config, burst=burst)
            if variant == "send-per-datagram":
                no_gso(link)
            if variant == "no-gro":
                sock = listener._sock
                assert sock is not None
                sock.setsockopt(SOL_UDP, UDP_GRO, 0)
                listener._gro = False
            before = listener.stats()
            link_stats0 = link.stats()
            listener_thread = listener._thread
            assert listener_thread is not None
            if calls is not None:
                calls.watch(link=link._thread, listener=listener_thread)
            counted0 = calls.totals() if calls is not None else {}
            with held(link) as taken:
                queue = link.queue
                for record in records:
                    queue(record)
                early = link._taken != taken
                spent0 = dict(spent)
                link_cpu0 = thread_cpu_ns(link._thread)
                listener_cpu0 = thread_cpu_ns(listener_thread)
                process_cpu0 = self_cpu_ns()
                if calls is not None:
                    calls.on = True
                t0 = time.perf_counter_ns()
            if not link.wait_stored(link.queued, timeout=TOLD_TIMEOUT):
                raise RuntimeError(f"only {link.stored:,} of {n:,} stored in {TOLD_TIMEOUT} s")
            t1 = told.at or time.perf_counter_ns()
            if calls is not None:
                calls.on = False
            link_cpu1 = thread_cpu_ns(link._thread)
            spent1 = dict(spent)
            listener_cpu1 = thread_cpu_ns(listener_thread)
            process_cpu1 = self_cpu_ns()
            stats = link.stats()
            after = listener.stats()
        finally:
            link.close(timeout=10)
    finally:
        listener.close()
    datagrams = stats.datagrams - link_stats0.datagrams
    batches = stats.batches - link_stats0.batches
    counted = {k: v - counted0.get(k, 0) for k, v in (calls.totals() if calls else {}).items()}
    return {
        "rate": n / ((t1 - t0) / 1e9),
        "seconds": (t1 - t0) / 1e9,
        "link_cpu_ns": (link_cpu1 - link_cpu0) / n,
        "listener_cpu_ns": (listener_cpu1 - listener_cpu0) / n,
        "process_cpu_ns": (process_cpu1 - process_cpu0) / n,
        "datagrams": datagrams,
        "batches": batches,
        "send_calls": stats.send_calls - link_stats0.send_calls,
        "retransmits": stats.retransmits - link_stats0.retransmits,
        "recv_calls": after.recv_calls - before.recv_calls,
        "drains": after.drains - before.drains,
        "gro": after.gro,
        "gso": stats.gso,
        "taken_early": early,
        **{f"{part}_ns": (spent1[part] - spent0[part]) / n for part in spent1},
        **{f"{k}_per_datagram": v / datagrams for k, v in counted.items()},
        **{f"{k}_per_batch": v / batches for k, v in counted.items()},
    }


def build_report(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]) -> Report:
    report = Report(
        "drain",
        f"a backlog of {args.records:,} records of {args.size} B drains; link and listener "
        "in one process, no store",
        parameters={
            "records": args.records,
            "size": args.size,
            "repeat": args.repeat,
            **({"warmup": args.warmup} if args.warmup else {}),
            **({"burst": args.burst} if args.burst else {}),
        },
    )
    for variant, rs in runs.items():
        report.add(
            variant=variant,
            records_per_s=summarize_key(rs, "rate", "records/s"),
            link_cpu_ns=summarize_key(rs, "link_cpu_ns", "ns/record"),
            listener_cpu_ns=summarize_key(rs, "listener_cpu_ns", "ns/record"),
            process_cpu_ns=summarize_key(rs, "process_cpu_ns", "ns/record"),
            datagrams=summarize_key(rs, "datagrams"),
            send_calls=summarize_key(rs, "send_calls"),
            recv_calls=summarize_key(rs, "recv_calls"),
            retransmits=summarize_key(rs, "retransmits"),
            **{
                f"{part}_ns": summarize_key(rs, f"{part}_ns", "ns/record")
                for part in PARTS
                if rs and f"{part}_ns" in rs[0]
            },
            **{
                key: summarize_key(rs, key, "calls")
                for key in (rs[0] if rs else {})
                if key.endswith(("_per_datagram", "_per_batch"))
            },
        )
    report.extra = {"runs": runs}
    after = runs.get("after")
    if after:
        rate = summarize_key(after, "rate").median
        report.notes.append(
            f"drain {rate:,.0f} records/s (target >= {RATE_TARGET:,.0f}): "
            + ("met" if rate >= RATE_TARGET else "NOT met")
        )
        for before in ("send-per-datagram", "no-gro"):
            if before in runs:
                x = ratio(summarize_key(after, "rate"), summarize_key(runs[before], "rate"))
                report.notes.append(f"after / {before}: records/s x{x:.2f}")
    calls: CallCounter | None = getattr(args, "calls_counter", None)
    if calls is not None:
        report.notes.append(
            "--calls: Python-level calls from release to told (py: of Python functions; "
            "c: of C functions from Python code), per datagram and per batch sent; the count "
            "slows the runs, so their times and CPU are not the workload's"
        )
        for role in ("link", "listener"):
            report.notes.append(f"  most called on the {role} thread, all runs: {calls.top(role)}")
    if any(r["taken_early"] for rs in runs.values() for r in rs):
        report.notes.append("note: in some runs the link thread took records before the release")
    report.notes.append(
        "CPU ns per record: each thread's own CPU clock from release to told; "
        "cells are median (min-max) over the runs"
    )
    return report


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = base_parser("drain", "a backlog drains; link and listener in one process, no store")
    parser.add_argument("--records", type=int, default=200_000, metavar="N")
    parser.add_argument("--size", type=int, default=61, metavar="B", help="bytes per record")
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated, of: {', '.join(VARIANTS)} (default all)",
    )
    parser.add_argument(
        "--parts",
        action="store_true",
        help="split the link thread's CPU per record by part: take, pack, send, answers "
        "(release within them)",
    )
    parser.add_argument(
        "--calls",
        action="store_true",
        help="count the link and listener threads' Python-level calls per datagram and batch "
        "(slows the runs)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=0,
        metavar="N",
        help="runs of each variant before the measured ones, not reported (default 0)",
    )
    parser.add_argument(
        "--burst",
        type=int,
        default=0,
        metavar="N",
        help="datagrams the sender puts out per round (0: the product's, 64)",
    )
    add_impl_argument(parser)
    args = parser.parse_args(list(argv))
    args.variant_list = [v for v in args.variants.split(",") if v]
    for v in args.variant_list:
        if v not in VARIANTS:
            parser.error(f"unknown variant {v!r}")
    if args.records < 1 or args.repeat < 1:
        parser.error("--records and --repeat must be at least 1")
    if args.burst < 0 or args.warmup < 0:
        parser.error("--burst and --warmup must be 0 or more")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if (code := run_elsewhere("drain", argv, args)) is not None:
        return code
    data = make_records(args.records, args.size)
    # the records' list settles in the collector's oldest generation, as an
    # application's long-lived data does: young, a collection started by
    # either path's allocations walked its 200,000 items inside a timed run
    gc.collect()
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in args.variant_list}
    for _ in range(args.warmup):
        for variant in args.variant_list:
            run_drain(variant, data, burst=args.burst)
    args.calls_counter = CallCounter() if args.calls else None
    for _ in range(args.repeat):
        for variant in args.variant_list:
            runs[variant].append(
                run_drain(variant, data, args.parts, args.calls_counter, args.burst)
            )
    build_report(args, runs).emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
