"""The command line's public promises that scripts depend on, each checked as written.

Why it exists: scripts and tests outside the project call the verbs, flags
and defaults of the README's command line exactly so, parse the ready line,
and count on an exit code and one error line for every mistake a new user
makes on the first day (a wrong address, a port in use, a directory that
cannot be written, a key file that is not there, a listener that goes away,
Ctrl-C).  The parser's names and defaults are checked in this process; every
behaviour runs the real command (test_cli.py's helpers), against a real
`purelink serve` on loopback where it needs one.  Waits are bounded reads.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import pty
import re
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import purelink
from helpers.cli import (
    PURELINK,
    TIMEOUT,
    Server,
    assert_one_line_error,
    keys_file,
    line,
    read_line,
    run,
    serving,
)
from purelink.cli import command as cli
from purelink.cli.bench import _bench_suite
from purelink.testing.ports import free_port, free_ports

# --- names and defaults ---------------------------------------------------------------------

EVERY_FLAG = [
    # serve, with every option of the command table
    [
        "serve", "--data", "d", "--replicas", "3", "--udp", "127.0.0.1:0", "--tcp", "127.0.0.1:0",
        "--sync", "always", "--secret-file", "f", "--keys-file", "f", "--metrics", "127.0.0.1:0",
    ],
    ["serve", "--data", "nats://h1:4222,h2:4222,h3:4222", "--sync", "none"],
    [
        "send", "udp://127.0.0.1:7400,udp://[::1]:7400", "--stream", "s", "--producer", "p",
        "--file", "f", "--secret-file", "f", "--key-id", "k",
    ],
    ["send", "tcp://127.0.0.1:7400", "--stream", "s"],
    [
        "read", "--data", "d", "--stream", "s", "--from", "2", "--to", "3", "--follow",
        "--format", "json",
    ],
    ["read", "--data", "nats://h:4222", "--stream", "s", "--format", "lines"],
    ["streams", "--data", "d"],
    ["streams", "--data", "nats://h:4222"],
    [
        "tail", "tcp://127.0.0.1:7400", "--stream", "s", "--from", "1", "--follow",
        "--format", "json", "--secret-file", "f", "--key-id", "k",
    ],
    ["demo", "--records", "10", "--size", "8"],
    ["bench", "queue", "drain", "--json"],
]  # fmt: skip


@pytest.mark.parametrize("argv", EVERY_FLAG, ids=lambda a: " ".join(a[:2]))
def test_every_verb_and_flag_of_the_command_table_parses(argv: list[str]) -> None:
    args = cli.build_parser().parse_args(argv)
    assert args.command == argv[0]


def test_the_documented_defaults() -> None:
    parse = cli.build_parser().parse_args
    serve = parse(["serve", "--data", "d"])
    assert (serve.udp, serve.tcp, serve.sync) == ("127.0.0.1:7400", None, "batch")
    assert serve.replicas == 3
    demo = parse(["demo"])
    assert (demo.records, demo.size) == (1_000_000, 61)
    for verb in (["send", "udp://127.0.0.1:7400"], ["tail", "tcp://127.0.0.1:7400"]):
        assert parse([*verb, "--stream", "s"]).timeout == 10.0
    read = parse(["read", "--data", "d", "--stream", "s"])
    assert (read.format, read.follow, read.start, read.to) == ("lines", False, None, None)


def test_help_lists_every_verb() -> None:
    result = run("--help")
    assert result.returncode == 0
    listed = result.stdout.decode()
    for verb in ("serve", "send", "read", "tail", "streams", "demo", "bench"):
        assert re.search(rf"^\s+{verb}\s", listed, re.MULTILINE), verb


def test_bench_knows_every_benchmark_of_the_suite_table() -> None:
    names = {"queue", "drain", "wakeups", "latency", "connections", "pool", "grace", "paths"}
    assert names | {"jetstream"} <= set(_bench_suite().BENCHMARKS)


def tcp_of(srv: Server) -> str:
    """The TCP address of a listener's ready line."""
    found = re.search(r"tcp=(\S+)", srv.line)
    assert found, srv.line
    return found.group(1)


# --- serve: the ready line and nothing else --------------------------------------------------


