"""`python -m bench.ccshare`: purelink links beside TCP flows on one bottleneck, in virtual time.

Why it exists: a link must take its fair share of a path it shares with
Linux TCP, and leave TCP its own, at any buffer depth; a controller tuned
on the few paths tests/sim/test_competitors.py looks at can miss that on a
path nobody looked at.  This program is bench/ccsweep.py's sweep put to
that question (its log-uniform draws, seeds, worker processes and
worst-first rows), with the TCP models of purelink.testing (Reno, CUBIC
and BBR v1 as Linux runs them, each with a receive window that never
binds on its path), measured as purelink.testing.sharing measures.

Each cell is a path and a setup: N purelink links (`--congestion`, default
bbr, the links' default) beside M TCP flows of one kind (`--tcp`), 1 and 1
unless `--flows N,M`.  They start together, or the TCP flows first and the
links `--stagger S` seconds later; at seed s the links also start
(s mod 4)/4 of an RTT late, so that seeds differ in phase and not only in
the models' random draws.  A run lasts `--seconds` (20) of virtual time
from the links' start and is measured from `--warm` (3) s on.  Paths are
drawn log-uniform from 2-200 Mbit/s, RTT 5-200 ms and a drop-tail buffer
of 0.5-10 bdp (at least 4 segments), without random loss unless `--loss P`
(each way); `--grid` runs a fixed list of paths instead (GRID), for tables
to set side by side before and after a change.

A flow's **part** is its line share (wire bytes of the unique payload it
got through, over rate x time) over what all the flows got together; the
**total** is what they got together, of the bottleneck.  Targets, at
every seed:

    each purelink link     part within 1/(N+M) x [0.7, 1.3]   (a pair: 0.35-0.65)
    the TCP flows          their mean part within the same band
    total                  >= 0.90

The band is 30 % either side of a fair share because that is the pair's
target (0.35-0.65 of two) said for any N + M.  The TCP flows are held as a
class, by their mean, not one by one: flows of one kind split a path
unevenly among themselves over a run this short (three CUBIC flows took
0.80-1.38 of a fair share each, three BBR v1 flows 0.70-1.49, at 10-50
Mbit/s, 40-200 ms, 0.5-2 bdp), and that is TCP's own unfairness, not
purelink's to fix.  A row's "result" is `pass`, or `miss k/n` with what
was missed (share, tcp, total); rows come the worst first (the least
margin at the worst seed: a part's distance inside its band in fair
shares, the total's above 0.90), the grid's in its own order.

    python -m bench.ccshare [--tcp cubic,bbr] [--cells 12] [--seeds 4] [--jobs 2] [--json]
    python -m bench.ccshare --tcp reno,cubic,bbr --stagger 0,5   # together, and TCP 5 s first
    python -m bench.ccshare --tcp cubic --flows 2,3 --congestion newreno
    python -m bench.ccshare --path mbit=50,rtt=0.1,buffer=2,tcp=bbr --seeds 8
    python -m bench.ccshare --grid                               # = purelink bench ccshare --grid
    python -m bench.ccshare --path mbit=20,rtt=0.04,buffer=1,tcp=cubic --seed 2 --trace 0.1

`--reference KIND` (or `reference=KIND` in a `--path`) puts a TCP flow of
KIND (reno, cubic or bbr: Linux's, as the simulation models it) in each
link's place, with the link's start: what Linux's flow gets on the same
cells, beside the same flows, judged by the same targets ("purelink" is
then its part). Where Linux's BBR v1 misses a target too, the path is
hard for TCP itself (BBR v1 beside CUBIC on a buffer of a bdp takes most
of it); where it does not, the link's miss is its own.

    python -m bench.ccshare --grid --reference bbr               # Linux's BBR v1 on the grid

`--trace S` runs one cell at one seed (`--seed`, default 0) and prints it
sampled every S s of virtual time instead of the table: the queue, each
link's verdict, state, model and window, each flow's rate (bench/cctrace.py).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from purelink.protocol.congestion import NAMES
from purelink.testing.competitors import KINDS
from purelink.testing.sharing import PURELINK, Observer, capacity, share

from ._common import SHARE_BAND, Report
from .ccsweep import draw_path, parse_fields, run_seeds
from .cctrace import Trace, Watch, format_trace

__all__ = [
    "GRID",
    "Cell",
    "Outcome",
    "draw_cells",
    "failures",
    "main",
    "margin",
    "run_cell",
    "trace_cell",
]

TOTAL = 0.90
"""What the flows take of the bottleneck together, at least."""
GRID = [
    (20, 0.04, 0.5), (20, 0.04, 1.0), (20, 0.04, 2.5), (20, 0.04, 10.0),
    (50, 0.1, 0.4), (50, 0.1, 2.0), (50, 0.01, 2.0),
    (10, 0.2, 1.0), (100, 0.02, 5.0), (5, 0.01, 8.0),
]  # fmt: skip
"""`--grid`'s paths: (Mbit/s, RTT s, buffer in bdps), each beside every `--tcp` kind."""


