"""The command line when things go wrong: the real `purelink` command, never a traceback.

Why it exists: what a new user hits first is rarely the happy path -- a line
longer than the listener takes, a listener that goes away in the middle of
a `send`, a Ctrl-C, a demo stopped by its terminal, an argument off by a few
orders of magnitude.  Each case here runs the real command (and a real
`purelink serve` on loopback), asserts what it says on stderr and its exit
code, and that no `Traceback` appears.  Waits are bounded: reads with a
deadline, or a condition polled until a deadline.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import select
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import purelink
from helpers.cli import PURELINK, TIMEOUT, assert_one_line_error, read_line, run, serving
from helpers.processes import in_syscall
from helpers.serve_process import ServeProcess
from purelink.testing.ports import free_port


def wait_until(condition: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    """Poll a condition about another process's state, until a deadline."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


FUTEX = {"x86_64": 202, "aarch64": 98}[platform.machine()]
"""The futex system call's number, as /proc/PID/task/TID/syscall shows it."""


def stored(data: Path, stream: str) -> int:
    try:
        return purelink.Store(data).last(stream)
    except purelink.Error:
        return 0


# --- point 1: no traceback at the command line --------------------------------------------


def test_send_stops_at_a_line_over_max_record_and_says_what_was_stored(tmp_path: Path) -> None:
    with serving(tmp_path / "data", "--udp", "127.0.0.1:0", "--max-record", "1000") as srv:
        lines = b"first\n" + b"x" * 2000 + b"\nafter\n"
        result = run("send", srv.url, "--stream", "s", stdin=lines)
        line = assert_one_line_error(result, 1)
        assert "line 2" in line and "1000" in line, line
        assert "the 1 record before it was stored" in line, line
        assert "--skip-long" in line
        out = run("read", "--data", str(srv.data), "--stream", "s")
        assert out.stdout == b"first\n"  # nothing after the long line was sent


def test_send_skip_long_skips_and_counts_even_a_line_over_16_mib(tmp_path: Path) -> None:
    with serving(tmp_path / "data", "--udp", "127.0.0.1:0", "--max-record", "1000") as srv:
        lines = b"a\n" + b"x" * 2000 + b"\nb\n" + b"y" * (17 << 20) + b"\nc"
        result = run("send", srv.url, "--stream", "s", "--skip-long", stdin=lines)
        err = result.stderr.decode()
        assert result.returncode == 0, err
        assert "Traceback" not in err
        (summary,) = err.splitlines()
        assert "3 records (3 payload bytes) stored" in summary, summary
        assert "2 lines skipped" in summary and "line 2" in summary, summary
        out = run("read", "--data", str(srv.data), "--stream", "s")
        assert out.stdout == b"a\nb\nc\n"


@pytest.mark.parametrize(
    "args",
    [
        ["demo", "--records", "3", "--size", "20000000"],  # over the listener's max_record
        ["demo", "--records", "100000000000000000000"],
        ["demo", "--records", "1000000000", "--size", "16000000"],  # more than the disk holds
        ["tail", "tcp://127.0.0.1:7400", "--stream", "s", "--from", str(2**64)],
        ["read", "--data", "{tmp}", "--stream", "s", "--from", str(2**64)],
        ["send", "udp://127.0.0.1:7400", "--stream", "s", "--timeout", "inf"],
        ["send", "udp://127.0.0.1:7400", "--stream", "s", "--timeout", "1e300"],
        ["serve", "--data", "{tmp}", "--max-record", str(1 << 32)],
        ["serve", "--data", "{tmp}", "--max-links", "1" + "0" * 30],
        ["serve", "--data", "{tmp}", "--read-timeout", "nan"],
    ],
    ids=lambda a: " ".join(a)[:50],
)
def test_absurd_arguments_are_one_line_and_exit_2(tmp_path: Path, args: list[str]) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # where a demo would make its store
    _refused_before_anything(tmp_path, [a.replace("{tmp}", str(tmp_path)) for a in args], env=env)


def _refused_before_anything(tmp_path: Path, args: list[str], **popen: Any) -> None:
    """`purelink ARGS` exits 2 with one line, and leaves `tmp_path` empty."""
    result = subprocess.run(
        [*PURELINK, *args], capture_output=True, timeout=TIMEOUT, check=False, **popen
    )
    assert_one_line_error(result, 2)
    assert not any(tmp_path.iterdir()), "nothing may be created before refusing"


