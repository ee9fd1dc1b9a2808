"""`purelink bench paths --shared`: purelink udp:// beside Linux TCP on one bottleneck.

Why it exists: the matrix (run.py) runs each transport alone on the path, so
a transport that takes the whole line whoever else is there, and one that
gives it all away, look the same.  Here they run *together*: on each path,
for each competitor (Linux TCP CUBIC, then BBR, set per socket with
TCP_CONGESTION), M TCP bulk flows and N purelink `udp://` links (1,000-B
records into one `purelink serve` in side B, as the matrix's purelink
transfers) start at the same moment (or TCP first and purelink `--stagger`
seconds later), run for `--seconds`, and stop.

What counts is what *arrived*, time-stamped on the receiving side and on the
monotonic clock all the namespaces share:

* a TCP flow's bytes as its receiver (peers.py `tcp-sink`) reads them out of
  the socket, every 50 ms;
* a purelink link's records as they appear in the store of `purelink serve`
  (`Store.last` of its stream, polled every 50 ms from here: the store's
  files are on the one file system);

each flow's count is interpolated at the edges of the window, from `--warm`
seconds (default 3) after the last flow started to the end, so slow start
and the first queue build-up are left out.  Reported per path and
competitor: each side's payload KB/s (1 KB = 1,000 B), purelink's share of
the pair, and the pair's total as a share of the bottleneck's rate (IP
packets: even one transport alone reaches ~0.96 of it in payload).  With
`--links N --tcp-flows M`, the share is of all N + M and fair is N / (N + M);
the JSON has every flow's own KB/s and a per-second timeline.

Default paths (SHARED_PATHS): 20 Mbit/s 40 ms RTT with a drop-tail queue of
0.5, 1, 2.5 and 10 BDP; 50 Mbit/s 100 ms with 0.4 and 2 BDP; 50 Mbit/s
10 ms with 2 BDP.  `--path SPEC` (spec.py; `queue=2bdp`) picks others.
"""

from __future__ import annotations

import itertools
import math
import select
import subprocess
import sys
import threading
import time
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from .._common import SHARE_BAND, Report, process_cpu_ns, summarize
from .constants import CHECKOUT, PORTS, TRANSPORTS
from .emu import Emulator, EmulatorError
from .model import Impairment
from .spec import BASE, bdp_bytes
from .transfers import Serve, json_line, peer

__all__ = [
    "COMPETITORS",
    "SHARED_PATHS",
    "Setup",
    "buffer_label",
    "delivered_at",
    "path_label",
    "run_shared",
    "run_together",
]

COMPETITORS = ("cubic", "bbr")
"""The Linux TCP congestion controls a purelink link shares the path with, in order."""
SAMPLE_EVERY = 0.05
"""Seconds between two time stamps of what a flow delivered (both kinds)."""


def _bdp_path(mbit: float, rtt_ms: float, bdps: float) -> tuple[str, Impairment]:
    imp = replace(BASE, rate=mbit * 1e6, delay=rtt_ms / 2000, queue_bytes=0)
    imp = replace(imp, queue_bytes=round(bdps * bdp_bytes(imp)))
    return f"{mbit:g}mbit-{rtt_ms:g}ms-{bdps:g}bdp", imp


SHARED_PATHS: dict[str, Impairment] = dict(
    _bdp_path(mbit, rtt, bdps)
    for mbit, rtt, depths in ((20, 40, (0.5, 1, 2.5, 10)), (50, 100, (0.4, 2)), (50, 10, (2,)))
    for bdps in depths
)
"""`--shared`'s paths by name: rate, round trip and buffer depth, nothing else."""


def path_label(imp: Impairment) -> str:
    """'20 Mbit/s, 40 ms': the path's rate and round trip, as the table shows them."""
    return f"{imp.rate / 1e6:g} Mbit/s, {2000 * imp.delay:g} ms"


