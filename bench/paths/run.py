"""`purelink bench paths`: goodput through emulated network paths (needs root).

Workload (docs/performance.md, section paths): the TUN path emulator of
bench/paths/emu.py between two network namespaces; every path is a 50 Mbit/s
bottleneck with a 256 KB drop-tail queue and 25 ms of delay in each
direction (50 ms RTT), plus one impairment, the same in both directions:

    clean, loss 0.1 % / 1 % / 5 %, jitter +-2 ms / +-10 ms (reordering),
    blackouts (1.5 s dark every 6 s, the first 1 s into the run), MTU 1280 / 1420

Across each path, `--size` MB (default 10) of 1,000-byte records go from
side A to side B four ways, one after the other:

* Linux TCP BBR and Linux TCP CUBIC (TCP_CONGESTION on the socket): a sender
  writes the bytes, the receiver reads them all and replies with one byte;
  timed from the first write to the reply.  Nothing is written to disk.
* purelink `tcp://` and `udp://`: a `purelink serve --sync batch` in side B
  (fdatasync before "stored"), a sender in side A that connects, queues
  every record and waits until all are stored; timed from the first queue to
  the last told stored.  The store is then read back: every record must be
  there exactly once, in order.

Reported: payload KB/s (1 KB = 1,000 B) per transport per path, median of
`--repeat` runs, and udp / BBR.  Every run is bounded by `--run-timeout`; a
run that does not finish is reported as stalled with what it moved by then.
The router's own figures (how late it released packets, its CPU) are in the
JSON.  A full default run also draws its part of docs/paths.png, the upper
one, and keeps its table in docs/paths.json, from which a full default
`--shared` run draws the figure again with its own part below (plot.py);
`--plot PNG` draws the run alone elsewhere.

`--torture` runs the target "10 % loss, 5 % duplicates, 20 ms jitter, 1.5 s
blackout every 6 s (on the same bottleneck): 30,000 mixed records (0 B to
20 KB) stored exactly once in under 60 s" for purelink udp:// and tcp://.

`--shared` runs purelink `udp://` *beside* Linux TCP CUBIC, then BBR, on
each of its own paths (buffers of 0.4 to 10 BDP) and reports purelink's
share of what arrived: shared.py.  A full default one draws the lower part
of docs/paths.png.

    purelink bench paths                       # the whole matrix, ~10 minutes
    purelink bench paths --paths clean,loss-1% --size 2 --repeat 1
    purelink bench paths --path rate=20mbit,rtt=100ms,loss=0.1%,queue=128k --transports bbr,udp
    purelink bench paths --torture
    purelink bench paths --shared              # 7 paths x 2 competitors, 20 s each
    purelink bench paths --shared --path rate=20mbit,rtt=40ms,queue=2bdp --links 2 --tcp-flows 2

`--path SPEC` (repeatable) runs a path of its own besides the named ones
(only those given, unless `--paths` names some too): spec.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._common import Report, base_parser, summarize
from .constants import CHECKOUT, TRANSPORTS
from .emu import Emulator, EmulatorError, available, terminate_as_exit
from .peers import fixed_records, mixed_records
from .plot import matrix_transports  # matplotlib itself only when a plot is drawn
from .shared import COMPETITORS, SHARED_PATHS, Setup, run_shared
from .spec import BASE, PATHS, TORTURE, parse_path
from .transfers import Serve, run_plain_tcp, run_purelink

__all__ = ["keep_part", "main", "report_from_json"]

DOCS_FIGURE = CHECKOUT / "docs" / "paths.png"
DOCS_DATA = CHECKOUT / "docs" / "paths.json"
"""A full default run's figure and the reports it is drawn from (plot.py)."""


def _available_cc() -> set[str]:
    text = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
    names = set(text.read_text().split()) if text.exists() else set()
    if "bbr" not in names:
        subprocess.run(["modprobe", "tcp_bbr"], capture_output=True, timeout=20, check=False)
        names = set(text.read_text().split()) if text.exists() else names
    return names


