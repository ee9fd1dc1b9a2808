"""`python -m bench.secret`: what the keyed MAC costs per record (docs/security.md).

Why it exists: docs/security.md makes every datagram carry a keyed BLAKE2b MAC
when a listener has a secret, and issue 7 asks that its cost per record be
measured on the 61 B `queue` workload and stay small against it.  This
benchmark runs that workload twice -- without a secret and with one -- and
reports the difference, and it times the MAC on its own so that the
difference can be told from noise.

Workload (variants `no-secret` and `secret`, run alternately `--repeat`
times): a real `purelink.Listener` (sync="batch", a store in a temporary
directory) and a real link, both in THIS process on loopback; one app
thread queues `--records` records of 61 B one at a time, as fast as it can;
the clock runs from the first `queue` to the link being told the last one
stored.  Reported per variant: records/s, CPU ns per record of the link
thread, of the listener thread and of the whole process (each thread's own
CPU clock).  All threads share one GIL, as in an application that embeds a
listener; the `queue` benchmark runs the listener in its own process.

Then the MAC alone (`wire` rows): a full DATA datagram of 61 B records, as
the sender packs them, is sealed (`encode_data`) and opened
(`decode_datagram`) in a loop with and without a key; the difference per
datagram, divided by the records it holds, is the MAC's cost per record on
each side, free of the scheduler's noise.

Run from the checkout root: `python -m bench.secret [--records N] [--json]`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import purelink
from purelink.protocol import wire

from ._common import (
    Report,
    base_parser,
    make_records,
    self_cpu_ns,
    summarize_key,
    thread_cpu_ns,
)

KEY = b"bench-secret-0123456789abcdef!!!"
VARIANTS = {"no-secret": None, "secret": KEY}
TOLD_TIMEOUT = 120.0


class _Told:
    def __init__(self, last: int) -> None:
        self.last = last
        self.at = 0

    def __call__(self, seq: int) -> None:
        if seq >= self.last and not self.at:
            self.at = time.perf_counter_ns()


def run_queue(secret: bytes | None, records: list[bytes]) -> dict[str, Any]:
    """One run: a fresh store, listener and link; every record queued one at a time."""
    n = len(records)
    with tempfile.TemporaryDirectory(prefix="purelink-bench-secret-") as tmp:
        listener = purelink.Listener(Path(tmp) / "data", udp="127.0.0.1:0", secret=secret)
        listener.start()
        try:
            assert listener.udp_address is not None
            host, port = listener.udp_address
            told = _Told(n)
            link = purelink.connect(
                f"udp://{host}:{port}", stream="bench", secret=secret, on_stored=told
            )
            try:
                listener_thread = listener._thread  # a benchmark of internals may
                assert listener_thread is not None
                link_cpu0 = thread_cpu_ns(link._thread)
                listener_cpu0 = thread_cpu_ns(listener_thread)
                process_cpu0 = self_cpu_ns()
                t0 = time.perf_counter_ns()
                queue = link.queue
                for record in records:
                    queue(record)
                if not link.wait_stored(link.queued, timeout=TOLD_TIMEOUT):
                    raise RuntimeError(f"only {link.stored:,} of {n:,} stored")
                t1 = told.at or time.perf_counter_ns()
                link_cpu1 = thread_cpu_ns(link._thread)
                listener_cpu1 = thread_cpu_ns(listener_thread)
                process_cpu1 = self_cpu_ns()
                stats = link.stats()
            finally:
                link.close(timeout=10)
            dropped = listener.stats().dropped
        finally:
            listener.close()
    return {
        "rate": n / ((t1 - t0) / 1e9),
        "link_cpu_ns": (link_cpu1 - link_cpu0) / n,
        "listener_cpu_ns": (listener_cpu1 - listener_cpu0) / n,
        "process_cpu_ns": (process_cpu1 - process_cpu0) / n,
        "datagrams": stats.datagrams,
        "retransmits": stats.retransmits,
        "dropped": sum(dropped.values()),
    }


def full_datagram(size: int, key: bytes | None, datagram_size: int = 1400) -> tuple[bytes, int]:
    """A DATA datagram packed as full as the sender packs it; (bytes, records in it)."""
    budget = datagram_size - wire.DATA_OVERHEAD - wire.BATCH_HEADER
    budget -= wire.MAC_SIZE if key is not None else 0
    count = budget // (size + 2)
    batch = wire.encode_batch((1 << 63) | 1, 1, 1, [b"r" * size] * count)
    return wire.encode_data(1, 1, batch, key), count


def time_wire(size: int, loops: int, rounds: int = 15) -> dict[str, dict[str, float]]:
    """ns per datagram to seal and to open a full DATA datagram, without and with a
    key: the best of `rounds` rounds of `loops` calls, the variants interleaved
    round by round so that a busy moment of the machine hits them alike."""
    cases = {}
    for variant, key in VARIANTS.items():
        data, count = full_datagram(size, key)
        msg = wire.decode_datagram(data, key)
        assert isinstance(msg, wire.Data)
        cases[variant] = (key, data, bytes(msg.batch), count)
    best = {v: {"seal_ns": float("inf"), "open_ns": float("inf")} for v in cases}
    encode, decode = wire.encode_data, wire.decode_datagram
    for _ in range(rounds):
        for variant, (key, data, batch, _count) in cases.items():
            t0 = time.perf_counter_ns()
            for _ in range(loops):
                encode(1, 1, batch, key)
            t1 = time.perf_counter_ns()
            for _ in range(loops):
                decode(data, key)
            t2 = time.perf_counter_ns()
            row = best[variant]
            row["seal_ns"] = min(row["seal_ns"], (t1 - t0) / loops)
            row["open_ns"] = min(row["open_ns"], (t2 - t1) / loops)
    for variant, (*_, count) in cases.items():
        best[variant]["records"] = count
    return best


def build_report(
    args: argparse.Namespace,
    runs: dict[str, list[dict[str, Any]]],
    wire_rows: dict[str, dict[str, float]],
) -> Report:
    report = Report(
        "secret",
        f"the keyed MAC's cost: {args.records:,} records of {args.size} B queued one at a "
        "time, listener (sync=batch) and link in one process; and the MAC alone",
        parameters={"records": args.records, "size": args.size, "repeat": args.repeat},
    )
    for variant, rs in runs.items():
        report.add(
            variant=variant,
            records_per_s=summarize_key(rs, "rate", "records/s"),
            link_cpu_ns=summarize_key(rs, "link_cpu_ns", "ns/record"),
            listener_cpu_ns=summarize_key(rs, "listener_cpu_ns", "ns/record"),
            process_cpu_ns=summarize_key(rs, "process_cpu_ns", "ns/record"),
            datagrams=summarize_key(rs, "datagrams"),
            retransmits=summarize_key(rs, "retransmits"),
        )
    plain, keyed = wire_rows["no-secret"], wire_rows["secret"]
    per_record = {
        side: (keyed[f"{side}_ns"] / keyed["records"]) - (plain[f"{side}_ns"] / plain["records"])
        for side in ("seal", "open")
    }
    for variant, row in wire_rows.items():
        report.add(
            variant=f"wire: {variant}",
            seal_ns_per_datagram=row["seal_ns"],
            open_ns_per_datagram=row["open_ns"],
            records_per_datagram=row["records"],
        )
    if "no-secret" in runs and "secret" in runs:
        a, b = runs["no-secret"], runs["secret"]
        for key, what in (("process_cpu_ns", "process CPU"), ("rate", "records/s")):
            before, after = summarize_key(a, key).median, summarize_key(b, key).median
            report.notes.append(
                f"secret vs none, {what}: {after:,.0f} vs {before:,.0f} "
                f"({(after - before) / before:+.1%})"
            )
    report.notes.append(
        f"the MAC alone, per record: +{per_record['seal']:.0f} ns to seal (link), "
        f"+{per_record['open']:.0f} ns to open (listener); full datagrams of "
        f"{keyed['records']:.0f} records with a key, {plain['records']:.0f} without"
    )
    report.extra = {"runs": runs, "wire": wire_rows, "mac_ns_per_record": per_record}
    return report


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = base_parser("secret", "the keyed MAC's cost per record on the queue workload")
    parser.add_argument("--records", type=int, default=200_000, metavar="N")
    parser.add_argument("--size", type=int, default=61, metavar="B", help="bytes per record")
    parser.add_argument("--loops", type=int, default=5000, metavar="N", help="calls per wire round")
    args = parser.parse_args(list(argv))
    if args.records < 1 or args.repeat < 1 or args.size < 1 or args.loops < 1:
        parser.error("--records, --repeat, --size and --loops must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    data = make_records(args.records, args.size)
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    for _ in range(args.repeat):
        for variant, secret in VARIANTS.items():  # alternate, so drift hits both alike
            runs[variant].append(run_queue(secret, data))
    wire_rows = time_wire(args.size, args.loops)
    build_report(args, runs, wire_rows).emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
