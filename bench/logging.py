"""`purelink bench logging`: what one `logger.info` call costs through LinkHandler.

Workload: one application thread makes `--records` calls (200,000) of
`log.info("order %d paid by %s", i, "user-7", extra={"shop": "s-1"})` on a
logger with one handler, as fast as it can.  Handlers, each in a fresh logger:

* `LinkHandler` (purelink.logging) to `purelink serve --sync batch` in its
  own process (loopback, a temporary store): a JSON object per call, queued
  on the link; done = the last record stored (fsynced by the listener);
* `FileHandler` (the standard library) to a temporary file, with a format of
  the same fields (time, level, logger, thread, message): the file write
  happens inside the call; done = the last call returned (in the page cache,
  not fsynced);
* `QueueHandler` + `QueueListener` to that FileHandler (the standard
  library's non-blocking recipe): the call formats and enqueues, a thread
  writes; done = the listener's queue drained;
* `JSON only (no link)` (a Handler that encodes with LinkHandler's JSONFormatter
  in the calling thread and drops the bytes): what the JSON costs, which
  LinkHandler pays on its own thread;
* `NullHandler (floor)` (the standard library's, which does nothing): what
  the logging call itself costs (LogRecord, level checks, finding the
  caller), under every row above.

Reported per handler, median (min-max) of `--repeat` runs: us per call, the
median of blocks of `--block` calls timed with perf_counter_ns (the
typical call of a burst; a block in which another thread held the GIL shows
only in the mean); the mean over the whole loop; the calling thread's own
CPU time per call (`time.thread_time_ns`: what the call costs, whatever else
runs on the machine); records/s from the first call to done; then `--isolated`
calls (2,000) timed one by one, each after a 0.5 ms sleep (the handler's and
the link's threads have caught up: the call of an application that logs now
and then; it includes waking a sleeping thread); and records dropped
(LinkHandler only: none unless the listener falls behind by more than the
handler's capacity).

Run from the checkout root: `python -m bench.logging [--records N] [--json]`,
or `purelink bench logging`.
"""

from __future__ import annotations

import logging
import logging.handlers
import queue
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from purelink.logging import JSONFormatter, LinkHandler

from ._common import Report, base_parser, ratio, serving, summarize_key
from ._impl import add_impl_argument, run_elsewhere

__all__ = ["main", "run_handler"]

FILE_FORMAT = "%(created)f %(levelname)s %(name)s %(threadName)s %(message)s"