def _rate(result: dict[str, Any], total: int) -> float:
    """Payload KB/s of a run: all of it over the time if it finished, else what moved."""
    elapsed = float(result.get("elapsed") or 0.0)
    if not elapsed:
        return 0.0
    moved = total if result.get("ok") else int(result.get("moved") or 0)
    return moved / elapsed / 1000.0


def _stall_note(path: str, transport: str, result: dict[str, Any], total: int) -> str:
    why = result.get("error") or "did not finish"
    return (
        f"{path} {TRANSPORTS[transport]}: stalled ({why}): "
        f"{int(result.get('moved') or 0) / 1e6:.2f} of {total / 1e6:.2f} MB "
        f"in {float(result.get('elapsed') or 0):.0f} s"
    )


def run_matrix(args: Any, report: Report, transports: list[str]) -> None:
    count = max(1, int(args.size * 1e6) // args.record_size)
    total = count * args.record_size
    records = fixed_records(count, args.record_size)
    sender_args = ["--size", str(args.record_size)]
    if args.congestion:
        sender_args += ["--congestion", args.congestion]
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with Emulator() as emu:
        report.parameters["tcp_default_cc"] = _netns_default_cc(emu)
        for rep in range(args.repeat):
            for path in args.paths:
                emu.set(args.impairments[path], seed=rep + 1)
                serve = Serve(emu, args.sync) if {"tcp", "udp"} & set(transports) else None
                try:
                    for transport in transports:
                        if transport in ("tcp", "udp"):
                            assert serve is not None
                            result = run_purelink(
                                emu,
                                serve,
                                transport,
                                f"{transport}-{rep}",
                                records,
                                args.run_timeout,
                                sender_args,
                            )
                        else:
                            result = run_plain_tcp(
                                emu, transport, total, args.record_size, args.run_timeout
                            )
                        result["kbps"] = _rate(result, total)
                        runs.setdefault((path, transport), []).append(result)
                        _progress(args, path, transport, result)
                        time.sleep(0.2)  # let stragglers of the last run drain
                finally:
                    if serve is not None:
                        serve.stop()
    _tabulate(args, report, transports, runs, total)


def _progress(args: Any, path: str, transport: str, result: dict[str, Any]) -> None:
    if not args.quiet:
        late = result.get("router", {}).get("late_us", {})
        print(
            f"  .. {path:<12} {TRANSPORTS[transport]:<16} {result['kbps']:>8,.0f} KB/s"
            f"{'' if result.get('ok') else '  (stalled)'}"
            f"  router late p99 {late.get('p99', 0):,.0f} us",
            file=sys.stderr,
            flush=True,
        )


def _tabulate(
    args: Any,
    report: Report,
    transports: list[str],
    runs: dict[tuple[str, str], list[dict[str, Any]]],
    total: int,
) -> None:
    lates: list[float] = []
    cpus: list[float] = []
    for path in args.paths:
        row: dict[str, Any] = {"path": path}
        stalled = []
        for transport in transports:
            results = runs[(path, transport)]
            row[TRANSPORTS[transport]] = summarize((r["kbps"] for r in results), "KB/s")
            for r in results:
                if not r.get("ok"):
                    stalled.append(transport)
                    report.notes.append(_stall_note(path, transport, r, total))
                if transport in ("tcp", "udp") and r.get("ok") and not r.get("exactly_once"):
                    report.notes.append(
                        f"{path} {TRANSPORTS[transport]}: NOT stored exactly "
                        f"once ({r.get('in_store')} records in the stream)"
                    )
                router = r.get("router", {})
                lates.append(router.get("late_us", {}).get("p99", 0.0))
                cpus.append(router.get("cpu_share", 0.0))
        if "udp" in transports and "bbr" in transports:
            row["udp/BBR"] = row[TRANSPORTS["udp"]].median / max(
                row[TRANSPORTS["bbr"]].median, 1e-9
            )
        row["stalled"] = ",".join(sorted(set(stalled))) or "-"
        report.add(**row)
    report.extra["runs"] = [
        {"path": p, "transport": t, **r} for (p, t), rs in runs.items() for r in rs
    ]
    if lates:
        report.notes.append(
            f"router: release lateness p99 per run, median {sorted(lates)[len(lates) // 2]:,.0f} us"
            f" (worst {max(lates):,.0f} us); CPU {100 * max(cpus):.0f} % of a core at most"
        )
    udp = [r[TRANSPORTS["udp"]].median for r in report.rows if TRANSPORTS["udp"] in r]
    if "udp" in transports and "bbr" in transports:
        met = all(r["udp/BBR"] >= 1.0 for r in report.rows)
        report.notes.append(
            f"target udp:// >= 1.0x Linux TCP BBR on every path: {'met' if met else 'not met'}"
        )
    if udp and "clean" in args.paths:
        report.notes.append("bottleneck: 50 Mbit/s of IP packets = 6,250 KB/s")


def run_torture(args: Any, report: Report, transports: list[str]) -> None:
    records = mixed_records(args.records, seed=14)
    total = sum(map(len, records))
    report.parameters.update(records=len(records), mb=round(total / 1e6, 1), target_s=60)
    with Emulator(TORTURE) as emu:
        report.parameters["tcp_default_cc"] = _netns_default_cc(emu)
        serve = Serve(emu, args.sync)
        try:
            for transport in transports:
                result = run_purelink(
                    emu,
                    serve,
                    transport,
                    f"torture-{transport}",
                    records,
                    args.run_timeout,
                    [
                        "--mixed",
                        "14",
                        *(["--congestion", args.congestion] if args.congestion else []),
                    ],
                )
                fwd = result["router"]["forward"]
                report.add(
                    transport=TRANSPORTS[transport],
                    records=len(records),
                    seconds=round(float(result.get("elapsed") or 0), 2),
                    stored=int(result.get("stored") or 0),
                    exactly_once=bool(result.get("exactly_once")),
                    stored_intact=bool(result.get("intact")),
                    under_60_s=bool(result.get("ok")) and float(result["elapsed"]) < 60,
                    lost=fwd["lost"],
                    duplicated=fwd["duplicated"],
                    blackout_drops=fwd["blackout_drops"],
                )
                report.extra.setdefault("runs", []).append({"transport": transport, **result})
        finally:
            serve.stop()
    report.notes.append(
        "path: 50 Mbit/s, 256 KB queue, 25 ms +-20 ms each way, 10 % loss, "
        "5 % duplicates, 1.5 s dark every 6 s (both directions)"
    )


def _parse(argv: Sequence[str]) -> Any:
    parser = base_parser("paths", "goodput through emulated paths (TUN + netns; root)", repeat=1)
    parser.add_argument(
        "--paths",
        default=None,
        help=f"comma-separated paths (default all: {', '.join(PATHS)})".replace("%", "%%"),
    )
    parser.add_argument(
        "--path",
        action="append",
        default=[],
        metavar="SPEC",
        help="a path of its own, KEY=VALUE items over the base of 50 mbit, 50 ms rtt, 256k "
        "queue: rate=20mbit,rtt=100ms,loss=0.5%%,jitter=3ms,queue=128k,mtu=1400,dup=1%%,"
        "blackout=6s/1.5s,name=NAME (repeatable; only these unless --paths is given too)",
    )
    parser.add_argument(
        "--transports",
        default=None,
        help="comma-separated of bbr,cubic,tcp,udp (default all; --torture: udp,tcp)",
    )
    parser.add_argument("--size", type=float, default=10.0, help="MB per run (default 10)")
    parser.add_argument("--record-size", type=int, default=1000, metavar="B")
    parser.add_argument(
        "--run-timeout",
        type=float,
        default=None,
        metavar="S",
        help="bound on each run (default 120 s; --torture 180 s)",
    )
    parser.add_argument("--sync", default="batch", choices=("batch", "always", "none"))
    parser.add_argument("--congestion", default=None, help="passed to purelink.connect")
    parser.add_argument("--torture", action="store_true", help="the exactly-once torture run")
    _shared_options(parser)
    parser.add_argument("--records", type=int, default=30_000, help="--torture: records")
    parser.add_argument(
        "--plot",
        type=Path,
        default=None,
        metavar="PNG",
        help="draw the plot here (default docs/paths.png on a full default run)",
    )
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument(
        "--from-json",
        type=Path,
        default=None,
        metavar="FILE",
        help="do not measure: print the table (and --plot) of a --json run",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(list(argv))
    _check(parser, args)
    return args


def _shared_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "--shared", "purelink udp:// beside Linux TCP on one bottleneck (shared.py)"
    )
    group.add_argument(
        "--shared",
        action="store_true",
        help="run purelink udp:// links and Linux TCP flows together on each path "
        f"(default paths: {', '.join(SHARED_PATHS)}; competitors: --transports, "
        "default cubic,bbr)",
    )
    group.add_argument(
        "--links", type=int, default=1, metavar="N", help="purelink links (1; 0: TCP alone)"
    )
    group.add_argument(
        "--tcp-flows", type=int, default=1, metavar="M", help="TCP flows (1; 0: purelink alone)"
    )
    group.add_argument(
        "--seconds", type=float, default=20.0, metavar="S", help="together for S seconds (20)"
    )
    group.add_argument(
        "--warm", type=float, default=3.0, metavar="S", help="not counted: the first S s (3)"
    )
    group.add_argument(
        "--stagger",
        type=float,
        default=0.0,
        metavar="S",
        help="TCP starts first, purelink S seconds later (0)",
    )


def _check_shared(parser: argparse.ArgumentParser, args: Any) -> None:
    """--shared's own checks; its competitors are --transports (bbr and cubic only)."""
    if not args.shared:
        return
    if args.torture:
        parser.error("--shared and --torture are two runs: one at a time")
    if set(args.transports) - set(COMPETITORS):
        parser.error("--shared: --transports names its TCP competitors, cubic and/or bbr")
    if min(args.links, args.tcp_flows) < 0 or args.links + args.tcp_flows < 1:
        parser.error("--shared: --links and --tcp-flows are >= 0 (0: the other alone)")
    if not 0 <= args.warm < args.seconds or args.stagger < 0:
        parser.error("--shared: 0 <= --warm < --seconds, and --stagger >= 0")


def _check(parser: argparse.ArgumentParser, args: Any) -> None:
    """The paths (named and --path SPEC) and transports asked for, checked and
    resolved in `args`; the bounds; the defaults that depend on the others."""
    every = "" if args.path or args.shared else ",".join(PATHS)
    named = args.paths if args.paths is not None else every
    args.paths = [p for p in named.split(",") if p]
    known = {**PATHS, **SHARED_PATHS} if args.shared else PATHS
    unknown = [p for p in args.paths if p not in known]
    if unknown:
        parser.error(f"unknown path {unknown[0]!r} (choose from {', '.join(known)})")
    args.impairments = {p: known[p] for p in args.paths}
    for spec in args.path:
        try:
            name, imp = parse_path(spec, BASE)
        except ValueError as exc:
            parser.error(f"--path: {exc}")
        if name in args.impairments:
            parser.error(f"--path: the name {name!r} is taken (name=...)")
        args.impairments[name] = imp
        args.paths.append(name)
    if args.shared and not args.paths:
        args.impairments = dict(SHARED_PATHS)
        args.paths = list(SHARED_PATHS)
    default_t = "udp,tcp" if args.torture else ",".join(TRANSPORTS)
    if args.shared:
        default_t = ",".join(COMPETITORS)
    args.transports = [t for t in (args.transports or default_t).split(",") if t]
    bad = [t for t in args.transports if t not in TRANSPORTS]
    if bad or not args.transports:
        parser.error(f"unknown transport {bad[0] if bad else ''!r} (choose from bbr,cubic,tcp,udp)")
    _check_shared(parser, args)
    if args.torture and set(args.transports) - {"tcp", "udp"}:
        parser.error("--torture runs purelink only: --transports udp,tcp")
    if args.size <= 0 or args.repeat < 1 or args.record_size < 8 or args.records < 1:
        parser.error("--size, --repeat, --records must be positive and --record-size >= 8")
    if args.run_timeout is None:
        args.run_timeout = 180.0 if args.torture else 120.0
    args.docs_figure = False
    if args.from_json is not None or args.plot is not None or args.no_plot:
        return  # it draws only where --plot says
    if args.shared:
        full = args.paths == list(SHARED_PATHS) and args.transports == list(COMPETITORS)
        full = full and (args.links, args.tcp_flows, args.stagger) == (1, 1, 0)
        full = full and (args.seconds, args.warm) == (20, 3) and args.congestion is None
    else:
        full = args.paths == list(PATHS) and args.transports == list(TRANSPORTS)
        full = full and not args.torture and args.size == 10
    if full:  # the docs' figure: this run's part of it (plot.py)
        args.plot, args.docs_figure = DOCS_FIGURE, True


def report_from_json(saved: dict[str, Any]) -> Report:
    """A report as `--json` printed it, with its Summary cells back."""
    report = Report(saved["benchmark"], saved["title"], environment=saved["environment"])
    report.parameters.update(saved["parameters"])
    report.notes.extend(saved["notes"])
    report.extra.update(saved.get("extra", {}))
    for row in saved["rows"]:
        report.add(
            **{
                k: summarize(v["runs"], v.get("unit", "")) if isinstance(v, dict) else v
                for k, v in row.items()
            }
        )
    if report.benchmark == "paths --shared" and report.rows:
        report.columns = [k for k in report.rows[0] if k not in ("bdp", "family")]
    return report


def _from_json(args: Any) -> int:
    """Print the table (and draw --plot) of an earlier `--json` run, without measuring."""
    report = report_from_json(json.loads(args.from_json.read_text()))
    _draw(args, report, matrix_transports(report))
    report.emit(args.json)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.from_json is not None:
        return _from_json(args)
    reason = available()
    if reason is not None:
        print(f"purelink bench paths: cannot run: {reason}", file=sys.stderr)
        return 1
    transports = list(args.transports)
    cc = _available_cc()
    missing = [t for t in transports if t in ("bbr", "cubic") and t not in cc]
    for t in missing:
        print(
            f"purelink bench paths: {TRANSPORTS[t]} is not available in this kernel "
            f"(tcp_available_congestion_control: {' '.join(sorted(cc))}); left out",
            file=sys.stderr,
        )
        transports.remove(t)
    if not transports:
        return 1
    if args.shared:
        return _main_shared(args, transports, missing)
    title = (
        "exactly once through 10 % loss, 5 % duplicates, 20 ms jitter, blackouts"
        if args.torture
        else "payload KB/s through emulated paths"
        if args.path
        else "payload KB/s through emulated 50 Mbit/s, 50 ms RTT paths"
    )
    report = Report("paths", title)
    report.parameters.update(
        size_mb=args.size,
        record_size=args.record_size,
        repeat=args.repeat,
        run_timeout_s=args.run_timeout,
        sync=args.sync,
    )
    _common_parameters(report, args, missing)
    try:
        with terminate_as_exit():
            if args.torture:
                report.benchmark = "paths --torture"
                run_torture(args, report, transports)
            else:
                run_matrix(args, report, transports)
    except EmulatorError as exc:
        print(f"purelink bench paths: {exc}", file=sys.stderr)
        return 1
    if not args.torture:
        _draw(args, report, transports)
    report.emit(args.json)
    return 0


def _common_parameters(report: Report, args: Any, missing: list[str]) -> None:
    """The parameters every run reports: the links' congestion control, the
    transports left out, and each `--path`'s impairments."""
    report.parameters.update(
        congestion=args.congestion or "default", left_out=",".join(missing) or "-"
    )
    for spec in args.path:
        name, imp = parse_path(spec, BASE)
        report.parameters[f"path {name}"] = " ".join(
            f"{k}={v:g}" for k, v in imp.to_json().items() if v
        )


def _main_shared(args: Any, competitors: list[str], missing: list[str]) -> int:
    """`--shared`: purelink udp:// beside Linux TCP on each path (shared.py)."""
    report = Report("paths --shared", "purelink udp:// and Linux TCP sharing one bottleneck")
    setup = Setup(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Setup)})
    report.parameters.update(dataclasses.asdict(setup), repeat=args.repeat)
    _common_parameters(report, args, missing)
    started = time.monotonic()
    try:
        with terminate_as_exit():
            run_shared(report, args.impairments, competitors, setup, args.repeat, args.quiet)
    except EmulatorError as exc:
        print(f"purelink bench paths: {exc}", file=sys.stderr)
        return 1
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    report.notes.append(f"took {time.monotonic() - started:.0f} s; load at the end {load}")
    _draw(args, report, competitors)
    report.emit(args.json)
    return 0