@dataclass(frozen=True)
class Cell:
    """One path, and the flows through it."""

    mbit: float
    """Bottleneck rate, Mbit/s."""
    rtt: float
    """Round trip without a queue, seconds."""
    buffer: float = 1.0
    """Drop-tail buffer, in bdps (at least 4 segments)."""
    tcp: str = "cubic"
    """The TCP flows' kind: reno, cubic or bbr."""
    links: int = 1
    """purelink links."""
    flows: int = 1
    """TCP flows."""
    stagger: float = 0.0
    """Seconds the TCP flows start before the links."""
    loss: float = 0.0
    """Random loss, each way."""
    congestion: str = "bbr"
    """The links' congestion controller."""
    reference: str = ""
    """A TCP kind whose flows take the links' place (their number, their
    start): what Linux's flow gets there, the bar the links are set beside."""
    seconds: float = 20.0
    """Virtual seconds from the links' start to the end of the run."""
    warm: float = 3.0
    """Virtual seconds from the links' start to the start of the measure."""

    @property
    def fair(self) -> float:
        """A fair part: one flow's of all."""
        return 1.0 / (self.links + self.flows)

    @property
    def band(self) -> tuple[float, float]:
        """The parts a link may take (and the TCP flows' mean)."""
        return (1 - SHARE_BAND) * self.fair, (1 + SHARE_BAND) * self.fair

    def path(self) -> str:
        """Rate and RTT."""
        return f"{self.mbit:g}Mb {self.rtt * 1e3:g}ms"

    @property
    def kinds(self) -> list[str]:
        """The flows, as `purelink.testing.sharing.share` names them: the links first."""
        ours = self.reference or f"{PURELINK}-{self.congestion}"
        return [ours] * self.links + [self.tcp] * self.flows

    def setup(self) -> str:
        """What differs from one link beside one TCP flow starting together, if anything."""
        parts = []
        if (self.links, self.flows) != (1, 1):
            parts.append(f"{self.links}+{self.flows}")
        if self.stagger:
            parts.append(f"tcp{self.stagger:g}s-first")
        if self.loss:
            parts.append(f"loss{self.loss:.1%}")
        if self.reference:
            parts.append(f"{self.reference}-in-place")
        elif self.congestion != Cell.congestion:
            parts.append(f"purelink-{self.congestion}")
        return " ".join(parts) or "-"


@dataclass
class Outcome:
    """One cell at one seed."""

    seed: int
    links: int
    """The first `links` of `shares` are purelink's, the rest TCP's."""
    shares: list[float]
    """Each flow's line share from the warm-up to the end."""
    timeouts: int
    """RTO expiries of the TCP flows."""

    @property
    def total(self) -> float:
        """What the flows got of the bottleneck together."""
        return sum(self.shares)

    @property
    def parts(self) -> list[float]:
        """Each flow's part of what they got together."""
        total = self.total
        return [s / total if total else 0.0 for s in self.shares]

    @property
    def purelink(self) -> float:
        """The links' part together."""
        return sum(self.parts[: self.links])


