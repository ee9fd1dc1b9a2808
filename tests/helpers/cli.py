"""The command line as the tests run it: `python -m purelink` in a child, a
`serve` process that answers, one-line error checks and keys files."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

PURELINK = [sys.executable, "-m", "purelink"]


TIMEOUT = 60.0  # seconds any one command may take before the test fails


def run(
    *args: str, stdin: bytes = b"", timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*PURELINK, *args], input=stdin, capture_output=True, timeout=timeout, check=False
    )


VERBS = ("serve", "send", "read", "tail", "streams", "demo", "bench")


def error_prefix(argv: Sequence[str]) -> str:
    """How the error line of `purelink *argv` starts: `purelink VERB: error: `, or
    `purelink: error: ` when argv names no verb."""
    verb = argv[0] if argv else ""
    return f"purelink {verb}: error: " if verb in VERBS else "purelink: error: "


def assert_one_line_error(result: subprocess.CompletedProcess[bytes], code: int) -> str:
    """Exit `code`, nothing on stdout, and exactly one `purelink VERB: error:` line on stderr."""
    err = result.stderr.decode(errors="replace")
    assert result.returncode == code, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    argv = [str(a) for a in result.args]
    after = argv.index("purelink") + 1 if "purelink" in argv else len(PURELINK)
    assert lines[0].startswith(error_prefix(argv[after:])), err
    assert result.stdout == b""
    return lines[0]


def read_line(stream: int, timeout: float) -> bytes:
    """One line from a pipe's fd, waiting at most `timeout` seconds in total."""
    deadline = time.monotonic() + timeout
    buf = b""
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        ready, _, _ = select.select([stream], [], [], max(left, 0))
        if not ready:
            raise AssertionError(f"no line within {timeout} s (got {buf!r})")
        byte = os.read(stream, 1)  # one byte at a time: leave the rest in the pipe
        if not byte:
            raise AssertionError(f"EOF before a whole line (got {buf!r})")
        buf += byte
    return buf


class Server:
    """A running `purelink serve` child and what its ready line said."""

    def __init__(self, proc: subprocess.Popen[bytes], line: str, data: Path) -> None:
        self.proc = proc
        self.line = line
        self.data = data
        found = re.search(r"udp=(\S+)", line)
        self.udp = found.group(1) if found else ""
        self.url = f"udp://{self.udp}"

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        """Signal the server, wait for it, return (exit code, stderr)."""
        self.proc.send_signal(sig)
        _, err = self.proc.communicate(timeout=TIMEOUT)
        return self.proc.returncode, err.decode(errors="replace")


@contextlib.contextmanager
def serving(data: Path, *args: str) -> Iterator[Server]:
    proc = subprocess.Popen(
        [*PURELINK, "serve", "--data", str(data), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        try:
            line = read_line(proc.stdout.fileno(), TIMEOUT).decode()
        except AssertionError:
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(f"serve did not get ready: {err.decode()}") from None
        yield Server(proc, line.rstrip("\n"), data)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def keys_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "keys"
    path.write_text(text)
    path.chmod(mode)
    return path


def line(key_id: str, secret: bytes, patterns: str) -> str:
    return f"{key_id} {base64.b64encode(secret).decode()} {patterns}\n"
