"""bench/ccshare.py: the shared-path sweep's structure and sanity, on tiny cells.

Why it exists: the program is the tool a congestion controller is tuned
with, so its rows must mean what they say: one per cell, the worst seed
first, shares that are shares (0..1, a total near 1 at most), targets
judged as the docstring states.  Whether purelink takes its fair share is
not asserted here: that is the program's output, not a property of its
structure.  The grid's table is checked on made-up outcomes, not run.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench import ccshare
from bench.ccshare import GRID, Cell, Outcome, failures, main, margin, report, run_cell
from purelink.testing.sharing import Shared, share

TINY = ["--seconds", "4", "--warm", "1", "--jobs", "1", "--json"]


def sane(out: Outcome, flows: int) -> None:
    assert len(out.shares) == flows
    assert all(0.0 <= s <= 1.0 for s in out.shares), out.shares
    assert 0.0 < out.total <= 1.05, out.shares
    assert sum(out.parts) == pytest.approx(1.0)
    assert 0.0 <= out.purelink <= 1.0


def test_a_link_beside_each_kind_together_and_staggered(capsys: pytest.CaptureFixture[str]) -> None:
    """--tcp with two kinds and two staggers on one path: a row each, with the
    band of a pair, shares in range, the result and the worst seed named."""
    argv = ["--path", "mbit=2,rtt=0.01,buffer=1", "--tcp", "cubic,bbr", "--stagger", "0,0.5"]
    assert main([*argv, "--seeds", "2", *TINY]) == 0
    rep = json.loads(capsys.readouterr().out)
    rows = rep["rows"]
    assert sorted((r["competitor"], r["setup"]) for r in rows) == [
        ("bbr", "-"),
        ("bbr", "tcp0.5s-first"),
        ("cubic", "-"),
        ("cubic", "tcp0.5s-first"),
    ]
    for row in rows:
        assert row["path"] == "2Mb 10ms" and row["band"] == "0.35-0.65"
        assert 0.0 <= row["purelink"] <= 1.0 and 0.0 < row["total"] <= 1.05
        assert row["worst_seed"] in (0, 1)
        assert row["result"] == "pass" or row["result"].startswith("miss ")
    assert [r["margin"] for r in rows] == sorted(r["margin"] for r in rows), "worst first"
    assert rep["notes"][0].endswith("of 4 cells within every target at every seed")


def test_links_and_flows_in_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    """--flows 2,1: three flows, the links' first; staggered, the TCP flow
    alone before the links start is not in the measure: it runs from `warm`
    to `seconds` after the links' start."""
    cell = Cell(2, 0.01, links=2, flows=1, seconds=4.0, warm=1.0)
    sane(run_cell(cell, 1), 3)
    asked: list[dict[str, Any]] = []
    share = ccshare.share

    def measured(kinds: list[str], **options: Any) -> Shared:
        asked.append(options)
        return share(kinds, **options)

    monkeypatch.setattr(ccshare, "share", measured)
    staggered = Cell(2, 0.01, tcp="reno", stagger=1.0, seconds=4.0, warm=1.0)
    out = run_cell(staggered, 0)
    sane(out, 2)
    (options,) = asked
    assert options["starts"] == [1.0, 0.0], "at seed 0 the link starts `stagger` after TCP"
    assert options["warm"] == 1.0 + staggered.warm
    assert options["seconds"] == 1.0 + staggered.seconds
    assert min(out.shares) > 0.0, "both flows ran through all of the measure"


