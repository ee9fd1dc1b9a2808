"""The `purelink` command line, run as a user runs it: `python -m purelink ...`.

Why it exists: the CLI contract of the README's command line (verbs, flags, the exact
ready line, exit codes 0/1/2/130, one-line errors, never a traceback) is
public, and other people's scripts parse it.  Every test here starts a real
process; the ones that move records start a real `purelink serve` on port 0
with a temporary store.  Waits are bounded reads with `select`, never sleeps.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from helpers.cli import PURELINK, TIMEOUT, Server, assert_one_line_error, read_line, run, serving


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with serving(tmp_path / "data", "--udp", "127.0.0.1:0") as srv:
        yield srv


# --- bad arguments: one line, exit 2, no traceback, for every verb ---

BAD_ARGUMENTS = [
    ["nope"],
    ["--bogus"],
    ["serve"],
    ["serve", "--data"],
    ["serve", "--data", "{tmp}", "--udp", "nonsense"],
    ["serve", "--data", "{tmp}", "--udp", "127.0.0.1:99999"],
    ["serve", "--data", "{tmp}", "--udp", "::1:7400"],
    ["serve", "--data", "{tmp}", "--tcp", "localhost"],
    ["serve", "--data", "{tmp}", "--sync", "sometimes"],
    ["serve", "--data", "{tmp}", "--udp", "none"],
    ["serve", "--data", "{tmp}", "--secret-file", "{tmp}/missing"],
    ["serve", "--data", "{tmp}", "--extra"],
    ["send"],
    ["send", "udp://127.0.0.1:7400"],
    ["send", "http://127.0.0.1:7400", "--stream", "s"],
    ["send", "udp://127.0.0.1", "--stream", "s"],
    ["send", "udp://127.0.0.1:0", "--stream", "s"],
    ["send", "udp://127.0.0.1:7400", "--stream", "../etc"],
    ["send", "udp://127.0.0.1:7400", "--stream", ".hidden"],
    ["send", "udp://127.0.0.1:7400", "--stream", "x" * 201],
    ["send", "udp://127.0.0.1:7400", "--stream", "s", "--file", "{tmp}/missing"],
    ["send", "udp://127.0.0.1:7400", "--stream", "s", "--timeout", "0"],
    ["send", "udp://127.0.0.1:7400", "--stream", "s", "--secret-file", "{tmp}/missing"],
    ["read", "--data", "{tmp}"],
    ["read", "--stream", "s"],
    ["read", "--data", "{tmp}", "--stream", "a/b"],
    ["read", "--data", "{tmp}", "--stream", "s", "--from", "0"],
    ["read", "--data", "{tmp}", "--stream", "s", "--from", "x"],
    ["read", "--data", "{tmp}", "--stream", "s", "--from", "5", "--to", "4"],
    ["read", "--data", "{tmp}", "--stream", "s", "--format", "xml"],
    ["read", "--data", "{tmp}/missing", "--stream", "s"],
    ["streams"],
    ["streams", "--data", "{tmp}/missing"],
    ["demo", "--records", "-1"],
    ["demo", "--records", "many"],
    ["demo", "--size", "3"],
    ["demo", "--size", "20000000"],
    ["serve", "--data", ""],
    ["streams", "--data", ""],
    ["send", "udp://127.0.0.1:7400", "--stream", "s", "--producer", "p/1"],
    ["tail", "tcp://127.0.0.1:7400", "--stream", "s", "--from", "18446744073709551616"],
    ["bench", "--bogus"],
]


@pytest.mark.parametrize("args", BAD_ARGUMENTS, ids=lambda a: " ".join(a)[:60])
def test_bad_arguments_give_one_line_and_exit_2(tmp_path: Path, args: list[str]) -> None:
    assert_one_line_error(run(*(a.replace("{tmp}", str(tmp_path)) for a in args)), 2)


def test_help_lists_the_verbs() -> None:
    result = run("--help")
    assert result.returncode == 0
    for verb in ("serve", "send", "read", "streams", "demo", "bench"):
        assert verb in result.stdout.decode()


@pytest.mark.parametrize("address", ["0.0.0.0:0", "[::]:0"])
@pytest.mark.parametrize("flag", ["--udp", "--tcp"])
def test_serve_refuses_a_public_address_without_a_secret(
    tmp_path: Path, flag: str, address: str
) -> None:
    line = assert_one_line_error(run("serve", "--data", str(tmp_path), flag, address), 2)
    assert "--secret-file" in line
    assert "--insecure" in line
    assert not any(tmp_path.iterdir()), "nothing may be created before refusing"


# --- serve ---


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_prints_the_ready_line_and_stops_cleanly(tmp_path: Path, sig: int) -> None:
    data = tmp_path / "data"
    with serving(data, "--udp", "127.0.0.1:0") as srv:
        found = re.fullmatch(r"purelink listening udp=127\.0\.0\.1:(\d+) data=(.*)", srv.line)
        assert found, srv.line
        assert int(found.group(1)) != 0, "the ready line shows the bound port"
        assert srv.line == f"purelink listening udp=127.0.0.1:{found.group(1)} data={data}"
        code, err = srv.stop(sig)
    assert code == 0, err
    assert "Traceback" not in err
    stopped = [ln for ln in err.splitlines() if " purelink.serve: stopped after " in ln]
    assert len(stopped) == 1, err
    assert stopped[0].endswith(": 0 records stored in 0 streams; 0 dropped"), err


def test_serve_with_udp_and_tcp_names_both(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serving(data, "--udp", "127.0.0.1:0", "--tcp", "127.0.0.1:0") as srv:
        found = re.fullmatch(
            r"purelink listening udp=127\.0\.0\.1:(\d+) tcp=127\.0\.0\.1:(\d+) data=(.*)", srv.line
        )
        assert found, srv.line
        assert found.group(3) == str(data)
        assert srv.stop()[0] == 0


def test_serve_tcp_only(tmp_path: Path) -> None:
    with serving(tmp_path / "data", "--no-udp", "--tcp", "127.0.0.1:0") as srv:
        assert re.fullmatch(r"purelink listening tcp=127\.0\.0\.1:\d+ data=.*", srv.line)
        assert srv.stop()[0] == 0


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback")
def test_serve_prints_ipv6_in_brackets(tmp_path: Path) -> None:
    with serving(tmp_path / "data", "--udp", "[::1]:0") as srv:
        assert re.fullmatch(r"purelink listening udp=\[::1\]:[1-9]\d* data=.*", srv.line)
        assert srv.stop()[0] == 0


def test_serve_insecure_binds_a_public_address(tmp_path: Path) -> None:
    with serving(tmp_path / "data", "--udp", "0.0.0.0:0", "--insecure") as srv:
        assert re.fullmatch(r"purelink listening udp=0\.0\.0\.0:[1-9]\d* data=.*", srv.line)
        assert srv.stop()[0] == 0


def test_serve_address_in_use_is_one_line_exit_1(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as busy:
        busy.bind(("127.0.0.1", 0))
        port = busy.getsockname()[1]
        result = run("serve", "--data", str(tmp_path / "data"), "--udp", f"127.0.0.1:{port}")
    assert_one_line_error(result, 1)


# --- send ---


def test_send_to_a_silent_port_is_one_line_exit_1() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))  # bound, so no ICMP; never answers
        url = f"udp://127.0.0.1:{silent.getsockname()[1]}"
        result = run("send", url, "--stream", "s", "--timeout", "1", stdin=b"x\n")
    assert_one_line_error(result, 1)


def test_send_then_read_both_formats_and_slices(server: Server) -> None:
    lines = b"alpha\nbeta\n\ngamma\r\nlast"  # an empty record; \r is payload; no final \n
    sent = run("send", server.url, "--stream", "t", stdin=lines)
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout == b""
    summary = sent.stderr.decode().splitlines()
    assert len(summary) == 1 and "5 records" in summary[0], summary
    data = str(server.data)

    out = run("read", "--data", data, "--stream", "t")
    assert (out.returncode, out.stdout) == (0, b"alpha\nbeta\n\ngamma\r\nlast\n")

    out = run("read", "--data", data, "--stream", "t", "--format", "json")
    assert out.returncode == 0
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["position"] for r in rows] == [1, 2, 3, 4, 5]
    payloads = [r["payload"] for r in rows]  # UTF-8: as text
    assert payloads == ["alpha", "beta", "", "gamma\r", "last"]
    assert list(rows[0]) == ["position", "time", "payload"]  # read says when it was stored
    assert datetime.fromisoformat(rows[0]["time"]).tzinfo == UTC

    for args, want in [
        (["--from", "2", "--to", "3"], b"beta\n\n"),
        (["--from", "4"], b"gamma\r\nlast\n"),
        (["--to", "1"], b"alpha\n"),
        (["--from", "5", "--to", "5"], b"last\n"),
        (["--from", "6"], b""),
        (["--from", "3", "--to", "99"], b"\ngamma\r\nlast\n"),
    ]:
        out = run("read", "--data", data, "--stream", "t", *args)
        assert (out.returncode, out.stdout) == (0, want), args


def test_send_from_a_file_appends_and_streams_lists_it(server: Server, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_bytes(b"".join(b"record %d\n" % i for i in range(1, 1001)))
    for _ in range(2):
        sent = run("send", server.url, "--stream", "file-test", "--file", str(source))
        assert sent.returncode == 0, sent.stderr
    assert run("send", server.url, "--stream", "other", stdin=b"x\n").returncode == 0

    table = run("streams", "--data", str(server.data))
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.decode().splitlines()]
    assert rows[0] == ["stream", "first", "last", "records", "bytes", "last", "stored"]
    by_name = {row[0]: row[1:] for row in rows[1:]}
    assert set(by_name) == {"file-test", "other"}
    first, last, records, size = map(int, by_name["file-test"][:4])
    assert by_name["file-test"][4].endswith("Z")  # the last stored time, ISO-8601 UTC
    assert (first, last, records) == (1, 2000, 2000)
    assert size >= 2 * (source.stat().st_size - 1000)  # at least the payload bytes

    out = run("read", "--data", str(server.data), "--stream", "file-test", "--from", "1000")
    assert out.stdout == b"record 1000\n" + source.read_bytes()


def test_read_unknown_stream_is_empty_and_exit_0_said_on_stderr(tmp_path: Path) -> None:
    out = run("read", "--data", str(tmp_path), "--stream", "nothing-here")
    said = f"purelink read: no stream 'nothing-here' in {tmp_path}\n".encode()
    assert (out.returncode, out.stdout, out.stderr) == (0, b"", said)


def test_streams_of_an_empty_store_is_the_header(tmp_path: Path) -> None:
    out = run("streams", "--data", str(tmp_path))
    assert out.returncode == 0
    assert out.stdout.split() == [
        b"stream",
        b"first",
        b"last",
        b"records",
        b"bytes",
        b"last",
        b"stored",
    ]


def test_read_follow_prints_new_records_until_sigint(server: Server) -> None:
    assert run("send", server.url, "--stream", "f", stdin=b"one\n").returncode == 0
    reader = subprocess.Popen(
        [*PURELINK, "read", "--data", str(server.data), "--stream", "f", "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert reader.stdout is not None
        fd = reader.stdout.fileno()
        assert read_line(fd, TIMEOUT) == b"one\n"
        assert run("send", server.url, "--stream", "f", stdin=b"two\nthree\n").returncode == 0
        assert read_line(fd, TIMEOUT) == b"two\n"
        assert read_line(fd, TIMEOUT) == b"three\n"
        reader.send_signal(signal.SIGINT)
        _, err = reader.communicate(timeout=TIMEOUT)
        assert reader.returncode == 130
        assert b"Traceback" not in err
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.communicate()


def test_read_into_a_closed_pipe_exits_quietly(server: Server) -> None:
    lines = b"".join(b"line %06d of many\n" % i for i in range(100_000))  # >> a pipe buffer
    assert run("send", server.url, "--stream", "big", stdin=lines).returncode == 0
    reader = subprocess.Popen(
        [*PURELINK, "read", "--data", str(server.data), "--stream", "big"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert reader.stdout is not None
    assert read_line(reader.stdout.fileno(), TIMEOUT) == b"line 000000 of many\n"
    reader.stdout.close()
    _, err = reader.communicate(timeout=TIMEOUT)
    assert reader.returncode == 0
    assert err == b""


# --- demo ---


def test_demo_runs_the_main_job_and_prints_its_table() -> None:
    result = run("demo", "--records", "20000", timeout=180)
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode() + out
    for label in (
        "records",
        "records/s",
        "ns per queue call",
        "wakeups",
        "datagrams sent",
        "syncs",
        "read-back",
    ):
        assert label in out, label
    assert re.search(r"records\s+20,000\b", out), out
    assert re.search(r"read-back\s+OK\b", out), out
    assert "Traceback" not in result.stderr.decode()