def _draw(args: Any, report: Report, transports: list[str]) -> None:
    """The plot of the run (--plot, or the full default run's docs/ figure)."""
    if args.plot is None or args.no_plot:
        return
    from .plot import plot, plot_shared  # noqa: PLC0415 -- matplotlib only when plotting

    try:
        if args.docs_figure:
            _draw_docs(report)
        elif report.benchmark == "paths --shared":
            plot_shared(report, args.plot)
        else:
            plot(report, args.plot, transports)
        report.notes.append(f"plot: {args.plot}")
    except ImportError:  # the figures are printed all the same
        report.notes.append("no plot: matplotlib is not installed (pip install '.[bench]')")


PARTS = {"matrix": "paths", "shared": "paths --shared"}
"""docs/paths.json's parts and the benchmark each is a report of."""


def _part_of(report: Report) -> str:
    return "shared" if report.benchmark == PARTS["shared"] else "matrix"


def keep_part(report: Report, data: Path) -> dict[str, Report | None]:
    """A full default run's report goes into `data` (docs/paths.json) as its
    part, "matrix" or "shared" (the rows, not the timelines), beside the
    other run's last one; both come back (None: not run on this checkout,
    or a kept part that is not a report of its kind, which is dropped)."""
    part = _part_of(report)
    try:
        kept = json.loads(data.read_text())
    except (OSError, ValueError):
        kept = {}
    if not isinstance(kept, dict):
        kept = {}
    kept[part] = {k: v for k, v in report.to_json().items() if k != "extra"}
    parts: dict[str, Report | None] = dict.fromkeys(PARTS)
    for name in PARTS:
        try:
            parts[name] = _part(name, kept[name]) if name in kept else None
        except (KeyError, TypeError, ValueError, AttributeError):
            del kept[name]  # damaged (by hand?): the figure does without it
    data.write_text(json.dumps(kept, indent=1) + "\n")
    return parts


