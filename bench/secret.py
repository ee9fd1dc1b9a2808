"""`python -m bench.secret`: what encryption costs per record (docs/performance.md).

Why it exists: with a secret every datagram is sealed with AES-256-GCM under
session keys (protocol/channel.py, docs/security.md); measured here against
the same work in clear, in the same run. Four measurements, each with its
variants interleaved so that a busy moment of the machine hits them alike:

* `core` rows: the protocol work of both sides, in memory, in one thread
  and no sockets: a Sender packs `--records` records of 61 B, a listener
  core takes every datagram, the store is a list, every answer goes back.
  Variants: `plain` (no secret) and `aead` (SecureSender + SecureCore:
  what a secret means).  CPU ns per
  record, sender side and listener side, each measured around its calls.
* `link` rows: the real thing on loopback, a `purelink.Listener`
  (sync="batch", a temporary store) and a link in THIS process, one app
  thread queueing one record at a time: records/s and CPU ns per record of
  the link thread, the listener thread and the process; `no-secret` and
  `encrypted`.
* `tail` rows: a subscription (`follow=False`) reads every record back over
  TCP from a listener in this process: plaintext batches by `sendfile` vs
  sealed frames read with `pread`; records/s and process CPU per record.
* `wire` rows: one full DATA datagram of 61 B records sealed and opened in a
  loop, in clear vs AEAD, free of the scheduler's noise; per record.

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
from purelink.protocol.channel import Channel
from purelink.protocol.keys import KeyTable
from purelink.protocol.listener_core import ListenerCore
from purelink.protocol.secure_core import SecureCore
from purelink.protocol.secure_sender import SecureSender
from purelink.protocol.sender import Sender, SenderConfig
from purelink.testing.fakes import MemoryStore

from ._common import Report, base_parser, make_records, self_cpu_ns, summarize_key, thread_cpu_ns
from ._impl import add_impl_argument, run_elsewhere

KEY = b"bench-secret-0123456789abcdef!!!"
LINK_VARIANTS = ("no-secret", "encrypted")
CORE_VARIANTS = ("plain", "aead")
TOLD_TIMEOUT = 120.0
ADDR = ("127.0.0.1", 40000)


# ------------------------------------------------------------------ core rows
def _pair(variant: str) -> tuple[Sender, ListenerCore]:
    store = MemoryStore()
    config = SenderConfig("bench", datagram_size=1400)
    if variant == "plain":
        return Sender(config), ListenerCore(store)
    return SecureSender(config, KEY), SecureCore(store, None, KeyTable.single(KEY), lambda: 1.7e9)


def run_core(variant: str, records: list[bytes]) -> dict[str, Any]:
    """Both sides' protocol work in memory, one thread: CPU ns per record of each."""
    sender, core = _pair(variant)
    clock = time.thread_time_ns
    now = 1.0
    sender.connect(now)
    for _ in range(10):  # the handshake (a RETRY round, then the ACCEPT)
        for d in sender.datagrams_to_send(now):
            core.receive_datagram(d, ADDR, now)
        for a, _ in core.datagrams_to_send(now):
            sender.receive_datagram(a, now)
    assert sender.state == "open", sender.state
    n = len(records)
    side = {"sender": 0, "listener": 0}
    t0 = clock()
    sender.push(records)
    side["sender"] += clock() - t0
    datagrams = 0
    store = core.store
    while sender.stored < n:
        now += 0.0001
        a = clock()
        out = sender.datagrams_to_send(now)
        b = clock()
        side["sender"] += b - a
        datagrams += len(out)
        for d in out:
            core.receive_datagram(d, ADDR, now)
        for stream, writes in core.take_writes().items():
            last = store.append(stream, writes)  # type: ignore[attr-defined]
            core.written(stream, last)
            core.synced(stream, store.sync(stream))  # type: ignore[attr-defined]
        answers = core.datagrams_to_send(now)
        c = clock()
        side["listener"] += c - b
        for ans, _ in answers:
            sender.receive_datagram(ans, now)
        sender.handle_timer(now)
        side["sender"] += clock() - c
        if not out and not answers:
            now += 0.05  # nothing moved: let the sender's timer fire
    return {
        "sender_ns": side["sender"] / n,
        "listener_ns": side["listener"] / n,
        "total_ns": (side["sender"] + side["listener"]) / n,
        "datagrams": datagrams,
    }


# ------------------------------------------------------------------ link rows
class _Told:
    def __init__(self, last: int) -> None:
        self.last = last
        self.at = 0

    def __call__(self, seq: int) -> None:
        if seq >= self.last and not self.at:
            self.at = time.perf_counter_ns()


