"""The benchmark suite of docs/performance.md: `purelink bench [NAME ...] [--json]`.

Why it exists: `purelink bench` (src/purelink/cli/bench.py) imports this package
from the checkout and calls `main(argv)`; this module knows which script
runs which workload, runs them in order, and degrades with one line when a
script is missing (the suite is written by several people).

Each workload is a module `bench/NAME.py` (or a package, `bench/NAME/`, as
bench/paths/ is) with `main(argv: list[str]) -> int` that prints a table, or
with `--json` one JSON object.  Run one with its own options from the checkout
root: `python -m bench.queue --records 50000`, or
through the suite: `python -m bench queue --records 50000` (options after the
names go to a single named benchmark).  With `--json` and several names the
suite prints one object: `{"suite": [<one object per benchmark>]}`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import sys
from collections.abc import Sequence

__all__ = ["BENCHMARKS", "main"]

BENCHMARKS: dict[str, str] = {
    "queue": "one app thread queues 200,000 x 61 B records; listener process, sync=batch",
    "drain": "a 200,000-record backlog drains; link and listener in one process, no store",
    "wakeups": "eventfd writes per 1,000 records queued; CPU of an idle link and listener",
    "latency": "one record queued on an idle link -> told stored; p50/p99",
    "sizes": "records/s against record size, 16 B to 64 KiB (and the plot)",
    "connections": "10,000 short-lived TCP links, 200 at a time; with and without draining accept",
    "links": "what a link costs: 200 links open at once (connect time, RSS, CPU per link)",
    "pool": "buffer get+put with 10 to 100,000 buffers held; and the scanning way",
    "grace": "10 readers, 1 updater waiting for grace periods; wake only a waiter that waits",
    "tail": "readers tailing a stream while the listener appends",
    "secret": "what encryption costs per record: AEAD vs plaintext, and a real link",
    "stages": "CPU per record of each stage of one link, in one thread (no system calls)",
    "probes": "what stands in the way: queue() floor, a fresh link's slow start, latency split",
    "logging": "us per logger.info call through LinkHandler, FileHandler and QueueHandler",
    "compare": "200,000 x 61 B from one thread: purelink, pyzmq, asyncio TCP, Redis, NATS",
    "overhead": "wire bytes per payload byte by record-size mix, over a loopback link",
    "paths": "goodput through emulated lossy, dark, small-MTU paths; --shared: beside TCP (root)",
    "handshake": "seconds from connect to OPEN through loss both ways, in virtual time",
    "jetstream": "200,000 x 61 B into a 3-node R3 JetStream cluster: purelink beside nats-py",
    "ccsweep": "BBR in virtual time over paths drawn from the whole space, worst seed first",
    "ccshare": "purelink links beside Reno, CUBIC, BBR flows on one bottleneck, virtual time",
    "since": "where since=T starts in a stream of many segments: seek vs read from 1",
}
"""Every benchmark by name, in the order the whole suite runs them."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="purelink bench",
        description="Run the benchmark suite. Names: " + ", ".join(BENCHMARKS),
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default all)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    return parser


def _run_one(name: str, argv: list[str], capture: bool) -> tuple[int, str]:
    """Import bench/NAME.py and run its main; (exit code, captured stdout)."""
    try:
        module = importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as exc:
        if exc.name == f"{__name__}.{name}":
            print(f"purelink bench: {name}: not available (bench/{name}.py is missing)",
                  file=sys.stderr)  # fmt: skip
        else:
            print(f"purelink bench: {name}: needs {exc.name!r} (pip install '.[bench]')",
                  file=sys.stderr)  # fmt: skip
        return 1, ""
    run = getattr(module, "main", None)
    if not callable(run):
        print(f"purelink bench: {name}: bench/{name}.py has no main(argv)", file=sys.stderr)
        return 1, ""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out) if capture else contextlib.nullcontext():
            code = int(run(argv) or 0)
    except KeyboardInterrupt:
        raise
    except SystemExit as exc:  # argparse inside the benchmark
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception as exc:
        print(f"purelink bench: {name}: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = 1
    return code, out.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the named benchmarks (default: all); return the worst exit code."""
    args, rest = _parser().parse_known_args(list(sys.argv[1:] if argv is None else argv))
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        print(f"purelink bench: error: unknown benchmark {unknown[0]!r} "
              f"(choose from {', '.join(BENCHMARKS)})", file=sys.stderr)  # fmt: skip
        return 2
    if rest and len(args.names) != 1:
        print(f"purelink bench: error: options {' '.join(rest)!r} need exactly one benchmark name",
              file=sys.stderr)  # fmt: skip
        return 2
    names = args.names or list(BENCHMARKS)
    explicit = bool(args.names)
    passed = [*rest, *(["--json"] if args.json else [])]
    combine = args.json and len(names) > 1
    worst = 0
    results: list[object] = []
    for name in names:
        code, out = _run_one(name, passed, capture=combine)
        if code and not explicit and out == "" and name not in _present():
            code = 0  # the whole suite skips a missing script after its one-line message
        worst = max(worst, code)
        if combine and out.strip():
            try:
                results.append(json.loads(out))
            except ValueError:
                results.append({"benchmark": name, "output": out})
    if combine:
        print(json.dumps({"suite": results}), flush=True)
    return worst


def _present() -> set[str]:
    """Names whose script (or package) exists next to this file."""
    from pathlib import Path  # noqa: PLC0415 -- only on the error path

    here = Path(__file__).resolve().parent
    return {
        name
        for name in BENCHMARKS
        if (here / f"{name}.py").is_file() or (here / name / "__init__.py").is_file()
    }
