"""`purelink bench handshake`: how long a link takes to connect through loss, in virtual time.

Workload: for each path (the same loss in both directions, a round trip),
`--seeds` runs of one link and a listener core in `purelink.testing.Simulation`
(the real sender and listener code, on a fake clock, through a seeded
FakeNet): the link connects (HELLO, RETRY, HELLO with the cookie, ACCEPT,
each of them lost at the path's rate) and ships 50 records of 100 B.

Reported per path, over the seeds: the seconds from `connect` to OPEN
(mean, median, p90, max), the seconds until the 50 records are stored
(median, p90), and the HELLOs sent per connection.  Virtual time, so the
figures are the same on every machine and every run; no `--repeat`.

Run from the checkout root: `python -m bench.handshake [--seeds N] [--json]`,
or `purelink bench handshake`.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from typing import Any

from purelink.protocol.sender import SenderState
from purelink.testing import FakeNet, NetConfig, Simulation

from ._common import Report

__all__ = ["PATHS", "connect_once", "main", "measure"]

PATHS: tuple[tuple[float, float], ...] = (
    (0.30, 0.001),
    (0.30, 0.05),
    (0.10, 0.1),
    (0.01, 0.02),
    (0.0, 0.3),
)
"""(loss each way, round trip in seconds) of the paths measured by default."""

RECORDS = 50


def connect_once(seed: int, loss: float, rtt: float) -> dict[str, float]:
    """One link through one seeded path: seconds to OPEN and to all stored, HELLOs."""
    net = FakeNet(seed, NetConfig(loss=loss, delay=rtt / 2))
    sim = Simulation(net)
    start = sim.clock.now
    link = sim.add_link("handshake", [b"x" * 100 for _ in range(RECORDS)])
    if not sim.run(lambda: link.sender.state == SenderState.OPEN, max_time=120):
        raise RuntimeError(f"seed {seed}: no connection in 120 s of virtual time")
    opened = sim.clock.now - start
    hellos = net.up_path.stats.packets  # everything the link sent before OPEN
    if not sim.run(sim.all_done, max_time=120):
        raise RuntimeError(f"seed {seed}: records not stored in 120 s of virtual time")
    return {"open": opened, "stored": sim.clock.now - start, "hellos": hellos}


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))]


def measure(paths: Sequence[tuple[float, float]], seeds: int) -> Report:
    """One row per (loss, rtt) path: the figures over `seeds` runs."""
    report = Report(
        "handshake",
        "seconds from connect to OPEN and to stored through loss both ways (virtual time)",
        parameters={"seeds": seeds, "records": RECORDS, "record_size": 100},
    )
    for loss, rtt in paths:
        runs = [connect_once(seed, loss, rtt) for seed in range(seeds)]
        opened = [r["open"] for r in runs]
        stored = [r["stored"] for r in runs]
        row: dict[str, Any] = {
            "loss": f"{loss * 100:g}%",
            "rtt_ms": round(rtt * 1e3, 1),
            "open_mean_s": round(statistics.fmean(opened), 3),
            "open_median_s": round(_quantile(opened, 0.5), 3),
            "open_p90_s": round(_quantile(opened, 0.9), 3),
            "open_max_s": round(max(opened), 3),
            "stored_median_s": round(_quantile(stored, 0.5), 3),
            "stored_p90_s": round(_quantile(stored, 0.9), 3),
            "hellos": round(statistics.fmean(r["hellos"] for r in runs), 2),
        }
        report.rows.append(row)
    return report


def _path(text: str) -> tuple[float, float]:
    """LOSS/RTT, e.g. 30%/50ms or 0.3/0.05."""
    try:
        loss_text, rtt_text = text.split("/")
        loss = float(loss_text.rstrip("%")) / (100 if loss_text.endswith("%") else 1)
        rtt = float(rtt_text.removesuffix("ms")) / (1e3 if rtt_text.endswith("ms") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: want LOSS/RTT, e.g. 30%/50ms") from None
    if not 0 <= loss < 1 or rtt <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: loss in [0, 1), rtt > 0")
    return loss, rtt


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="purelink bench handshake", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--seeds", type=int, default=300, metavar="N", help="runs per path")
    parser.add_argument(
        "--path",
        type=_path,
        action="append",
        metavar="LOSS/RTT",
        help="a path of its own, e.g. 30%%/50ms (repeatable; default: five paths)",
    )
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    measure(args.path or PATHS, args.seeds).emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
