"""`purelink demo`: the product's main job in one command (the README's set-up).

Why it exists: `pip install . && purelink demo` is how a new machine proves
the whole path works and how fast it is.  The demo does what a user would:

1. start a listener child process (`demo_listener.py`: serve's listener on
   127.0.0.1 port 0) with a temporary store, and learn its port from the ready line;
2. connect one link and queue N distinct records one at a time, timing only
   the `queue` calls (ns per call = time in the queue loop / N);
3. wait until the link is told all are stored (first queue -> last told gives
   records/s), then take the link's counters and close it;
4. stop the listener and parse its `purelink serve: stopped {...}` line for
   the listener's counters (syncs, datagrams received);
5. read every record back with `Store` and compare byte for byte.

Record i (1-based) is its index as 8 big-endian bytes plus a fixed filler, so
records are distinct and record i must be at position i (one link, a fresh
store).

Nothing outlives the demo.  Ctrl-C, SIGTERM and SIGHUP unwind it (`finally`):
the link closes, the child stops, the temporary directory goes, and the exit
code is 130, 143 or 129.  A demo killed outright (SIGKILL, or its parent's
death taking it down) runs no code, so the child watches its stdin, a pipe
from the demo: at its end it stops and removes the temporary directory
itself (`demo_listener.py`).  Arguments that cannot work are refused before
anything starts (exit 2): a record over the listener's max_record, more
records than `MAX_RECORDS`, or a store larger than the free space of the
temporary directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from .. import Full, Link, Store, connect
from .common import counted
from .progress import Progress

__all__ = ["DemoError", "DemoUsageError", "check_arguments", "run_demo"]

STREAM = "demo"
MAX_RECORDS = 1_000_000_000
MAX_SIZE = 16 << 20  # the listener's max_record
CHUNK_BYTES = 8 << 20  # payload bytes built per step (at most CHUNK records)
READY_TIMEOUT = 30.0  # seconds for the child to print its ready line
STALL_TIMEOUT = 60.0  # seconds without progress on `stored` before giving up
STOP_TIMEOUT = 60.0  # seconds for the child to flush its listener and stop, or to exit
CHUNK = 10_000  # records built per step; only the queue calls are timed
_FILLER = b"purelink demo record " * 64


class DemoError(Exception):
    """The demo could not run or its read-back differed; the message is one line."""


class DemoUsageError(DemoError):
    """Arguments the demo cannot run with (exit 2)."""


class _Stopped(BaseException):
    """SIGTERM or SIGHUP: unwind like Ctrl-C, cleaning up on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def check_arguments(records: int, size: int, tmp: str | None = None) -> None:
    """Raise DemoUsageError for arguments that cannot work, before anything starts."""
    if not 1 <= records <= MAX_RECORDS:
        raise DemoUsageError(f"--records must be 1 to {MAX_RECORDS:,}, not {records:,}")
    if not 8 <= size <= MAX_SIZE:
        raise DemoUsageError(
            f"--size must be 8 to {MAX_SIZE:,} bytes (the listener's max_record), not {size:,}"
        )
    where = tmp or tempfile.gettempdir()
    need = _store_bytes(records, size)
    free = shutil.disk_usage(where).free
    if need > free:
        raise DemoUsageError(
            f"{counted(records, 'record')} of {size:,} B need about {need / 1e9:,.1f} GB "
            f"in {where}, "
            f"which has {free / 1e9:,.1f} GB free (set TMPDIR, or ask for fewer)"
        )


def _store_bytes(records: int, size: int) -> int:
    """What the temporary store will take: payload, ~12 B of framing per record
    (a record's length, a 40-byte batch header per ~20 small records), a margin."""
    return int(records * (size + 12) * 1.1) + (64 << 20)


