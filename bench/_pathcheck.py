"""`python -m bench.pathemu selftest`: how accurate the path emulator is, and its CPU.

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
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from ._common import Report, base_parser, percentile, summarize
from ._pathmodel import Impairment
from .pathemu import CHECKOUT, Emulator

__all__ = ["selftest_main"]


def _added_delay(emu: Emulator) -> dict[str, float]:
    emu.set(Impairment(delay=0.025))
    echo = subprocess.Popen(
        emu.command(
            1,
            [
                sys.executable,
                "-m",
                "bench._pathpeers",
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
                    "bench._pathpeers",
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
    from .paths import BASE, run_plain_tcp  # noqa: PLC0415 -- paths imports this package

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
    parser = base_parser("pathemu selftest", "the path emulator's accuracy and CPU", repeat=3)
    args = parser.parse_args(list(argv))
    delays, rates = [], []
    with Emulator() as emu:
        for _ in range(args.repeat):
            delays.append(_added_delay(emu))
            rates.append(_full_rate(emu))
    report = Report("pathemu selftest", "what the emulator adds, and what it costs")
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