def run_link(variant: str, records: list[bytes]) -> dict[str, Any]:
    """One run: a fresh store, listener and link; every record queued one at a time."""
    n = len(records)
    secret = KEY if variant == "encrypted" else None
    with tempfile.TemporaryDirectory(prefix="purelink-bench-secret-") as tmp:
        listener = purelink.Listener(Path(tmp) / "data", udp="127.0.0.1:0", secret=secret)
        listener.start()
        try:
            assert listener.udp_address is not None
            host, port = listener.udp_address
            told = _Told(n)
            url = f"udp://{host}:{port}"
            link = purelink.connect(url, stream="bench", secret=secret, on_stored=told)
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
        finally:
            listener.close()
    return {
        "rate": n / ((t1 - t0) / 1e9),
        "link_cpu_ns": (link_cpu1 - link_cpu0) / n,
        "listener_cpu_ns": (listener_cpu1 - listener_cpu0) / n,
        "process_cpu_ns": (process_cpu1 - process_cpu0) / n,
        "datagrams": stats.datagrams,
        "retransmits": stats.retransmits,
    }


def run_tail(secret: bytes | None, records: list[bytes]) -> dict[str, Any]:
    """A subscription reads back every record (follow=False) from a listener in this
    process: records/s and the process's CPU ns per record while it reads."""
    n = len(records)
    with tempfile.TemporaryDirectory(prefix="purelink-bench-secret-") as tmp:
        listener = purelink.Listener(
            Path(tmp) / "data", udp="127.0.0.1:0", tcp="127.0.0.1:0", secret=secret
        )
        listener.start()
        try:
            assert listener.udp_address is not None and listener.tcp_address is not None
            udp = "udp://%s:%d" % listener.udp_address
            tcp = "tcp://%s:%d" % listener.tcp_address
            with purelink.connect(udp, stream="bench", secret=secret) as link:
                for record in records:
                    link.queue(record)
                if not link.wait_stored(timeout=TOLD_TIMEOUT):
                    raise RuntimeError("not all stored")
            cpu0 = self_cpu_ns()
            t0 = time.perf_counter_ns()
            got = 0
            with purelink.subscribe(tcp, "bench", follow=False, secret=secret) as sub:
                for chunk in sub.chunks():
                    got += len(chunk)
            t1 = time.perf_counter_ns()
            cpu1 = self_cpu_ns()
        finally:
            listener.close()
    if got != n:
        raise RuntimeError(f"read {got:,} of {n:,}")
    return {"rate": n / ((t1 - t0) / 1e9), "process_cpu_ns": (cpu1 - cpu0) / n}


# ------------------------------------------------------------------ wire rows
def _full_batch(size: int, overhead: int) -> tuple[bytes, int]:
    budget = 1400 - wire.DATA_OVERHEAD - wire.BATCH_HEADER - overhead
    count = budget // (size + 2)
    return wire.encode_batch((1 << 63) | 1, 1, 1, [b"r" * size] * count), count


def time_wire(size: int, loops: int, rounds: int = 15) -> dict[str, dict[str, float]]:
    """ns per full DATA datagram to seal and to open, in clear and with the AEAD:
    the best of `rounds` rounds of `loops` calls, variants interleaved."""
    plain_batch, plain_count = _full_batch(size, 0)
    plain_data = wire.encode_data(1, 1, plain_batch)
    aead_batch, aead_count = _full_batch(size, 32)
    plain = wire.encode_data(1, 1, aead_batch)
    send = Channel(1, b"s" * 32, b"r" * 32, 0.0)
    receive = Channel(1, b"r" * 32, b"s" * 32, 0.0)
    sealed = [send.seal(plain, 0.0) for _ in range(64)]  # cycled: the window reset each pass
    best = {v: {"seal_ns": float("inf"), "open_ns": float("inf")} for v in ("plain", "aead")}
    encode, decode = wire.encode_data, wire.decode_datagram
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(loops):
            encode(1, 1, plain_batch)
        t1 = time.perf_counter_ns()
        for _ in range(loops):
            decode(plain_data)
        t2 = time.perf_counter_ns()
        for _ in range(loops):
            send.seal(encode(1, 1, aead_batch), 0.0)
        t3 = time.perf_counter_ns()
        for i in range(loops):
            if not i & 63:
                receive._top = receive._bits = 0  # (internals: open them again)
            decode(receive.open(sealed[i & 63], 0.0))
        t4 = time.perf_counter_ns()
        for variant, seal, open_ in (("plain", t1 - t0, t2 - t1), ("aead", t3 - t2, t4 - t3)):
            row = best[variant]
            row["seal_ns"] = min(row["seal_ns"], seal / loops)
            row["open_ns"] = min(row["open_ns"], open_ / loops)
    best["plain"]["records"] = plain_count
    best["aead"]["records"] = aead_count
    return best