class _JSONOnly(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self._encode = JSONFormatter().encode

    def emit(self, record: logging.LogRecord) -> None:
        self._encode(record)


def _loop(log: logging.Logger, records: int, block: int) -> tuple[list[float], float, float]:
    """Make the calls; (ns per call of each block, seconds for all, this thread's
    CPU seconds for all)."""
    info = log.info
    extra = {"shop": "s-1"}
    blocks: list[float] = []
    clock = time.perf_counter_ns
    cpu = time.thread_time_ns()
    started = clock()
    for first in range(0, records, block):
        t = clock()
        for i in range(first, min(first + block, records)):
            info("order %d paid by %s", i, "user-7", extra=extra)
        blocks.append((clock() - t) / (min(first + block, records) - first))
    return blocks, (clock() - started) / 1e9, (time.thread_time_ns() - cpu) / 1e9


def _isolated(log: logging.Logger, calls: int) -> float:
    """The median ns of `calls` calls timed one by one, each after a short sleep."""
    info = log.info
    extra = {"shop": "s-1"}
    clock = time.perf_counter_ns
    took: list[int] = []
    for i in range(calls):
        time.sleep(0.0005)  # the GIL released: the handler's threads catch up
        t = clock()
        info("order %d paid by %s", i, "user-7", extra=extra)
        took.append(clock() - t)
    return statistics.median(took)


def run_handler(
    kind: str, records: int, block: int, url: str, workdir: Path, run: int, isolated: int = 0
) -> dict[str, Any]:
    """One run of one handler: the calls, then until done; then the isolated calls."""
    log = logging.getLogger(f"bench.logging.{kind}.{run}")
    log.propagate = False
    log.setLevel(logging.INFO)
    finish: Callable[[], None]
    dropped: Callable[[], int] = lambda: 0  # noqa: E731
    closers: list[Callable[[], None]] = []
    resume: Callable[[], None] = lambda: None  # noqa: E731 -- after finish(), for the isolated calls
    if kind == "LinkHandler":
        capacity = records + isolated + 1
        link_handler = LinkHandler(url, f"bench-{run}", capacity=capacity, timeout=60)
        handler: logging.Handler = link_handler
        deadline = time.monotonic() + 30
        while link_handler.link is None and time.monotonic() < deadline:
            time.sleep(0.01)  # it connects in the background; the clock starts once it has
        if link_handler.link is None:
            raise RuntimeError(f"LinkHandler did not connect to {url}")

        def finish() -> None:
            link_handler.wait_stored(120)

        dropped = lambda: link_handler.dropped  # noqa: E731
    elif kind == "FileHandler":
        handler = logging.FileHandler(workdir / f"file-{run}.log")
        handler.setFormatter(logging.Formatter(FILE_FORMAT))

        def finish() -> None:
            handler.flush()
    elif kind == "QueueHandler":
        target = logging.FileHandler(workdir / f"queue-{run}.log")
        target.setFormatter(logging.Formatter(FILE_FORMAT))
        channel: queue.SimpleQueue[Any] = queue.SimpleQueue()
        handler = logging.handlers.QueueHandler(channel)
        listener = logging.handlers.QueueListener(channel, target)
        listener.start()

        def finish() -> None:
            listener.stop()  # drains the queue, then joins its thread

        resume = listener.start
        closers.append(target.close)
    else:
        handler = _JSONOnly() if kind == "JSON only (no link)" else logging.NullHandler()

        def finish() -> None:
            return None

    log.addHandler(handler)
    started = time.perf_counter()
    blocks, loop_s, cpu_s = _loop(log, records, block)
    finish()
    total_s = time.perf_counter() - started
    isolated_us = None
    if isolated:
        resume()
        isolated_us = _isolated(log, isolated) / 1000
        finish()
    log.removeHandler(handler)
    handler.close()
    for close in closers:
        close()
    return {
        "call_us": statistics.median(blocks) / 1000,
        "mean_us": loop_s * 1e6 / records,
        "cpu_us": cpu_s * 1e6 / records,
        "rate": records / total_s,
        "isolated_us": isolated_us,
        "dropped": dropped(),
    }


COLUMNS = ("handler", "us per call (median block)", "us per call (mean)",
           "CPU us per call", "records/s", "us per call (isolated)", "done means",
           "dropped")  # fmt: skip
FLOOR = "NullHandler (floor)"
KINDS = ("LinkHandler", "FileHandler", "QueueHandler", "JSON only (no link)", FLOOR)
DONE = {
    "LinkHandler": "stored (fsynced by the listener)",
    "FileHandler": "written to the page cache",
    "QueueHandler": "written by the queue's thread",
    "JSON only (no link)": "-",
    FLOOR: "-",
}


def _against(runs: dict[str, list[dict[str, Any]]], kinds: list[str], key: str, what: str) -> str:
    """LinkHandler's figure beside the floor's and the standard library handlers'."""
    link = summarize_key(runs["LinkHandler"], key, "us")
    floor = summarize_key(runs[FLOOR], key, "us")
    parts = [
        f"LinkHandler, {what}: {link.median - floor.median:.2f} us over the NullHandler floor "
        f"({ratio(link, floor):.2f}x the floor)"
    ]
    for other in ("FileHandler", "QueueHandler"):
        if other in kinds:
            parts.append(f"{ratio(link, summarize_key(runs[other], key)):.2f}x a {other} call")
    return "; ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser("logging", "logger.info through LinkHandler, FileHandler, QueueHandler")
    parser.add_argument("--records", type=int, default=200_000, help="log calls per run")
    parser.add_argument("--block", type=int, default=100, help="calls per timed block")
    parser.add_argument("--isolated", type=int, default=2_000, help="calls timed one by one")
    parser.add_argument("--handlers", default=",".join(KINDS), help="which, comma-separated")
    add_impl_argument(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if (code := run_elsewhere("logging", argv, args)) is not None:
        return code
    kinds = [k.strip() for k in args.handlers.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        parser.error(f"unknown handler {unknown[0]!r} (choose from {', '.join(KINDS)})")
    report = Report(
        "logging",
        "us per logger.info call, and records/s to done, per handler (median of runs)",
        parameters={
            "records": args.records,
            "block": args.block,
            "isolated": args.isolated,
            "repeat": args.repeat,
        },
        columns=[*COLUMNS],
    )
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    with serving("batch") as server, tempfile.TemporaryDirectory() as tmp:
        for run in range(args.repeat):  # handlers interleaved: each round shares the load
            for kind in kinds:
                runs[kind].append(
                    run_handler(
                        kind, args.records, args.block, server.url, Path(tmp), run, args.isolated
                    )
                )
    for kind in kinds:
        report.add(
            **{
                "handler": kind,
                "us per call (median block)": summarize_key(runs[kind], "call_us", "us"),
                "us per call (mean)": summarize_key(runs[kind], "mean_us", "us"),
                "CPU us per call": summarize_key(runs[kind], "cpu_us", "us"),
                "records/s": summarize_key(runs[kind], "rate", "records/s")
                if DONE[kind] != "-"
                else None,
                "us per call (isolated)": summarize_key(runs[kind], "isolated_us", "us")
                if args.isolated
                else None,
                "done means": DONE[kind],
                "dropped": max(r["dropped"] for r in runs[kind]),
            }
        )
    if "LinkHandler" in kinds and FLOOR in kinds:
        report.notes.append(_against(runs, kinds, "call_us", "a call in a burst (median block)"))
        if args.isolated:
            report.notes.append(_against(runs, kinds, "isolated_us", "an isolated call"))
    report.notes.append(
        "each call: log.info('order %d paid by %s', i, 'user-7', extra={'shop': 's-1'}); "
        "LinkHandler encodes a JSON object (on its own thread), the file handlers a line "
        "of the same fields"
    )
    report.extra["runs"] = runs
    report.emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