def buffer_label(imp: Impairment) -> str:
    """'250,000 B (2.5 BDP)': the queue in bytes and in the path's BDPs."""
    bdp = bdp_bytes(imp)
    depth = f" ({imp.queue_bytes / bdp:.2g} BDP)" if bdp and imp.queue_bytes else ""
    return f"{imp.queue_bytes:,} B{depth}" if imp.queue_bytes else "unbounded"


@dataclass(frozen=True)
class Setup:
    """How each run of `--shared` goes (the command line's options)."""

    seconds: float = 20.0
    """How long all the flows run together, s."""
    warm: float = 3.0
    """Left out at the start of that time, s: only what arrives after it counts."""
    stagger: float = 0.0
    """TCP starts first, purelink this many seconds later (0: together)."""
    links: int = 1
    """purelink udp:// links, each its own stream."""
    tcp_flows: int = 1
    """Linux TCP flows, each to its own receiver."""
    record_size: int = 1000
    """Bytes per purelink record and per TCP write's record."""
    congestion: str | None = None
    """purelink.connect's `congestion` (None: its default)."""
    sync: str = "batch"
    """`purelink serve --sync`."""


# ----------------------------------------------------------- the processes


class _Peer:
    """One program of peers.py running in a namespace; its output read once it ends."""

    def __init__(self, argv: list[str], kind: str, stdin: bool) -> None:
        self.kind = kind
        self.proc = subprocess.Popen(
            argv,
            cwd=CHECKOUT,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.first = ""
        self.result: dict[str, Any] = {}

    def first_line(self, timeout: float) -> str:
        """Its first line of output ("ready", "connected"), or "" after `timeout`."""
        out = self.proc.stdout
        assert out is not None
        ready, _, _ = select.select([out], [], [], timeout)
        self.first = out.readline().strip() if ready else ""
        return self.first

    def go(self) -> None:
        stdin: IO[str] | None = self.proc.stdin
        assert stdin is not None
        stdin.write("go\n")
        stdin.flush()

    def finish(self, timeout: float) -> dict[str, Any]:
        """Its JSON line once it exits (killed after `timeout`)."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            err = f"killed after {timeout:.0f} s; {err}"
        self.result = json_line(self.first + "\n" + out) or {
            "ok": False,
            "error": (err or self.first).strip()[-300:],
        }
        return self.result

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


class _StoreSampler(threading.Thread):
    """[monotonic time, records stored] of each stream every SAMPLE_EVERY s.

    `Store.last` reads only the batch headers written since its last call,
    so polling costs little; the time stamp is the middle of the call."""

    def __init__(self, data: Path, streams: Sequence[str]) -> None:
        super().__init__(name="shared-sampler", daemon=True)
        self.data = data
        self.streams = list(streams)
        self.samples: dict[str, list[tuple[float, int]]] = {s: [] for s in streams}
        self.cpu_s = 0.0
        self.stopping = threading.Event()

    def run(self) -> None:
        import purelink  # noqa: PLC0415 -- the checkout under test, as in the peers

        cpu0 = time.thread_time()
        with purelink.Store(str(self.data)) as store:
            while True:
                for stream in self.streams:
                    before = time.monotonic()
                    last = store.last(stream)
                    self.samples[stream].append(((before + time.monotonic()) / 2, last))
                if self.stopping.wait(SAMPLE_EVERY):
                    break
        self.cpu_s = time.thread_time() - cpu0

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=10)


# --------------------------------------------------------------- one run


def delivered_at(samples: Sequence[Sequence[float]], at: float) -> float:
    """What a flow had delivered by time `at`: its samples [time, amount so far],
    in time order, interpolated (0 before the first, the last amount after the last)."""
    i = bisect_right([t for t, _ in samples], at)
    if i == 0:
        return 0.0
    if i == len(samples):
        return float(samples[-1][1])
    (t0, v0), (t1, v1) = samples[i - 1], samples[i]
    return v0 + (v1 - v0) * (at - t0) / (t1 - t0)


def _timeline(
    samples: Sequence[Sequence[float]], start: float, seconds: float, scale: int
) -> list[float]:
    """KB/s of each whole second from `start` on, for `seconds` seconds (an
    amount in the samples is `scale` bytes)."""
    edges = [delivered_at(samples, start + k) for k in range(math.ceil(seconds) + 1)]
    return [round((b - a) * scale / 1000, 1) for a, b in itertools.pairwise(edges)]


def _start_peers(
    emu: Emulator, serve: Serve, cc: str, setup: Setup, tag: str
) -> tuple[list[_Peer], list[_Peer], list[_Peer]]:
    """The TCP receivers (ready), then the TCP and purelink senders (connected)."""
    host = emu.addresses[1]
    run_for = setup.seconds + setup.stagger + 1.0  # past the window's end
    sinks = [
        _Peer(peer(emu, 1, "tcp-sink", "--bind", f"{host}:{PORTS['plain'] + i}", "--every",
                   str(SAMPLE_EVERY), "--timeout", str(run_for + 60)), "sink", stdin=False)
        for i in range(setup.tcp_flows)
    ]  # fmt: skip
    if any(sink.first_line(30) != "ready" for sink in sinks):
        for sink in sinks:
            sink.kill()
        raise EmulatorError("a TCP receiver did not start in side B")
    tcp = [
        _Peer(peer(emu, 0, "tcp-flow", "--to", f"{host}:{PORTS['plain'] + i}", "--cc", cc,
                   "--seconds", str(run_for), "--record", str(setup.record_size)),
              "tcp", stdin=True)
        for i in range(setup.tcp_flows)
    ]  # fmt: skip
    extra = ["--congestion", setup.congestion] if setup.congestion else []
    udp = [
        _Peer(peer(emu, 0, "purelink-flow", "--url", serve.url("udp"), "--stream",
                   f"{tag}-{i}", "--seconds", str(run_for - setup.stagger), "--size",
                   str(setup.record_size), *extra), "udp", stdin=True)
        for i in range(setup.links)
    ]  # fmt: skip
    return sinks, tcp, udp


def _flow(
    kind: str,
    index: int,
    samples: Sequence[Sequence[float]],
    window: tuple[float, float],
    t0: float,
    total: float,
    scale: int,
    sender: dict[str, Any],
) -> dict[str, Any]:
    """One flow's figures: payload bytes and KB/s in the window, its timeline."""
    start, end = window
    moved = (delivered_at(samples, end) - delivered_at(samples, start)) * scale
    return {
        "kind": kind,
        "index": index,
        "bytes": moved,
        "kbps": moved / (end - start) / 1000,
        "timeline_kbps": _timeline(samples, t0, total, scale),
        "sender": sender,
    }


def run_together(emu: Emulator, serve: Serve, cc: str, setup: Setup, tag: str) -> dict[str, Any]:
    """One run: the flows start, run `setup.seconds` together, and what each
    delivered in the window is counted; the router's and the processes' figures."""
    sinks, tcp, udp = _start_peers(emu, serve, cc, setup, tag)
    sampler = _StoreSampler(serve.dir / "data", [f"{tag}-{i}" for i in range(setup.links)])
    everyone = [*sinks, *tcp, *udp]
    try:
        for sender in (*tcp, *udp):
            if sender.first_line(60) != "connected":
                why = sender.finish(10).get("error")
                return {"ok": False, "errors": [f"a {sender.kind} sender: {why}"], "flows": []}
        emu.forget()
        emu.reset()
        serve_cpu0 = process_cpu_ns(serve.proc.pid)
        sampler.start()
        t0 = time.monotonic()
        for sender in tcp:
            sender.go()
        if setup.stagger:
            time.sleep(setup.stagger)
        for sender in udp:
            sender.go()
        total = setup.stagger + setup.seconds
        time.sleep(max(0.0, t0 + total - time.monotonic()))
        router = emu.stats()
        serve_cpu = (process_cpu_ns(serve.proc.pid) - serve_cpu0) / 1e9
        results = [s.finish(total + 60) for s in (*tcp, *udp)]
        received = [s.finish(60) for s in sinks]
    finally:
        if sampler.is_alive():
            sampler.stop()
        for p in everyone:
            p.kill()
    window = (t0 + setup.stagger + setup.warm, t0 + total)
    flows = [
        _flow("tcp", i, got.get("samples", []), window, t0, total, 1, sent)
        for i, (got, sent) in enumerate(zip(received, results[: len(tcp)], strict=True))
    ] + [
        _flow("udp", i, sampler.samples[f"{tag}-{i}"], window, t0, total, setup.record_size, sent)
        for i, sent in enumerate(results[len(tcp) :])
    ]
    return {
        "ok": all(r.get("ok") for r in results),
        "errors": [r["error"] for r in results if r.get("error")],
        "window_s": [window[0] - t0, window[1] - t0],
        "flows": flows,
        "router": router,
        "cpu_s": {"serve": serve_cpu, "sampler": sampler.cpu_s, "wall": total},
    }


# ------------------------------------------------------------ the figures


def _figures(result: dict[str, Any], imp: Impairment, setup: Setup) -> None:
    """Each side's KB/s, purelink's share of all, the pair's share of the line,
    and each flow's KB/s against a fair 1/(N+M) of what all moved."""
    flows = result.get("flows", [])
    udp = sum(f["kbps"] for f in flows if f["kind"] == "udp")
    tcp = sum(f["kbps"] for f in flows if f["kind"] == "tcp")
    pair = udp + tcp
    fair = pair / max(1, setup.links + setup.tcp_flows)
    line = imp.rate / 8 / 1000
    result.update(
        purelink_kbps=udp,
        tcp_kbps=tcp,
        share=udp / pair if pair else float("nan"),
        line_share=pair / line if line else float("nan"),
        each_of_fair=[f["kbps"] / fair if fair else float("nan") for f in flows],
    )


def run_shared(
    report: Report,
    paths: dict[str, Impairment],
    competitors: Sequence[str],
    setup: Setup,
    repeat: int = 1,
    quiet: bool = False,
) -> None:
    """Every path, every competitor, `repeat` times; the table and the JSON's runs."""
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with Emulator() as emu:
        for rep in range(repeat):
            for name, imp in paths.items():
                emu.set(imp, seed=rep + 1)
                serve = Serve(emu, setup.sync)
                try:
                    for cc in competitors:
                        result = run_together(emu, serve, cc, setup, f"{cc}-{rep}")
                        _figures(result, imp, setup)
                        runs.setdefault((name, cc), []).append(result)
                        if not quiet:
                            _progress(name, cc, result)
                        emu.set(imp, seed=rep + 1)  # empty the path for the next run
                        time.sleep(0.5)
                finally:
                    serve.stop()
    _tabulate(report, paths, competitors, runs, setup)


def _progress(name: str, cc: str, result: dict[str, Any]) -> None:
    late = result.get("router", {}).get("late_us", {})
    print(
        f"  .. {name:<20} {TRANSPORTS[cc]:<16} purelink {result.get('purelink_kbps', 0):>7,.0f}"
        f"  TCP {result.get('tcp_kbps', 0):>7,.0f} KB/s  share {result.get('share', 0):.2f}"
        f"  of line {result.get('line_share', 0):.2f}"
        f"{'' if result.get('ok') else '  (FAILED: ' + '; '.join(result.get('errors', [])) + ')'}"
        f"  router late p99 {late.get('p99', 0):,.0f} us{_drops(result)}",
        file=sys.stderr,
        flush=True,
    )


def _drops(result: dict[str, Any]) -> str:
    """The bottleneck queue's drops by protocol in the data's direction, as a
    part of each one's packets (a paced link and an unpaced TCP flow lose
    at different rates at one full buffer); "" where the router gave none."""
    protocols = result.get("router", {}).get("forward", {}).get("protocols", {})
    parts = [
        f"{name.upper()} {100 * c['queue_drops'] / c['packets']:.2f} %"
        for name, c in protocols.items()
        if name in ("tcp", "udp") and c.get("packets")
    ]
    return f"  queue drops {', '.join(parts)}" if parts else ""


def _tabulate(
    report: Report,
    paths: dict[str, Impairment],
    competitors: Sequence[str],
    runs: dict[tuple[str, str], list[dict[str, Any]]],
    setup: Setup,
) -> None:
    many = setup.links + setup.tcp_flows > 2
    for name, imp in paths.items():
        for cc in competitors:
            results = runs[(name, cc)]
            row = report.add(
                path=path_label(imp) if name in SHARED_PATHS else name,
                buffer=buffer_label(imp),
                competitor=TRANSPORTS[cc],
                **{
                    "purelink KB/s": summarize(
                        (r.get("purelink_kbps", 0) for r in results), "KB/s"
                    ),
                    "TCP KB/s": summarize((r.get("tcp_kbps", 0) for r in results), "KB/s"),
                    "purelink share": summarize(r.get("share", math.nan) for r in results),
                    "pair / line": summarize(r.get("line_share", math.nan) for r in results),
                },
                bdp=imp.queue_bytes / bdp_bytes(imp) if bdp_bytes(imp) else 0.0,
                family=path_label(imp),
            )
            if many:
                each = [x for r in results for x in r.get("each_of_fair", [])]
                row["each / fair"] = f"{min(each):.2f}-{max(each):.2f}" if each else "-"
            for r in results:
                if not r.get("ok"):
                    report.notes.append(
                        f"{name} {TRANSPORTS[cc]}: FAILED ({'; '.join(r.get('errors', []))})"
                    )
    report.columns = [k for k in report.rows[0] if k not in ("bdp", "family")]
    report.extra["runs"] = [
        {"path": p, "competitor": c, **r} for (p, c), rs in runs.items() for r in rs
    ]
    _notes(report, runs, setup)


def _notes(report: Report, runs: dict[tuple[str, str], list[dict[str, Any]]], setup: Setup) -> None:
    fair = setup.links / (setup.links + setup.tcp_flows)
    low, high = (1 - SHARE_BAND) * fair, (1 + SHARE_BAND) * fair
    target = f"; target {low:.2f}-{high:.2f}" if 0 < fair < 1 else ""
    every = [r for rs in runs.values() for r in rs]
    late = [r.get("router", {}).get("late_us", {}).get("p99", 0.0) for r in every]
    router = [r.get("router", {}).get("cpu_share", 0.0) for r in every]
    serve = [r["cpu_s"]["serve"] / r["cpu_s"]["wall"] for r in every if "cpu_s" in r]
    sender = [
        f["sender"].get("cpu_s", 0.0) / max(1e-9, f["sender"].get("elapsed", 0.0) or 1e-9)
        for r in every
        for f in r.get("flows", [])
        if f["kind"] == "udp"
    ]
    report.notes.append(
        f"share: purelink's part of what all {setup.links + setup.tcp_flows} flows delivered "
        f"(fair: {fair:.2f}{target}); pair / line: their payload "
        "over the bottleneck's rate of IP packets"
    )
    report.notes.append(
        f"counted from {setup.warm:g} s after the last flow started to the end of "
        f"{setup.seconds:g} s together; time stamps at the receiving side"
    )
    if late:
        report.notes.append(
            f"router: release lateness p99 per run, median {sorted(late)[len(late) // 2]:,.0f} us"
            f" (worst {max(late):,.0f} us); CPU {100 * max(router):.0f} % of a core at most; "
            f"purelink serve {100 * max(serve, default=0):.0f} %, a purelink sender "
            f"{100 * max(sender, default=0):.0f} % at most"
        )
    origins = {f["sender"].get("purelink") for r in every for f in r.get("flows", [])}
    origins.discard(None)
    here = report.environment.get("purelink_path")
    if origins and origins != {here}:
        report.notes.append(
            f"WARNING: the senders imported purelink from {', '.join(sorted(origins))}, "
            f"this process from {here}"
        )