def test_the_ready_line_is_all_that_serve_prints_on_stdout(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serving(data, "--udp", "127.0.0.1:0", "--tcp", "127.0.0.1:0") as srv:
        assert re.fullmatch(
            rf"purelink listening udp=127\.0\.0\.1:[1-9]\d* tcp=127\.0\.0\.1:[1-9]\d* data={data}",
            srv.line,
        )
        assert run("send", srv.url, "--stream", "s", stdin=b"one\ntwo\n").returncode == 0
        srv.proc.send_signal(signal.SIGTERM)
        rest, err = srv.proc.communicate(timeout=TIMEOUT)
    assert srv.proc.returncode == 0, err
    assert rest == b"", "serve prints one line to stdout, the ready line"


TGKILL = {"x86_64": 234, "aarch64": 131}[platform.machine()]
"""The tgkill system call's number: a signal to one thread of another process."""


def _signal_thread(pid: int, tid: int, sig: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.syscall(TGKILL, pid, tid, sig) == 0, os.strerror(ctypes.get_errno())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_on_any_thread_of_serve_does_what_it_says(tmp_path: Path, sig: int) -> None:
    """The kernel may hand a process's signal to any thread that does not block
    it, and the listener's threads wait in system calls as the main thread does:
    a SIGHUP on each of them in turn is heard (and changes nothing), and a stop
    signal on one of them stops serve cleanly."""
    with serving(tmp_path / "data", "--udp", "127.0.0.1:0", "--tcp", "127.0.0.1:0") as srv:
        pid = srv.proc.pid
        assert srv.proc.stderr is not None
        err = srv.proc.stderr.fileno()
        others = sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task") if int(tid) != pid)
        assert others, "the listener has threads of its own"
        for tid in others:
            _signal_thread(pid, tid, signal.SIGHUP)
            while b"SIGHUP ignored" not in read_line(err, TIMEOUT):
                pass
        assert srv.proc.poll() is None, "a SIGHUP did not stop it"
        _signal_thread(pid, others[-1], sig)
        try:
            code = srv.proc.wait(timeout=TIMEOUT / 2)
        except subprocess.TimeoutExpired:
            code = None
        rest = srv.proc.communicate(timeout=TIMEOUT)[1].decode() if code is not None else ""
    assert code == 0, f"serve did not stop cleanly on a signal to another thread: {rest}"
    assert "Traceback" not in rest


def test_a_keys_file_is_a_secret_enough_for_a_public_address(tmp_path: Path) -> None:
    keys = keys_file(tmp_path, line("ops", b"k" * 32, "*"))
    with serving(
        tmp_path / "data", "--no-udp", "--tcp", "0.0.0.0:0", "--keys-file", str(keys)
    ) as srv:
        assert re.fullmatch(r"purelink listening tcp=0\.0\.0\.0:[1-9]\d* data=.*", srv.line)
        assert srv.stop()[0] == 0


# --- send: several listeners, a terminal ----------------------------------------------------


@pytest.mark.parametrize("scheme", ["udp", "tcp"])
def test_send_moves_on_to_the_next_listener_when_the_first_cannot_be_reached(
    tmp_path: Path, scheme: str
) -> None:
    with serving(tmp_path / "data", "--udp", "127.0.0.1:0", "--tcp", "127.0.0.1:0") as srv:
        live = re.search(rf"{scheme}=(\S+)", srv.line)
        assert live
        urls = f"{scheme}://127.0.0.1:{free_port(both=True)},{scheme}://{live.group(1)}"
        sent = run("send", urls, "--stream", "many", stdin=b"a\nb\nc\n")
        assert sent.returncode == 0, sent.stderr
        out = run("read", "--data", str(srv.data), "--stream", "many")
    assert out.stdout == b"a\nb\nc\n"


def test_send_where_no_listener_of_several_answers_is_one_line_exit_1() -> None:
    urls = ",".join(f"tcp://127.0.0.1:{port}" for port in free_ports(2))
    line = assert_one_line_error(run("send", urls, "--stream", "s", stdin=b"x\n"), 1)
    assert "refused" in line.lower()


def test_send_draws_a_progress_bar_when_stderr_is_a_terminal(tmp_path: Path) -> None:
    with serving(tmp_path / "data", "--udp", "127.0.0.1:0") as srv:
        controller, terminal = pty.openpty()
        try:
            proc = subprocess.Popen(
                [*PURELINK, "send", srv.url, "--stream", "tty"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=terminal,
            )
            os.close(terminal)
            terminal = -1
            out, _ = proc.communicate(b"".join(b"%d\n" % i for i in range(5000)), TIMEOUT)
            shown = _read_all(controller)
        finally:
            os.close(controller)
            if terminal >= 0:
                os.close(terminal)
    assert proc.returncode == 0, shown
    assert out == b""
    assert b"\r" in shown, shown  # drawn in place
    assert b"5,000 records" in shown, shown
    assert b"5000 records (" in shown.replace(b",", b""), shown  # and the summary


def _read_all(controller: int) -> bytes:
    """What the child wrote to the terminal, once it has exited (EIO: no writer left)."""
    seen = b""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        ready, _, _ = select.select([controller], [], [], 0.5)
        if not ready:
            break
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO on Linux once the terminal's last writer closed it
            break
        if not chunk:
            break
        seen += chunk
    return seen


# --- the first day: each mistake is one line, a non-zero exit, no traceback ------------------


def test_a_data_directory_that_cannot_be_created_is_one_line_exit_1(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    line = assert_one_line_error(
        run("serve", "--data", str(blocker / "data"), "--udp", "127.0.0.1:0"), 1
    )
    assert "data directory" in line


def test_a_missing_keys_file_is_one_line_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "keys"
    serve = ["serve", "--data", str(tmp_path / "d"), "--udp", "127.0.0.1:0"]
    line = assert_one_line_error(run(*serve, "--keys-file", str(missing)), 2)
    assert str(missing) in line
    assert not (tmp_path / "d").exists(), "nothing is created before refusing"


@pytest.mark.parametrize(
    "argv",
    [
        ["send", "udp://no-such-host.invalid:7400", "--stream", "s"],
        ["send", "tcp://no-such-host.invalid:7400", "--stream", "s"],
        ["tail", "tcp://no-such-host.invalid:7400", "--stream", "s"],
        ["tail", "tcp://127.0.0.1:{port}", "--stream", "s"],
    ],
    ids=["send-udp-unknown-host", "send-tcp-unknown-host", "tail-unknown-host", "tail-closed"],
)
def test_a_wrong_address_is_one_line_exit_1(argv: list[str]) -> None:
    port = str(free_port())
    result = run(*(a.replace("{port}", port) for a in argv), stdin=b"x\n")
    line = assert_one_line_error(result, 1)
    assert line.startswith(f"purelink {argv[0]}: error: cannot "), line


def test_what_another_listener_holds_is_one_line_exit_1(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serving(data, "--udp", "127.0.0.1:0", "--tcp", "127.0.0.1:0") as srv:
        tcp = tcp_of(srv)
        other = ["--data", str(tmp_path / "other"), "--udp", "127.0.0.1:0"]
        cases = {
            "in use by another listener": ["--data", str(data), "--udp", "127.0.0.1:0"],
            "cannot bind udp": [*other[:2], "--udp", srv.udp],
            "cannot bind tcp": [*other, "--tcp", tcp],
            "cannot serve --metrics": [*other, "--metrics", tcp],
        }
        for said, argv in cases.items():
            assert said in assert_one_line_error(run("serve", *argv), 1), argv
        assert srv.proc.poll() is None, "the first listener is not disturbed"


@contextlib.contextmanager
def following(tmp_path: Path) -> Iterator[tuple[Server, subprocess.Popen[bytes]]]:
    """A listener with one record on stream "s", and `tail --follow` of it that
    has printed it (and waits for more)."""
    with serving(tmp_path / "data", "--udp", "127.0.0.1:0", "--tcp", "127.0.0.1:0") as srv:
        assert run("send", srv.url, "--stream", "s", stdin=b"one\n").returncode == 0
        tail = subprocess.Popen(
            [*PURELINK, "tail", f"tcp://{tcp_of(srv)}", "--stream", "s", "--follow"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert tail.stdout is not None
            assert read_line(tail.stdout.fileno(), TIMEOUT) == b"one\n"
            yield srv, tail
        finally:
            if tail.poll() is None:
                tail.kill()
            tail.communicate()


def test_tail_of_a_listener_that_goes_away_is_one_line_exit_1(tmp_path: Path) -> None:
    with following(tmp_path) as (srv, tail):
        assert srv.stop()[0] == 0
        _, err = tail.communicate(timeout=TIMEOUT)
    text = err.decode()
    assert tail.returncode == 1, text
    assert "Traceback" not in text
    lines = text.splitlines()
    assert len(lines) == 1 and lines[0].startswith("purelink tail: error: "), text
    assert "next position 2" in lines[0], "it says where to resume"


def test_ctrl_c_stops_tail_follow_quietly_with_130(tmp_path: Path) -> None:
    with following(tmp_path) as (_, tail):
        tail.send_signal(signal.SIGINT)
        _, err = tail.communicate(timeout=TIMEOUT)
    assert (tail.returncode, err) == (130, b"")


def test_the_python_api_says_the_same_of_several_unreachable_listeners() -> None:
    urls = ",".join(f"tcp://127.0.0.1:{port}" for port in free_ports(2))
    with pytest.raises(purelink.ConnectError, match="refused"):
        purelink.connect(urls, stream="s", timeout=5)


# --- tail and send to what is not a listener's TCP port ------------------------------------


@contextlib.contextmanager
def foreign_server(answer: bytes | None) -> Iterator[str]:
    """A TCP port on loopback that is not a listener's: with `answer`, it answers
    each connection that (an HTTP server's error, say) and closes; with None it
    accepts nothing and says nothing (the kernel completes the handshakes)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(TIMEOUT)
        done = threading.Event()

        def serve() -> None:
            with contextlib.suppress(OSError):
                while not done.is_set():
                    conn, _ = server.accept()
                    with conn:
                        conn.recv(1024)
                        conn.sendall(answer or b"")

        thread = threading.Thread(target=serve, daemon=True)
        if answer is not None:
            thread.start()
        try:
            yield "tcp://127.0.0.1:%d" % server.getsockname()[1]
        finally:
            done.set()
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)  # wakes the accept above (EINVAL)
            if thread.is_alive():
                thread.join(TIMEOUT)


HTTP_400 = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "secret"])
@pytest.mark.parametrize("follow", [[], ["--follow"]], ids=["once", "follow"])
def test_tail_of_another_services_port_says_so(
    follow: list[str], sealed: bool, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s" * 32)
    extra = ["--secret-file", str(secret)] if sealed else []
    with foreign_server(HTTP_400) as url:
        line = assert_one_line_error(run("tail", url, "--stream", "s", *follow, *extra), 1)
    assert line.startswith(f"purelink tail: error: cannot subscribe at {url}: "), line
    assert "TCP port" in line


def test_tail_of_a_silent_port_gives_up_after_its_timeout() -> None:
    with foreign_server(None) as url:
        started = time.monotonic()
        line = assert_one_line_error(run("tail", url, "--stream", "s", "--timeout", "1"), 1)
        took = time.monotonic() - started
    assert "no answer within 1 s" in line, line
    assert took < TIMEOUT / 2, f"took {took:.1f} s"


def test_tail_with_a_secret_of_a_listener_without_one_says_so(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"s" * 32)
    with serving(tmp_path / "data", "--udp", "127.0.0.1:0", "--tcp", "127.0.0.1:0") as srv:
        argv = ["tail", f"tcp://{tcp_of(srv)}", "--stream", "s", "--secret-file", str(secret)]
        line = assert_one_line_error(run(*argv), 1)
    assert "this listener has no secret" in line, line


def test_send_to_another_services_tcp_port_says_so_at_once() -> None:
    with foreign_server(HTTP_400) as url:
        started = time.monotonic()
        sent = run("send", url, "--stream", "s", "--timeout", "30", stdin=b"x\n")
        took = time.monotonic() - started
    line = assert_one_line_error(sent, 1)
    assert "no purelink listener sends" in line, line
    assert took < 15, f"took {took:.1f} s: it waited for the handshake timeout"
