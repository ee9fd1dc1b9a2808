"""`purelink bench stages`: CPU per record of each stage of one link, in one thread.

Why it exists: on a shared 2-core machine wall-clock rates move by 2x between
runs, and in the threaded benchmarks the stages share one GIL, so a profile
cannot say which stage got cheaper.  Here every stage of the pipeline runs in
ONE thread, in order, with the network replaced by lists and the store by a
null one, and each is timed with `time.thread_time_ns` (CPU time of this
thread): what it measures is CPU per record, stage by stage, and that moves
little with the load.

Stages (200,000 records of 61 B by default):

* queue     `Link.queue` called once per record (the application's cost);
* take      the link thread moves the records from the ring into the sender;
* pack      `Sender.datagrams_to_send` packs and encodes every datagram;
* listener  `ListenerCore.receive_datagram` for each datagram, then take_writes;
* answers   the listener's answers go back into the sender and the link.

What it leaves out on purpose: system calls, thread switches and the store
(see `queue`, `drain` and `connections` for those).

Run from the checkout root: `python -m bench.stages [--records N] [--json]`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

from purelink.link.link import Link
from purelink.protocol.listener_core import ListenerCore

from ._common import Report, base_parser, summarize
from ._impl import add_impl_argument, run_elsewhere

__all__ = ["STAGES", "main", "run_once"]

STAGES = ("queue", "take", "pack", "listener", "answers")
ADDR = ("127.0.0.1", 1)


class _NullStore:
    """The core's ProducerTable with nothing behind it."""

    def producer_state(self, stream: str, pid: int) -> tuple[int, int]:
        return (0, 0)

    def epoch_owner(self, stream: str, pid: int) -> int:
        return 0

    def new_epoch(self, stream: str, pid: int, durable: bool, owner: int = 0) -> int:
        return 1

    def forget(self, stream: str, pid: int) -> None:
        pass


class _ListTransport:
    """A transport that keeps what is sent."""

    gso = True
    send_calls = 0
    send_errors = 0
    broken = False
    path_too_big = 0

    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.too_large: list[int] = []

    def send(self, datagrams: list[bytes]) -> None:
        self.out.extend(datagrams)

    def fileno(self) -> int:
        return -1

    def reset(self) -> None:
        pass

    def close(self) -> None:
        pass


def run_once(records: int, size: int) -> dict[str, float]:
    """One pass of every stage; CPU ns per record for each."""
    link = Link("udp://127.0.0.1:9", "s", capacity=max(records, 1) * 2)
    core = ListenerCore(_NullStore())  # type: ignore[arg-type]
    sender = link._sender
    sender.connect(0.0)
    # the handshake, by hand: HELLO -> RETRY -> HELLO -> ACCEPT
    for _ in range(2):
        for data in sender.datagrams_to_send(0.0):
            core.receive_datagram(data, ADDR, 0.0)
        for data, _ in core.datagrams_to_send(0.0):
            sender.receive_datagram(data, 0.0)
    link._handle_events()
    if sender.state != "open":
        raise RuntimeError(f"handshake did not complete: {sender.state}")
    sender.cc.cwnd = 1 << 40  # no pacing here: every record goes in one pass
    sender._peer_window = 1 << 40
    transport = _ListTransport()
    link._transport.close()  # the UDP socket it was made with: unused from here on
    link._transport = transport
    record = b"x" * size
    queue = link.queue
    clock = time.thread_time_ns
    t0 = clock()
    for _ in range(records):
        queue(record)
    t1 = clock()
    link._take()
    t2 = clock()
    link._transmit(1.0)
    t3 = clock()
    receive = core.receive_datagram
    for data in transport.out:
        receive(data, ADDR, 1.0)
    core.take_writes()
    t4 = clock()
    core.written("s", records)
    core.synced("s", records)
    for data, _ in core.datagrams_to_send(1.0):
        sender.receive_datagram(data, 1.001)
    link._handle_events()
    t5 = clock()
    if link.stored != records:
        raise RuntimeError(f"only {link.stored} of {records} records were told stored")
    n = records
    return {
        "queue": (t1 - t0) / n,
        "take": (t2 - t1) / n,
        "pack": (t3 - t2) / n,
        "listener": (t4 - t3) / n,
        "answers": (t5 - t4) / n,
        "datagrams": float(len(transport.out)),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser("stages", "CPU per record of each stage of one link, in one thread", 5)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=61)
    add_impl_argument(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if (code := run_elsewhere("stages", argv, args)) is not None:
        return code
    runs = [run_once(args.records, args.size) for _ in range(max(args.repeat, 1))]
    report = Report(
        "stages",
        "CPU ns per record of each stage, one thread, no system calls",
        parameters={"records": args.records, "size": args.size, "repeat": args.repeat},
    )
    for stage in STAGES:
        report.add(stage=stage, cpu_ns_per_record=summarize(r[stage] for r in runs))
    total: Any = summarize(sum(r[s] for s in STAGES) for r in runs)
    report.add(stage="all", cpu_ns_per_record=total)
    report.notes.append(f"datagrams per pass: {int(runs[0]['datagrams']):,}")
    report.emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