def run_cell(cell: Cell, seed: int, observe: Observer | None = None, every: float = 0.1) -> Outcome:
    """Run `cell`'s flows through its path at `seed` (module docstring);
    `observe` and `every` as for `purelink.testing.sharing.share` (--trace)."""
    late = cell.stagger + cell.rtt * (seed % 4) / 4
    run = share(
        cell.kinds,
        mbit=cell.mbit,
        rtt=cell.rtt,
        buffer=cell.buffer,
        loss=cell.loss,
        seconds=cell.stagger + cell.seconds,
        warm=cell.stagger + cell.warm,
        seed=seed,
        starts=[late] * cell.links + [0.0] * cell.flows,
        # at least 4 x what the path holds, as ccsweep's: the listener's
        # default (4 MiB) would cap a link on a long, deep path, and it is
        # the congestion control that is measured here (share gives each TCP
        # flow a receive window of 4 x too: sharing.window)
        max_reorder=max(4 << 20, int(4 * capacity(cell.mbit, cell.rtt, cell.buffer))),
        observe=observe,
        every=every,
    )
    timeouts = sum(flow.timeouts for flow in run.sim.competitors)
    return Outcome(seed=seed, links=cell.links, shares=run.shares, timeouts=timeouts)


def _edges(cell: Cell, out: Outcome) -> tuple[list[float], float, float]:
    """How far inside (+) or outside (-) its band each link's part is and the
    TCP flows' mean is, in fair shares; the total's distance above TOTAL."""
    parts, fair = out.parts, cell.fair
    tcp = sum(parts[cell.links :]) / cell.flows
    inside = [SHARE_BAND - abs(p / fair - 1) for p in parts[: cell.links]]
    return inside, SHARE_BAND - abs(tcp / fair - 1), out.total - TOTAL


def margin(cell: Cell, out: Outcome) -> float:
    """The least of `_edges`: below 0, a target missed."""
    links, tcp, total = _edges(cell, out)
    return min(*links, tcp, total)


def failures(cell: Cell, out: Outcome) -> list[str]:
    """What one run misses of its targets (empty: none): "share", a link's part
    is out of its band; "tcp", every link's is in but the TCP flows' mean
    part is not (it can be only where the links outnumber the flows);
    "total", the flows left the bottleneck idle."""
    links, tcp, total = _edges(cell, out)
    share = min(links) < 0
    misses = {"share": share, "tcp": not share and tcp < 0, "total": total < 0}
    return [name for name, missed in misses.items() if missed]


def draw_cells(count: int, seed: int, template: Cell) -> list[Cell]:
    """`count` paths drawn from the whole space (seeded; module docstring),
    the rest as `template` says."""
    rng = random.Random(seed)
    cells = []
    for _ in range(count):
        mbit, rtt, buffer = draw_path(rng, (0.005, 0.2), (0.5, 10.0))
        cells.append(replace(template, mbit=mbit, rtt=rtt, buffer=buffer))
    return cells


def summarize(cell: Cell, runs: Sequence[Outcome]) -> dict[str, Any]:
    """A cell's row: its worst seed, the spread of purelink's part, what was missed."""
    worst = min(runs, key=lambda o: margin(cell, o))
    ours = [o.purelink for o in runs]
    missed = [o for o in runs if failures(cell, o)]
    fails = sorted({f for o in missed for f in failures(cell, o)})
    result = f"miss {len(missed)}/{len(runs)}: {','.join(fails)}" if missed else "pass"
    lo, hi = cell.band
    return {
        "path": cell.path(),
        "buffer": cell.buffer,
        "competitor": cell.tcp,
        "setup": cell.setup(),
        "band": f"{lo * cell.links:.2f}-{hi * cell.links:.2f}",
        "purelink": round(worst.purelink, 2),
        "median": round(statistics.median(ours), 2),
        "range": f"{min(ours):.2f}-{max(ours):.2f}",
        "total": round(worst.total, 2),
        "worst_seed": worst.seed,
        "parts": "+".join(f"{p:.2f}" for p in worst.parts),
        "margin": round(margin(cell, worst), 3),
        "tcp_timeouts": max(o.timeouts for o in runs),
        "result": result,
    }