def test_the_targets_as_documented() -> None:
    pair = Cell(20, 0.04)
    assert pair.band == pytest.approx((0.35, 0.65))
    assert failures(pair, Outcome(0, 1, [0.5, 0.48], 0)) == []
    assert failures(pair, Outcome(0, 1, [0.3, 0.68], 0)) == ["share"]
    assert failures(pair, Outcome(0, 1, [0.4, 0.4], 0)) == ["total"]
    assert margin(pair, Outcome(0, 1, [0.5, 0.5], 0)) == pytest.approx(0.1), "the total's"
    many = Cell(20, 0.04, links=2, flows=3)  # a fair part 0.2: each link 0.14-0.26
    assert failures(many, Outcome(0, 2, [0.2, 0.25, 0.1, 0.2, 0.25], 0)) == []
    assert failures(many, Outcome(0, 2, [0.1, 0.3, 0.2, 0.2, 0.2], 0)) == ["share"]
    crowd = Cell(20, 0.04, links=3, flows=1)  # each link in its band, TCP's part not
    assert failures(crowd, Outcome(0, 3, [0.32, 0.32, 0.32, 0.04], 0)) == ["tcp"]


def test_the_grid_is_a_compact_table_in_its_own_order(capsys: pytest.CaptureFixture[str]) -> None:
    """The grid's rows on made-up outcomes: every path beside each kind, in
    GRID's order, with the columns of a before/after table and the count."""
    cells = [Cell(m, r, b, tcp=k) for m, r, b in GRID for k in ("cubic", "bbr")]
    fair, unfair = [0.485, 0.485], [0.196, 0.784]  # every other cell misses at seed 0
    results = {
        c: [Outcome(s, 1, unfair if i % 2 and not s else fair, 0) for s in range(2)]
        for i, c in enumerate(cells)
    }
    rep = report(cells, results, grid=True)
    assert [(r["path"], r["buffer"], r["competitor"]) for r in rep.rows] == [
        (c.path(), c.buffer, c.tcp) for c in cells
    ]
    assert rep.columns == ["path", "buffer", "competitor", "purelink", "range", "total", "result"]
    assert [r["result"] for r in rep.rows[:2]] == ["pass", "miss 1/2: share"]
    assert rep.rows[1]["purelink"] == pytest.approx(0.2, abs=0.001)
    assert rep.rows[1]["range"] == "0.20-0.50"
    assert rep.notes[0] == f"10 of {2 * len(GRID)} cells within every target at every seed"
    rep.emit(as_json=False)
    lines = capsys.readouterr().out.splitlines()
    table = [line for line in lines if line.startswith("  20Mb 40ms")]
    assert len(table) == 8 and table[0].split()[:4] == ["20Mb", "40ms", "0.50", "cubic"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--flows", "0,1"],
        ["--tcp", "vegas"],
        ["--path", "mbit=2"],
        ["--path", "rate=2,rtt=1"],
        ["--seeds", "0"],
        ["--reference", "purelink"],
        ["--path", "mbit=2,rtt=0.01,reference=vegas"],
        ["--trace", "0.5", "--path", "mbit=2,rtt=0.01"],  # two cells: beside cubic and bbr
        ["--trace", "-1", "--path", "mbit=2,rtt=0.01,tcp=bbr"],
        ["--trace", "nan", "--path", "mbit=2,rtt=0.01,tcp=bbr"],
    ],
)
def test_bad_options_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*argv, *TINY])
    assert exc.value.code == 2


