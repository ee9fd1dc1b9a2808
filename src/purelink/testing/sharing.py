"""Flows that share one bottleneck in virtual time, and the share each took.

Why it exists: the competitor tests (tests/sim/test_competitors.py) and the
shared-path sweep (bench/ccshare.py) must measure the same way, and the
benchmarks cannot import tests/.  So the measure lives here, beside
`Simulation.arrived`, which it builds on:

a FakeNet path of `mbit` and `rtt` whose drop-tail queue holds `buffer`
bdps (at least 4 segments), flows started together (or each at its own
time), and each flow's **line share** from `warm` to `seconds`: the bytes
the bottleneck charged for the payload it got through, unique bytes only,
over rate x time.  The bottleneck charges every packet its wire size less
the 28 B of an IPv4 and a UDP header (competitors.py, `UDP_IP`): a link's
datagram its UDP payload, a TCP segment 1472 B of its 1500.  A TCP
competitor's payload is the unique bytes that reached its sink (1472
charged bytes per 1448); a purelink link's is what reached the listener
(`Simulation.arrived`), at its own datagram bytes per payload byte of first
transmissions.  So the shares of flows that fill the path sum to about 1
(a little over, at most a few hundredths, when bytes that were in the queue
at `warm` count in the window).

Each TCP flow gets a receive window that never binds on its path
(`window`), so that its congestion control alone sets what it has in flight.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..protocol.listener_core import CoreConfig
from .competitors import CHARGED, MSS, SEGMENT, WINDOW, Competitor
from .fakes import FakeNet, NetConfig
from .sim import SimLink, Simulation

__all__ = [
    "PURELINK",
    "RECORD",
    "Observer",
    "Shared",
    "add_flow",
    "capacity",
    "line_bytes",
    "path",
    "share",
    "window",
]

Observer = Callable[[Simulation, Sequence[SimLink | Competitor | None], float], None]
"""What `share(observe=...)` calls: the simulation, the flows in the order asked
(None for one not started yet) and the seconds since the run began."""

RECORD = 1000
"""Bytes of each record a purelink flow ships."""
PURELINK = "purelink"
"""A flow kind: a purelink link with its default controller; "purelink-newreno"
(any name congestion.create knows after the dash) for another."""


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


def capacity(mbit: float, rtt: float, buffer: float) -> float:
    """Bytes the path of `path` holds: its bdp, and its queue full."""
    up, _ = path(mbit, rtt, buffer)
    return up.rate * rtt + (up.queue or 0)


def window(mbit: float, rtt: float, buffer: float) -> int:
    """A TCP flow's receive window on the path, segments: the default cap, or
    4 x what the path holds where that is more (a flow's window overshoots
    what the path holds, up to about 2.9 x in BBR's startup), so that it
    never binds."""
    return max(WINDOW, math.ceil(4 * capacity(mbit, rtt, buffer) / CHARGED))


def line_bytes(sim: Simulation, flow: SimLink | Competitor) -> float:
    """The bytes the bottleneck charged for the unique payload a flow got through so far."""
    if isinstance(flow, Competitor):
        return flow.delivered * CHARGED / MSS
    stats = flow.sender.stats
    ratio = (stats.bytes - stats.retransmit_bytes) / stats.payload if stats.payload else 1.0
    return sim.arrived(flow) * ratio


def add_flow(
    sim: Simulation, kind: str, i: int, seed: int, count: int, *, rwnd: int = WINDOW
) -> SimLink | Competitor:
    """Flow i of `kind` (a competitor kind, or "purelink[-controller]"), now; a
    link ships `count` records of RECORD bytes, a TCP flow has a receive
    window of `rwnd` segments."""
    if not kind.startswith(PURELINK):
        return sim.add_competitor(kind, seed=seed * 16 + i, window=rwnd)
    anonymous = (1 << 63) | (seed << 8) | (i + 1)
    records = [bytes([i % 256]) * RECORD] * count
    congestion = kind.partition("-")[2]
    if not congestion:
        return sim.add_link("s", records, anonymous_id=anonymous)
    return sim.add_link("s", records, anonymous_id=anonymous, congestion=congestion)


class _Sampler:
    """Calls `observe(t)` (t: seconds since the run began) once every `every`
    seconds of virtual time, from inside the predicate that `Simulation.run`
    asks after each step: watching takes no step and moves no clock, so a
    run watched is the run unwatched."""

    def __init__(
        self, sim: Simulation, observe: Callable[[float], None] | None, every: float
    ) -> None:
        if observe is not None and not (every > 0 and math.isfinite(every)):
            raise ValueError(f"every: a positive number of seconds, not {every!r}")
        self.sim, self.observe, self.every = sim, observe, every
        self.begin = sim.clock.now
        self.count = 0  # samples taken: the next is due at begin + count x every

    def until(self, at: float) -> Callable[[], bool]:
        """A predicate for `Simulation.run`: the clock reached `at`; samples on the way."""
        clock = self.sim.clock

        def reached() -> bool:
            now = clock.now
            if self.observe is not None:
                while now >= (due := self.begin + self.count * self.every):
                    self.observe(due - self.begin)
                    self.count += 1
            return now >= at

        return reached


def _run_to(sim: Simulation, at: float, sampler: _Sampler) -> None:
    """Step `sim` until its clock reaches `at`, and move the clock there if no
    step did: with nothing on its way the simulation has no step to take."""
    sim.run(sampler.until(at), max_time=at - sim.clock.now + 1, max_steps=1 << 30)
    sim.clock.now = max(sim.clock.now, at)


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
    starts: Sequence[float] | None = None,
    max_reorder: int | None = None,
    observe: Observer | None = None,
    every: float = 0.1,
) -> Shared:
    """Run `kinds` through one path and measure from `warm` to `seconds` (both
    from the run's start).  Flow i starts at `starts[i]`, or i x `stagger`
    (once flows run, at the first event at or after that time: on a busy
    path a packet's time later at most); `max_reorder` is the listener's
    reorder buffer (None: CoreConfig's).  `observe(sim, flows, t)`, if
    given, is called every `every` s of virtual time (t from the run's
    start) with the flows in the order asked, None for one not started yet:
    a trace of the run that does not change it."""
    rate = mbit * 1e6 / 8
    core = CoreConfig() if max_reorder is None else CoreConfig(max_reorder=max_reorder)
    sim = Simulation(FakeNet(seed, *path(mbit, rtt, buffer, loss)), core_config=core)
    begin = sim.clock.now
    due = [i * stagger for i in range(len(kinds))] if starts is None else list(starts)
    count = int(rate * (seconds + 1) / RECORD)
    rwnd = window(mbit, rtt, buffer)
    added: dict[int, SimLink | Competitor] = {}

    def watched(t: float) -> None:
        assert observe is not None
        observe(sim, [added.get(i) for i in range(len(kinds))], t)

    sampler = _Sampler(sim, None if observe is None else watched, every)
    for i in sorted(range(len(kinds)), key=lambda i: due[i]):
        _run_to(sim, begin + due[i], sampler)
        added[i] = add_flow(sim, kinds[i], i, seed, count, rwnd=rwnd)
    flows = [added[i] for i in range(len(kinds))]
    sim.run(sampler.until(begin + warm), max_time=seconds + 1, max_steps=1 << 30)
    before = [line_bytes(sim, flow) for flow in flows]
    sim.run(sampler.until(begin + seconds), max_time=seconds + 1, max_steps=1 << 30)
    after = [line_bytes(sim, flow) for flow in flows]
    shares = [(b - a) / (rate * (seconds - warm)) for a, b in zip(before, after, strict=True)]
    return Shared(sim, flows, shares)
