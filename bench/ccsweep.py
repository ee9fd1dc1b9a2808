"""`python -m bench.ccsweep`: BBR in virtual time over many paths and seeds, worst cells first.

Why it exists: tests/sim/test_congestion_sim.py asserts issue 14's targets on a
handful of paths; a congestion controller tuned on those can still miss
them on a path nobody looked at.  This program draws paths from the whole
space (rate 2-200 Mbit/s, RTT 4-300 ms, a drop-tail queue of 0.1-2 bdp,
random loss 0-5 % one way or both, jitter 0-RTT/4, record sizes from 0 B to
20 KB), runs each at several seeds through FakeNet in virtual time (the
same run on every machine), and prints every cell's worst seed against its
target, the worst first:

    clean                    utilisation >= 0.90
    random loss (any)        utilisation >= 0.75
    jitter only              utilisation >= 0.85, spurious retransmits < 3 % of datagrams
    two links, one-bdp queue the smaller share >= 0.75 x the larger

(the second link starts 0, 0.5, 1 or 1.5 s after the first by the seed, or
--gap seconds after it; measured after a warm-up of 10 s or 40 RTTs, plus
the gap), and at every seed, exactly once: what reached the store is each
link's records 1..k, once each, in order, byte for byte.

How a link shares a path with competing TCP flows is bench/ccshare.py's
question: it runs this sweep (its draws, seeds and worker processes) with
the simulation's TCP models beside the links.

Utilisation is measured as tests/sim/test_congestion_sim.py measures it: the
first transmissions of records that reached the listener after the warm-up
(8 RTTs, at least 1 s), over rate x time.

    python -m bench.ccsweep [--cells 24] [--seeds 8] [--jobs 2] [--json]
    python -m bench.ccsweep --path mbit=10,rtt=0.1,queue=1,loss=0.01,jitter=0.25 --seeds 8
    python -m bench.ccsweep --share --cells 6 --seeds 4
    python -m bench.ccsweep --share --gap 1,2,3 --cells 12 --seeds 2
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from purelink.protocol.listener_core import CoreConfig
from purelink.testing import FakeNet, NetConfig, SimLink, Simulation

from ._common import Report

__all__ = [
    "Cell",
    "Outcome",
    "draw_cells",
    "draw_path",
    "failures",
    "log_uniform",
    "main",
    "parse_fields",
    "run_cell",
    "run_seeds",
    "start_gap",
    "timing",
]

DATAGRAM = 1400
MIXES = ("1000 B", "61 B", "uniform 0-20 KB", "log-uniform 1 B-20 KB")


@dataclass(frozen=True)
class Cell:
    """One path, and how the links use it."""

    mbit: float
    """Bottleneck rate, Mbit/s (the data direction; answers are not rate-limited)."""
    rtt: float
    """Round trip without a queue, seconds."""
    queue: float = 1.0
    """Drop-tail queue, in bdps (at least 4 datagrams)."""
    loss: float = 0.0
    """Random loss, each way it applies."""
    both: bool = True
    """Loss (and jitter) in both directions; False: the data direction only."""
    jitter: float = 0.0
    """Jitter up to this share of the RTT, each way it applies (at most 0.25)."""
    symmetric: bool = False
    """Jitter both ways around the delay (FakeNet's `symmetric`); False: on top of it."""
    mix: str = "1000 B"
    """Record sizes (MIXES)."""
    links: int = 1
    """Links through the path (2: the sharing target; the second starts later)."""
    reorder: int = 0
    """The listener's reorder buffer, bytes (0: at least 4 bdp; see run_cell)."""
    gap: float = -1.0
    """Seconds from one link's start to the next's (below 0: 0, 0.5, 1 or 1.5 s
    by the seed, as tests/sim/test_congestion_sim.py's pair cases)."""

    @property
    def kind(self) -> str:
        if self.links > 1:
            return "share"
        if self.loss:
            return "loss"
        return "jitter" if self.jitter else "clean"

    @property
    def target(self) -> float:
        return {"clean": 0.90, "loss": 0.75, "jitter": 0.85, "share": 0.75}[self.kind]

    def label(self) -> str:
        parts = [f"{self.mbit:g}Mb", f"{self.rtt * 1e3:g}ms", f"q{self.queue:g}"]
        if self.loss:
            parts.append(f"loss{self.loss:.1%}" + ("" if self.both else "-up"))
        if self.jitter:
            parts.append(f"jit{self.jitter:g}rtt" + ("+-" if self.symmetric else "")
                         + ("" if self.both or self.loss else "-up"))  # fmt: skip
        parts.append(self.mix.replace(" ", ""))
        if self.links > 1:
            parts.append(f"x{self.links}")
        if self.links > 1 and self.gap >= 0:
            parts.append(f"gap{self.gap:g}s")
        return " ".join(parts)


@dataclass
class Outcome:
    """One cell at one seed."""

    seed: int
    util: list[float]
    datagrams: int
    spurious: int
    retransmits: int
    exact: bool
    state: str

    @property
    def score(self) -> float:
        """The figure held against the cell's target."""
        if len(self.util) > 1:
            return min(self.util) / max(*self.util, 1e-9)
        return self.util[0]


def records(mix: str, total: int, rng: random.Random) -> list[bytes]:
    """Records of one mix, about `total` payload bytes, each starting with
    its index (so that those of 4 bytes or more are distinct)."""
    size = {
        "1000 B": lambda: 1000,
        "61 B": lambda: 61,
        "uniform 0-20 KB": lambda: rng.randrange(0, 20_001),
        "log-uniform 1 B-20 KB": lambda: int(math.exp(rng.uniform(0, math.log(20_000)))),
    }[mix]
    out: list[bytes] = []
    body = bytes(range(256)) * 80
    made = 0
    while made < total:
        n = size()
        head = len(out).to_bytes(4, "big")
        out.append((head + body[: max(n - 4, 0)])[:n])
        made += n
    return out


def _exactly_once(sim: Simulation, links: list[SimLink], sent: list[list[bytes]]) -> bool:
    """Each link's stored records are its records 1..k, once each, in order, byte for byte."""
    seen: dict[int, list[tuple[int, bytes]]] = {}
    for _, pid, seq, payload in sim.store.records("s"):
        seen.setdefault(pid, []).append((seq, payload))
    for link, recs in zip(links, sent, strict=True):
        got = seen.pop(link.sender.producer_id, [])
        if [s for s, _ in got] != list(range(1, len(got) + 1)):
            return False
        if any(recs[s - 1] != p for s, p in got):
            return False
    return not seen


def timing(cell: Cell) -> tuple[float, float]:
    """(warm-up, measured) seconds: long enough for start-up and some probe
    cycles (of the last link: a gap between the links' starts adds to it)."""
    if cell.links > 1:
        gaps = (cell.links - 1) * max(cell.gap, 0.0)
        return gaps + max(10.0, 40 * cell.rtt), max(18.0, 120 * cell.rtt)
    return max(1.0, 8 * cell.rtt), max(2.0, 12 * cell.rtt)


def start_gap(cell: Cell, seed: int) -> float:
    """Seconds from one link's start to the next's: `cell.gap`, or by the seed."""
    if cell.links < 2:
        return 0.0
    return cell.gap if cell.gap >= 0 else 1.5 * (seed % 4) / 3


def run_cell(cell: Cell, seed: int) -> Outcome:
    """Ship through `cell`'s path at `seed`; utilisation per link after the warm-up."""
    rate = cell.mbit * 1e6 / 8
    bdp = rate * cell.rtt
    queue = max(int(cell.queue * bdp), 4 * DATAGRAM)
    jitter = cell.jitter * cell.rtt
    sym = cell.symmetric
    up = NetConfig(
        loss=cell.loss, delay=cell.rtt / 2, jitter=jitter, symmetric=sym, rate=rate, queue=queue
    )
    down = NetConfig(
        loss=cell.loss if cell.both else 0.0,
        delay=cell.rtt / 2,
        jitter=jitter if cell.both else 0.0,
        symmetric=sym,
    )
    net = FakeNet(seed, up, down)
    # the listener's reorder buffer (its flow-control window) at least 4 bdp, so
    # that what is measured is the congestion control (4 MiB, the default,
    # caps a flow near 4 MiB / (2 x RTT): the bytes held behind a loss's repair)
    core = CoreConfig(max_reorder=cell.reorder or max(4 << 20, int(4 * bdp)))
    sim = Simulation(net, sync_interval=0.002, core_config=core)
    warm, measured = timing(cell)
    stagger = start_gap(cell, seed)
    rng = random.Random(seed)
    total = int(rate * (warm + measured + stagger + 1) / cell.links) + 1
    start = sim.clock.now
    links: list[SimLink] = []
    sent: list[list[bytes]] = []
    for i in range(cell.links):
        if i and stagger:
            due = sim.clock.now + stagger
            sim.run(lambda due=due: sim.clock.now >= due, max_time=stagger + 1)  # type: ignore[misc]
        recs = records(cell.mix, total, rng)
        sent.append(recs)
        links.append(sim.add_link("s", recs, anonymous_id=(1 << 63) | (seed << 8) | (i + 1)))
    sim.run(lambda: sim.clock.now >= start + warm, max_time=warm + stagger + 1)
    before = [sim.arrived(link) for link in links]
    t0 = sim.clock.now
    sim.run(lambda: sim.clock.now >= t0 + measured, max_time=measured + 1)
    util = []
    for link, b0 in zip(links, before, strict=True):
        s = link.sender
        first = (s.stats.bytes - s.stats.retransmit_bytes) / max(s.payload_bytes, 1)
        util.append((sim.arrived(link) - b0) * first / (rate * measured))
    s = links[0].sender
    return Outcome(
        seed=seed,
        util=util,
        datagrams=sum(link.sender.stats.datagrams for link in links),
        spurious=sum(link.sender.stats.spurious for link in links),
        retransmits=sum(link.sender.stats.retransmits for link in links),
        exact=_exactly_once(sim, links, sent),
        state=s.cc.state,
    )


def failures(cell: Cell, out: Outcome) -> list[str]:
    """What one run misses of its targets (empty: none)."""
    bad = []
    if out.score < cell.target:
        bad.append("share" if cell.kind == "share" else "utilisation")
    if cell.jitter and out.spurious >= 0.03 * out.datagrams:
        bad.append("spurious")
    if not out.exact:
        bad.append("exactly-once")
    return bad


def log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    """A draw between `lo` and `hi` whose logarithm is uniform (as many paths
    at 2-20 Mbit/s as at 20-200)."""
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def draw_path(
    rng: random.Random, rtts: tuple[float, float], queues: tuple[float, float]
) -> tuple[float, float, float]:
    """Rate (2-200 Mbit/s), RTT (s) and queue (bdps), each log-uniform between
    its bounds and rounded as the rows print them."""
    mbit = round(log_uniform(rng, 2, 200), 1)
    rtt = round(log_uniform(rng, *rtts), 3)
    return mbit, rtt, round(log_uniform(rng, *queues), 2)


def draw_cells(count: int, seed: int, share: bool = False) -> list[Cell]:
    """`count` paths drawn from the whole space (seeded); a quarter of each
    kind (clean, loss, jitter, both) for single links."""
    rng = random.Random(seed)
    cells = []
    for i in range(count):
        mbit, rtt, queue = draw_path(rng, (0.004, 0.3), (0.1, 2.0))
        kind = i % 4
        loss = round(rng.choice((0.001, 0.005, 0.01, 0.02, 0.05)), 3) if kind in (1, 3) else 0.0
        jitter = round(rng.uniform(0.02, 0.25), 3) if kind in (2, 3) else 0.0
        mix = rng.choice(MIXES if mbit <= 20 else MIXES[:1] + MIXES[2:])
        both, sym = rng.random() < 0.7, rng.random() < 0.5
        cell = Cell(mbit, rtt, queue, loss, both, jitter, sym, mix)
        if share:
            cell = replace(cell, queue=1.0, loss=0.0, jitter=0.0, links=2, mix="1000 B",
                           mbit=min(cell.mbit, 50.0), rtt=max(cell.rtt, 0.01))  # fmt: skip
        cells.append(cell)
    return cells


def parse_fields(text: str, cls: type[Any]) -> dict[str, Any]:
    """The fields of dataclass `cls` that `name=value,...` names, each read as
    its annotation says (bool: anything but 0, false, no is true; str: as is)."""
    kinds = {f.name: f.type for f in dataclasses.fields(cls)}
    fields: dict[str, Any] = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        key = key.strip()
        kind = kinds.get(key)
        if kind is None:
            raise ValueError(f"{key!r} is not one of {', '.join(kinds)}")
        if kind == "bool":
            fields[key] = value.strip() not in ("0", "false", "no")
        elif kind in ("int", "float"):
            fields[key] = int(value) if kind == "int" else float(value)
        else:
            fields[key] = value
    return fields


def parse_path(text: str) -> Cell:
    """A Cell from `name=value,...` of its fields, e.g.
    `mbit=10,rtt=0.1,queue=1,loss=0.01,both=0,jitter=0.25,symmetric=1,mix=61 B`."""
    return Cell(**parse_fields(text, Cell))


C = TypeVar("C")
R = TypeVar("R")


def _call(job: tuple[Callable[[C, int], R], C, int]) -> tuple[C, R]:
    run, cell, seed = job
    return cell, run(cell, seed)


def run_seeds(
    run: Callable[[C, int], R], cells: Sequence[C], seeds: int, jobs: int
) -> dict[C, list[R]]:
    """`run(cell, seed)` for every cell at seeds 0 .. seeds-1, in `jobs`
    processes (1: in this one; `run` is then free to be any callable, else
    a module's function); each cell's outcomes in seed order."""
    work = [(run, cell, seed) for cell in cells for seed in range(seeds)]
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(_call, work))
    else:  # in this process
        results = list(map(_call, work))
    out: dict[C, list[R]] = {cell: [] for cell in cells}
    for cell, outcome in results:
        out[cell].append(outcome)
    return out


