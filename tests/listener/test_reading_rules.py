"""Reading a stream from the start after retention, and subscription slots: one rule each.

Why it exists: `Store.read`, `purelink.subscribe`, `purelink read` and
`purelink tail` must agree on what "from the start" means once retention
removed old segments: start 1 (the default) or 0 is the beginning, the
first record retained; a later start below it is an error that names it
(never a silent gap).
And a subscription slot (`max_subscriptions`, settable on the Listener and
`serve`) must come back as soon as its subscriber leaves, not a heartbeat
later.  A refused first TCP connection is reported at once.  Real listeners
on loopback; every wait has a deadline.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import purelink
from helpers.cli import PURELINK, TIMEOUT, assert_one_line_error, read_line, run, serving
from purelink.protocol.wire import encode_batch, verify_batch
from purelink.store import DataDir
from purelink.testing.ports import free_port


def payload(position: int) -> bytes:
    return f"record {position:07d}".encode()


def expected(start: int, stop: int) -> list[tuple[int, bytes]]:
    return [(p, payload(p)) for p in range(start, stop)]


def wait_until(condition: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


@pytest.fixture
def retained(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A store whose stream "s" holds positions 1..300 of which the first
    segments were removed: (its directory, the first position retained)."""
    with DataDir(tmp_path, segment_bytes=2000) as data:
        log = data.stream("s")
        for first in range(1, 301, 10):
            raw = encode_batch(7, 1, first, [payload(p) for p in range(first, first + 10)])
            log.append([(raw, verify_batch(raw))])
        log.sync()
        assert log.retire(3)  # unpublished; unlinked below, as retention does after its grace
        first = log.first_position
        assert first > 1
    for segment in (tmp_path / "streams" / "s").glob("*.seg"):
        if int(segment.stem) < first:
            segment.unlink()
    yield tmp_path, first


# --- Store.read and the CLI's read ----------------------------------------------------------


def test_store_read_defaults_to_the_first_retained(retained: tuple[Path, int]) -> None:
    path, first = retained
    store = purelink.Store(path)
    assert list(store.read("s")) == expected(first, 301)
    assert list(store.read("s", start=0)) == expected(first, 301)
    assert list(store.read("s", start=1)) == expected(first, 301)
    assert list(store.read("s", 0, stop=first + 2)) == expected(first, first + 2)
    assert list(store.read("s", first + 1, stop=first + 3)) == expected(first + 1, first + 3)
    with pytest.raises(purelink.Error, match=f"records retained start at {first}, cannot read"):
        store.read("s", start=2)
    with pytest.raises(ValueError):
        store.read("s", start=-1)
    assert list(store.read("unknown")) == []


def test_cli_read_from_the_first_retained_and_below_it(retained: tuple[Path, int]) -> None:
    path, first = retained
    out = run("read", "--data", str(path), "--stream", "s")
    assert out.returncode == 0
    assert out.stdout.splitlines() == [payload(p) for p in range(first, 301)]
    out = run("read", "--data", str(path), "--stream", "s", "--from", "1")  # the beginning
    assert out.stdout.splitlines() == [payload(p) for p in range(first, 301)]
    below = run("read", "--data", str(path), "--stream", "s", "--from", "2")
    line = assert_one_line_error(below, 1)
    assert f"records retained start at {first}" in line


# --- subscribe and the CLI's tail ------------------------------------------------------------


def test_subscribe_defaults_to_the_first_retained(retained: tuple[Path, int]) -> None:
    path, first = retained
    with purelink.Listener(path, udp=None, tcp="127.0.0.1:0") as lst:
        assert lst.tcp_address is not None
        url = f"tcp://127.0.0.1:{lst.tcp_address[1]}"
        assert list(purelink.subscribe(url, "s", follow=False)) == expected(first, 301)
        assert list(purelink.subscribe(url, "s", start=0, follow=False)) == expected(first, 301)
        assert list(purelink.subscribe(url, "s", start=1, follow=False)) == expected(first, 301)
        with pytest.raises(purelink.Error, match=f"records retained start at {first}"):
            list(purelink.subscribe(url, "s", start=2, follow=False))
        for args in ([], ["--from", "1"]):
            out = run("tail", url, "--stream", "s", *args)
            assert out.stdout.splitlines() == [payload(p) for p in range(first, 301)]
        line = assert_one_line_error(run("tail", url, "--stream", "s", "--from", "2"), 1)
        assert f"records retained start at {first}" in line


