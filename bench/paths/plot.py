"""docs/paths.png: payload KB/s per transport per path (run.py).

Why it exists: the paths table has 9 rows and 4 transports; one grouped bar
chart (log scale, so 100 KB/s and 6,000 KB/s both read) shows at a glance
where each transport falls off and how far, with the bottleneck's rate as a
line.  Needs matplotlib (the `bench` extra).
"""

from __future__ import annotations

from pathlib import Path

from .._common import Report, Summary
from .constants import TRANSPORTS

__all__ = ["plot"]

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
