"""`python -m bench.paths.selftest`: how accurate the path emulator is, and its CPU.

Why it exists: a path emulator written in Python must show that it is not
the bottleneck and that its timing is what it claims, at the rates the
`paths` benchmark drives it (50 Mbit/s of 1,500-byte packets: ~4,200
packets/s one way plus the ACKs the other).  Two measurements, each
`--repeat` times:

1. **added delay**: 500 UDP probes, 2 ms apart, through 25 ms each way and
   nothing else; the round trip minus 50 ms is what the router, the TUN
   devices, the kernel and the two Python peers add (p50, p99, max);
2. **at full rate**: 10 MB of Linux TCP (BBR) through the 50 Mbit/s, 50 ms,
   256 KB-queue path; the router's own account of how late it released each
   packet against its release time (p50, p99, max), its CPU time as a share
   of one core, and the packets it moved per second.

Set PLK_ROUTER_PRIORITY=none (default "fifo") to see the router as an
ordinary process on a loaded machine.

`python -m bench.paths.selftest model [PACKETS]`: what the model's decisions
cost per packet, on no devices (no root needed).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from .._common import Report, base_parser, percentile, summarize
from .constants import CHECKOUT, PEERS_MODULE
from .emu import Emulator
from .model import Impairment
from .model import Path as EmulatedPath
from .spec import BASE
from .transfers import run_plain_tcp

__all__ = ["main", "selftest_main"]


def _added_delay(emu: Emulator) -> dict[str, float]:
    emu.set(Impairment(delay=0.025))
    echo = subprocess.Popen(
        emu.command(
            1,
            [
                sys.executable,
                "-m",
                PEERS_MODULE,
                "echo",
                "--bind",
                f"{emu.addresses[1]}:9000",
                "--timeout",
                "60",
            ],
        ),
        cwd=CHECKOUT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert echo.stdout is not None
        echo.stdout.readline()
        emu.reset()
        done = subprocess.run(
            emu.command(
                0,
                [
                    sys.executable,
                    "-m",
                    PEERS_MODULE,
                    "ping",
                    "--to",
                    f"{emu.addresses[1]}:9000",
                    "--count",
                    "500",
                    "--interval",
                    "0.002",
                ],
            ),
            cwd=CHECKOUT,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    finally:
        echo.kill()
        echo.wait()
        if echo.stdout is not None:
            echo.stdout.close()
    rtts = sorted((r - 0.050) * 1e6 for r in json.loads(done.stdout)["rtt"])
    return {"p50": statistics.median(rtts), "p99": percentile(rtts, 99), "max": rtts[-1]}


def _full_rate(emu: Emulator) -> dict[str, Any]:
    emu.set(BASE)
    result = run_plain_tcp(emu, "bbr", 10_000_000, 1000, limit=60)
    router = result["router"]
    return {
        "kbps": 10_000_000 / result["elapsed"] / 1000 if result.get("ok") else 0.0,
        "late": router["late_us"],
        "cpu_share": router["cpu_share"],
        "packets_per_s": (router["reads"] + router["writes"]) / 2 / router["wall_s"],
    }


def selftest_main(argv: Sequence[str]) -> int:
    parser = base_parser("paths selftest", "the path emulator's accuracy and CPU", repeat=3)
    parser.prog = "python -m bench.paths.selftest"  # not one of `purelink bench`'s names
    args = parser.parse_args(list(argv))
    delays, rates = [], []
    with Emulator() as emu:
        for _ in range(args.repeat):
            delays.append(_added_delay(emu))
            rates.append(_full_rate(emu))
    report = Report("paths selftest", "what the emulator adds, and what it costs")
    report.parameters.update(
        repeat=args.repeat, priority=os.environ.get("PLK_ROUTER_PRIORITY", "fifo")
    )
    report.add(
        measure="round trip added to 50 ms (us), idle path",
        p50=summarize(d["p50"] for d in delays),
        p99=summarize(d["p99"] for d in delays),
        max=summarize(d["max"] for d in delays),
    )
    report.add(
        measure="release lateness (us), 50 Mbit/s TCP BBR",
        p50=summarize(r["late"]["p50"] for r in rates),
        p99=summarize(r["late"]["p99"] for r in rates),
        max=summarize(r["late"]["max"] for r in rates),
    )
    report.notes.append(
        f"at 50 Mbit/s: router CPU {summarize(100 * r['cpu_share'] for r in rates)} % of a core, "
        f"{summarize(r['packets_per_s'] for r in rates)} packets/s, "
        f"TCP BBR {summarize(r['kbps'] for r in rates)} KB/s"
    )
    report.emit(args.json)
    return 0


def _model_cost(argv: Sequence[str]) -> int:
    """`python -m bench.paths.selftest model [PACKETS]`: CPU per packet of `Path.arrive`
    and `due` (a heap of ~200 in flight), 1,500-B packets both ways at the
    paths' 50 Mbit/s, 25 ms, 256 KB queue; best of 5 runs."""
    count = int(argv[0]) if argv else 200_000
    base = Impairment(delay=0.025, rate=50e6, queue_bytes=256 * 1024)
    lossy = Impairment(delay=0.025, rate=50e6, queue_bytes=256 * 1024, jitter=0.002, loss=0.01)
    packet = bytes(1500)
    gap = 1500 * 8 / 50e6 / 2  # each direction at its rate, the two interleaved
    for name, imp in (("clean", base), ("jitter 2 ms, loss 1 %", lossy)):
        best = float("inf")
        for _ in range(5):
            path = EmulatedPath(imp, imp, 0.0)
            arrive, due = path.arrive, path.due
            start = time.process_time()
            for i in range(count):
                arrive(i & 1, packet, i * gap)
                if not i & 7:
                    due(i * gap)
            due(float("inf"))
            best = min(best, (time.process_time() - start) / count)
        print(f"{name}: {best * 1e9:,.0f} ns of CPU per packet (arrive, heap, due)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`[--json] [--repeat N]`: the self-test; `model [PACKETS]`: the model's cost."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["model"]:
        return _model_cost(args[1:])
    return selftest_main(args)


if __name__ == "__main__":
    sys.exit(main())
