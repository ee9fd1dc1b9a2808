"""`purelink bench links`: what a link costs -- N links open at once.

Workload: `purelink serve --sync batch` runs as its own process (loopback, a
temporary store); this process connects `--links` (200) links one after the
other, each on its own stream, and keeps them all open; each queues one
record of 61 B and waits until it is stored; then all are closed.  Variants:
the default `capacity` (1,000,000) and `capacity=1000`.

Each run is a fresh Python process (so that memory freed by one run does
not hide the next one's).  Reported per variant, median (min-max) of
`--repeat` runs:

* connect ms: the mean time of one `connect()` call (the handshake included);
* RSS MB: the run's process with every link open;
* RSS per link: (RSS with every link open - RSS before the first) / links;
* CPU ms per link: this process's CPU from the first connect to the last close,
  per link;
* seconds: the whole run (connect all, queue and wait, close all).

Run from the checkout root: `python -m bench.links [--links N] [--json]`, or
`purelink bench links`.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import purelink

from ._common import Report, base_parser, rss_bytes, self_cpu_ns, serving, summarize_key
from ._impl import add_impl_argument, run_elsewhere

__all__ = ["main", "run_links"]

VARIANTS: dict[str, int] = {"default capacity": 1_000_000, "capacity=1000": 1000}


def run_links(url: str, links: int, capacity: int) -> dict[str, Any]:
    """One run: `links` links open at once against the listener at `url`."""
    gc.collect()
    rss0 = rss_bytes()
    cpu0 = self_cpu_ns()
    t0 = time.perf_counter()
    opened: list[purelink.Link] = []
    try:
        for i in range(links):
            opened.append(purelink.connect(url, stream=f"l{i}", capacity=capacity))
        t_connected = time.perf_counter()
        for link in opened:
            link.queue(b"x" * 61)
        for link in opened:
            if not link.wait_stored(timeout=30):
                raise RuntimeError("a record was not stored within 30 s")
        rss_open = rss_bytes()
    finally:
        for link in opened:
            link.close(timeout=10)
    t_end = time.perf_counter()
    return {
        "connect_ms": (t_connected - t0) * 1e3 / links,
        "rss": rss_open,
        "rss_per_link": (rss_open - rss0) / links,
        "cpu_ms_per_link": (self_cpu_ns() - cpu0) / 1e6 / links,
        "seconds": t_end - t0,
    }


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = base_parser("links", __doc__.splitlines()[0] if __doc__ else "links")
    parser.add_argument("--links", type=int, default=200, metavar="N")
    parser.add_argument("--child", metavar="URL,CAPACITY", help=argparse.SUPPRESS)
    add_impl_argument(parser)
    args = parser.parse_args(list(argv))
    if args.links < 1 or args.repeat < 1:
        parser.error("--links and --repeat must be at least 1")
    return args


def _child_run(url: str, links: int, capacity: int) -> dict[str, Any]:
    """run_links in a fresh interpreter (this module's `--child`)."""
    command = [sys.executable, "-m", "bench.links", "--links", str(links)]
    command += ["--child", f"{url},{capacity}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the run failed: {done.stderr.strip().splitlines()[-1:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.child:
        url, capacity = args.child.rsplit(",", 1)
        print(json.dumps(run_links(url, args.links, int(capacity))))
        return 0
    if (code := run_elsewhere("links", argv, args)) is not None:
        return code
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    for _ in range(args.repeat):
        for variant, capacity in VARIANTS.items():
            with serving("batch") as server:
                runs[variant].append(_child_run(server.url, args.links, capacity))
                server.stop()
    report = Report(
        "links",
        f"{args.links} links open at once, one 61 B record each; listener process, sync=batch",
        parameters={"links": args.links, "repeat": args.repeat},
    )
    for variant, rs in runs.items():
        report.add(
            variant=variant,
            connect_ms=summarize_key(rs, "connect_ms", "ms"),
            rss_mb=summarize_key(rs, "rss", "MB", 1 / (1 << 20)),
            rss_per_link_kb=summarize_key(rs, "rss_per_link", "KB", 1 / 1024),
            cpu_ms_per_link=summarize_key(rs, "cpu_ms_per_link", "ms"),
            seconds=summarize_key(rs, "seconds", "s"),
        )
    report.extra = {"runs": runs}
    report.notes.append("cells are median (min-max) over the runs")
    report.emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