DRAWN = ["path", "buffer", "competitor", "setup", "band", "purelink", "median", "range",
         "total", "worst_seed", "parts", "result"]  # fmt: skip
"""The table's columns for drawn paths (the JSON has every key of `summarize`)."""
COMPACT = ["path", "buffer", "competitor", "purelink", "range", "total", "result"]
"""The grid's table: one line a cell, to set beside another run's."""


def report(cells: Sequence[Cell], results: Mapping[Cell, Sequence[Outcome]], grid: bool) -> Report:
    """The rows (the grid's in its order, drawn cells the worst first) and a
    count of the cells that met every target at every seed."""
    rows = [summarize(cell, results[cell]) for cell in cells]
    if not grid:
        rows.sort(key=lambda r: r["margin"])
    what = "purelink links beside TCP flows in virtual time"
    references = sorted({c.reference for c in cells})
    if len(references) > 1:  # (--path cells with and without reference=)
        what = "purelink links, or Linux's flows in their place (setup), beside TCP flows"
    elif references != [""]:
        what = f"Linux's {references[0]} in the links' place, a reference"
    title = f"{what}: each cell's worst seed"
    columns = list(COMPACT if grid else DRAWN)
    if grid and any(c.setup() != "-" for c in cells):
        columns.insert(3, "setup")
    out = Report("ccshare", title, columns=columns)
    out.rows.extend(rows)
    passed = sum(r["result"] == "pass" for r in rows)
    out.notes.append(f"{passed} of {len(rows)} cells within every target at every seed")
    out.notes.append(
        "targets: each link's part within 1/(N+M) x [0.7, 1.3] (band; purelink = the links'), "
        f"the TCP flows' mean part too, total >= {TOTAL:.2f} of the bottleneck"
    )
    if references != [""]:
        out.notes.append(
            "where setup says KIND-in-place, Linux's KIND flows run in the links' place: "
            "purelink is their part, tcp_timeouts counts theirs too"
        )
    return out


def _kinds(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"TCP kinds are {', '.join(KINDS)}, not {text!r}")
    return kinds


def _flows(text: str) -> tuple[int, int]:
    links, _, flows = text.partition(",")
    try:
        n, m = int(links), int(flows)
    except ValueError:
        n = m = 0
    if n < 1 or m < 1:
        raise argparse.ArgumentTypeError(
            f"N,M: purelink links and TCP flows, 1 or more each, not {text!r}"
        )
    return n, m


def _staggers(text: str) -> list[float]:
    return [float(s) for s in text.split(",")]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ccshare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--tcp", type=_kinds, default=["cubic", "bbr"], help="TCP kinds, one cell each (cubic,bbr)")
    add("--flows", type=_flows, default=(1, 1), metavar="N,M", help="N links beside M TCP flows")
    stagger = "the TCP flows start S s before the links; several: a cell each (default 0)"
    add("--stagger", type=_staggers, default=[0.0], metavar="S[,S]", help=stagger)
    add("--congestion", choices=NAMES, default=Cell.congestion, help="the links' (default bbr)")
    reference = "a TCP flow of KIND in each link's place, a reference (reno, cubic or bbr)"
    add("--reference", choices=KINDS, default="", metavar="KIND", help=reference)
    add("--loss", type=float, default=0.0, help="random loss each way (default 0)")
    add("--seconds", type=float, default=Cell.seconds, help="virtual s from the links' start")
    add("--warm", type=float, default=Cell.warm, help="virtual s before the measure (default 3)")
    add("--cells", type=int, default=12, help="paths drawn (default 12; x kinds x staggers)")
    add("--seeds", type=int, default=4, help="seeds per cell (default 4)")
    add("--draw", type=int, default=0, help="seed of the paths' draw")
    path = "a path of its own, Cell's fields: mbit=50,rtt=0.1,buffer=2[,tcp=bbr] (repeat)"
    add("--path", action="append", default=[], help=path)
    add("--grid", action="store_true", help="the fixed paths of GRID, a compact table")
    add("--jobs", type=int, default=2, help="processes (default 2; 1: this one)")
    trace = "sample one cell's run at --seed every S s of virtual time, instead of the table"
    add("--trace", type=float, default=0.0, metavar="S", help=trace)
    add("--seed", type=int, default=0, help="--trace's seed (default 0)")
    add("--json", action="store_true")
    return parser


