"""`purelink bench wakeups`: how often queue() writes the eventfd, and what idling costs.

Two parts.

1. During `queue` (bench/queue.py, a listener process with sync=batch): the
   link's `wakeups` counter (eventfd writes by `queue`) per 1,000 records
   queued back to back, for the product (`after`) and for the naive way that
   writes the eventfd for every record (`wake-every-record`).  Target <= 1.

2. Idle: a connected link and a listener process, after 1,000 records were
   queued and told stored (so any timer armed by that traffic must have been
   disarmed), left alone for `--seconds` (10).  Reported: CPU % of one core
   used by the listener process (all its threads, from /proc/PID/task/*/
   schedstat) and by this, the sending process (all threads, process CPU
   clock; the main thread sleeps in one `time.sleep`), the context switches
   of the listener's threads, and the link thread's sleeps and eventfd writes
   in that time.  Target <= 1 % of a core each.

Run from the checkout root: `python -m bench.wakeups [--seconds S] [--json]`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._common import (
    Report,
    base_parser,
    make_records,
    self_cpu_ns,
    serving,
    summarize_key,
)
from ._impl import add_impl_argument, run_elsewhere
from ._links import asleep, open_link
from .queue import run_queue

__all__ = ["IDLE_CPU_TARGET", "WAKEUPS_TARGET", "main", "run_idle"]

WAKEUPS_TARGET = 1.0
IDLE_CPU_TARGET = 1.0  # percent of one core


def context_switches(pid: int) -> int:
    """Voluntary + involuntary context switches of every live thread of `pid`."""
    total = 0
    with contextlib.suppress(FileNotFoundError):
        for task in os.scandir(f"/proc/{pid}/task"):
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                for line in Path(task.path, "status").read_text().splitlines():
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
    return total


def run_idle(seconds: float, warm_records: int = 1000) -> dict[str, Any]:
    """One idle measurement: see the module header, part 2."""
    with serving("batch") as server:
        link = open_link(server.url, "after")
        try:
            for record in make_records(warm_records, 61):
                link.queue(record)
            if not link.wait_stored(timeout=30):
                raise RuntimeError("the warm-up records were not stored in 30 s")
            if not asleep(link, 10.0):
                raise RuntimeError("the link thread did not go to sleep after the warm-up")
            # let the listener's answer and sync for the warm-up finish before measuring
            time.sleep(0.2)
            s0 = link.stats()
            listener0, switches0, self0 = (
                server.cpu_ns(),
                context_switches(server.pid),
                self_cpu_ns(),
            )
            t0 = time.perf_counter_ns()
            time.sleep(seconds)
            t1 = time.perf_counter_ns()
            listener1, switches1, self1 = (
                server.cpu_ns(),
                context_switches(server.pid),
                self_cpu_ns(),
            )
            s1 = link.stats()
        finally:
            link.close(timeout=10)
        server.stop()
    wall = t1 - t0
    return {
        "seconds": wall / 1e9,
        "listener_cpu_pct": 100 * (listener1 - listener0) / wall,
        "sender_cpu_pct": 100 * (self1 - self0) / wall,
        "listener_switches": switches1 - switches0,
        "link_sleeps": s1.sleeps - s0.sleeps,
        "link_wakeups": s1.wakeups - s0.wakeups,
        "probes": s1.probes - s0.probes,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser("wakeups", "eventfd writes per 1,000 records; CPU of an idle pair")
    parser.add_argument("--records", type=int, default=200_000, metavar="N")
    parser.add_argument("--seconds", type=float, default=10.0, metavar="S", help="idle time")
    parser.add_argument("--idle-repeat", type=int, default=1, metavar="N", help="idle runs")
    add_impl_argument(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if (code := run_elsewhere("wakeups", argv, args)) is not None:
        return code
    if args.records < 1 or args.repeat < 1 or args.idle_repeat < 1 or not args.seconds > 0:
        parser.error("--records, --repeat, --idle-repeat and --seconds must be positive")

    data = make_records(args.records, 61)
    runs: dict[str, list[dict[str, Any]]] = {"after": [], "wake-every-record": []}
    for _ in range(args.repeat):
        for variant, variant_runs in runs.items():
            with serving("batch") as server:
                variant_runs.append(run_queue(server.url, variant, data, 1000))
                server.stop()
    idle = [run_idle(args.seconds) for _ in range(args.idle_repeat)]

    report = Report(
        "wakeups",
        f"eventfd writes while queuing {args.records:,} records of 61 B; "
        f"then an idle link and listener for {args.seconds:g} s",
        parameters={
            "records": args.records,
            "repeat": args.repeat,
            "seconds": args.seconds,
            "idle_repeat": args.idle_repeat,
        },
    )
    per_1000 = 1000 / args.records
    for variant, rs in runs.items():
        report.add(
            part="queue",
            variant=variant,
            wakeups=summarize_key(rs, "wakeups"),
            wakeups_per_1000=summarize_key(rs, "wakeups", "per 1,000 records", per_1000),
            link_sleeps=summarize_key(rs, "sleeps"),
            records_per_s=summarize_key(rs, "rate", "records/s"),
        )
    report.add(
        part="idle",
        variant="after",
        wakeups=summarize_key(idle, "link_wakeups"),
        link_sleeps=summarize_key(idle, "link_sleeps"),
        listener_cpu_pct=summarize_key(idle, "listener_cpu_pct", "% of a core"),
        sender_cpu_pct=summarize_key(idle, "sender_cpu_pct", "% of a core"),
        listener_switches=summarize_key(idle, "listener_switches"),
    )
    report.columns = [
        "part", "variant", "wakeups", "wakeups_per_1000", "link_sleeps", "records_per_s",
        "listener_cpu_pct", "sender_cpu_pct", "listener_switches",
    ]  # fmt: skip
    report.extra = {"queue_runs": runs, "idle_runs": idle}
    w = summarize_key(runs["after"], "wakeups", scale=per_1000).median
    report.notes.append(
        f"eventfd writes per 1,000 records {w:.3f} (target <= {WAKEUPS_TARGET:g}): "
        + ("met" if w <= WAKEUPS_TARGET else "NOT met")
    )
    for key, who in (("listener_cpu_pct", "listener"), ("sender_cpu_pct", "sending process")):
        pct = summarize_key(idle, key).median
        report.notes.append(
            f"idle CPU of the {who} {pct:.3f} % of a core (target <= {IDLE_CPU_TARGET:g} %): "
            + ("met" if pct <= IDLE_CPU_TARGET else "NOT met")
        )
    report.notes.append(
        "idle: after 1,000 records were told stored; listener_switches = context switches of "
        "all the listener's threads while idle"
    )
    report.emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
