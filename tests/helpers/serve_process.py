"""`purelink serve` as a real child process, for the integration tests.

Starts it, waits for its ready line (with a deadline, reading the pipe with
select: no sleeps), restarts it on the same port, stops it with real signals.
It logs with `--log-format json` (unless `extra` says otherwise): `logs` holds
every record, and `last_stats` the listener's counters of the last stop, the
stop record's `stats` field (its text line is one human sentence).
The child runs with `-W error`, and a traceback on its stderr fails the test
that ran it (thread_guard.py), as an exception on an in-process thread does.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from helpers import thread_guard
from purelink.testing.ports import free_port

READY = re.compile(r"^purelink listening (?:udp=\S+:(\d+) )?(?:tcp=\S+:(\d+) )?data=(.+)$")


class ServeProcess:
    """One `purelink serve` child; `port` stays the same across restarts (0, the
    default: one free for TCP and UDP alike below the ephemeral range, so that
    nothing takes it while a restart leaves it unbound: purelink.testing.ports).
    `transport` "tcp" serves tcp:// only (`--no-udp --tcp`)."""

    def __init__(
        self,
        data: Path,
        *,
        port: int = 0,
        sync: str = "batch",
        extra: Sequence[str] = (),
        transport: str = "udp",
    ) -> None:
        self.data = data
        self.transport = transport
        self.port = port or free_port(both=True)
        self.sync = sync
        self.extra = list(extra)  # more `purelink serve` arguments, e.g. --segment-bytes
        self.stderr = ""  # what every run so far wrote to stderr (logs, the stop line)
        self.logs: list[dict[str, Any]] = []  # every run's log records, decoded
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_line = ""
        self.last_stats: dict[str, Any] | None = None

    @property
    def url(self) -> str:
        return f"{self.transport}://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> ServeProcess:
        cmd = [
            sys.executable, "-W", "error", "-m", "purelink", "serve", "--data", str(self.data),
            "--udp", f"127.0.0.1:{self.port}", "--sync", self.sync, "--log-format", "json",
            *self.extra,
        ]  # fmt: skip
        if self.transport == "tcp":
            at = cmd.index("--udp")
            cmd[at : at + 2] = ["--no-udp", "--tcp", f"127.0.0.1:{self.port}"]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        buf = b""
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(left, 0))
            if not ready:
                self.kill()
                raise TimeoutError("purelink serve printed no ready line")
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"purelink serve exited before it was ready: {err}")
            buf += chunk
        self.ready_line = buf.decode().split("\n", 1)[0]
        m = READY.match(self.ready_line)
        assert m, self.ready_line
        port = m.group(2) if self.transport == "tcp" else m.group(1)
        assert port, self.ready_line
        self.port = int(port)
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        """Send `sig`, wait for the exit, return the exit code."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        _, err = self.proc.communicate(timeout=timeout)
        for record in self._took(err):
            if record.get("logger") == "purelink.serve" and "stats" in record:
                self.last_stats = record["stats"]
        code = self.proc.returncode
        self.proc = None
        return code

    def kill(self) -> None:
        """SIGKILL: no flush, no sync, no goodbye."""
        if self.proc is not None:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=20)
            self._took(err)
            self.proc = None

    def _took(self, err: bytes) -> list[dict[str, Any]]:
        """Keep what the child wrote to stderr, and return its log records (the
        lines that are JSON objects); a traceback there fails the test."""
        text = err.decode(errors="replace")
        self.stderr += text
        if thread_guard.TRACEBACK in text:
            thread_guard.note(f"purelink serve wrote a traceback to stderr:\n{text}")
        records = []
        for line in text.splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    records.append(json.loads(line))
        self.logs += records
        return records

    def restart(self) -> ServeProcess:
        return self.start()

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.stop(signal.SIGTERM)