def cells_of(args: argparse.Namespace) -> list[Cell]:
    """The cells the options ask for: --path's, else --grid's, else drawn; each
    at every --stagger and beside every --tcp kind (unless a --path names its own)."""
    links, flows = args.flows
    base = Cell(0.0, 0.0, links=links, flows=flows, loss=args.loss, congestion=args.congestion,
                reference=args.reference, seconds=args.seconds, warm=args.warm)  # fmt: skip
    if args.path:
        given = [parse_fields(p, Cell) for p in args.path]
        if any(not ({"mbit", "rtt"} <= set(f) and f.get("tcp", "cubic") in KINDS) for f in given):
            raise ValueError(f"a path needs mbit= and rtt=, and tcp= one of {', '.join(KINDS)}")
        if any(f.get("reference", "") not in ("", *KINDS) for f in given):
            raise ValueError(f"reference= is one of {', '.join(KINDS)}")
        paths = [(replace(base, **fields), set(fields)) for fields in given]
    elif args.grid:
        paths = [(replace(base, mbit=m, rtt=r, buffer=b), set()) for m, r, b in GRID]
    else:
        paths = [(c, set()) for c in draw_cells(args.cells, args.draw, base)]
    cells = []
    for path, named in paths:
        staggers = [path.stagger] if "stagger" in named else args.stagger
        kinds = [path.tcp] if "tcp" in named else args.tcp
        cells += [replace(path, stagger=s, tcp=k) for s in staggers for k in kinds]
    return cells


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.warm >= args.seconds:
        parser.error("--warm must be shorter than --seconds")
    if min(args.seeds, args.cells, args.jobs) < 1:
        parser.error("--seeds, --cells and --jobs take 1 or more")
    try:
        cells = cells_of(args)
    except (TypeError, ValueError) as exc:
        parser.error(f"--path: {exc}")
    if not (args.trace >= 0 and math.isfinite(args.trace)) or (args.trace and len(cells) != 1):
        parser.error(
            "--trace takes seconds > 0 and one cell: one --path, with its tcp= or one --tcp"
        )
    if args.trace:
        return _trace(cells[0], args)
    began = time.perf_counter()
    results = run_seeds(run_cell, cells, args.seeds, args.jobs)
    took = time.perf_counter() - began
    out = report(cells, results, args.grid)
    hidden = {"json", "path", "cells", "draw"} | ({"congestion"} if args.reference else set())
    shown = {k: v for k, v in vars(args).items() if k not in hidden}
    shown.update(tcp=",".join(args.tcp), flows="{},{}".format(*args.flows))
    shown["stagger"] = ",".join(f"{s:g}" for s in args.stagger)
    if args.path:
        shown["path"] = args.path
    elif not args.grid:
        shown.update(cells=args.cells, draw=args.draw)
    out.parameters.update(shown)
    out.notes.append(
        f"{len(cells) * args.seeds} runs in {took:.0f} s of real time, --jobs {args.jobs}"
    )
    out.emit(args.json)
    return 0


def trace_cell(cell: Cell, seed: int, every: float) -> Trace:
    """`run_cell(cell, seed)`, sampled every `every` s of virtual time (--trace)."""
    trace = Trace(kinds=cell.kinds, every=every)
    trace.shares = run_cell(cell, seed, observe=Watch(trace), every=every).shares
    return trace


def _trace(cell: Cell, args: argparse.Namespace) -> int:
    """--trace: the one cell at --seed, sampled (bench/cctrace.py)."""
    traced = trace_cell(cell, args.seed, args.trace)
    if args.json:
        print(json.dumps({"cell": asdict(cell), "seed": args.seed, **traced.to_json()}))
        return 0
    print(f"{cell.path()}, buffer {cell.buffer:g} bdp, beside {cell.tcp} "
          f"({cell.setup()}), seed {args.seed}, a sample every {args.trace:g} s")  # fmt: skip
    for line in format_trace(traced):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
