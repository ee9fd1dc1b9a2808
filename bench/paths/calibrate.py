"""`python -m bench.paths.calibrate`: the `--shared` cells in virtual time beside the emulator's.

Why it exists: a congestion controller is tuned in virtual time
(purelink.testing: `Simulation.add_competitor`, models of Linux's reno,
cubic and BBR v1 flows) and checked on the TUN emulator against the real
kernel (`bench.paths --shared`).  The first is only worth trusting where it
gives the second's figures, so this runs every cell of a `--shared` run in
the simulation -- the same path (the emulator's own `PathModel` in both
directions, as `Impairment.model()` configures it), the same flows, seconds
and warm-up, purelink's share of the payload that arrived, counted the same
way -- and prints the two side by side with their difference.

The emulator's figures come from the JSON of earlier runs (`--emulator
FILE`, repeatable: the runs of every file are pooled per cell), or from a
run made now (`--run`, root; `--repeat` times).  Without either, only the
simulation's column (`--paths`, `--path SPEC`, `--transports` and the
`--shared` options pick the cells, as for `bench.paths --shared`).  The
simulation runs each cell with `--seeds` seeds (1, 2, ...) and reports the
median and the range, as the emulator's repeats are.

    python -m bench.paths.calibrate --emulator cubic.json          # the table, from a run
    python -m bench.paths.calibrate --run --congestion cubic --repeat 2 --json > both.json
    python -m bench.paths.calibrate --congestion cubic --seeds 1   # the simulation alone

Cost: a cell is 20 s of virtual time, 1.5-5 s of real time per seed (the
50 Mbit/s paths the most).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from purelink.protocol.sender import SenderState
from purelink.testing import FakeNet, Simulation

from .._common import Report, Summary, base_parser, summarize
from .constants import TRANSPORTS
from .model import Impairment
from .shared import COMPETITORS, SHARED_PATHS, Setup, buffer_label, path_label
from .spec import BASE, parse_path

__all__ = ["Cell", "main", "simulate"]

Cell = tuple[str, str]
"""(path name, competitor): one cell of a `--shared` run."""


def simulate(imp: Impairment, competitor: str, setup: Setup, seed: int) -> float:
    """purelink's share of the payload that arrived in one `--shared` cell, in
    virtual time: `setup.links` links and `setup.tcp_flows` model flows of
    `competitor` through `imp` both ways, counted from the warm-up to the end.

    As on the emulator, every flow is connected before the clock starts (the
    links' handshakes, then the TCP flows'), and then the TCP flows start
    sending and the links get their records (`setup.stagger` s later)."""
    sim = Simulation(FakeNet(seed, imp.model(), imp.model()))
    total = setup.stagger + setup.seconds
    records = [b"x" * setup.record_size] * int(imp.rate / 8 * (total + 1) / setup.record_size)
    links = [
        sim.add_link(
            f"s{i}",
            [],
            anonymous_id=(1 << 63) | (seed << 8) | (i + 1),
            congestion=setup.congestion or "bbr",
            datagram_size=1400,
        )
        for i in range(setup.links)
    ]
    sim.run(lambda: all(link.sender.state == SenderState.OPEN for link in links), max_time=30.0)
    tcp = [sim.add_competitor(competitor, seed=seed * 16 + i) for i in range(setup.tcp_flows)]
    sim.run(lambda: all(flow.established for flow in tcp), max_time=30.0)
    go = sim.clock.now
    if setup.stagger:
        sim.run(lambda: sim.clock.now >= go + setup.stagger, max_time=total + 1)
    for link in links:
        link.todo = list(records)

    def moved() -> tuple[float, float]:
        return sum(sim.arrived(link) for link in links), sum(f.delivered for f in tcp)

    sim.run(
        lambda: sim.clock.now >= go + setup.stagger + setup.warm,
        max_time=total + 1,
        max_steps=1 << 31,
    )
    before = moved()
    sim.run(lambda: sim.clock.now >= go + total, max_time=total + 1, max_steps=1 << 31)
    udp, flows = (b - a for a, b in zip(before, moved(), strict=True))
    return udp / (udp + flows) if udp + flows else math.nan


def _impairment(name: str, parameters: dict[str, Any]) -> Impairment:
    """A cell's path: one of `--shared`'s own, or a `--path` the run recorded."""
    if name in SHARED_PATHS:
        return SHARED_PATHS[name]
    spec = parameters.get(f"path {name}")
    if not isinstance(spec, str):
        raise ValueError(f"the run does not say what path {name!r} was")
    fields = dict(item.split("=", 1) for item in spec.split())
    return Impairment(
        **{k: int(v) if k in ("queue_bytes", "mtu") else float(v) for k, v in fields.items()}
    )


def read_runs(
    files: Sequence[Path],
) -> tuple[dict[Cell, list[float]], dict[str, Impairment], Setup, list[str]]:
    """Every file's shares per cell, the paths, the runs' setup and notes on their load."""
    shares: dict[Cell, list[float]] = {}
    paths: dict[str, Impairment] = {}
    setup: Setup | None = None
    notes = []
    for file in files:
        saved = json.loads(file.read_text())
        p = saved["parameters"]
        this = Setup(
            seconds=p["seconds"],
            warm=p["warm"],
            stagger=p["stagger"],
            links=p["links"],
            tcp_flows=p["tcp_flows"],
            record_size=p["record_size"],
            congestion=None if p["congestion"] == "default" else p["congestion"],
        )
        if setup is not None and this != setup:
            raise ValueError(f"{file}: not the same runs as the files before it ({this})")
        setup = this
        for run in saved.get("extra", {}).get("runs", []):
            if run.get("ok"):
                cell = (run["path"], run["competitor"])
                shares.setdefault(cell, []).append(run["share"])
                paths.setdefault(run["path"], _impairment(run["path"], p))
        env = saved["environment"]
        load = [n for n in saved.get("notes", []) if n.startswith("took")]
        notes.append(
            f"{file.name}: {env['date']}, load {env['machine']['loadavg']} at the "
            f"start{'; ' + load[0] if load else ''}"
        )
    if setup is None:
        raise ValueError("no runs to compare with")
    return shares, paths, setup, notes


def _row(
    report: Report, name: str, imp: Impairment, cc: str, emu: Summary | None, sim: Summary
) -> None:
    row = report.add(
        path=path_label(imp) if name in SHARED_PATHS else name,
        buffer=buffer_label(imp),
        competitor=TRANSPORTS[cc],
    )
    if emu is not None:
        row["emulator"] = emu
    row["simulation"] = sim
    if emu is not None:
        row["sim - emu"] = round(sim.median - emu.median, 2)


def compare(
    report: Report,
    cells: Sequence[Cell],
    paths: dict[str, Impairment],
    setup: Setup,
    seeds: int,
    emulator: dict[Cell, list[float]] | None,
) -> None:
    """The simulation's share of every cell, beside the emulator's if given."""
    gaps = []
    for name, cc in cells:
        began = time.perf_counter()
        sim = summarize(simulate(paths[name], cc, setup, seed) for seed in range(1, seeds + 1))
        emu = summarize(emulator[(name, cc)]) if emulator is not None else None
        _row(report, name, paths[name], cc, emu, sim)
        if emu is not None:
            gaps.append(abs(sim.median - emu.median))
        print(
            f"  .. {name:<20} {cc:<6} sim {sim}  emu {emu or '-'}  "
            f"({time.perf_counter() - began:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
    if gaps:
        near = sum(1 for g in gaps if g <= 0.1)
        report.notes.append(
            f"|sim - emu| of the medians: {near}/{len(gaps)} cells within 0.1, mean "
            f"{statistics.mean(gaps):.2f}, worst {max(gaps):.2f}"
        )


def _parse(argv: Sequence[str]) -> Any:
    parser = base_parser("paths calibrate", "the --shared cells in virtual time", repeat=1)
    parser.add_argument(
        "--emulator",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="JSON of a `bench.paths --shared --json` run (repeatable)",
    )
    parser.add_argument("--run", action="store_true", help="measure on the emulator now (root)")
    parser.add_argument("--seeds", type=int, default=3, help="simulation runs per cell (3)")
    parser.add_argument("--congestion", default=None, help="purelink.connect's congestion")
    parser.add_argument("--paths", default=None, help="comma-separated --shared paths")
    parser.add_argument("--path", action="append", default=[], metavar="SPEC")
    parser.add_argument("--transports", default=",".join(COMPETITORS))
    parser.add_argument("--links", type=int, default=1)
    parser.add_argument("--tcp-flows", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warm", type=float, default=3.0)
    parser.add_argument("--stagger", type=float, default=0.0)
    args = parser.parse_args(list(argv))
    if args.seeds < 1 or (args.run and args.emulator):
        parser.error("--seeds >= 1; --run or --emulator, not both")
    return args


def _setup_and_paths(args: Any) -> tuple[Setup, dict[str, Impairment]]:
    setup = Setup(
        seconds=args.seconds,
        warm=args.warm,
        stagger=args.stagger,
        links=args.links,
        tcp_flows=args.tcp_flows,
        congestion=args.congestion,
    )
    names = args.paths.split(",") if args.paths else [] if args.path else list(SHARED_PATHS)
    paths = {name: SHARED_PATHS[name] for name in names}
    for spec in args.path:
        name, imp = parse_path(spec, BASE)
        paths[name] = imp
    return setup, paths


def _measure(
    args: Any, setup: Setup, paths: dict[str, Impairment], competitors: list[str]
) -> tuple[dict[Cell, list[float]], list[str]]:
    """The emulator's shares per cell, measured now."""
    from .shared import run_shared  # noqa: PLC0415 -- the emulator only when asked

    measured = Report("paths --shared", "for calibration")
    run_shared(measured, paths, competitors, setup, args.repeat, quiet=False)
    shares: dict[Cell, list[float]] = {}
    for run in measured.extra["runs"]:
        if run.get("ok"):
            shares.setdefault((run["path"], run["competitor"]), []).append(run["share"])
    return shares, [f"emulator measured now, {args.repeat} run(s) a cell"]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    competitors = [c for c in args.transports.split(",") if c]
    emulator: dict[Cell, list[float]] | None = None
    notes: list[str] = []
    if args.emulator:
        emulator, paths, setup, notes = read_runs(args.emulator)
        cells = [c for c in emulator if c[1] in competitors]
        cells.sort(key=lambda c: (list(paths).index(c[0]), competitors.index(c[1])))
    else:
        setup, paths = _setup_and_paths(args)
        cells = [(name, cc) for name in paths for cc in competitors]
        if args.run:
            emulator, notes = _measure(args, setup, paths, competitors)
            cells = [c for c in cells if c in emulator]
    report = Report("paths calibrate", "purelink's share: the emulator's and the simulation's")
    report.parameters.update(
        seconds=setup.seconds,
        warm=setup.warm,
        stagger=setup.stagger,
        links=setup.links,
        tcp_flows=setup.tcp_flows,
        congestion=setup.congestion or "default",
        seeds=args.seeds,
    )
    compare(report, cells, paths, setup, args.seeds, emulator)
    report.notes.extend(notes)
    report.extra["cells"] = [
        {
            "path": name,
            "competitor": cc,
            **{k: v for k, v in row.items() if k in ("emulator", "simulation")},
        }
        for (name, cc), row in zip(cells, report.rows, strict=True)
    ]
    report.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
