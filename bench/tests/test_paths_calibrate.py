"""`python -m bench.paths.calibrate`: the `--shared` cells in virtual time.

Why it exists: the calibration is how the simulation's TCP models are
checked against the emulator's Linux TCP, so its own arithmetic must hold:
a cell in virtual time is the same run for the same seed, purelink's share
is a share, and a saved `--shared --json` run is read back cell by cell and
printed beside the simulation's figure.  Short cells (a few seconds of
virtual time), no emulator, no root.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's bench/

from bench.paths.calibrate import main, read_runs, simulate
from bench.paths.shared import SHARED_PATHS, Setup

SHORT = Setup(seconds=3.0, warm=1.0, congestion="cubic")
PATH = "20mbit-40ms-1bdp"


def test_a_cell_in_virtual_time_is_a_share_and_the_same_run_per_seed() -> None:
    share = simulate(SHARED_PATHS[PATH], "cubic", SHORT, seed=1)
    assert 0.0 < share < 1.0
    assert simulate(SHARED_PATHS[PATH], "cubic", SHORT, seed=1) == share


def test_the_links_alone_take_everything() -> None:
    alone = Setup(seconds=2.0, warm=1.0, tcp_flows=0)
    assert simulate(SHARED_PATHS[PATH], "bbr", alone, seed=1) == 1.0


def saved_run(path: Path) -> Path:
    """A `bench.paths --shared --json` file of one path, two cells, two runs of one."""
    runs = [
        {"path": PATH, "competitor": "cubic", "ok": True, "share": 0.7},
        {"path": PATH, "competitor": "cubic", "ok": True, "share": 0.8},
        {"path": PATH, "competitor": "bbr", "ok": True, "share": 0.3},
        {"path": PATH, "competitor": "bbr", "ok": False, "share": 0.0},
    ]
    parameters = {"seconds": 3.0, "warm": 1.0, "stagger": 0.0, "links": 1, "tcp_flows": 1,
                  "record_size": 1000, "congestion": "cubic"}  # fmt: skip
    environment = {"date": "then", "machine": {"loadavg": [0.5, 0.5, 0.5]}}
    path.write_text(json.dumps({"parameters": parameters, "environment": environment,
                                "notes": ["took 60 s"], "extra": {"runs": runs}}))  # fmt: skip
    return path


def test_a_saved_run_is_read_back_cell_by_cell(tmp_path: Path) -> None:
    shares, paths, setup, notes = read_runs([saved_run(tmp_path / "run.json")])
    assert shares == {(PATH, "cubic"): [0.7, 0.8], (PATH, "bbr"): [0.3]}, "failed runs left out"
    assert paths == {PATH: SHARED_PATHS[PATH]} and setup == SHORT
    assert "load [0.5, 0.5, 0.5]" in notes[0]


def test_the_table_puts_both_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = saved_run(tmp_path / "run.json")
    assert main(["--emulator", str(file), "--seeds", "1", "--transports", "cubic", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (cell,) = out["extra"]["cells"]
    assert cell["path"] == PATH and cell["competitor"] == "cubic"
    assert cell["emulator"]["median"] == pytest.approx(0.75)
    assert 0.0 < cell["simulation"]["median"] < 1.0
    assert any("within 0.1" in note for note in out["notes"])
