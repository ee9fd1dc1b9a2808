"""`purelink demo`: the product's main job in one command (SPEC sections 4 and 10).

Why it exists: `pip install . && purelink demo` is how a new machine proves
the whole path works and how fast it is.  The demo does what a user would:

1. start `python -m purelink serve --udp 127.0.0.1:0` as a child process with a
   temporary store, and learn its port from the ready line;
2. connect one link and queue N distinct records one at a time, timing only
   the `queue` calls (ns per call = time in the queue loop / N);
3. wait until the link is told all are stored (first queue -> last told gives
   records/s), then take the link's counters and close it;
4. SIGTERM the listener and parse its `purelink serve: stopped {...}` line for
   the listener's counters (syncs, datagrams received);
5. read every record back with `Store` and compare byte for byte.

Record i (1-based) is its index as 8 big-endian bytes plus a fixed filler, so
records are distinct and record i must be at position i (one link, a fresh
store).  The child and the temporary directory are cleaned up on every path.
"""

from __future__ import annotations

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
from typing import Any

from . import Full, Link, Store, connect
from ._progress import Progress

__all__ = ["DemoError", "run_demo"]

STREAM = "demo"
READY_TIMEOUT = 30.0  # seconds for the child to print its ready line
STALL_TIMEOUT = 60.0  # seconds without progress on `stored` before giving up
STOP_TIMEOUT = 60.0  # seconds for the child to flush and exit after SIGTERM
CHUNK = 10_000  # records built per step; only the queue calls are timed
_FILLER = b"purelink demo record " * 64


class DemoError(Exception):
    """The demo could not run or its read-back differed; the message is one line."""


def _payloads(start: int, stop: int, size: int) -> list[bytes]:
    tail = (_FILLER * (size // len(_FILLER) + 1))[: size - 8]
    return [i.to_bytes(8, "big") + tail for i in range(start, stop)]


class _Server:
    """The listener child process: started, its ready line read, stopped."""

    def __init__(self, workdir: Path) -> None:
        self.data = workdir / "data"
        self.log_path = workdir / "serve.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 -- closed in stop()/kill()
        command = [sys.executable, "-m", "purelink", "serve", "--data", str(self.data)]
        self.proc = subprocess.Popen(
            [*command, "--udp", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
            # Its own session: a Ctrl-C in the terminal reaches only the demo,
            # which then stops the child itself (in `kill`), in order.
            start_new_session=True,
        )

    def ready(self) -> str:
        """Wait for the ready line; return the UDP address "HOST:PORT"."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + READY_TIMEOUT
        buf = b""
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DemoError(f"the listener printed no ready line in {READY_TIMEOUT:.0f} s")
            readable, _, _ = select.select([fd], [], [], left)
            if readable:
                chunk = os.read(fd, 4096)
                if not chunk:
                    self.proc.wait()
                    raise DemoError(f"the listener exited early: {self.last_log_line()}")
                buf += chunk
        line = buf.partition(b"\n")[0].decode(errors="replace")
        found = re.search(r"\budp=(\S+)", line)
        if not line.startswith("purelink listening ") or found is None:
            raise DemoError(f"unexpected ready line from the listener: {line!r}")
        return found.group(1)

    def check_alive(self) -> None:
        code = self.proc.poll()
        if code is not None:
            raise DemoError(f"the listener exited with code {code}: {self.last_log_line()}")

    def stop(self) -> dict[str, Any]:
        """SIGTERM, wait, and return the counters of its `stopped` line."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise DemoError(f"the listener did not stop in {STOP_TIMEOUT:.0f} s") from None
        self._log.close()
        if code != 0:
            raise DemoError(f"the listener exited with code {code}: {self.last_log_line()}")
        prefix = "purelink serve: stopped "
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith(prefix):
                stats: dict[str, Any] = json.loads(line[len(prefix) :])
                return stats
        raise DemoError("the listener did not report its counters when it stopped")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()

    def last_log_line(self) -> str:
        self._log.flush()
        lines = self.log_path.read_text(errors="replace").strip().splitlines()
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
    for start in range(1, records + 1, CHUNK):
        it = iter(_payloads(start, min(start + CHUNK, records + 1), size))
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
                f"no progress for {STALL_TIMEOUT:.0f} s: {stored:,} of {records:,} records stored"
            )
        server.check_alive()
    progress.close(link.stored)


def _read_back(data: Path, records: int, size: int) -> str | None:
    """Compare the stream with what was sent; return None if equal, else what differs."""
    store = Store(str(data))
    progress = Progress("read  ", records)
    expected: Iterator[bytes] = (
        p
        for s in range(1, records + 1, CHUNK)
        for p in _payloads(s, min(s + CHUNK, records + 1), size)
    )
    count = 0
    for position, payload in store.read(STREAM, start=1, stop=None):
        count += 1
        want = next(expected, None)
        if position != count:
            return f"record {count} is at position {position}"
        if payload != want:
            return f"position {position} holds different bytes ({len(payload)} B)"
        if count % CHUNK == 0:
            progress.update(count)
    progress.close(count)
    if count != records:
        return f"{count:,} records read back, {records:,} sent"
    return None


def _table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    vwidth = max(len(v.split("  ")[0]) for _, v in rows)
    lines = []
    for key, value in rows:
        number, _, note = value.partition("  ")
        lines.append(f"  {key.ljust(width)}  {number.rjust(vwidth)}  {note}".rstrip())
    return "\n".join(lines)


def run_demo(records: int, size: int) -> int:
    """Run the demo and print its summary; raise DemoError on failure; return 0."""
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
        if link is not None:
            link.close(timeout=0)
        if server is not None:
            server.kill()
        shutil.rmtree(workdir, ignore_errors=True)

    seconds = max(t_told - t_first, 1e-9)
    wakeups = int(getattr(stats, "wakeups", 0))
    print(f"purelink demo: {records:,} records of {size} B, one link to {url}, sync=batch")
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
