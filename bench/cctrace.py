"""`python -m bench.ccshare --trace S`: one cell's run in virtual time, sampled every S seconds.

Why it exists: a share says who won, not why.  Whether a link gave a
verdict on what shares its path, when, and what its model and window did
around it are what a change to the controller (protocol/congestion/bbr.py,
crosstraffic.py) is judged by, and the docs quote such figures; this makes
them a command of the project, the same on every machine.

Each sample, at t seconds after the run's start (the TCP flows' start when
staggered): the bottleneck queue's delay; for each purelink link its
controller's verdict and state (`CongestionStatistics`), btl_bw, min RTT,
cwnd and the bytes in flight; for each TCP flow its cwnd; and for every
flow the payload that arrived since the previous sample, as a rate.  The
samples are taken from inside the simulation's step predicate
(`purelink.testing.sharing.share(observe=...)`), so the run traced is the
run the table measures: same seed, same shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from purelink.testing.competitors import MSS, Competitor
from purelink.testing.sharing import PURELINK
from purelink.testing.sim import SimLink, Simulation

__all__ = ["Trace", "Watch", "format_trace"]


@dataclass
class Trace:
    """A traced run: its samples and the shares it ended with."""

    kinds: list[str]
    every: float
    samples: list[dict[str, Any]] = field(default_factory=list)
    shares: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"kinds": self.kinds, "every": self.every, "samples": self.samples,
                "shares": self.shares}  # fmt: skip


class Watch:
    """The observer `share` calls (`observe=`): one sample of the run into
    `trace` per call, each flow's rate since the sample before."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.last: dict[int, tuple[float, float]] = {}  # flow -> (t, payload bytes)
        self.previous = 0.0  # the last sample's t: a flow first seen started after it

    def __call__(
        self, sim: Simulation, flows: Sequence[SimLink | Competitor | None], t: float
    ) -> None:
        queue = max(sim.net.up_path.busy_until - sim.clock.now, 0.0)
        sample: dict[str, Any] = {"t": round(t, 3), "queue_ms": round(queue * 1e3, 2), "flows": []}
        for i, flow in enumerate(flows):
            if flow is None:
                sample["flows"].append(None)
                continue
            got = float(flow.delivered if isinstance(flow, Competitor) else sim.arrived(flow))
            then, before = self.last.get(i, (self.previous, 0.0))
            self.last[i] = (t, got)
            rate = (got - before) / (t - then) if t > then else 0.0
            row: dict[str, Any] = {"KB_s": round(rate / 1e3, 1)}
            if isinstance(flow, Competitor):
                row["cwnd_KB"] = round(flow.cwnd * MSS / 1e3, 1)
            else:
                st = flow.sender.cc.statistics()
                row.update(
                    verdict=st.cross_traffic or "-",
                    state=st.state,
                    btl_bw_KB_s=round((st.btl_bw or 0.0) / 1e3, 1),
                    min_rtt_ms=round((st.min_rtt or 0.0) * 1e3, 2),
                    cwnd_KB=round(st.cwnd / 1e3, 1),
                    flight_KB=round(flow.sender.in_flight / 1e3, 1),
                )
            sample["flows"].append(row)
        self.previous = t
        self.trace.samples.append(sample)


def format_trace(trace: Trace) -> list[str]:
    """The samples as a table: a row per sample, a column group per flow."""
    heads = ["t s", "queue ms"]
    for i, kind in enumerate(trace.kinds):
        name = f"{i}:{kind}"
        if kind.startswith(PURELINK):
            heads += [
                f"{name} KB/s",
                "verdict",
                "state",
                "btl_bw KB/s",
                "min_rtt",
                "cwnd KB",
                "flight KB",
            ]
        else:
            heads += [f"{name} KB/s", "cwnd KB"]
    rows = [heads]
    for sample in trace.samples:
        row = [f"{sample['t']:.2f}", f"{sample['queue_ms']:.1f}"]
        for kind, flow in zip(trace.kinds, sample["flows"], strict=True):
            width = 7 if kind.startswith(PURELINK) else 2
            if flow is None:
                row += ["-"] * width
            elif "verdict" in flow:
                row += [f"{flow['KB_s']:.0f}", flow["verdict"], flow["state"],
                        f"{flow['btl_bw_KB_s']:.0f}", f"{flow['min_rtt_ms']:.1f}",
                        f"{flow['cwnd_KB']:.1f}", f"{flow['flight_KB']:.1f}"]  # fmt: skip
            else:
                row += [f"{flow['KB_s']:.0f}", f"{flow['cwnd_KB']:.1f}"]
        rows.append(row)
    widths = [max(len(r[c]) for r in rows) for c in range(len(heads))]
    lines = ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    total = sum(trace.shares)
    parts = ", ".join(f"{s / total:.2f}" if total else "0" for s in trace.shares)
    lines.append(
        f"parts of what the flows got from the warm-up on: {parts}; of the line {total:.2f}"
    )
    return lines
