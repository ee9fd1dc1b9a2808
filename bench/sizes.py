"""`purelink bench sizes`: records/s against record size, 16 B to 64 KiB, and the plot.

Workload: the `queue` workload (bench/queue.py: a listener process with
sync=batch, one link, one application thread queuing distinct records one at
a time, first queue -> last told) at each record size of `--sizes` (default
16 B to 64 KiB in powers of 4).  Each size queues min(200,000, `--mib` MiB /
size) records, at least 500, so every point moves a similar amount of data
and the whole run stays bounded; records larger than a datagram (1,400 B)
travel as fragments.

Reported per size, median (min-max) of `--repeat` runs: records/s, MB/s of
payload, queue() ns (median block).  With `--plot PATH` it also draws
records/s (and MB/s) against size into PATH (PNG; needs matplotlib, the
`bench` extra):

    python -m bench.sizes --plot docs/records_per_second.png

`--json` output can be drawn again later without measuring:
`python -m bench.sizes --from-json RUN.json --plot PNG`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._common import Report, Summary, base_parser, make_records, serving, summarize
from ._impl import add_impl_argument, run_elsewhere
from .queue import run_queue

__all__ = ["DEFAULT_SIZES", "main", "plot"]

DEFAULT_SIZES = (16, 64, 256, 1024, 4096, 16384, 65536)
MAX_RECORDS = 200_000
MIN_RECORDS = 500


def records_for(size: int, mib: float) -> int:
    return max(MIN_RECORDS, min(MAX_RECORDS, int(mib * (1 << 20)) // size))


def _label(size: int) -> str:
    return f"{size >> 10} KiB" if size >= 1024 else f"{size} B"


def plot(rows: list[dict[str, Any]], path: Path, subtitle: str) -> None:
    """Draw records/s and MB/s against record size (log-log) into `path`."""
    import matplotlib  # noqa: PLC0415 -- a bench-only dependency, loaded when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    sizes = [r["size"] for r in rows]
    rate: list[Summary] = [r["records_per_s"] for r in rows]
    mbps: list[Summary] = [r["mb_per_s"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=120)
    med = [s.median for s in rate]
    err = [[m - s.low for m, s in zip(med, rate, strict=True)],
           [s.high - m for m, s in zip(med, rate, strict=True)]]  # fmt: skip
    ax.errorbar(sizes, med, yerr=err, marker="o", capsize=3, color="tab:blue", label="records/s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes, [_label(s) for s in sizes])
    ax.set_xlabel("record size")
    ax.set_ylim(min(s.low for s in rate) / 2, max(s.high for s in rate) * 3)
    ax.set_ylabel("records/s (first queue -> last told stored)", color="tab:blue")
    ax.grid(True, which="both", alpha=0.3)
    for x, y in zip(sizes, med, strict=True):
        ax.annotate(f"{y:,.0f}", (x, y), textcoords="offset points", xytext=(6, 3),
                    ha="left", fontsize=7, color="tab:blue")  # fmt: skip
    ax2 = ax.twinx()
    ax2.plot(sizes, [s.median for s in mbps], marker="s", ls="--", color="tab:orange",
             label="MB/s of payload")  # fmt: skip
    ax2.set_ylim(0, max(s.high for s in mbps) * 1.15)
    ax2.set_ylabel("MB/s of payload", color="tab:orange")
    ax.set_title("purelink: one link, one app thread, listener process, sync=batch", fontsize=10)
    fig.text(0.5, 0.005, subtitle, ha="center", va="bottom", fontsize=7, color="dimgray")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="lower left", fontsize=8)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _subtitle(env: dict[str, Any], repeat: int, plot_path: Path) -> str:
    m = env["machine"]
    return (
        f"{m['cpu']}, {m['cores']} cores, {m['kernel']}; {env['python']}; git {env['git']}\n"
        f"median (bars: min-max) of {repeat} runs; "
        f"python -m bench.sizes --plot {plot_path}"
    )


def _replot(source: Path, plot_path: Path) -> int:
    """Draw the plot from an earlier run's JSON (rows of Summary objects)."""
    saved = json.loads(source.read_text())
    rows = [
        {
            "size": row["size"],
            "records_per_s": summarize(row["records_per_s"]["runs"]),
            "mb_per_s": summarize(row["mb_per_s"]["runs"]),
        }
        for row in saved["rows"]
    ]
    repeat = int(saved["parameters"].get("repeat", 1))
    plot(rows, plot_path, _subtitle(saved["environment"], repeat, plot_path))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser("sizes", "records/s against record size (and a plot)")
    parser.add_argument(
        "--sizes",
        default=",".join(str(s) for s in DEFAULT_SIZES),
        help="comma-separated record sizes in bytes (default 16 B to 64 KiB, powers of 4)",
    )
    parser.add_argument(
        "--mib", type=float, default=64.0, help="payload MiB per size (bounds the run)"
    )
    parser.add_argument("--max-records", type=int, default=MAX_RECORDS, metavar="N")
    parser.add_argument("--plot", type=Path, metavar="PNG", help="draw the plot into this file")
    parser.add_argument(
        "--from-json",
        type=Path,
        metavar="FILE",
        help="do not measure: draw --plot from the output of an earlier `--json` run",
    )
    add_impl_argument(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.from_json is not None:
        if args.plot is None:
            parser.error("--from-json needs --plot")
        return _replot(args.from_json, args.plot)
    # --plot: of the first implementation's figures (the compiled core's by default)
    if (code := run_elsewhere("sizes", argv, args, first_only=("--plot",))) is not None:
        return code
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s]
    except ValueError:
        parser.error(f"--sizes must be integers: {args.sizes!r}")
    if not sizes or min(sizes) < 1 or args.repeat < 1 or args.max_records < 1:
        parser.error("--sizes, --repeat and --max-records must be positive")

    runs: dict[int, list[dict[str, Any]]] = {s: [] for s in sizes}
    counts = {s: min(args.max_records, records_for(s, args.mib)) for s in sizes}
    for _ in range(args.repeat):
        for size in sizes:
            data = make_records(counts[size], size)
            with serving("batch") as server:
                run = run_queue(server.url, "after", data, min(1000, max(1, counts[size] // 20)))
                server.stop()
            run["mb_per_s"] = run["rate"] * size / 1e6
            runs[size].append(run)
            del data

    report = Report(
        "sizes",
        "records/s against record size; one link, one app thread, listener process, sync=batch",
        parameters={"mib_per_size": args.mib, "repeat": args.repeat},
    )
    for size, rs in runs.items():
        report.add(
            size=size,
            records=counts[size],
            records_per_s=summarize((r["rate"] for r in rs), "records/s"),
            mb_per_s=summarize((r["mb_per_s"] for r in rs), "MB/s"),
            queue_ns=summarize((r["queue_ns"] for r in rs), "ns"),
            datagrams=summarize(r["datagrams"] for r in rs),
        )
    report.extra = {"runs": {str(s): rs for s, rs in runs.items()}}
    if args.plot is not None:
        try:
            plot(report.rows, args.plot, _subtitle(report.environment, args.repeat, args.plot))
        except ModuleNotFoundError as exc:
            print(f"purelink bench sizes: the plot needs {exc.name!r}: pip install '.[bench]'",
                  file=sys.stderr)  # fmt: skip
            report.emit(args.json)
            return 1
        report.notes.append(f"plot written to {args.plot}")
    report.emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
