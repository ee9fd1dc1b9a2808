"""`purelink bench probes`: the measurements behind "what stands in the way" (issue 4).

Why it exists: performance.md explains why some targets are not met with
figures that are not any one benchmark's: where a fresh link's time
goes, where one record's latency goes, what a Python function can cost at
all.  Each probe here produces one of those figures, so that every figure
has its command.

* `queue-floor`: ns per call, in the loop shape of `bench.queue` (blocks of
  1,000 calls timed, the median block), of an empty function, of the least a
  queue can do (take the next seq from an `itertools.count`, store the record
  in a ring slot, return the seq), and of the real `Link.queue` (a link that
  is made but not connected: its first grant admits `capacity` records, and
  nothing is sent).  The three run interleaved, `--repeat` rounds.
* `slowstart`: a fresh link queues `--records` records of 61 B into
  `purelink serve --sync batch`; a thread samples the link every 5 ms (seqs
  queued, taken, sent, stored; congestion window, bytes in flight).  Prints
  the timeline of the median run, and each run's queue-loop and told times.
* `latency-split`: one record on an idle link (`sync=none`), `--samples`
  times; the link's steps are wrapped with `perf_counter_ns` stamps: queue ->
  the thread's first take (the eventfd wake), take -> send started, the send
  call (on loopback the listener's whole answer runs inside it), send ->
  answer read, answer read -> unpark, unpark -> wait_stored returned.
  Medians and p90 in microseconds.  The wrappers add ~1 us per step.
* `tcp`: the `queue` workload end to end over one tcp:// link
  (`purelink serve --no-udp --tcp`), `--repeat` runs against one listener.
* `short-process`: what a short-lived process (a job, a CLI tool, a
  serverless function) pays to ship one record: `--samples` / 20 fresh
  interpreters, one after the other, each `import purelink`, connect a tcp://
  link, queue one 128 B record, wait until it is stored (`sync=batch`),
  close, exit; against interpreters that only `import purelink` and that do
  nothing.  Median wall time per process and CPU time per process (user +
  system, from the children's rusage), in milliseconds.  The children run
  without PYTHONDONTWRITEBYTECODE, after one warm-up each, so they import
  from cached bytecode as an installed package does (pip compiles it).

Run from the checkout root: `python -m bench.probes [--probe NAME] [--json]`.
These reach into private attributes of `Link` (as bench/_links.py does).
"""

from __future__ import annotations

import itertools
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import purelink
from purelink.link.link import Link

from ._common import Report, ServeProcess, base_parser, make_records, summarize, wait_until
from .connections import Child

__all__ = ["PROBES", "main"]

PROBES = ("queue-floor", "slowstart", "latency-split", "tcp", "short-process")

_ONE_RECORD = """
import sys, purelink
link = purelink.connect(sys.argv[1], stream="short", timeout=30)
link.queue(b"r" * 128)
if not link.wait_stored(timeout=30):
    sys.exit("not stored")
link.close(timeout=30)
"""


def _median_block_ns(call: Callable[[bytes], object], records: list[bytes], block: int) -> float:
    clock = time.perf_counter_ns
    times = []
    for start in range(0, len(records), block):
        chunk = records[start : start + block]
        t0 = clock()
        for record in chunk:
            call(record)
        times.append((clock() - t0) / len(chunk))
    return statistics.median(times)


def queue_floor(records: int, repeat: int) -> list[dict[str, Any]]:
    recs = make_records(records, 61)
    size = 1 << (records * 2).bit_length()

    def empty(record: bytes) -> None:
        pass

    def minimal_factory() -> Callable[[bytes], int]:
        ring: list[bytes | None] = [None] * size
        mask = size - 1
        take = itertools.count(1).__next__

        def minimal(record: bytes) -> int:
            s = take()
            ring[s & mask] = record
            return s

        return minimal

    results: dict[str, list[float]] = {"empty function": [], "minimal queue": [], "Link.queue": []}
    for _ in range(repeat):
        results["empty function"].append(_median_block_ns(empty, recs, 1000))
        results["minimal queue"].append(_median_block_ns(minimal_factory(), recs, 1000))
        link = Link("udp://127.0.0.1:9", "floor", capacity=records * 2)
        try:
            results["Link.queue"].append(_median_block_ns(link.queue, recs, 1000))
        finally:
            link._transport.close()
            link._wakeup.close()
    return [
        {"probe": "queue-floor", "what": k, "ns_per_call": summarize(v, "ns")}
        for k, v in results.items()
    ]