# -------------------------------------------------------------------- report
def build_report(
    args: argparse.Namespace,
    cores: dict[str, list[dict[str, Any]]],
    links: dict[str, list[dict[str, Any]]],
    tails: dict[str, list[dict[str, Any]]],
    wire_rows: dict[str, dict[str, float]],
) -> Report:
    report = Report(
        "secret",
        f"encryption's cost per record: {args.records:,} records of {args.size} B; the "
        "protocol in memory (plain / AEAD), a real link (none / encrypted), the wire alone",
        parameters={"records": args.records, "size": args.size, "repeat": args.repeat},
    )
    for variant, rs in cores.items():
        report.add(
            variant=f"core: {variant}",
            sender_cpu_ns=summarize_key(rs, "sender_ns", "ns/record"),
            listener_cpu_ns=summarize_key(rs, "listener_ns", "ns/record"),
            total_cpu_ns=summarize_key(rs, "total_ns", "ns/record"),
            datagrams=summarize_key(rs, "datagrams"),
        )
    for variant, rs in links.items():
        report.add(
            variant=f"link: {variant}",
            records_per_s=summarize_key(rs, "rate", "records/s"),
            link_cpu_ns=summarize_key(rs, "link_cpu_ns", "ns/record"),
            listener_cpu_ns=summarize_key(rs, "listener_cpu_ns", "ns/record"),
            process_cpu_ns=summarize_key(rs, "process_cpu_ns", "ns/record"),
            datagrams=summarize_key(rs, "datagrams"),
        )
    for variant, rs in tails.items():
        report.add(
            variant=f"tail: {variant}",
            records_per_s=summarize_key(rs, "rate", "records/s"),
            process_cpu_ns=summarize_key(rs, "process_cpu_ns", "ns/record"),
        )
    for variant, row in wire_rows.items():
        report.add(
            variant=f"wire: {variant}",
            seal_ns_per_datagram=row["seal_ns"],
            open_ns_per_datagram=row["open_ns"],
            records_per_datagram=row["records"],
            seal_ns_per_record=row["seal_ns"] / row["records"],
            open_ns_per_record=row["open_ns"] / row["records"],
        )
    aead = summarize_key(cores["aead"], "total_ns").median
    plain = summarize_key(cores["plain"], "total_ns").median
    report.notes.append(
        f"protocol CPU per record, both sides: AEAD {aead:,.0f} ns vs plain {plain:,.0f} ns "
        f"({(aead - plain) / plain:+.1%})"
    )
    a, b = links["no-secret"], links["encrypted"]
    for key, what in (("process_cpu_ns", "process CPU/record"), ("rate", "records/s")):
        before, after = summarize_key(a, key).median, summarize_key(b, key).median
        report.notes.append(
            f"link, encrypted vs no-secret, {what}: {after:,.0f} vs {before:,.0f} "
            f"({(after - before) / before:+.1%})"
        )
    a, b = tails["no-secret"], tails["encrypted"]
    before = summarize_key(a, "process_cpu_ns").median
    after = summarize_key(b, "process_cpu_ns").median
    report.notes.append(
        f"subscription, encrypted vs none, process CPU/record: {after:,.0f} vs {before:,.0f} "
        f"({(after - before) / before:+.1%})"
    )
    report.extra = {"core": cores, "link": links, "tail": tails, "wire": wire_rows}
    return report


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = base_parser("secret", "encryption's cost per record on the 61 B queue workload")
    parser.add_argument("--records", type=int, default=200_000, metavar="N")
    parser.add_argument("--size", type=int, default=61, metavar="B", help="bytes per record")
    parser.add_argument("--loops", type=int, default=5000, metavar="N", help="calls per wire round")
    add_impl_argument(parser)
    args = parser.parse_args(list(argv))
    if args.records < 1 or args.repeat < 1 or args.size < 8 or args.loops < 1:
        parser.error("--records, --repeat and --loops must be at least 1, --size at least 8")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if (code := run_elsewhere("secret", argv, args)) is not None:
        return code
    data = make_records(args.records, args.size)
    cores: dict[str, list[dict[str, Any]]] = {v: [] for v in CORE_VARIANTS}
    links: dict[str, list[dict[str, Any]]] = {v: [] for v in LINK_VARIANTS}
    tails: dict[str, list[dict[str, Any]]] = {"no-secret": [], "encrypted": []}
    for _ in range(args.repeat):  # alternate, so drift hits every variant alike
        for variant in CORE_VARIANTS:
            cores[variant].append(run_core(variant, data))
        for variant in LINK_VARIANTS:
            links[variant].append(run_link(variant, data))
        for variant, secret in (("no-secret", None), ("encrypted", KEY)):
            tails[variant].append(run_tail(secret, data))
    wire_rows = time_wire(args.size, args.loops)
    build_report(args, cores, links, tails, wire_rows).emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
