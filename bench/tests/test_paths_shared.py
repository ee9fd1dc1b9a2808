"""`purelink bench paths --shared` end to end, reduced (slow, root).

Why it exists: the shared run is the check of how a purelink udp:// link
shares a bottleneck with Linux TCP; this runs a small one for real -- one
path, one competitor, a few seconds -- through the command line, and checks
what it prints: the table's shape, that both flows moved data, that the two
together used a sane part of the path, and that the programs in the
namespaces ran the same purelink as the benchmark.  purelink's share itself
is printed, not asserted: it is the congestion controller's figure, not the
benchmark's.

Skipped, with the reason, where the machine cannot run the emulator (not
root, no /dev/net/tun, no `ip`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]
# bench/ is a package of the checkout, not of the installed distribution
sys.path.insert(0, str(CHECKOUT))

from bench.paths.emu import available  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(available() is not None, reason=f"path emulator: {available()}"),
]

LINE_KBPS = 20e6 / 8 / 1000


def test_a_short_shared_run_reports_both_flows_and_a_full_line() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.paths",
            "--shared",
            "--path",
            "rate=20mbit,rtt=40ms,queue=2bdp,name=short",
            "--transports",
            "cubic",
            "--seconds",
            "6",
            "--warm",
            "2",
            "--json",
            "--quiet",
            "--no-plot",
        ],
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["benchmark"] == "paths --shared"
    assert report["parameters"]["seconds"] == 6 and report["parameters"]["links"] == 1
    [row] = report["rows"]
    assert row["path"] == "short" and row["competitor"] == "Linux TCP CUBIC"
    assert row["buffer"] == "200,000 B (2 BDP)" and row["bdp"] == pytest.approx(2)
    for key in ("purelink KB/s", "TCP KB/s", "purelink share", "pair / line"):
        assert len(row[key]["runs"]) == 1, key
    [run] = report["extra"]["runs"]
    assert run["ok"], run["errors"]
    assert run["window_s"] == pytest.approx([2, 6], abs=0.01)
    assert sorted(f["kind"] for f in run["flows"]) == ["tcp", "udp"]
    for flow in run["flows"]:  # each moved something real: 5 % of the line at least
        assert flow["kbps"] > 0.05 * LINE_KBPS, flow["kind"]
        assert len(flow["timeline_kbps"]) == 6
    [udp] = [f for f in run["flows"] if f["kind"] == "udp"]
    states = udp["sender"]["states"]  # its controller every 0.1 s of its 7 (6, 1 past the end)
    assert 60 <= len(states) <= 71
    assert [s["t"] for s in states] == sorted(s["t"] for s in states)
    assert {s["cross_traffic"] for s in states} <= {"none", "loss", "model"}
    assert all(s["btl_bw"] >= 0 and s["cwnd"] > 0 for s in states)
    pair = run["purelink_kbps"] + run["tcp_kbps"]
    assert pair == pytest.approx(row["pair / line"]["median"] * LINE_KBPS)
    # payload through a 20 Mbit/s line of IP packets: most of it, never more
    assert 0.6 < row["pair / line"]["median"] < 1.0
    assert run["share"] == pytest.approx(run["purelink_kbps"] / pair)
    assert not [n for n in report["notes"] if n.startswith("WARNING")], report["notes"]
    print(
        f"purelink {run['purelink_kbps']:,.0f} KB/s beside CUBIC {run['tcp_kbps']:,.0f} KB/s: "
        f"share {run['share']:.2f}, the pair {row['pair / line']['median']:.2f} of the line"
    )