def _sample(link: Link, samples: list[tuple[float, ...]], stop: threading.Event, t0: float) -> None:
    """Every 5 ms: (s since t0, queued, taken, sent, stored, cwnd, in flight)."""
    s = link._sender
    while not stop.is_set():
        samples.append(
            (time.perf_counter() - t0, link.queued, link._taken, s._next - 1,
             link.stored, s.cc.cwnd, s.in_flight)
        )  # fmt: skip
        stop.wait(0.005)


def slowstart(records: int, repeat: int) -> tuple[list[dict[str, Any]], list[str]]:
    recs = make_records(records, 61)
    runs: list[tuple[float, float, list[tuple[float, ...]]]] = []
    with ServeProcess(sync="batch") as server:
        for k in range(repeat):
            link = purelink.connect(server.url, stream=f"slowstart{k}")
            samples: list[tuple[float, ...]] = []
            stop = threading.Event()
            t0 = time.perf_counter()
            sampler = threading.Thread(target=_sample, args=(link, samples, stop, t0))
            sampler.start()
            queue = link.queue
            for record in recs:
                queue(record)
            t1 = time.perf_counter()
            link.wait_stored(timeout=120)
            t2 = time.perf_counter()
            stop.set()
            sampler.join()
            link.close(timeout=10)
            runs.append((t1 - t0, t2 - t0, samples))
    rows = [
        {"probe": "slowstart", "run": k, "queue_loop_ms": q * 1e3, "told_ms": t * 1e3,
         "records_per_s": records / t}
        for k, (q, t, _) in enumerate(runs)
    ]  # fmt: skip
    median = sorted(runs, key=lambda r: r[1])[len(runs) // 2]
    notes = ["timeline of the median run (ms, queued, taken, sent, stored, cwnd B, in flight B):"]
    for s in median[2][:: max(1, len(median[2]) // 12)]:
        notes.append("  %7.1f %8d %8d %8d %8d %9d %9d" % (s[0] * 1e3, *s[1:]))
    return rows, notes


def latency_split(samples: int) -> list[dict[str, Any]]:
    clock = time.perf_counter_ns
    steps: dict[str, list[float]] = {}
    with ServeProcess(sync="none") as server:
        link = purelink.connect(server.url, stream="split")
        marks: dict[str, int] = {}

        def wrap(obj: Any, name: str, label: str) -> None:
            inner = getattr(obj, name)

            def wrapped(*args: Any) -> Any:
                marks.setdefault(label + ">", clock())
                result = inner(*args)
                marks.setdefault(label + "<", clock())
                return result

            setattr(obj, name, wrapped)

        for obj, name, label in (
            (link, "_take", "take"), (link, "_send", "send"), (link, "_receive", "recv"),
            (link._parker, "unpark", "unpark"),
        ):  # fmt: skip
            wrap(obj, name, label)
        w = link._wakeup
        try:
            for _ in range(samples):
                if not wait_until(lambda: w.armed, 5.0):
                    raise RuntimeError("the link thread did not go to sleep")
                time.sleep(0.0005)
                marks.clear()
                t0 = clock()
                seq = link.queue(b"x" * 61)
                link.wait_stored(seq, timeout=10)
                t_end = clock()
                m = marks
                if not all(k in m for k in ("take>", "send>", "send<", "recv>", "unpark>")):
                    continue
                for label, a, b in (
                    ("queue -> link thread takes", t0, m["take>"]),
                    ("take -> send starts", m["take>"], m["send>"]),
                    ("send call (listener answers inside)", m["send>"], m["send<"]),
                    ("send returned -> answer read", m["send<"], m["recv>"]),
                    ("answer read -> unpark", m["recv>"], m["unpark>"]),
                    ("unpark -> wait_stored returns", m["unpark>"], t_end),
                    ("total", t0, t_end),
                ):
                    steps.setdefault(label, []).append((b - a) / 1000)
        finally:
            link.close(timeout=10)
    rows = []
    for label, values in steps.items():
        values.sort()
        rows.append({"probe": "latency-split", "what": label, "p50_us": values[len(values) // 2],
                     "p90_us": values[int(len(values) * 0.9)]})  # fmt: skip
    return rows


def tcp(records: int, repeat: int) -> list[dict[str, Any]]:
    recs = make_records(records, 61)
    rates = []
    serve = ["serve", "--data", "{DATA}", "--no-udp", "--tcp", "127.0.0.1:0", "--sync", "batch"]
    child = Child([sys.executable, "-m", "purelink", *serve])
    try:
        url = "tcp://%s:%d" % child.address
        for k in range(repeat):
            link = purelink.connect(url, stream=f"tcp{k}")
            t0 = time.perf_counter()
            queue = link.queue
            for record in recs:
                queue(record)
            if not link.wait_stored(timeout=120):
                raise RuntimeError("not all records stored in time")
            rates.append(records / (time.perf_counter() - t0))
            link.close(timeout=10)
    finally:
        child.close()
    return [{"probe": "tcp", "what": "first queue -> last told", "records_per_s": summarize(rates)}]


def short_process(samples: int) -> list[dict[str, Any]]:
    runs = max(5, samples // 20)
    serve = ["serve", "--data", "{DATA}", "--no-udp", "--tcp", "127.0.0.1:0", "--sync", "batch"]
    child = Child([sys.executable, "-m", "purelink", *serve])
    rows = []
    try:
        url = "tcp://%s:%d" % child.address
        shapes = (
            ("python -c pass", ["-c", "pass"]),
            ("python -c 'import purelink'", ["-c", "import purelink"]),
            ("import, connect, queue one record, stored, close", ["-c", _ONE_RECORD, url]),
        )
        walls: dict[str, list[float]] = {label: [] for label, _ in shapes}
        cpus: dict[str, list[float]] = {label: [] for label, _ in shapes}
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        for _, args in shapes:  # warm-up: writes the bytecode caches
            subprocess.run([sys.executable, *args], check=True, timeout=60, env=env)
        for _ in range(runs):  # interleaved, so a noisy moment hurts all three
            for label, args in shapes:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                # no timeout=: waiting with one polls in sleeps of up to 50 ms, which
                # would be the wall time's resolution; the child has its own timeouts
                subprocess.run([sys.executable, *args], check=True, env=env)
                walls[label].append((time.perf_counter() - t0) * 1e3)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
                cpus[label].append(cpu * 1e3)
        for label, _ in shapes:
            wall, cpu = summarize(walls[label]), summarize(cpus[label])
            rows.append({"probe": "short-process", "what": label, "wall_ms": wall, "cpu_ms": cpu})
    finally:
        child.close()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser("probes", "what stands in the way: floors, timelines, splits", 3)
    parser.add_argument(
        "--probe", default=",".join(PROBES), help=f"comma-separated, of: {', '.join(PROBES)}"
    )
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--samples", type=int, default=1_000)
    args = parser.parse_args(argv)
    probes = [p.strip() for p in args.probe.split(",") if p.strip()]
    if set(probes) - set(PROBES) or args.records < 1 or args.samples < 1 or args.repeat < 1:
        parser.error("probes as listed; --records, --samples and --repeat positive")
    report = Report(
        "probes",
        "floors, timelines and splits behind performance.md's 'what stands in the way'",
        parameters={"records": args.records, "samples": args.samples, "repeat": args.repeat},
    )
    if "queue-floor" in probes:
        for row in queue_floor(args.records, args.repeat):
            report.add(**row)
    if "slowstart" in probes:
        rows, notes = slowstart(args.records, args.repeat)
        for row in rows:
            report.add(**row)
        report.notes.extend(notes)
    if "latency-split" in probes:
        for row in latency_split(args.samples):
            report.add(**row)
    if "tcp" in probes:
        for row in tcp(args.records, args.repeat):
            report.add(**row)
    if "short-process" in probes:
        for row in short_process(args.samples):
            report.add(**row)
    report.emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
