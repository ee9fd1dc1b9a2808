"""`--impl compiled,python`: one benchmark run on both implementations, with the ratio.

Why it exists: purelink's per-record path has two implementations, the
compiled core (`purelink._speedups`) and pure Python (`purelink.native`
chooses once, at import; PURELINK_NO_EXTENSIONS=1 forces pure Python).  A
figure means little without the other path's figure beside it, measured in
the same invocation on the same machine, so each benchmark of the per-record
and per-connection work (queue, drain, stages, sizes, secret, wakeups, latency, links,
connections, logging, compare, overhead) takes `--impl` and this module runs
it once per implementation, each in its own process (the listener processes
a benchmark starts inherit its environment, so they run the same path):

* `--impl compiled,python` (the default where the compiled core is built and
  PURELINK_NO_EXTENSIONS is not set; else the implementation in use) starts
  `python -m bench.NAME ... --impl X` for each, with PURELINK_NO_EXTENSIONS=1
  for python and without it for compiled, prints each one's table as it would
  alone, then a table of ratios: compiled / python for every measured cell;
* a single implementation that this process already runs is measured in
  process, as before (`run_elsewhere` returns None);
* a compiled run that did not load the compiled core is an error (exit 1),
  never a silent pure-Python figure under the compiled name.

The child writes its report as JSON into the file named by
PURELINK_BENCH_REPORT (`Report.emit`), besides printing it; the parent
reads the medians from there.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import site
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "IMPLS",
    "REPORT_VARIABLE",
    "add_impl_argument",
    "current_impl",
    "default_impls",
    "ratio_rows",
    "run_elsewhere",
]

IMPLS = ("compiled", "python")
"""The implementations, by the names `--impl` takes."""

NAMES = {"compiled": "compiled core", "python": "pure Python"}
"""`--impl` name -> what purelink.native.IMPLEMENTATION (and `--version`) says."""

REPORT_VARIABLE = "PURELINK_BENCH_REPORT"
"""A child run writes its report as JSON into this file (see Report.emit)."""

FORCE_VARIABLE = "PURELINK_NO_EXTENSIONS"


def _forced() -> bool:
    return os.environ.get(FORCE_VARIABLE, "") not in ("", "0")


def compiled_built() -> bool:
    """Whether the compiled core is there to be imported (built, not forced off)."""
    return importlib.util.find_spec("purelink._speedups") is not None


def current_impl() -> str:
    """The implementation this process runs ("compiled" or "python")."""
    from purelink import native  # noqa: PLC0415 -- decided once, at its import

    return "compiled" if native.COMPILED else "python"


def default_impls() -> str:
    """Both where the compiled core is built and not forced off; else the one in use."""
    if compiled_built() and not _forced():
        return ",".join(IMPLS)
    return current_impl()


def _impl_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in IMPLS]
    if bad or not names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"--impl takes a comma-separated list of {', '.join(IMPLS)}, each once: {text!r}"
        )
    return names


def add_impl_argument(parser: argparse.ArgumentParser) -> None:
    """The `--impl` option (parsed into a list of names)."""
    parser.add_argument(
        "--impl",
        type=_impl_list,
        default=None,
        metavar="LIST",
        help="implementations to measure, each in its own process, with the ratio: "
        "compiled, python, or compiled,python (default: both where the compiled core "
        f"is built, else the one in use: now {default_impls()})",
    )


def _without(argv: Sequence[str], options: Sequence[str]) -> list[str]:
    """argv less the `options` (each with its value) and --json (the parent decides that)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in options:
            skip = True
        elif not arg.startswith(tuple(f"{o}=" for o in options)) and arg != "--json":
            out.append(arg)
    return out