def test_a_reference_runs_linux_s_flow_in_the_link_s_place(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--reference bbr: the cell's first flow is the TCP model (no purelink
    link runs), named in the setup and the title, and its shares are the
    run of those two TCP flows at that seed, started as the link would be."""
    path = "mbit=5,rtt=0.02,buffer=2,tcp=cubic"
    assert main(["--path", path, "--reference", "bbr", "--seeds", "2", *TINY]) == 0
    rep = json.loads(capsys.readouterr().out)
    (row,) = rep["rows"]
    assert row["setup"] == "bbr-in-place" and "Linux's bbr" in rep["title"]
    cell = Cell(5, 0.02, 2, tcp="cubic", reference="bbr", seconds=4, warm=1)
    assert cell.kinds == ["bbr", "cubic"]
    out = run_cell(cell, 1)
    sane(out, 2)
    late = 0.02 * 1 / 4  # seed 1: a quarter of an RTT late, as a link would be
    tcp = share(["bbr", "cubic"], mbit=5, rtt=0.02, buffer=2, seconds=4, warm=1, seed=1,
                starts=[late, 0.0])  # fmt: skip
    assert out.shares == tcp.shares
    assert row["range"] == "{:.2f}-{:.2f}".format(*sorted(
        [run_cell(cell, 0).purelink, out.purelink]))  # fmt: skip


@pytest.mark.parametrize("argv", [["--grid"], ["--cells", "3"], ["--grid", "--flows", "2,1"]])
def test_a_reference_takes_every_link_s_place_on_every_kind_of_cell(argv: list[str]) -> None:
    """--reference cubic on the grid's and drawn cells, and with two links:
    every link's place is a CUBIC flow's, the TCP flows stay as asked."""
    cells = ccshare.cells_of(ccshare._parser().parse_args([*argv, "--reference", "cubic"]))
    assert cells and all(c.reference == "cubic" for c in cells)
    for c in cells:
        assert c.kinds == ["cubic"] * c.links + [c.tcp] * c.flows
        assert not any(k.startswith("purelink") for k in c.kinds)


def test_a_table_of_cells_with_and_without_a_reference_says_so() -> None:
    """--path cells with and without reference=: the title names neither
    alone, and a note says what "purelink" is in the reference's rows."""
    cells = [Cell(5, 0.02), Cell(5, 0.02, reference="bbr")]
    fair = {c: [Outcome(0, 1, [0.49, 0.49], 0)] for c in cells}
    out = report(cells, fair, grid=False)
    assert out.title.startswith("purelink links, or Linux's flows in their place")
    assert any("in-place" in note for note in out.notes)
    assert sorted(r["setup"] for r in out.rows) == ["-", "bbr-in-place"]
    alone = report(cells[:1], fair, grid=False)
    assert alone.title.startswith("purelink links beside") and len(alone.notes) == 2


def test_a_trace_is_the_run_it_samples(capsys: pytest.CaptureFixture[str]) -> None:
    """--trace: one cell at --seed, a sample every S s of virtual time from
    the start to the end, and the shares it ends with are those of the same
    cell's untraced run at that seed (watching takes no step)."""
    path = "mbit=5,rtt=0.02,buffer=2,tcp=cubic"
    argv = ["--path", path, "--seconds", "4", "--warm", "1", "--seed", "3", "--trace", "0.5"]
    assert main([*argv, "--json"]) == 0
    traced = json.loads(capsys.readouterr().out)
    plain = run_cell(Cell(5, 0.02, buffer=2.0, seconds=4.0, warm=1.0), 3)
    assert traced["shares"] == plain.shares
    samples = traced["samples"]
    assert [s["t"] for s in samples] == [i * 0.5 for i in range(9)]
    assert samples[0]["flows"] == [None, None]  # taken before the first flow starts
    assert all(f is not None for s in samples[1:] for f in s["flows"])
    link, tcp = samples[-1]["flows"]
    assert link["verdict"] in ("none", "model", "loss") and link["state"] == "probe_bw"
    assert link["btl_bw_KB_s"] > 0 and link["min_rtt_ms"] >= 20.0 and link["cwnd_KB"] > 0
    assert tcp["cwnd_KB"] > 0
    rates = [s["flows"][0]["KB_s"] for s in samples[1:]] + [
        s["flows"][1]["KB_s"] for s in samples[1:]
    ]
    assert all(0 <= r <= 5e6 / 8 / 1e3 * 1.05 for r in rates), rates
    assert all(s["queue_ms"] >= 0 for s in samples)
    assert main([*argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("5Mb 20ms, buffer 2 bdp, beside cubic")
    assert len(lines) == 2 + 9 + 1 and lines[-1].startswith("parts of what the flows got")


@pytest.mark.parametrize("every", [0.0, -0.1, float("nan"), float("inf")])
def test_a_sampler_needs_a_positive_interval(every: float) -> None:
    with pytest.raises(ValueError, match="every"):
        share(["purelink"], mbit=2, rtt=0.01, seconds=1, warm=0.5,
              observe=lambda sim, flows, t: None, every=every)  # fmt: skip