def _part(name: str, saved: Any) -> Report:
    """A kept part back as a report; ValueError if it is not one of its kind."""
    report = report_from_json(saved)
    if report.benchmark != PARTS[name]:
        raise ValueError(f"{name}: a report of {report.benchmark!r}")
    return report


def _draw_docs(report: Report) -> None:
    """docs/paths.png from this run and the other's last report (plot.py); if
    the other's cannot be drawn (a kept part damaged in its rows), this run
    alone."""
    from .plot import plot_paths  # noqa: PLC0415 -- matplotlib only when plotting

    parts = keep_part(report, DOCS_DATA)
    try:
        plot_paths(parts["matrix"], parts["shared"], DOCS_FIGURE)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        alone: dict[str, Report | None] = dict.fromkeys(PARTS)
        alone[_part_of(report)] = report
        plot_paths(alone["matrix"], alone["shared"], DOCS_FIGURE)
        report.notes.append(f"docs figure: this run alone ({DOCS_DATA.name}: {exc!r})")


def _netns_default_cc(emu: Emulator) -> str:
    """The congestion control a socket in side A gets unless it asks (purelink tcp://)."""
    done = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            emu.namespaces[0],
            "cat",
            "/proc/sys/net/ipv4/tcp_congestion_control",
        ],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    return done.stdout.strip() or "unknown"


if __name__ == "__main__":
    sys.exit(main())
