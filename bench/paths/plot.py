"""docs/paths.png: what `purelink bench paths` measured, alone and shared.

Why it exists: the paths table has 9 rows and 4 transports; one grouped bar
chart (log scale, so 100 KB/s and 6,000 KB/s both read) shows at a glance
where each transport falls off and how far, with the bottleneck's rate as a
line.  The `--shared` table is a share per buffer depth, path and competitor:
one line per path and competitor over the depth (log scale, 0.4 to 10 BDP),
against the fair share and the target band, and beside it how much of the
line the pair used.  The two come from two runs (the matrix, `--shared`), so
the figure is drawn from both: a full default run of either keeps its own
report in docs/paths.json (the table's figures, not the timelines) and
redraws docs/paths.png from it and the other's last report there, the matrix
on top and the shared run below, each with its own footer (revision, load).
`--plot PNG` draws the one run alone.  Needs matplotlib (the `bench` extra).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._common import SHARE_BAND, Report, Summary
from .constants import TRANSPORTS

__all__ = ["plot", "plot_paths", "plot_shared"]

COLOURS = {
    "Linux TCP BBR": "tab:blue",
    "Linux TCP CUBIC": "tab:cyan",
    "purelink tcp://": "tab:green",
    "purelink udp://": "tab:orange",
}
BOTTLENECK_KBPS = 50e6 / 8 / 1000
MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def _pyplot() -> Any:
    import matplotlib  # noqa: PLC0415 -- a bench-only dependency, loaded when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def _save(fig: Any, plt: Any, path: Path, footers: list[str]) -> None:
    """The footers (one line each, at the bottom), then the file."""
    for k, text in enumerate(reversed(footers)):
        fig.text(
            0.5, 0.005 + 0.018 * k, text, ha="center", va="bottom", fontsize=6, color="dimgray"
        )
    fig.tight_layout(rect=(0, 0.012 + 0.018 * len(footers), 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _footer(report: Report, what: str) -> str:
    env = report.environment
    m = env["machine"]
    load = m.get("loadavg")
    return (
        f"{m['cpu']}, {m['cores']} cores, {m['kernel']}"
        + (f", load {' '.join(map(str, load))}" if load else "")
        + f"; {env['python']}; git {env['git']}; {what}"
    )


def matrix_transports(report: Report) -> list[str]:
    """The transports (keys of TRANSPORTS) a matrix report has columns for."""
    labels = {label: name for name, label in TRANSPORTS.items()}
    return [labels[k] for k in (report.rows[0] if report.rows else {}) if k in labels]


def plot(report: Report, path: Path, transports: list[str]) -> None:
    """Draw the matrix report's rows (Summary cells per transport label) into `path`."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 5), dpi=120)
    _matrix(ax, report, transports)
    _save(fig, plt, path, [_matrix_footer(report)])


def plot_shared(report: Report, path: Path) -> None:
    """Draw a `--shared` report: purelink's share (left) and the pair's part of
    the line (right) per buffer depth, one line per path and competitor."""
    plt = _pyplot()
    fig, (share, used) = plt.subplots(1, 2, figsize=(11, 4.8), dpi=120, width_ratios=(3, 2))
    _shared(share, used, report)
    _save(fig, plt, path, [_shared_footer(report)])


def plot_paths(matrix: Report | None, shared: Report | None, path: Path) -> None:
    """docs/paths.png: the matrix on top, the shared run below; either may be
    missing (not run yet on this checkout), and the other is drawn alone."""
    if matrix is None or shared is None:
        if matrix is not None:
            plot(matrix, path, matrix_transports(matrix))
        elif shared is not None:
            plot_shared(shared, path)
        return
    plt = _pyplot()
    fig = plt.figure(figsize=(11, 9.8), dpi=120)
    grid = fig.add_gridspec(2, 2, height_ratios=(1, 1), width_ratios=(3, 2))
    _matrix(fig.add_subplot(grid[0, :]), matrix, matrix_transports(matrix))
    _shared(fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1]), shared)
    _save(fig, plt, path, [f"top: {_matrix_footer(matrix)}", f"below: {_shared_footer(shared)}"])