# --- point 2: the demo leaves no listener and no temporary store ---------------------------


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if text.encode() in cmdline:
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize(
    ("sig", "code"),
    [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGKILL, -signal.SIGKILL)],
    ids=["SIGTERM", "SIGHUP", "SIGKILL"],
)
def test_a_stopped_demo_leaves_nothing_behind(tmp_path: Path, sig: int, code: int) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    demo = subprocess.Popen(
        [*PURELINK, "demo", "--records", "20000000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        # running: its listener child stores records in the temporary store
        wait_until(lambda: any(tmp_path.glob("purelink-demo-*/data/streams/demo/*.seg")))
        (workdir,) = tmp_path.glob("purelink-demo-*")
        assert _processes_mentioning(str(workdir)), "the listener child runs"
        demo.send_signal(sig)
        _, err = demo.communicate(timeout=TIMEOUT)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.communicate()
    assert demo.returncode == code, err
    assert b"Traceback" not in err
    # after SIGKILL the child learns it from its stdin's end, and cleans up itself
    wait_until(lambda: not workdir.exists() and not _processes_mentioning(str(workdir)))
    assert list(tmp_path.iterdir()) == []


# --- point 3: send while the listener is down --------------------------------------------


@contextlib.contextmanager
def _sending(url: str, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """`purelink send URL --stream s ARGS`, its stdin and stderr piped; killed if it
    still runs at the end, its pipes closed."""
    sender = subprocess.Popen(
        [*PURELINK, "send", url, "--stream", "s", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert sender.stdin is not None and sender.stderr is not None
        yield sender
    finally:
        if sender.poll() is None:
            sender.kill()
        sender.__exit__(None, None, None)  # closes its pipes, waits


def _send_lines(data: Path, sender: subprocess.Popen[bytes], lines: bytes) -> None:
    """Write `lines` to the sender and wait until the listener has stored them in `data`."""
    assert sender.stdin is not None
    sender.stdin.write(lines)
    sender.stdin.flush()
    wait_until(lambda: stored(data, "s") == lines.count(b"\n"))


def _listener_goes_away(
    srv: ServeProcess, sender: subprocess.Popen[bytes], more: bytes
) -> tuple[str, float]:
    """With "one" stored, the listener stops; then `more` lines and the end of
    input go to the sender.  The first line it says on stderr, and a moment no
    later than the sender's last progress (time.monotonic before "one" went:
    its --timeout counts from that progress, which came before the stop)."""
    assert sender.stdin is not None and sender.stderr is not None
    before = time.monotonic()
    _send_lines(srv.data, sender, b"one\n")
    assert srv.stop() == 0
    sender.stdin.write(more)
    sender.stdin.close()
    return read_line(sender.stderr.fileno(), TIMEOUT).decode(), before


def _rest_of_stderr(proc: subprocess.Popen[bytes]) -> str:
    """Wait for the exit; what it wrote to stderr that was not read yet."""
    assert proc.stderr is not None
    proc.wait(timeout=TIMEOUT)
    rest = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    return rest


def test_send_says_it_waits_for_a_listener_that_went_away_and_gives_up(tmp_path: Path) -> None:
    with (
        ServeProcess(tmp_path / "data") as srv,
        _sending(srv.url, "--timeout", "3") as sender,
    ):
        waiting, progressed = _listener_goes_away(srv, sender, b"two\nthree\n")
        err = _rest_of_stderr(sender)
        elapsed = time.monotonic() - progressed  # --timeout counts from the last progress
    assert sender.returncode == 1, err
    assert "Traceback" not in err
    (line,) = err.splitlines()
    assert line.startswith("purelink send: error: ") and "stored nothing for 3 s" in line, line
    # "one" is in the store; the link was told so, unless the listener stopped first
    found = re.search(
        r"gave up with (\d) of 3 records stored; (\d) not confirmed stored \(input lines? (\d)",
        line,
    )
    assert found and found.group(1) in "01", line
    unstored = 3 - int(found.group(1))
    assert found.group(2) == str(unstored)
    assert found.group(3) == str(int(found.group(1)) + 1)  # where a re-send should start
    assert "waiting for the listener" in waiting, waiting
    assert f"{unstored} records not yet stored" in waiting, waiting
    assert 3 <= elapsed < 20


def test_send_rides_through_a_listener_restart_and_says_so(tmp_path: Path) -> None:
    with (
        ServeProcess(tmp_path / "data") as srv,
        _sending(srv.url, "--timeout", "30") as sender,
    ):
        waiting, _ = _listener_goes_away(srv, sender, b"two\n")
        assert "waiting for the listener" in waiting
        srv.restart()  # the same port
        err = _rest_of_stderr(sender)
    assert sender.returncode == 0, err
    assert "storing again" in err and "2 records (6 payload bytes) stored" in err, err
    assert run("read", "--data", str(srv.data), "--stream", "s").stdout == b"one\ntwo\n"


def _feed_until(
    sender: subprocess.Popen[bytes], said: str, first: int, timeout: float = TIMEOUT
) -> tuple[str, int]:
    """Write numbered lines to the sender's stdin, 20 a second from `first` on,
    until it says a line containing `said` on stderr; that line, and the next
    number. Its input never pauses: send must speak while it reads."""
    assert sender.stdin is not None and sender.stderr is not None
    n = first
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sender.stdin.write(b"line %d\n" % n)
        sender.stdin.flush()
        n += 1
        ready, _, _ = select.select([sender.stderr.fileno()], [], [], 0.05)
        if ready:
            line = read_line(sender.stderr.fileno(), TIMEOUT).decode()
            assert said in line, line
            return line, n
    raise AssertionError(f"send did not say {said!r} within {timeout} s")


def test_send_speaks_through_an_outage_while_its_input_flows(tmp_path: Path) -> None:
    """`tail -F app.log | purelink send`: the listener SIGKILLed and started again
    while lines keep coming; send says so both times, and everything is stored once."""
    with (
        ServeProcess(tmp_path / "data") as srv,
        _sending(srv.url, "--timeout", "60") as sender,
    ):
        _send_lines(srv.data, sender, b"line 0\n")
        srv.kill()
        waiting, n = _feed_until(sender, "waiting for the listener", 1)
        assert "not yet stored" in waiting
        srv.restart()
        _, n = _feed_until(sender, "the listener is storing again", n)
        assert sender.stdin is not None
        sender.stdin.close()
        err = _rest_of_stderr(sender)
    assert sender.returncode == 0, err
    assert f"{n} records" in err, err
    lines = run("read", "--data", str(srv.data), "--stream", "s").stdout.splitlines()
    assert lines == [b"line %d" % i for i in range(n)]


def test_send_gives_up_after_timeout_without_progress_while_its_input_flows(
    tmp_path: Path,
) -> None:
    with (
        ServeProcess(tmp_path / "data") as srv,
        _sending(srv.url, "--timeout", "2") as sender,
    ):
        _send_lines(srv.data, sender, b"line 0\n")
        srv.kill()
        _feed_until(sender, "waiting for the listener", 1)
        started = time.monotonic()
        assert sender.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # it gives up while we still write
            while sender.poll() is None and time.monotonic() - started < TIMEOUT:
                sender.stdin.write(b"more\n")
                sender.stdin.flush()
                time.sleep(0.05)  # paces the input; the exit is what is waited for
        err = _rest_of_stderr(sender)
    assert sender.returncode == 1, err
    assert "Traceback" not in err
    found = re.search(
        r"stored nothing for 2 s; gave up with (\d) of .* \(input lines (\d) to ", err
    )
    assert found and found.group(1) in "01", (
        err
    )  # "line 0" is stored; told, unless it was killed first
    assert found.group(2) == str(int(found.group(1)) + 1), err


def test_ctrl_c_during_send_prints_what_was_stored(tmp_path: Path) -> None:
    with (
        serving(tmp_path / "data", "--udp", "127.0.0.1:0") as srv,
        _sending(srv.url) as sender,
    ):
        _send_lines(srv.data, sender, b"one\ntwo\n")
        sender.send_signal(signal.SIGINT)  # while it waits for more input
        err = _rest_of_stderr(sender)
    assert sender.returncode == 130
    assert "Traceback" not in err
    assert err.splitlines() == ["purelink send: interrupted: 2 of 2 records stored"]


# --- point 5: refusals that say what is wrong ---------------------------------------------


def test_a_bad_producer_name_is_checked_locally() -> None:
    # port 1: nothing listens there; the check comes before any connection
    result = run("send", "udp://127.0.0.1:1", "--stream", "s", "--producer", "p/1", stdin=b"x\n")
    line = assert_one_line_error(result, 2)
    assert "producer" in line and "A-Z a-z 0-9 . _ -" in line, line


def test_the_listener_refusal_names_the_limit(tmp_path: Path) -> None:
    with serving(tmp_path / "data", "--udp", "127.0.0.1:0", "--max-streams", "1") as srv:
        assert run("send", srv.url, "--stream", "a", stdin=b"1\n").returncode == 0
        line = assert_one_line_error(run("send", srv.url, "--stream", "b", stdin=b"2\n"), 1)
    assert "refused the link: max_streams" in line and "--max-streams" in line, line
    assert "cannot reach" not in line  # it was reached: it said no


def test_send_to_a_closed_tcp_port_says_connection_refused_at_once() -> None:
    started = time.monotonic()
    url = f"tcp://127.0.0.1:{free_port()}"
    result = run("send", url, "--stream", "s", "--timeout", "60", stdin=b"x\n")
    line = assert_one_line_error(result, 1)
    assert "connection refused" in line, line
    assert time.monotonic() - started < 30  # not the 60 s handshake timeout (start-up aside)


def test_send_to_a_closed_udp_port_says_connection_refused_at_once() -> None:
    started = time.monotonic()
    url = f"udp://127.0.0.1:{free_port(socket.SOCK_DGRAM)}"
    result = run("send", url, "--stream", "s", "--timeout", "60", stdin=b"x\n")
    line = assert_one_line_error(result, 1)
    assert "connection refused" in line.lower(), line
    assert time.monotonic() - started < 30  # not the 60 s handshake timeout (start-up aside)


# --- point 10: smaller things --------------------------------------------------------------


def test_streams_and_read_refuse_a_directory_that_is_not_a_store(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a store")
    for args in (["streams"], ["read", "--stream", "s"]):
        line = assert_one_line_error(run(*args, "--data", str(tmp_path)), 2)
        assert "not a purelink data directory" in line, line


@pytest.mark.parametrize("verb", [["serve"], ["streams"], ["read", "--stream", "s"]])
def test_an_empty_data_argument_is_refused(tmp_path: Path, verb: list[str]) -> None:
    _refused_before_anything(tmp_path, [*verb, "--data", ""], cwd=tmp_path)  # no store in cwd


def test_tail_follow_reconnect_waits_for_a_listener_down_at_start(tmp_path: Path) -> None:
    port = free_port()
    tail = subprocess.Popen(
        [
            *PURELINK,
            "tail",
            f"tcp://127.0.0.1:{port}",
            "--stream",
            "s",
            "--follow",
            "--reconnect",
            "30",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    srv = ServeProcess(tmp_path / "data", port=port, transport="tcp")
    try:
        # the listener is down while tail starts: wait until tail has been refused
        # and waits to try again (its only futex wait; its start-up has none)
        wait_until(lambda: tail.poll() is not None or in_syscall(tail.pid, (FUTEX,)))
        assert tail.poll() is None, "tail gave up at once"
        srv.start()
        assert run("send", srv.url, "--stream", "s", stdin=b"hello\n").returncode == 0
        assert tail.stdout is not None
        assert read_line(tail.stdout.fileno(), TIMEOUT) == b"hello\n"
        tail.send_signal(signal.SIGINT)
        _, err = tail.communicate(timeout=TIMEOUT)
        assert tail.returncode == 130
        assert b"Traceback" not in err
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.communicate()
        if srv.proc is not None:
            srv.stop()


def test_send_names_payload_bytes_and_streams_help_says_on_disk(tmp_path: Path) -> None:
    with serving(tmp_path / "data", "--udp", "127.0.0.1:0") as srv:
        sent = run("send", srv.url, "--stream", "s", stdin=b"abc\n")
        assert re.search(r"1 record \(3 payload bytes\) stored", sent.stderr.decode())
    assert "bytes on disk" in " ".join(run("streams", "--help").stdout.decode().split())
