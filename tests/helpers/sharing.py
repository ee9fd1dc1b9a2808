"""Flows that share one bottleneck in virtual time, and the share each took.

Why it exists: the competitor tests (sim/test_competitors.py) and the table
of shares quoted when purelink's controller changes measure the same way:
a FakeNet path of `mbit` and `rtt` whose drop-tail queue holds `buffer`
bdps, flows started together (or `stagger` s apart), and each flow's
**line share** from `warm` to the end: the wire bytes that carried the
payload it got through, unique bytes only, over rate x time.  A TCP
competitor's payload is the unique bytes that reached its sink (1500 wire
bytes per 1448); a purelink link's is what reached the listener
(`Simulation.arrived`), at its own wire bytes per payload byte of first
transmissions.  So the shares of flows that fill the path sum to about 1.

    python tests/helpers/sharing.py     # the table: cubic alone and in pairs, a purelink
                                        # link beside cubic and beside bbr, bbr beside cubic
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from purelink.testing import MSS, SEGMENT, Competitor, FakeNet, NetConfig, SimLink, Simulation

RECORD = 1000
PURELINK = "purelink"
"""A flow kind: a purelink link with its default controller (BBR); "purelink-newreno" too."""


@dataclass
class Shared:
    """One run: its simulation, its flows in the order asked, and their shares."""

    sim: Simulation
    flows: list[SimLink | Competitor]
    shares: list[float]
    """Per flow: its line share from the warm-up to the end."""

    @property
    def total(self) -> float:
        """The utilisation of the path."""
        return sum(self.shares)

    def share(self, i: int) -> float:
        """Flow i's part of what the flows got together."""
        return self.shares[i] / self.total if self.total else 0.0


def path(mbit: float, rtt: float, buffer: float, loss: float = 0.0) -> tuple[NetConfig, NetConfig]:
    """Up (with the bottleneck) and down directions of a path; `buffer` in bdps."""
    rate = mbit * 1e6 / 8
    queue = max(int(rate * rtt * buffer), 4 * SEGMENT)
    up = NetConfig(delay=rtt / 2, rate=rate, queue=queue, loss=loss)
    return up, NetConfig(delay=rtt / 2, loss=loss)


def wire_bytes(sim: Simulation, flow: SimLink | Competitor) -> float:
    """The wire bytes of the unique payload a flow got through so far."""
    if isinstance(flow, Competitor):
        return flow.delivered * SEGMENT / MSS
    stats = flow.sender.stats
    ratio = (stats.bytes - stats.retransmit_bytes) / stats.payload if stats.payload else 1.0
    return sim.arrived(flow) * ratio


def add(sim: Simulation, kind: str, i: int, seed: int, count: int) -> SimLink | Competitor:
    """Flow i of `kind` (a competitor kind, or "purelink[-controller]")."""
    if kind.startswith(PURELINK):
        congestion = kind.partition("-")[2] or "bbr"
        anonymous = (1 << 63) | (seed << 8) | (i + 1)
        records = [bytes([i]) * RECORD] * count
        return sim.add_link("s", records, anonymous_id=anonymous, congestion=congestion)
    return sim.add_competitor(kind, seed=seed * 16 + i)


def share(
    kinds: Sequence[str],
    *,
    mbit: float = 20,
    rtt: float = 0.04,
    buffer: float = 1.0,
    loss: float = 0.0,
    seconds: float = 10.0,
    warm: float = 3.0,
    seed: int = 1,
    stagger: float = 0.0,
) -> Shared:
    """Run `kinds` through one path; each starts `stagger` s after the one before."""
    rate = mbit * 1e6 / 8
    sim = Simulation(FakeNet(seed, *path(mbit, rtt, buffer, loss)))
    start = sim.clock.now
    count = int(rate * (seconds + 1) / RECORD)
    flows = []
    for i, kind in enumerate(kinds):
        if i and stagger:
            sim.run(lambda i=i: sim.clock.now >= start + i * stagger, max_time=stagger + 1)  # type: ignore[misc]
        flows.append(add(sim, kind, i, seed, count))
    sim.run(lambda: sim.clock.now >= start + warm, max_time=seconds + 1, max_steps=1 << 30)
    before = [wire_bytes(sim, flow) for flow in flows]
    sim.run(lambda: sim.clock.now >= start + seconds, max_time=seconds + 1, max_steps=1 << 30)
    after = [wire_bytes(sim, flow) for flow in flows]
    shares = [(b - a) / (rate * (seconds - warm)) for a, b in zip(before, after, strict=True)]
    return Shared(sim, flows, shares)


TABLE_RUNS = [
    ("cubic alone", ["cubic"]),
    ("cubic + cubic", ["cubic", "cubic"]),
    ("purelink-bbr + cubic", [PURELINK, "cubic"]),
    ("purelink-bbr + bbr", [PURELINK, "bbr"]),
    ("bbr + cubic", ["bbr", "cubic"]),
]
TABLE_BUFFERS = (0.5, 1.0, 2.5, 10.0)
TABLE_COLUMNS = ("buffer", "first", "second", "pair", "part", "real s")


def table(mbit: float = 20, rtt: float = 0.04, seconds: float = 40.0, warm: float = 10.0) -> None:
    """Print the line shares of TABLE_RUNS at each of TABLE_BUFFERS, the first
    flow's part of the pair, and the real time each run took."""
    print(f"{mbit:g} Mbit/s, {rtt * 1e3:g} ms: line shares from {warm:g} s to {seconds:g} s")
    print(f"{'flows':22}" + "".join(f"{h:>8}" for h in TABLE_COLUMNS))
    for name, kinds in TABLE_RUNS:
        for buffer in TABLE_BUFFERS:
            began = time.perf_counter()
            run = share(kinds, mbit=mbit, rtt=rtt, buffer=buffer, seconds=seconds, warm=warm)
            took = time.perf_counter() - began
            second = f"{run.shares[1]:8.2f}" if len(kinds) > 1 else " " * 8
            print(
                f"{name:22}{buffer:8g}{run.shares[0]:8.2f}{second}{run.total:8.2f}"
                f"{run.share(0):8.2f}{took:8.1f}"
            )


if __name__ == "__main__":
    table()