def _gaps(text: str) -> list[float]:
    gaps = [float(g) for g in text.split(",")]
    if any(not 0 <= g <= 60 for g in gaps):
        raise argparse.ArgumentTypeError("each gap is 0 to 60 seconds")
    return gaps


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ccsweep", description=__doc__)
    parser.add_argument("--cells", type=int, default=24, help="paths drawn (default 24)")
    parser.add_argument("--seeds", type=int, default=8, help="seeds per path (default 8)")
    parser.add_argument("--draw", type=int, default=0, help="seed of the paths' draw")
    parser.add_argument("--path", action="append", default=[], help="a path of its own (repeat)")
    parser.add_argument("--share", action="store_true", help="two links on one-bdp buffers")
    gap = "seconds between the links' starts, a cell each (default: 0-1.5 by the seed)"
    parser.add_argument("--gap", type=_gaps, default=[], metavar="S[,S]", help=gap)
    parser.add_argument("--jobs", type=int, default=2, help="processes (default 2; 1: this one)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    cells = [parse_path(p) for p in args.path] or draw_cells(args.cells, args.draw, args.share)
    if args.gap:
        cells = [replace(c, gap=g) if c.links > 1 else c for c in cells for g in args.gap]
        cells = list(dict.fromkeys(cells))  # a single link's cell once
    results = run_seeds(run_cell, cells, args.seeds, args.jobs)
    report = Report(
        "ccsweep",
        "BBR in virtual time: each path's worst seed against its target",
        {k: v for k, v in vars(args).items() if k != "json"},
    )
    rows = []
    for cell in cells:
        runs = results[cell]
        worst = min(runs, key=lambda o: o.score)
        bad = sorted({b for o in runs for b in failures(cell, o)})
        rows.append({
            "path": cell.label(),
            "target": cell.target,
            "worst": round(worst.score, 3),
            "median": round(sorted(o.score for o in runs)[len(runs) // 2], 3),
            "worst_seed": worst.seed,
            "worst_util": "+".join(f"{u:.2f}" for u in worst.util),
            "missed": f"{sum(bool(failures(cell, o)) for o in runs)}/{len(runs)}",
            "spurious_max": f"{max(o.spurious / max(o.datagrams, 1) for o in runs):.2%}",
            "fails": ",".join(bad) or "-",
        })  # fmt: skip
    rows.sort(key=lambda r: r["worst"] - r["target"])
    report.rows.extend(rows)
    missed = sum(r["fails"] != "-" for r in rows)
    report.notes.append(f"{missed} of {len(rows)} paths miss a target at some seed")
    report.emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
