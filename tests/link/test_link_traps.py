"""What a new user hits first on a link: hangs at exit, late fencing, misleading refusals.

Each test here fails on a link that hangs when it should fail loudly, learns
of a takeover late, or reports a local mistake as a network one.  The
listener is a real `purelink serve` process (tests/helpers/serve_process.py) where
the behaviour crosses it; the argument checks need none.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import purelink
import purelink.link.link as link_module
from helpers.serve_process import ServeProcess
from purelink.testing.ports import free_port


@pytest.fixture(params=["udp", "tcp"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServeProcess]:
    with ServeProcess(tmp_path / "data", transport=str(request.param)) as srv:
        yield srv


def within(seconds: float, call: Callable[[], Any]) -> tuple[float, Any, BaseException | None]:
    """Run `call` in a thread; (its seconds, result, exception), or fail the test if
    it has not returned within `seconds` (a hang must fail, not hang the suite)."""
    box: dict[str, Any] = {}

    def run() -> None:
        started = time.monotonic()
        try:
            box["result"] = call()
        except BaseException as exc:  # handed to the test
            box["error"] = exc
        box["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still waiting after {seconds} s"
    return box["seconds"], box.get("result"), box.get("error")


def closed_port(kind: int) -> int:
    """A loopback port where nothing listens, and no outgoing connection of
    another process is given while the test runs (ports.py)."""
    return free_port(kind)


# ------------------------------------------- close() while the listener is down


def test_close_without_timeout_fails_loudly_after_close_timeout(server: ServeProcess) -> None:
    link = purelink.connect(server.url, stream="s", close_timeout=1.0)
    server.stop()
    for i in range(3):
        link.queue(b"r%d" % i)
    seconds, _, error = within(20, link.close)
    assert isinstance(error, purelink.LinkError)
    assert "3 records (seqs 1..3) were not stored within 1 s" in str(error)
    assert 0.9 < seconds < 10
    with pytest.raises(purelink.Closed):
        link.queue(b"after")


def test_leaving_a_with_block_is_bounded_and_logs_while_it_waits(
    server: ServeProcess, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(link_module, "CLOSE_QUIET", 0.2)
    monkeypatch.setattr(link_module, "CLOSE_LOG_EVERY", 0.3)

    def leave() -> None:
        with purelink.connect(server.url, stream="s", close_timeout=1.5) as link:
            server.stop()
            link.queue(b"x")

    with caplog.at_level(logging.WARNING, logger="purelink.link"):
        seconds, _, error = within(20, leave)
    assert isinstance(error, purelink.LinkError) and "1 record (seq 1)" in str(error)
    waiting = [r for r in caplog.records if "closing: waiting for 1 record" in r.getMessage()]
    assert len(waiting) >= 2  # said while waiting, not only at the end
    assert seconds < 10


def test_an_exception_leaving_the_with_block_is_kept_and_the_loss_logged(
    server: ServeProcess, caplog: pytest.LogCaptureFixture
) -> None:
    def leave() -> None:
        with purelink.connect(server.url, stream="s", close_timeout=0.5) as link:
            server.stop()
            link.queue(b"x")
            raise KeyError("the application's own error")

    with caplog.at_level(logging.ERROR, logger="purelink.link"):
        _, _, error = within(20, leave)
    assert isinstance(error, KeyError)  # not masked by the close's LinkError
    assert any("were not stored" in r.getMessage() for r in caplog.records)


def test_close_with_a_timeout_still_returns_false(server: ServeProcess) -> None:
    link = purelink.connect(server.url, stream="s")
    server.stop()
    link.queue(b"x")
    _, result, error = within(20, lambda: link.close(timeout=0.3))
    assert error is None and result is False


def test_close_timeout_none_waits_until_the_listener_is_back(server: ServeProcess) -> None:
    link = purelink.connect(server.url, stream="s", close_timeout=None)
    server.stop()
    link.queue(b"x")
    closing = threading.Thread(target=link.close)
    closing.start()
    closing.join(1.5)
    assert closing.is_alive()  # no limit: still waiting
    server.start()
    closing.join(30)
    assert not closing.is_alive() and link.stored == 1


# ------------------------------------------------------------------- fencing


def test_a_fenced_link_learns_at_once_and_every_call_raises_fenced(server: ServeProcess) -> None:
    old = purelink.connect(server.url, stream="s", producer="api-1")
    old.queue(b"a")
    assert old.wait_stored(timeout=10)
    # the old link is idle now: it sends nothing, so only the listener can tell it
    new = purelink.connect(server.url, stream="s", producer="api-1")
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                old.wait_stored(timeout=0)
            except purelink.Fenced:
                break
            time.sleep(0.01)
        else:
            pytest.fail("the old session was not told it is fenced within 5 s")
        with pytest.raises(purelink.Fenced):
            old.queue(b"b")
        with pytest.raises(purelink.Fenced):
            old.wait_stored(1, timeout=1)
        with pytest.raises(purelink.Fenced, match="api-1"):
            old.close(2)  # never a silent False
        with pytest.raises(purelink.Fenced):
            old.close()
        new.queue(b"c")
        assert new.wait_stored(timeout=10)
    finally:
        new.close(timeout=5)


def test_fenced_says_what_was_not_stored(server: ServeProcess) -> None:
    old = purelink.connect(server.url, stream="s", producer="api-2")
    old._sender.get_timer = lambda: None  # type: ignore[method-assign]  # no probes
    old._transport.send = lambda datagrams: None  # type: ignore[method-assign]  # all lost
    old.queue(b"a")
    old.queue(b"b")
    new = purelink.connect(server.url, stream="s", producer="api-2")
    try:
        _, _, error = within(10, lambda: old.wait_stored(timeout=8))
        assert isinstance(error, purelink.Fenced)
        assert "2 records (seqs 1..2) not stored" in str(error)
    finally:
        new.close(timeout=5)
        with pytest.raises(purelink.Fenced):
            old.close(timeout=1)


# ------------------------------------------------------- refusals that mislead


@pytest.mark.parametrize("stream", ["a/b", "../etc", ".hidden", "", "x" * 201])
def test_a_bad_stream_name_is_a_value_error_at_once(stream: str) -> None:
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"1-200 characters of A-Z a-z 0-9 \. _ -"):
        purelink.connect("udp://127.0.0.1:9", stream=stream)
    assert time.monotonic() - started < 5  # at once, not the 10 s handshake timeout


@pytest.mark.parametrize("producer", ["p/1", "a b", ".x", "x" * 201])
def test_a_bad_producer_name_is_a_value_error_at_once(producer: str) -> None:
    with pytest.raises(ValueError, match="producer name"):
        purelink.connect("udp://127.0.0.1:9", stream="s", producer=producer)


def test_tcp_to_a_closed_port_is_refused_at_once() -> None:
    url = f"tcp://127.0.0.1:{closed_port(socket.SOCK_STREAM)}"
    seconds, _, error = within(8, lambda: purelink.connect(url, stream="s", timeout=5))
    assert isinstance(error, purelink.ConnectError)
    assert "connection refused" in str(error).lower()
    assert seconds < 2


def test_wait_stored_for_a_seq_never_queued_is_a_value_error(server: ServeProcess) -> None:
    with purelink.connect(server.url, stream="s") as link:
        link.queue(b"x")
        with pytest.raises(ValueError, match="seq 2 was never queued"):
            link.wait_stored(2, timeout=5)
        assert link.wait_stored(1, timeout=10)


def test_wait_stored_inside_on_stored_raises_instead_of_deadlocking(server: ServeProcess) -> None:
    seen: list[BaseException] = []
    holder: dict[str, purelink.Link] = {}

    def on_stored(seq: int) -> None:
        try:
            holder["link"].wait_stored(seq, timeout=5)
        except BaseException as exc:  # what the callback saw
            seen.append(exc)

    link = purelink.connect(server.url, stream="s", on_stored=on_stored)
    holder["link"] = link
    try:
        link.queue(b"x")
        seconds, ok, _ = within(10, lambda: link.wait_stored(timeout=8))
        assert ok is True and seconds < 3  # the link thread did not sit in the callback
        assert seen and isinstance(seen[0], RuntimeError)
        assert "link's own thread" in str(seen[0])
    finally:
        link.close(timeout=5)


@pytest.mark.parametrize("kind", ["udp", "tcp"])
def test_a_listener_on_all_interfaces_needs_a_secret(tmp_path: Path, kind: str) -> None:
    where = {"udp": None, "tcp": None, kind: "0.0.0.0:0"}
    with pytest.raises(ValueError, match=r"non-loopback .* without a secret"):
        purelink.Listener(tmp_path / "d", **where)  # type: ignore[arg-type]
    with purelink.Listener(tmp_path / "d", insecure=True, **where) as lst:  # type: ignore[arg-type]
        assert (lst.udp_address or lst.tcp_address) is not None
    with purelink.Listener(tmp_path / "e", secret=b"k" * 16, **where):  # type: ignore[arg-type]
        pass