def _child_env(impl: str, report: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != FORCE_VARIABLE}
    if impl == "python":
        env[FORCE_VARIABLE] = "1"
    env[REPORT_VARIABLE] = str(report)
    # the child imports the same bench package and the same purelink as this process
    import purelink  # noqa: PLC0415 -- loaded by every benchmark anyway

    package = sys.modules[__package__ or "bench"]
    roots = [
        str(Path(package.__file__ or ".").resolve().parent.parent),
        str(Path(purelink.__file__).resolve().parent.parent),
    ]
    if (__package__ or "").startswith("purelink."):  # purelink.bench: one level more
        roots[0] = str(Path(roots[0]).parent)
    on_path_anyway = {*site.getsitepackages(), site.getusersitepackages()}
    roots = [r for r in dict.fromkeys(roots) if r not in on_path_anyway]
    path = [*roots, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env


def _run_child(name: str, impl: str, argv: list[str], as_json: bool) -> dict[str, Any] | None:
    """Run `python -m bench.NAME ARGV --impl IMPL`; print its table (not with --json);
    its report, or None if it failed (after saying why on stderr)."""
    module = f"{__package__ or 'bench'}.{name}"
    with tempfile.TemporaryDirectory(prefix="purelink-bench-impl-") as tmp:
        report_path = Path(tmp) / "report.json"
        command = [sys.executable, "-m", module, *argv, "--impl", impl]
        result = subprocess.run(
            [*command, *(["--json"] if as_json else [])],
            env=_child_env(impl, report_path),
            stdout=subprocess.PIPE,
            text=True,
            check=False,
        )
        if not as_json:
            print(result.stdout, end="", flush=True)
        report: dict[str, Any] | None = None
        with contextlib.suppress(OSError, ValueError):
            report = json.loads(report_path.read_text())
    if result.returncode != 0 or report is None:
        print(f"purelink bench {name}: the {impl} run failed (exit {result.returncode})",
              file=sys.stderr)  # fmt: skip
        return None
    ran = report.get("environment", {}).get("implementation")
    if ran != NAMES[impl]:
        print(f"purelink bench {name}: --impl {impl} ran {ran!r}, not {NAMES[impl]!r}: "
              f"{report.get('environment', {}).get('implementation_reason', '')}",
              file=sys.stderr)  # fmt: skip
        return None
    return report


def _median(cell: Any) -> float | None:
    """The measured figure of a JSON cell (a Summary's median), else None."""
    if isinstance(cell, dict) and isinstance(cell.get("median"), int | float):
        return float(cell["median"])
    return None


def ratio_rows(first: dict[str, Any], second: dict[str, Any]) -> list[dict[str, Any]]:
    """Row by row (the same arguments give the same rows in the same order): the
    cells that are not measured as they are, each measured one first / second."""
    rows: list[dict[str, Any]] = []
    for a, b in zip(first.get("rows", []), second.get("rows", []), strict=False):
        row: dict[str, Any] = {}
        for key, cell in a.items():
            x, y = _median(cell), _median(b.get(key))
            if x is None:
                row[key] = cell if not isinstance(cell, dict) else "-"
            else:
                row[key] = round(x / y, 3) if y else None
        rows.append(row)
    return rows


def _combined(name: str, reports: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One JSON object for all runs: every run's rows (with `impl`), and the ratios."""
    from ._common import environment  # noqa: PLC0415 -- _common imports this module

    first = next(iter(reports.values()))
    combined: dict[str, Any] = {
        "benchmark": name,
        "title": first.get("title", ""),
        "environment": environment(),
        "parameters": {**first.get("parameters", {}), "impl": list(reports)},
        "rows": [{"impl": i, **row} for i, r in reports.items() for row in r.get("rows", [])],
        "notes": [f"{i}: {n}" for i, r in reports.items() for n in r.get("notes", [])],
        "implementations": reports,
    }
    if set(reports) == set(IMPLS):
        combined["ratios"] = ratio_rows(reports["compiled"], reports["python"])
    return combined


def run_elsewhere(
    name: str, argv: Sequence[str], args: argparse.Namespace, first_only: Sequence[str] = ()
) -> int | None:
    """Run the benchmark once per implementation `args.impl` names, each in its own
    process, and print the ratio; None when this process measures (one
    implementation, the one it runs).  The options `first_only` (such as a file
    to write) go to the first implementation's run only."""
    impls: list[str] = args.impl or _impl_list(default_impls())
    if impls == [current_impl()]:
        return None
    if os.environ.get(REPORT_VARIABLE):  # a child of this: never a grandchild
        print(f"purelink bench {name}: --impl {','.join(impls)} in a process that runs "
              f"{current_impl()}", file=sys.stderr)  # fmt: skip
        return 1
    if "compiled" in impls and not compiled_built():
        print(f"purelink bench {name}: --impl compiled: the compiled core is not built "
              "(python setup.py build_ext --inplace, or pip install . with a C compiler)",
              file=sys.stderr)  # fmt: skip
        return 1
    reports: dict[str, dict[str, Any]] = {}
    for impl in impls:
        rest = _without(argv, ["--impl", *(first_only if impl != impls[0] else ())])
        report = _run_child(name, impl, rest, args.json)
        if report is None:
            return 1
        reports[impl] = report
    if args.json:  # one run: its own report; several: them all, and the ratios
        both = _combined(name, reports) if len(reports) > 1 else reports[impls[0]]
        print(json.dumps(both), flush=True)
    elif set(reports) == set(IMPLS):
        _print_ratios(name, reports)
    return 0


def _print_ratios(name: str, reports: dict[str, dict[str, Any]]) -> None:
    from ._common import format_table  # noqa: PLC0415 -- _common imports this module

    print(f"purelink bench {name}: compiled core / pure Python, each figure's median")
    print(format_table(ratio_rows(reports["compiled"], reports["python"])))
    print("  below 1: the compiled core takes less (time, CPU, calls); above 1: it does more")
    print("  (a rate: records/s, MB/s)", flush=True)