def _matrix(ax: Any, report: Report, transports: list[str]) -> None:
    """The matrix: grouped bars of payload KB/s per path, one per transport."""
    labels = [TRANSPORTS[t] for t in transports]
    rows = report.rows
    width = 0.8 / max(1, len(labels))
    for i, label in enumerate(labels):
        cells: list[Summary] = [r[label] for r in rows]
        xs = [k + (i - (len(labels) - 1) / 2) * width for k in range(len(rows))]
        med = [max(c.median, 1.0) for c in cells]
        err = [
            [m - max(c.low, 1.0) for m, c in zip(med, cells, strict=True)],
            [max(c.high, 1.0) - m for m, c in zip(med, cells, strict=True)],
        ]
        ax.bar(
            xs,
            med,
            width,
            yerr=err if any(len(c.values) > 1 for c in cells) else None,
            label=label,
            color=COLOURS.get(label),
            capsize=2,
        )
    for k, row in enumerate(rows):
        if "udp/BBR" in row:
            ax.annotate(
                f"{row['udp/BBR']:.2f}x",
                (k, BOTTLENECK_KBPS * 1.15),
                ha="center",
                fontsize=7,
                color="tab:orange",
            )
    ax.axhline(BOTTLENECK_KBPS, ls="--", lw=0.8, color="gray", label="bottleneck (6,250 KB/s)")
    ax.set_yscale("log")
    ax.set_ylim(10, BOTTLENECK_KBPS * 1.6)
    ax.set_xticks(range(len(rows)), [r["path"] for r in rows], fontsize=8)
    ax.set_ylabel("payload KB/s (log scale)")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    p = report.parameters
    ax.set_title(
        f"alone: {p['size_mb']:g} MB of {p['record_size']} B records through a 50 Mbit/s, "
        f"50 ms RTT path with a 256 KB queue (numbers: udp / BBR)",
        fontsize=9,
    )
    ax.legend(fontsize=8, loc="lower left")


def _matrix_footer(report: Report) -> str:
    return _footer(report, f"median of {report.parameters['repeat']}; purelink bench paths")


def _shared(share: Any, used: Any, report: Report) -> None:
    """The shared run: purelink's share (left) and the pair's part of the line
    (right) per buffer depth, one line per path and competitor."""
    p = report.parameters
    fair = p["links"] / (p["links"] + p["tcp_flows"])
    rows = [r for r in report.rows if r.get("bdp", 0) > 0]
    families = list(dict.fromkeys(r["family"] for r in rows))
    depths = sorted({round(float(r["bdp"]), 2) for r in rows})
    for j, competitor in enumerate(dict.fromkeys(r["competitor"] for r in rows)):
        for k, family in enumerate(families):
            line = sorted(
                (r for r in rows if (r["competitor"], r["family"]) == (competitor, family)),
                key=lambda r: float(r["bdp"]),
            )
            style = {
                "color": COLOURS.get(competitor),
                "marker": MARKERS[k % len(MARKERS)],
                "ls": ("-", "--", ":")[j % 3],
                "capsize": 2,
            }
            for ax, key in ((share, "purelink share"), (used, "pair / line")):
                cells: list[Summary] = [r[key] for r in line]
                ax.errorbar(
                    [float(r["bdp"]) for r in line],
                    [c.median for c in cells],
                    yerr=[
                        [c.median - c.low for c in cells],
                        [c.high - c.median for c in cells],
                    ],
                    label=f"beside {competitor}, {family}",
                    **style,
                )
    low, high = (1 - SHARE_BAND) * fair, (1 + SHARE_BAND) * fair
    share.axhspan(low, high, color="tab:green", alpha=0.1, label=f"target {low:.2f}-{high:.2f}")
    share.axhline(fair, ls="--", lw=0.8, color="gray", label=f"fair ({fair:.2g})")
    target = used.axhline(
        0.9, ls="-.", lw=0.8, color="gray", label="target: all >= 0.9 of the line"
    )
    for ax, ylabel in (
        (share, "purelink's share of what all delivered"),
        (used, "payload / line rate"),
    ):
        ax.set_xscale("log")
        ax.set_xlim(min(depths, default=0.4) / 1.3, max(depths, default=10) * 1.3)
        ax.set_xticks(depths, [f"{d:g}" for d in depths], fontsize=8)
        ax.minorticks_off()
        ax.set_xlabel("bottleneck buffer, BDP (log scale)")
        ax.set_ylabel(ylabel)
        ax.set_ylim(0, 1.05)
        ax.grid(True, alpha=0.3)
    handles, labels = share.get_legend_handles_labels()
    # the right panel's lower part is empty: every legend entry goes there
    used.legend([*handles, target], [*labels, target.get_label()], fontsize=7, loc="lower left")
    share.set_title(
        f"shared: {p['links']} purelink udp:// link(s) beside {p['tcp_flows']} Linux TCP "
        f"flow(s), {p['seconds']:g} s together (first {p['warm']:g} s not counted)",
        fontsize=9,
    )
    used.set_title("the payload of all the flows as a part of the line rate", fontsize=9)


def _shared_footer(report: Report) -> str:
    p = report.parameters
    return _footer(report, f"median of {p['repeat']}; purelink bench paths --shared")
