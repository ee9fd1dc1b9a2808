"""The command line under Python's development mode with warnings as errors.

Why it exists: a deprecated interpreter behaviour shows first as a warning
that nobody sees (DeprecationWarning is hidden outside __main__), then as a
failure on the next Python.  Development mode shows them all, and ResourceWarnings
for a socket or a file left open; `-W error` makes each one fatal.  The demo
and serve/send/read/streams/tail run here as a user runs them, each process and
its children in that mode (PYTHONDEVMODE, PYTHONWARNINGS are inherited), and
none may print a warning.  .ci/run runs this on every interpreter it tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers.serve_process import ServeProcess

PURELINK = [sys.executable, "-m", "purelink"]


@pytest.fixture(autouse=True)
def _dev_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONDEVMODE", "1")
    monkeypatch.setenv("PYTHONWARNINGS", "error")


def run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    out = subprocess.run(
        [*PURELINK, *args], input=stdin, capture_output=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    assert b"Warning" not in out.stderr, out.stderr.decode(errors="replace")
    return out


def test_demo() -> None:
    out = run("demo", "--records", "20000")
    assert b"read-back" in out.stdout
    assert b"OK" in out.stdout


def test_serve_send_read_streams_tail(tmp_path: Path) -> None:
    lines = b"".join(b"record %d\n" % i for i in range(2000))
    server = ServeProcess(tmp_path / "d", extra=["--tcp", "127.0.0.1:0"])
    with server:
        run("send", server.url, "--stream", "dev", stdin=lines)
        tcp = server.ready_line.split("tcp=", 1)[1].split()[0]
        tailed = run("tail", f"tcp://{tcp}", "--stream", "dev")
        assert tailed.stdout == lines
    assert "Warning" not in server.stderr, server.stderr
    assert run("read", "--data", str(tmp_path / "d"), "--stream", "dev").stdout == lines
    assert b"dev" in run("streams", "--data", str(tmp_path / "d")).stdout
