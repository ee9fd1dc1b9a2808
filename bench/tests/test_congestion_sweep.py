"""Issue 14's targets at the corners of the path space, eight seeds each (slow).

Why it exists: tests/sim/test_congestion_sim.py holds the targets on a few
paths; a controller can be tuned to those.  These are the extremes of the
space `python -m bench.ccsweep` draws from (2-200 Mbit/s, 4-300 ms, queues
of 0.1-2 bdp, loss one way or both, jitter on top of the delay or both ways
around it, records from 0 B to 20 KB), run as the sweep runs them
(bench/ccsweep.py: same measure, same targets, exactly once at every seed).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

# bench/ is a package of the checkout, not of the installed distribution
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.ccsweep import Cell, failures, main, run_cell, start_gap, timing

CORNERS = [
    Cell(2, 0.3, queue=1.0),
    Cell(200, 0.004, queue=0.1),
    Cell(200, 0.05, queue=0.5, loss=0.01),
    Cell(10, 0.1, queue=2.0, jitter=0.25, symmetric=True, mix="61 B"),
    Cell(50, 0.02, queue=0.25, loss=0.05, both=False, mix="uniform 0-20 KB"),
    Cell(20, 0.15, queue=1.0, loss=0.01, jitter=0.25, mix="log-uniform 1 B-20 KB"),
    Cell(5, 0.01, queue=0.5, loss=0.02, jitter=0.25, symmetric=True),
]


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("cell", CORNERS, ids=[c.label().replace(" ", "-") for c in CORNERS])
def test_targets_hold_at_the_corners(cell: Cell, seed: int) -> None:
    out = run_cell(cell, seed)
    assert not failures(cell, out), (out.util, out.spurious, out.datagrams, out.exact)


def test_the_sweep_prints_one_row_per_path_worst_first(capsys: pytest.CaptureFixture[str]) -> None:
    """The program itself, on two tiny paths: one JSON object, a row per path
    with its worst seed, the worst against its target first."""
    paths = ["mbit=2,rtt=0.01,queue=1", "mbit=2,rtt=0.01,queue=1,loss=0.05,mix=61 B"]
    argv = [a for p in paths for a in ("--path", p)]
    assert main([*argv, "--seeds", "2", "--jobs", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = report["rows"]
    assert [r["path"] for r in rows] == ["2Mb 10ms q1 1000B", "2Mb 10ms q1 loss5.0% 61B"]
    assert all(r["missed"] == "0/2" and r["fails"] == "-" for r in rows), rows
    assert rows[0]["worst"] - rows[0]["target"] <= rows[1]["worst"] - rows[1]["target"]


def test_gap_starts_the_second_link_that_many_seconds_later(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--gap S: each two-link cell once per gap, the second link S seconds
    after the first and measured from the warm-up after it; a single link's
    cell once, whatever the gaps."""
    late = Cell(2, 0.01, links=2, gap=2.5)
    assert late.label() == "2Mb 10ms q1 1000B x2 gap2.5s"
    assert [start_gap(late, seed) for seed in range(4)] == [2.5] * 4
    assert [start_gap(Cell(2, 0.01, links=2), seed) for seed in range(4)] == [0, 0.5, 1, 1.5]
    assert start_gap(Cell(2, 0.01, gap=2.5), 1) == 0  # one link
    assert timing(late)[0] == timing(Cell(2, 0.01, links=2))[0] + 2.5
    paths = ["mbit=2,rtt=0.01,links=2", "mbit=2,rtt=0.01"]
    argv = [a for p in paths for a in ("--path", p)]
    assert main([*argv, "--gap", "0,2", "--seeds", "1", "--jobs", "1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert sorted(r["path"] for r in rows) == [
        "2Mb 10ms q1 1000B",
        "2Mb 10ms q1 1000B x2 gap0s",
        "2Mb 10ms q1 1000B x2 gap2s",
    ]
    shares = {r["path"]: [float(u) for u in r["worst_util"].split("+")] for r in rows}
    for path in ("2Mb 10ms q1 1000B x2 gap0s", "2Mb 10ms q1 1000B x2 gap2s"):
        assert sum(shares[path]) > 0.85 and min(shares[path]) > 0.3, shares
    with pytest.raises(SystemExit):
        main(["--gap", "-1"])
