"""`purelink bench`: hand over to the benchmark suite (docs/performance.md).

Why it exists: the suite is bench/ of the source checkout; a wheel ships it
as `purelink.bench` (setup.py copies it in), and an editable install runs it
from the checkout.  This finds it either way, or says in one line where it
is, and passes a single benchmark its own options.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import ModuleType

from .. import Error
from .common import UsageError

__all__ = ["bench_list", "cmd_bench"]


def cmd_bench(args: argparse.Namespace) -> int:
    """Hand over to the benchmark suite (docs/performance.md).  A wheel ships it
    as `purelink.bench` (setup.py copies bench/ in); an editable install runs
    it from bench/ of its checkout.  Options after a single name go to it."""
    bench = _bench_suite()
    names: dict[str, str] = bench.BENCHMARKS
    if args.options and len(args.names) != 1:
        raise UsageError(
            f"options {' '.join(args.options)!r} need exactly one benchmark name "
            f"(choose from {', '.join(names)})"
        )
    unknown = [n for n in args.names if n not in names]
    if unknown:
        raise UsageError(f"unknown benchmark {unknown[0]!r} (choose from {', '.join(names)})")
    return int(bench.main([*args.names, *args.options, *(["--json"] if args.json else [])]))


def bench_list() -> str:
    """The benchmarks, a line each, for `purelink bench --help`."""
    try:
        names: dict[str, str] = _bench_suite().BENCHMARKS
    except (Error, UsageError) as exc:
        return f"benchmarks: {exc}"
    width = max(map(len, names))
    return "benchmarks:\n" + "\n".join(f"  {n.ljust(width)}  {text}" for n, text in names.items())


def _bench_suite() -> ModuleType:
    """`purelink.bench`, else the `bench` package of the checkout this file is in."""
    import importlib  # noqa: PLC0415 -- only this verb needs it

    checkout = Path(__file__).resolve().parents[3]  # src/purelink/cli/bench.py
    for name in ("purelink.bench", "bench"):
        if name == "bench":
            if not (checkout / "bench" / "__init__.py").is_file():
                continue
            sys.path.insert(0, str(checkout))
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise Error(f"the benchmarks need {exc.name!r}: pip install '.[bench]'") from None
    raise UsageError(
        "the benchmarks are not installed with this copy of purelink: they are bench/ "
        "of the source checkout (pip install . from it, or python -m bench there)"
    )
