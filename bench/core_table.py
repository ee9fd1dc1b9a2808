"""The table of docs/performance.md's "The compiled core": both paths, one command.

Why it exists: the compiled core's figures are refilled whenever a part of it
lands or changes, so the table must come from one command, not from hand
copies: this runs `queue`, `drain` and `stages` with `--impl compiled,python`
(each implementation in its own process, bench/_impl.py) and prints the
Markdown table to paste, the command and the environment under it.

Run from the checkout root, with the extension built
(`python setup.py build_ext --inplace`):

    python -m bench.core_table [--repeat 3] [--records 200000]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from . import drain, queue, stages
from ._impl import compiled_built

__all__ = ["FIGURES", "main"]

FIGURES: list[tuple[str, str, str, str]] = [
    # (benchmark, row's first cell, column, what the table calls it)
    ("queue", "after", "queue_ns", "`queue()` ns, median block of 1,000 calls (`queue`)"),
    ("queue", "after", "records_per_s", "records/s, first queue -> last told stored (`queue`)"),
    ("queue", "after", "send_cpu_ns", "app + link process CPU ns per record (`queue`)"),
    ("drain", "after", "records_per_s", "records/s, link and listener in one process (`drain`)"),
    ("drain", "after", "link_cpu_ns", "link thread CPU ns per record (`drain`)"),
    ("drain", "after", "listener_cpu_ns", "listener thread CPU ns per record (`drain`)"),
    *(
        ("stages", stage, "cpu_ns_per_record", f"{stage}: CPU ns per record (`stages`)")
        for stage in ("queue", "take", "pack", "listener", "answers", "all")
    ),
]
"""The figures of the table, in its order."""

RUNS: dict[str, Callable[[list[str]], int]] = {
    "queue": queue.main,
    "drain": drain.main,
    "stages": stages.main,
}


def _run(name: str, argv: list[str]) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = RUNS[name]([*argv, "--impl", "compiled,python", "--json"])
    if code != 0:
        raise SystemExit(f"core_table: {name} failed (exit {code})")
    report: dict[str, Any] = json.loads(out.getvalue())
    return report


def _median(report: dict[str, Any], first: str, column: str) -> float | None:
    for row in report.get("rows", []):
        if next(iter(row.values()), None) == first:
            cell = row.get(column)
            return float(cell["median"]) if isinstance(cell, dict) else None
    return None


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def table(reports: dict[str, dict[str, Any]]) -> list[str]:
    """The Markdown table: a line per figure, pure Python, compiled core, the ratio."""
    lines = [
        "| figure (median of the runs) | pure Python | compiled core | compiled / python |",
        "|---|---:|---:|---:|",
    ]
    for name, first, column, label in FIGURES:
        runs = reports[name]["implementations"]
        python = _median(runs["python"], first, column)
        compiled = _median(runs["compiled"], first, column)
        ratio = f"{compiled / python:.2f}" if compiled is not None and python else "-"
        lines.append(f"| {label} | {_cell(python)} | {_cell(compiled)} | {ratio} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.core_table", description=__doc__)
    parser.add_argument("--repeat", type=int, default=3, metavar="N")
    parser.add_argument("--records", type=int, default=200_000, metavar="N")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if not compiled_built():
        print("core_table: the compiled core is not built (python setup.py build_ext --inplace)",
              file=sys.stderr)  # fmt: skip
        return 1
    common = ["--records", str(args.records), "--repeat", str(args.repeat)]
    reports = {
        "queue": _run("queue", [*common, "--variants", "after", "--no-backlog"]),
        "drain": _run("drain", [*common, "--variants", "after"]),
        "stages": _run("stages", common),
    }
    env = reports["queue"]["environment"]
    print("\n".join(table(reports)))
    print()
    print(f"`python -m bench.core_table --repeat {args.repeat} --records {args.records}`: "
          f"{env['machine']['cpu']}, {env['machine']['cores']} cores, load "
          f"{' '.join(str(x) for x in env['machine']['loadavg'])}, {env['python']}, "
          f"git {env['git']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
