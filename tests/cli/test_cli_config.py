"""`purelink serve` configured by the environment and by `--config FILE`, run for real.

Why it exists: SPEC §4 -- every serve option can come from `PURELINK_<NAME>` and
from a TOML file; a flag wins over the environment, the environment over the
file; sizes take K/M/G/T, durations s/m/h/d.  Each test starts the real command
and looks at what the listener does: the ready line says what it bound (each
layer binds a different loopback address, port 0, so no port can be taken
meanwhile), a record over a `max-record` given as `1K` is refused naming 1024,
a `read-timeout` of `500ms` closes an idle connection.  A bad file or value is
one line naming where it came from, exit 2.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.cli import PURELINK, TIMEOUT, assert_one_line_error, read_line, run


@contextlib.contextmanager
def _serving(args: list[str], env: dict[str, str]) -> Iterator[str]:
    """`purelink serve ARGS` with `env` added to the environment; yields its ready line."""
    proc = subprocess.Popen(
        [*PURELINK, "serve", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **env},
    )
    try:
        assert proc.stdout is not None
        try:
            line = read_line(proc.stdout.fileno(), TIMEOUT).decode().rstrip("\n")
        except AssertionError:
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(f"serve did not get ready: {err.decode()}") from None
        yield line
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=TIMEOUT)
        assert "Traceback" not in err.decode(errors="replace")


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "serve.toml"
    path.write_text(text)
    return path


def _address(line: str, transport: str) -> str:
    """The host of `transport` in the ready line, '' if it is not there."""
    found = re.search(rf"\b{transport}=(\S+):\d+\b", line)
    return found.group(1) if found else ""


@pytest.mark.parametrize(
    ("env_udp", "flag_udp", "expected"),
    [
        (None, None, "127.0.0.2"),  # the file's
        ("127.0.0.3:0", None, "127.0.0.3"),  # the environment over the file
        ("127.0.0.3:0", "127.0.0.4:0", "127.0.0.4"),  # the flag over both
    ],
    ids=["file", "env-over-file", "flag-over-env"],
)
def test_flags_win_over_the_environment_which_wins_over_the_file(
    tmp_path: Path, env_udp: str | None, flag_udp: str | None, expected: str
) -> None:
    data = tmp_path / "data"
    config = _config(tmp_path, f'data = "{data}"\nudp = "127.0.0.2:0"\nsync = "always"\n')
    env = {"PURELINK_UDP": env_udp} if env_udp else {}
    flags = ["--udp", flag_udp] if flag_udp else []
    with _serving(["--config", str(config), *flags], env) as line:
        assert _address(line, "udp") == expected, line
        assert line.endswith(f" data={data}"), line  # --data from the file alone


def test_everything_from_the_environment_with_the_file_named_there_too(tmp_path: Path) -> None:
    config = _config(tmp_path, 'tcp = "127.0.0.5:0"\n')
    env = {
        "PURELINK_CONFIG": str(config),
        "PURELINK_DATA": str(tmp_path / "data"),
        "PURELINK_NO_UDP": "yes",
        "PURELINK_RETAIN_BYTES": "1G",
        "PURELINK_RETAIN_AGE": "7d",
        "PURELINK_MIN_FREE": "1M",
    }
    with _serving([], env) as line:
        assert _address(line, "udp") == "", line  # PURELINK_NO_UDP
        assert _address(line, "tcp") == "127.0.0.5", line  # the file PURELINK_CONFIG names


@pytest.mark.parametrize(
    ("text", "env"),
    [("max-record = 1024", {}), ('max_record = "1K"', {}), ("", {"PURELINK_MAX_RECORD": "1KiB"})],
    ids=["file-int", "file-size", "env-size"],
)
def test_a_size_from_the_file_or_environment_reaches_the_listener(
    tmp_path: Path, text: str, env: dict[str, str]
) -> None:
    config = _config(tmp_path, f'data = "{tmp_path / "data"}"\nudp = "127.0.0.1:0"\n{text}\n')
    with _serving(["--config", str(config)], env) as line:
        url = f"udp://127.0.0.1:{line.split('udp=127.0.0.1:')[1].split()[0]}"
        result = run("send", url, "--stream", "s", "--timeout", "30s", stdin=b"x" * 1025 + b"\n")
        message = assert_one_line_error(result, 1)
        assert "larger than max_record (1024)" in message, message
        fits = run("send", url, "--stream", "s", "--timeout", "30s", stdin=b"x" * 1024 + b"\n")
        assert fits.returncode == 0, fits.stderr.decode()


def test_a_duration_from_the_environment_reaches_the_listener(tmp_path: Path) -> None:
    """PURELINK_READ_TIMEOUT=500ms: a connection that opens no session is closed
    long before the default 10 s."""
    env = {"PURELINK_READ_TIMEOUT": "500ms", "PURELINK_TCP": "127.0.0.1:0"}
    with _serving(["--data", str(tmp_path / "data"), "--no-udp"], env) as line:
        port = int(line.split("tcp=127.0.0.1:")[1].split()[0])
        with socket.create_connection(("127.0.0.1", port), timeout=5.0) as conn:
            started = time.monotonic()
            assert conn.recv(1) == b""  # closed by the listener, not by our 5 s timeout
            assert time.monotonic() - started < 5.0


def test_sizes_and_durations_on_the_command_line(tmp_path: Path) -> None:
    args = ["--data", str(tmp_path / "data"), "--udp", "127.0.0.1:0", "--retain-bytes", "1G"]
    with _serving([*args, "--retain-age", "7d", "--segment-bytes", "64MiB"], {}) as line:
        assert _address(line, "udp") == "127.0.0.1", line


def test_send_takes_a_duration_for_its_timeout() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as nobody:
        nobody.bind(("127.0.0.1", 0))  # bound, never answers
        url = f"udp://127.0.0.1:{nobody.getsockname()[1]}"
        started = time.monotonic()
        result = run("send", url, "--stream", "s", "--timeout", "300ms", stdin=b"x\n")
        assert_one_line_error(result, 1)
        assert time.monotonic() - started < 8.0  # not the default 10 s


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("retian-bytes = 1", {}, "serve.toml: unknown option 'retian-bytes'"),
        ("retain-bytes = 'lots'", {}, "serve.toml: retain-bytes: not a size: 'lots'"),
        ("retain-age = '1 week'", {}, "serve.toml: retain-age: not a duration: '1 week'"),
        ("data = ", {}, "serve.toml: not valid TOML"),
        ("", {"PURELINK_RETAIN_BYTES": "1X"}, "PURELINK_RETAIN_BYTES: not a size: '1X'"),
        ("", {"PURELINK_INSECURE": "maybe"}, "PURELINK_INSECURE: not a yes or no"),
        ("", {"PURELINK_SYNC": "often"}, "PURELINK_SYNC: 'often' is not one of batch"),
        ("", {"PURELINK_MAX_RECORD": "17M"}, "PURELINK_MAX_RECORD: must be at most"),
    ],
)
def test_a_bad_file_or_value_is_one_line_naming_its_source_and_exit_2(
    tmp_path: Path, text: str, env: dict[str, str], message: str
) -> None:
    config = _config(tmp_path, text)
    result = subprocess.run(
        [*PURELINK, "serve", "--data", str(tmp_path / "data"), "--config", str(config)],
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
        env={**os.environ, **env},
    )
    line = assert_one_line_error(result, 2)
    assert message in line, line
    assert not (tmp_path / "data").exists()  # refused before anything was made


def test_an_unreadable_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = run("serve", "--data", str(tmp_path / "data"), "--config", str(tmp_path))
    line = assert_one_line_error(result, 2)
    assert f"cannot read --config {str(tmp_path)!r}" in line, line