def _chunk(size: int) -> int:
    """Records built per step: 10,000 small ones, fewer large ones (memory stays bounded)."""
    return max(1, min(CHUNK, CHUNK_BYTES // size))


def _payloads(start: int, stop: int, size: int) -> list[bytes]:
    tail = (_FILLER * (size // len(_FILLER) + 1))[: size - 8]
    return [i.to_bytes(8, "big") + tail for i in range(start, stop)]


class _Server:
    """The listener child process: started, its ready line read, stopped, let go."""

    def __init__(self, workdir: Path) -> None:
        self.data = workdir / "data"
        self.log_path = workdir / "serve.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 -- closed in stop()/release()
        self._out = b""
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "purelink.cli.demo_listener", str(workdir)],
            stdin=subprocess.PIPE,  # the tie: its end tells the child to clean up
            stdout=subprocess.PIPE,
            stderr=self._log,
            # Its own session: a Ctrl-C or a hang-up in the terminal reaches only
            # the demo, which then stops the child itself (in `release`), in order.
            start_new_session=True,
        )

    def _line(self, timeout: float, what: str) -> str:
        """The next line the child prints on stdout, within `timeout` seconds."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._out:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DemoError(f"the listener printed no {what} in {timeout:.0f} s")
            readable, _, _ = select.select([fd], [], [], left)
            if readable:
                chunk = os.read(fd, 4096)
                if not chunk:
                    self.proc.wait()
                    raise DemoError(f"the listener exited early: {self.last_log_line()}")
                self._out += chunk
        line, _, self._out = self._out.partition(b"\n")
        return line.decode(errors="replace")

    def ready(self) -> str:
        """Wait for the ready line; return the UDP address "HOST:PORT"."""
        line = self._line(READY_TIMEOUT, "ready line")
        found = re.search(r"\budp=(\S+)", line)
        if not line.startswith("purelink listening ") or found is None:
            raise DemoError(f"unexpected ready line from the listener: {line!r}")
        return found.group(1)

    def check_alive(self) -> None:
        code = self.proc.poll()
        if code is not None:
            raise DemoError(f"the listener exited with code {code}: {self.last_log_line()}")

    def stop(self) -> dict[str, Any]:
        """Ask the child to stop its listener; return the counters of its `stopped` line."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(b"stop\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise DemoError(f"the listener exited: {self.last_log_line()}") from None
        line = self._line(STOP_TIMEOUT, "counters when it stopped")
        prefix = "purelink serve: stopped "
        if not line.startswith(prefix):
            raise DemoError(f"unexpected line from the listener: {line[:80]!r}")
        stats: dict[str, Any] = json.loads(line[len(prefix) :])
        return stats

    def release(self) -> None:
        """End the tie: the child stops (if it still serves), removes the
        temporary directory, and exits; killed if it takes too long."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()

    def last_log_line(self) -> str:
        self._log.flush()
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no output)"
        return lines[-1] if lines else "(no output)"


class _Told:
    """on_stored callback: notes when the link is told the last record is stored."""

    def __init__(self, last: int) -> None:
        self.last = last
        self.at: float | None = None

    def __call__(self, seq: int) -> None:
        if seq >= self.last and self.at is None:
            self.at = time.perf_counter()


def _queue_all(link: Link, records: int, size: int, server: _Server) -> int:
    """Queue records 1..N one at a time; return the ns spent inside the queue loops."""
    progress = Progress("queue ", records)
    queue = link.queue
    queue_ns = 0
    clock = time.perf_counter_ns
    chunk = _chunk(size)
    for start in range(1, records + 1, chunk):
        it = iter(_payloads(start, min(start + chunk, records + 1), size))
        while True:
            t0 = clock()
            try:
                for payload in it:
                    queue(payload)
            except Full:
                queue_ns += clock() - t0
                # `payload` was refused: wait for room (never drop), queue it, go on.
                while True:
                    server.check_alive()
                    link.wait_stored(min(link.stored + 1, link.queued), timeout=0.1)
                    try:
                        queue(payload)
                        break
                    except Full:
                        continue
                continue
            queue_ns += clock() - t0
            break
        progress.update(link.queued)
    progress.close(link.queued)
    return queue_ns


def _wait_all_stored(link: Link, records: int, server: _Server, since: float) -> None:
    progress = Progress("stored", records, since=since)
    last_seen, last_move = link.stored, time.monotonic()
    while not link.wait_stored(timeout=0.1):
        stored = link.stored
        progress.update(stored)
        now = time.monotonic()
        if stored != last_seen:
            last_seen, last_move = stored, now
        elif now - last_move > STALL_TIMEOUT:
            raise DemoError(
                f"no progress for {STALL_TIMEOUT:.0f} s: "
                f"{stored:,} of {counted(records, 'record')} stored"
            )
        server.check_alive()
    progress.close(link.stored)


def _read_back(data: Path, records: int, size: int) -> str | None:
    """Compare the stream with what was sent; return None if equal, else what differs."""
    store = Store(str(data))
    progress = Progress("read  ", records)
    chunk = _chunk(size)
    expected: Iterator[bytes] = (
        p
        for s in range(1, records + 1, chunk)
        for p in _payloads(s, min(s + chunk, records + 1), size)
    )
    count = 0
    for position, payload in store.read(STREAM, start=1, stop=None):
        count += 1
        want = next(expected, None)
        if position != count:
            return f"record {count} is at position {position}"
        if payload != want:
            return f"position {position} holds different bytes ({len(payload)} B)"
        if count % chunk == 0:
            progress.update(count)
    progress.close(count)
    if count != records:
        return f"{counted(count, 'record')} read back, {records:,} sent"
    return None


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Ignore SIGINT, SIGTERM and SIGHUP inside; restore the handlers after."""
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in stops}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    vwidth = max(len(v.split("  ")[0]) for _, v in rows)
    lines = []
    for key, value in rows:
        number, _, note = value.partition("  ")
        lines.append(f"  {key.ljust(width)}  {number.rjust(vwidth)}  {note}".rstrip())
    return "\n".join(lines)


def run_demo(records: int, size: int) -> int:
    """Run the demo and print its summary; raise DemoError on failure; return 0
    (or 128 + the signal's number after SIGTERM or SIGHUP, cleaned up)."""
    check_arguments(records, size)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise _Stopped(signum)

    stops = (signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, on_signal) for sig in stops}
    try:
        return _run(records, size)
    except _Stopped as stop:
        name = signal.Signals(stop.signum).name
        sys.stderr.write(f"purelink demo: stopped by {name}; the listener and its store are gone\n")
        return 128 + stop.signum
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(records: int, size: int) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="purelink-demo-"))
    server: _Server | None = None
    link: Link | None = None
    try:
        server = _Server(workdir)
        address = server.ready()
        url = f"udp://{address}"
        told = _Told(records)
        link = connect(url, stream=STREAM, on_stored=told)
        t_first, since = time.perf_counter(), time.monotonic()
        queue_ns = _queue_all(link, records, size, server)
        _wait_all_stored(link, records, server, since)
        t_told = told.at if told.at is not None else time.perf_counter()
        stats = link.stats()
        link.close()
        link = None
        served = server.stop()
        differs = _read_back(server.data, records, size)
    finally:
        # a second SIGTERM/SIGHUP (or a Ctrl-C) must not cut the cleanup short
        with _signals_held():
            if link is not None:
                link.close(timeout=0)
            if server is not None:
                server.release()
            shutil.rmtree(workdir, ignore_errors=True)

    seconds = max(t_told - t_first, 1e-9)
    wakeups = int(getattr(stats, "wakeups", 0))
    print(f"purelink demo: {counted(records, 'record')} of {size} B, one link to {url}, sync=batch")
    print(
        _table(
            [
                ("records", f"{records:,}"),
                ("bytes", f"{records * size:,}"),
                ("records/s", f"{records / seconds:,.0f}  first queue -> last told"),
                ("seconds", f"{seconds:.3f}"),
                ("ns per queue call", f"{queue_ns / records:,.0f}"),
                ("wakeups", f"{wakeups:,}  eventfd writes"),
                ("wakeups per 1,000 records", f"{wakeups * 1000 / records:.2f}"),
                ("datagrams sent", f"{int(getattr(stats, 'datagrams', 0)):,}"),
                ("datagrams received", f"{int(served.get('datagrams', 0)):,}  listener"),
                ("syncs", f"{int(served.get('syncs', 0)):,}  fdatasync calls, listener"),
                ("read-back", "OK  byte for byte" if differs is None else "DIFFERS"),
            ]
        ),
        flush=True,
    )
    if differs is not None:
        raise DemoError(f"read-back differs: {differs}")
    return 0
