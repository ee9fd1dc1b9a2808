"""docs/paths.png: payload KB/s per transport per path (run.py); and
docs/paths-shared.png: purelink's share beside Linux TCP per buffer depth (shared.py).

Why it exists: the paths table has 9 rows and 4 transports; one grouped bar
chart (log scale, so 100 KB/s and 6,000 KB/s both read) shows at a glance
where each transport falls off and how far, with the bottleneck's rate as a
line.  The `--shared` table is a share per buffer depth, path and competitor:
one line per path and competitor over the depth (log scale, 0.4 to 10 BDP),
against the fair share and the target band, and beside it how much of the
line the pair used.  Two figures, because they are two runs (the matrix and
`--shared`), each redrawing its own.  Needs matplotlib (the `bench` extra).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._common import SHARE_BAND, Report, Summary
from .constants import TRANSPORTS

__all__ = ["plot", "plot_shared"]

COLOURS = {
    "Linux TCP BBR": "tab:blue",
    "Linux TCP CUBIC": "tab:cyan",
    "purelink tcp://": "tab:green",
    "purelink udp://": "tab:orange",
}
BOTTLENECK_KBPS = 50e6 / 8 / 1000


def plot(report: Report, path: Path, transports: list[str]) -> None:
    """Draw the report's rows (Summary cells per transport label) into `path`."""
    import matplotlib  # noqa: PLC0415 -- a bench-only dependency, loaded when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    labels = [TRANSPORTS[t] for t in transports]
    rows = report.rows
    width = 0.8 / max(1, len(labels))
    fig, ax = plt.subplots(figsize=(10, 5), dpi=120)
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
        f"{p['size_mb']:g} MB of {p['record_size']} B records through a 50 Mbit/s, "
        f"50 ms RTT path with a 256 KB queue (numbers: udp / BBR)",
        fontsize=9,
    )
    env = report.environment
    m = env["machine"]
    fig.text(
        0.5,
        0.005,
        f"{m['cpu']}, {m['cores']} cores, {m['kernel']}; {env['python']}; "
        f"git {env['git']}; median of {p['repeat']}; purelink bench paths",
        ha="center",
        va="bottom",
        fontsize=6,
        color="dimgray",
    )
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def _footer(fig: Any, report: Report, what: str) -> None:
    env = report.environment
    m = env["machine"]
    fig.text(
        0.5,
        0.005,
        f"{m['cpu']}, {m['cores']} cores, {m['kernel']}, load {' '.join(map(str, m['loadavg']))}; "
        f"{env['python']}; "
        f"git {env['git']}; {what}",
        ha="center",
        va="bottom",
        fontsize=6,
        color="dimgray",
    )


def plot_shared(report: Report, path: Path) -> None:
    """Draw a `--shared` report: purelink's share (left) and the pair's part of
    the line (right) per buffer depth, one line per path and competitor."""
    import matplotlib  # noqa: PLC0415 -- a bench-only dependency, loaded when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    p = report.parameters
    fair = p["links"] / (p["links"] + p["tcp_flows"])
    fig, (share, used) = plt.subplots(1, 2, figsize=(11, 4.8), dpi=120, width_ratios=(3, 2))
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
        f"{p['links']} purelink udp:// link(s) beside {p['tcp_flows']} Linux TCP flow(s), "
        f"{p['seconds']:g} s together (first {p['warm']:g} s not counted)",
        fontsize=9,
    )
    used.set_title("the payload of all the flows as a part of the line rate", fontsize=9)
    _footer(fig, report, f"median of {p['repeat']}; purelink bench paths --shared")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
