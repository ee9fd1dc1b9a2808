"""`purelink bench overhead`: wire bytes per payload byte, by record-size mix.

Workload: a real `purelink.Listener` (`sync="none"`) and a real UDP link in
this process, on loopback.  For each mix of record sizes, `--mb` MB of
distinct records (at least 200 records) are queued one at a time and the
link is waited on until all are stored; then `link.stats()` says how many
bytes went on the wire (`bytes_sent`: every datagram, headers, CRCs, the
handshake, probes and resends included) for how many bytes of records
(`payload_bytes`).  Optionally with a secret (every datagram sealed: 32
bytes more each, which `wire_ratio` counts).

Reported per mix: `wire_ratio` (bytes_sent / payload_bytes; the target is
<= 1.05 for 1,000-byte records and <= 1.10 for any mix), the datagram size
the link's path MTU search settled on, datagrams, and records/s (a side
figure: this is not a throughput benchmark).  The ratio does not depend on
the machine's load; records/s does.

Run from the checkout root: `python -m bench.overhead [--mb N] [--secret] [--json]`,
or `purelink bench overhead`.
"""

from __future__ import annotations

import math
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import purelink

from ._common import Report, base_parser, summarize_key
from ._impl import add_impl_argument, run_elsewhere

__all__ = ["MIXES", "main", "measure"]


def _sizes(rng: random.Random) -> dict[str, Callable[[], int]]:
    return {
        "1000 B": lambda: 1000,
        "61 B": lambda: 61,
        "uniform 0-20 kB": lambda: rng.randrange(0, 20_001),
        "log-uniform 1 B-20 kB": lambda: int(math.exp(rng.uniform(0, math.log(20_000)))),
        "uniform 200 B-2 kB": lambda: rng.randrange(200, 2_001),
        "bimodal 10 B / 10 kB": lambda: rng.choice((10, 10_000)),
        "0-20 kB with 1 % of 100 kB-1 MB": lambda: (
            rng.randrange(100_000, 1_000_001) if rng.random() < 0.01 else rng.randrange(0, 20_001)
        ),
    }


MIXES = tuple(_sizes(random.Random(0)))
"""The mixes measured, by name."""


def records_of(mix: str, megabytes: float, seed: int) -> list[bytes]:
    """Records of one mix, about `megabytes` MB of them (at least 200), each
    starting with its index (so those of 4 bytes or more are distinct)."""
    rng = random.Random(seed)
    size = _sizes(rng)[mix]
    out: list[bytes] = []
    total = 0
    while total < megabytes * 1e6 or len(out) < 200:
        n = size()
        record = (len(out).to_bytes(4, "little") + bytes(n))[:n]  # exactly n bytes
        out.append(record)
        total += len(record)
    return out


def run_once(records: list[bytes], secret: bytes | None) -> dict[str, Any]:
    """Ship `records` over one link; the link's byte counters."""
    with (
        tempfile.TemporaryDirectory(prefix="purelink-overhead-") as tmp,
        purelink.Listener(tmp, udp="127.0.0.1:0", sync="none", secret=secret) as lst,
    ):
        assert lst.udp_address is not None
        url = "udp://%s:%d" % lst.udp_address
        with purelink.connect(url, stream="overhead", secret=secret, timeout=20) as link:
            start = time.perf_counter()
            for r in records:
                link.queue(r)
            if not link.wait_stored(timeout=120):
                raise RuntimeError("not all records were stored in 120 s")
            seconds = time.perf_counter() - start
            stats = link.stats()
    return {
        "wire_ratio": stats.wire_ratio,
        "datagram_size": stats.datagram_size,
        "datagrams": stats.datagrams,
        "retransmits": stats.retransmits,
        "records_per_s": len(records) / seconds,
        "payload_mb": stats.payload_bytes / 1e6,
    }


def measure(mixes: Sequence[str], megabytes: float, repeat: int, secret: bool) -> Report:
    key = bytes(range(32)) if secret else None
    report = Report(
        "overhead",
        "wire bytes per payload byte by record-size mix; one UDP link on loopback"
        + (", with a secret" if secret else ""),
        parameters={"mb": megabytes, "repeat": repeat, "secret": secret},
    )
    for mix in mixes:
        records = records_of(mix, megabytes, seed=len(mix))
        runs = [run_once(records, key) for _ in range(repeat)]
        report.rows.append(
            {
                "mix": mix,
                "records": len(records),
                "wire_ratio": summarize_key(runs, "wire_ratio"),
                "datagram_size": summarize_key(runs, "datagram_size", "B"),
                "datagrams": summarize_key(runs, "datagrams"),
                "retransmits": summarize_key(runs, "retransmits"),
                "records_per_s": summarize_key(runs, "records_per_s", "records/s"),
            }
        )
    worst = max(row["wire_ratio"].median for row in report.rows)
    report.notes.append(f"worst wire_ratio {worst:.4f} (target <= 1.10 for any mix)")
    for row in report.rows:
        if row["mix"] == "1000 B":
            met = "met" if row["wire_ratio"].median <= 1.05 else "NOT met"
            report.notes.append(
                f"1000 B records: {row['wire_ratio'].median:.4f} (target <= 1.05): {met}"
            )
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser("overhead", __doc__ or "", repeat=1)
    parser.add_argument("--mb", type=float, default=20.0, metavar="N", help="MB per mix")
    parser.add_argument("--secret", action="store_true", help="with a secret (encrypted)")
    parser.add_argument(
        "--mixes", default=",".join(MIXES), help="comma-separated mix names (default: all)"
    )
    add_impl_argument(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if (code := run_elsewhere("overhead", argv, args)) is not None:
        return code
    mixes = [m for m in args.mixes.split(",") if m]
    unknown = [m for m in mixes if m not in MIXES]
    if unknown or args.mb <= 0 or args.repeat < 1:
        parser.error(f"unknown mix {unknown[0]!r}" if unknown else "--mb and --repeat must be > 0")
    measure(mixes, args.mb, args.repeat, args.secret).emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