def test_subscribe_from_beyond_any_position_is_a_value_error_at_once() -> None:
    # nothing listens at port 1: a ValueError must come before any connection
    for start in (2**64, -1):
        with pytest.raises(ValueError, match="start"):
            purelink.subscribe("tcp://127.0.0.1:1", "s", start=start)


# --- subscription slots ---------------------------------------------------------------------


def test_subscription_slots_come_back_at_once(tmp_path: Path) -> None:
    """Two followers at the idle tail of a stream hold both slots; once they
    close, a new subscriber gets a slot at once (it took a 5 s heartbeat)."""
    with purelink.Listener(
        tmp_path, udp="127.0.0.1:0", tcp="127.0.0.1:0", max_subscriptions=2
    ) as lst:
        assert lst.udp_address is not None and lst.tcp_address is not None
        tail = lst._tail
        assert tail is not None and tail.max_subscribers == 2
        with purelink.connect(f"udp://127.0.0.1:{lst.udp_address[1]}", stream="s") as link:
            link.queue(b"one")
            assert link.wait_stored(timeout=TIMEOUT)
        url = f"tcp://127.0.0.1:{lst.tcp_address[1]}"
        followers = [purelink.subscribe(url, "s") for _ in range(2)]
        for sub in followers:
            assert next(iter(sub)) == (1, b"one")  # each is served, then parks at the tail
        wait_until(lambda: tail.statistics().subscribers == 2)
        with pytest.raises(purelink.Error, match="at most 2"):
            list(purelink.subscribe(url, "s", follow=False))
        for sub in followers:
            sub.close()
        started = time.monotonic()
        wait_until(lambda: tail.statistics().subscribers == 0)
        assert list(purelink.subscribe(url, "s", follow=False)) == [(1, b"one")]
        assert time.monotonic() - started < 2.0  # at once, not a heartbeat later


def test_serve_max_subscriptions_is_enforced(tmp_path: Path) -> None:
    with serving(tmp_path / "data", "--no-udp", "--tcp", "127.0.0.1:0") as srv:
        assert srv.stop()[0] == 0
    args = ["--no-udp", "--tcp", "127.0.0.1:0", "--max-subscriptions", "1"]
    with serving(tmp_path / "data", *args) as srv:
        port = srv.line.split("tcp=127.0.0.1:")[1].split()[0]
        url = f"tcp://127.0.0.1:{port}"
        assert run("send", url, "--stream", "s", stdin=b"x\n").returncode == 0
        holder = subprocess.Popen(
            [*PURELINK, "tail", url, "--stream", "s", "--follow"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert holder.stdout is not None
            assert read_line(holder.stdout.fileno(), TIMEOUT) == b"x\n"  # it holds the slot
            line = assert_one_line_error(run("tail", url, "--stream", "s"), 1)
            assert "too many subscribers (at most 1)" in line
        finally:
            holder.kill()
            holder.communicate()


# --- a refused first TCP connection ----------------------------------------------------------


def test_connect_to_a_closed_tcp_port_is_refused_at_once() -> None:
    port = free_port()  # nobody listens there, nor takes it meanwhile
    started = time.monotonic()
    with pytest.raises(purelink.ConnectError, match="connection refused"):
        purelink.connect(f"tcp://127.0.0.1:{port}", stream="s", timeout=60)
    assert time.monotonic() - started < 30  # refused, not timed out
