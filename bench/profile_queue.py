"""Profile both sides of the `queue` workload with py-spy and print self time per thread.

Why it exists: the hot-path work of issue 4 is done against a profile, and
a profile that cannot be made again cannot be compared.  This program makes
it: it starts `purelink serve --sync batch` (as `bench/queue.py` does),
attaches `py-spy record --pid` to it, runs a sender under `py-spy record`
that queues `--records` records of 61 B on a new link `--runs` times, and
prints the functions with the most self time on each thread (link thread,
application thread, listener thread, sync thread).

    python -m bench.profile_queue                 # --gil: only the thread holding the GIL
    python -m bench.profile_queue --no-gil        # on-CPU, system calls included
    python -m bench.profile_queue --keep DIR      # keep the raw py-spy output

Needs py-spy (`pip install py-spy`) and permission to ptrace child processes.
Not part of `purelink bench`: it measures where time goes, not how fast.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from ._common import CHECKOUT, ServeProcess

__all__ = ["main", "self_time"]

SENDER = """
import sys, time
from bench._common import make_records
from bench._links import open_link
url, runs, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = make_records(count, 61)
for i in range(runs):
    link = open_link(url, "after", stream=f"profile{i}")
    t0 = time.perf_counter()
    queue = link.queue
    for record in data:
        queue(record)
    link.wait_stored(timeout=60)
    print(f"run {i}: {count / (time.perf_counter() - t0):,.0f} records/s", file=sys.stderr)
    link.close()
"""

ROLES = (
    ("Link._run", "link thread"),
    ("Listener._sync_loop", "sync thread"),
    ("Listener._run", "listener thread"),
)
_LINE = re.compile(r" \((.*?):\d+\)$")


def self_time(raw: Path) -> dict[str, collections.Counter[str]]:
    """Samples per (thread role, leaf function) from py-spy's raw (collapsed) output."""
    out: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if not frames or not n.isdigit():
            continue
        joined = ";".join(frames)
        role = next((r for key, r in ROLES if key in joined), "application thread")
        out[role][_LINE.sub(r" (\1)", frames[-1])] += int(n)
    return out


def _print(title: str, table: dict[str, collections.Counter[str]], top: int) -> None:
    print(f"== {title}")
    for role, counts in sorted(table.items(), key=lambda kv: -sum(kv[1].values())):
        total = sum(counts.values())
        print(f"  {role}: {total:,} samples")
        for name, n in counts.most_common(top):
            print(f"    {100 * n / total:5.1f} %  {name}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_queue", description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rate", type=int, default=1000, help="py-spy samples per second")
    parser.add_argument("--no-gil", action="store_true", help="sample on-CPU, not GIL holders")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep the raw profiles here")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(pyspy).exists():
        print("profile_queue: py-spy is not installed (pip install py-spy)", file=sys.stderr)
        return 1
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="purelink-profile-"))
    workdir.mkdir(parents=True, exist_ok=True)
    common = ["--threads", "--nonblocking", "-r", str(args.rate), "--format", "raw"]
    common += [] if args.no_gil else ["--gil"]
    listener_raw, sender_raw = workdir / "listener.txt", workdir / "sender.txt"
    with ServeProcess(sync="batch") as server:
        spy = subprocess.Popen(
            [pyspy, "record", "--pid", str(server.pid), *common, "-o", str(listener_raw)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)  # py-spy attaches before the workload starts (a profiler, not a test)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CHECKOUT), *sys.path[1:]])}
        sender = subprocess.run(
            [pyspy, "record", *common, "-o", str(sender_raw), "--",
             sys.executable, "-c", SENDER, server.url, str(args.runs), str(args.records)],
            env=env, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
        server.stop()
    for line in sender.stderr.splitlines():
        if line.startswith("run "):
            print(line)
    if sender.returncode != 0 or not sender_raw.exists() or not listener_raw.exists():
        print(f"profile_queue: py-spy failed: {sender.stderr.strip()[-500:]}", file=sys.stderr)
        return 1
    mode = "on-CPU" if args.no_gil else "GIL holders"
    _print(f"sending process, self time ({mode})", self_time(sender_raw), args.top)
    _print(f"listener process, self time ({mode})", self_time(listener_raw), args.top)
    if args.keep is None:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"raw profiles in {workdir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
