"""docs/paths.png is drawn from two runs: the matrix and `--shared`.

Why it exists: a full default run of either keeps its report in
docs/paths.json and redraws the figure from it and the other run's last
report (bench/paths/plot.py), so a run of one must never lose the other's
figures, and a figure must come out whichever of the two ran first.  No
emulator here: the reports are made up, in the shapes the runs make.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

# bench/ is a package of the checkout, not of the installed distribution
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._common import Report, summarize
from bench.paths import plot, run
from bench.paths.constants import TRANSPORTS
from bench.paths.run import _parse, keep_part, report_from_json


def matrix(kbps: float) -> Report:
    report = Report("paths", "payload KB/s through emulated 50 Mbit/s, 50 ms RTT paths")
    report.parameters.update(size_mb=10, record_size=1000, repeat=3)
    for path in ("clean", "loss-1%"):
        cells = {
            label: summarize([kbps, kbps * 1.01, kbps * 0.99], "KB/s")
            for label in TRANSPORTS.values()
        }
        report.add(path=path, **cells, **{"udp/BBR": 1.0})
    return report


def shared(part: float) -> Report:
    report = Report("paths --shared", "purelink udp:// and Linux TCP sharing one bottleneck")
    report.parameters.update(links=1, tcp_flows=1, seconds=20, warm=3, repeat=1)
    for depth in (0.5, 2.5):
        for competitor in ("Linux TCP CUBIC", "Linux TCP BBR"):
            report.add(
                path="20 Mbit/s, 40 ms",
                buffer=f"{depth:g} bdp",
                competitor=competitor,
                **{
                    "purelink KB/s": summarize([part * 2500], "KB/s"),
                    "TCP KB/s": summarize([(1 - part) * 2500], "KB/s"),
                    "purelink share": summarize([part]),
                    "pair / line": summarize([0.95]),
                },
                bdp=depth,
                family="20 Mbit/s, 40 ms",
            )
    return report


def test_each_run_keeps_its_part_and_the_other_s(tmp_path: Path) -> None:
    data = tmp_path / "paths.json"
    parts = keep_part(matrix(5000), data)
    assert parts["shared"] is None and parts["matrix"] is not None
    assert parts["matrix"].rows[0]["Linux TCP BBR"].median == pytest.approx(5000)
    parts = keep_part(shared(0.4), data)
    assert parts["matrix"] is not None and parts["shared"] is not None
    # the matrix again: the shared run's figures stay, the matrix's are the new ones
    parts = keep_part(matrix(4000), data)
    assert parts["matrix"] is not None and parts["shared"] is not None
    assert parts["matrix"].rows[1]["purelink udp://"].median == pytest.approx(4000)
    assert parts["shared"].rows[0]["purelink share"].median == pytest.approx(0.4)
    kept = json.loads(data.read_text())
    assert set(kept) == {"matrix", "shared"}
    assert "extra" not in kept["shared"], "the timelines stay out of the docs"


def test_a_damaged_data_file_is_started_again(tmp_path: Path) -> None:
    data = tmp_path / "paths.json"
    data.write_text("[1, 2")
    parts = keep_part(shared(0.5), data)
    assert parts["matrix"] is None and parts["shared"] is not None
    assert set(json.loads(data.read_text())) == {"shared"}


def test_a_report_comes_back_from_its_json() -> None:
    report = shared(0.45)
    back = report_from_json(report.to_json())
    assert back.rows[0]["purelink share"].median == pytest.approx(0.45)
    assert back.columns == [
        "path",
        "buffer",
        "competitor",
        "purelink KB/s",
        "TCP KB/s",
        "purelink share",
        "pair / line",
    ]


@pytest.mark.parametrize(
    ("argv", "docs"),
    [
        ([], True),
        (["--shared"], True),
        (["--repeat", "3"], True),
        (["--shared", "--repeat", "2"], True),
        (["--shared", "--transports", "bbr"], False),
        (["--shared", "--stagger", "5"], False),
        (["--paths", "clean"], False),
        (["--torture"], False),
        (["--no-plot"], False),
        (["--plot", "elsewhere.png"], False),
    ],
    ids=str,
)
def test_only_a_full_default_run_draws_the_docs_figure(argv: list[str], docs: bool) -> None:
    args = _parse(argv)
    assert args.docs_figure is docs
    if docs:
        assert args.plot == Path(__file__).resolve().parents[2] / "docs" / "paths.png"


@pytest.mark.slow  # needs matplotlib, the `bench` extra: pip install '.[bench]'
def test_the_figure_is_drawn_from_either_part_or_both(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from bench.paths.plot import plot_paths  # noqa: PLC0415

    sizes = {}
    for name, parts in {
        "matrix": (matrix(5000), None),
        "shared": (None, shared(0.5)),
        "both": (matrix(5000), shared(0.5)),
    }.items():
        png = tmp_path / f"{name}.png"
        plot_paths(*parts, png)
        head = png.read_bytes()[:24]
        assert head[:8] == b"\x89PNG\r\n\x1a\n"
        sizes[name] = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    # both: the matrix's width, and taller than either alone (one above the other)
    assert sizes["both"][1] > max(sizes["matrix"][1], sizes["shared"][1])


@pytest.mark.parametrize(
    "other",
    [
        {"rows": []},  # no benchmark, no title
        {"benchmark": "paths", "title": "t", "environment": {}, "parameters": {}, "notes": [],
         "rows": [{"path": "clean", "Linux TCP BBR": {"median": 1}}]},  # a cell without runs
        "a string",
        None,
    ],
)  # fmt: skip
def test_a_damaged_part_is_dropped_and_this_run_kept(tmp_path: Path, other: object) -> None:
    """A part of docs/paths.json that is not a report (damaged by hand, say)
    comes back as None and leaves the file; this run's part is kept."""
    data = tmp_path / "paths.json"
    data.write_text(json.dumps({"matrix": other}))
    parts = keep_part(shared(0.5), data)
    assert parts == {"matrix": None, "shared": parts["shared"]} and parts["shared"] is not None
    assert set(json.loads(data.read_text())) == {"shared"}


def test_a_part_of_the_other_kind_is_dropped(tmp_path: Path) -> None:
    data = tmp_path / "paths.json"
    keep_part(shared(0.4), data)
    kept = json.loads(data.read_text())
    data.write_text(json.dumps({"matrix": kept["shared"]}))  # a shared run kept as the matrix
    parts = keep_part(shared(0.6), data)
    assert parts["matrix"] is None and parts["shared"] is not None


def test_a_figure_the_other_part_breaks_is_drawn_from_this_run_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows that parse but cannot be drawn (a kept part damaged in its
    columns): the docs figure is this run's alone, and the run says why."""
    drawn: list[tuple[bool, bool]] = []

    def plot_paths(matrix: Report | None, shared: Report | None, path: Path) -> None:
        drawn.append((matrix is not None, shared is not None))
        if matrix is not None and shared is not None:
            raise KeyError("Linux TCP BBR")

    monkeypatch.setattr(plot, "plot_paths", plot_paths)
    monkeypatch.setattr(run, "DOCS_DATA", tmp_path / "paths.json")
    monkeypatch.setattr(run, "DOCS_FIGURE", tmp_path / "paths.png")
    keep_part(matrix(5000), tmp_path / "paths.json")
    report = shared(0.5)
    run._draw_docs(report)
    assert drawn == [(True, True), (False, True)]
    assert "docs figure: this run alone" in report.notes[-1]
