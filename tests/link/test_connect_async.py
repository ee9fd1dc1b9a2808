"""connect_async and `async with`: the event loop keeps running while a link
connects and closes, cancelling stops the attempt for good, and the errors are
connect()'s own."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import purelink
import purelink.link.transport
from purelink.store.store import Store


@pytest.fixture(params=["udp", "tcp"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def listener(tmp_path: Path, transport: str) -> Iterator[purelink.Listener]:
    udp, tcp = ("127.0.0.1:0", None) if transport == "udp" else (None, "127.0.0.1:0")
    with purelink.Listener(tmp_path / "data", udp=udp, tcp=tcp) as lst:
        yield lst


def url_of(lst: purelink.Listener) -> str:
    if lst.udp_address is not None:
        return "udp://%s:%d" % lst.udp_address
    assert lst.tcp_address is not None
    return "tcp://%s:%d" % lst.tcp_address


@pytest.fixture
def silent() -> Iterator[str]:
    """A udp:// URL where a socket is bound and never answers: a slow listener."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield "udp://127.0.0.1:%d" % sock.getsockname()[1]


class Ticker:
    """A task that counts the event loop's turns: it counts only while the loop runs."""

    def __init__(self) -> None:
        self.ticks = 0
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            self.ticks += 1

    def stop(self) -> None:
        self._task.cancel()


def link_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("purelink-link-")]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_connect_async_ships_records_and_async_with_stores_them(
    listener: purelink.Listener,
) -> None:
    async def main() -> int:
        async with await purelink.connect_async(url_of(listener), stream="aio") as link:
            assert isinstance(link, purelink.Link)
            for i in range(1_000):
                link.queue(b"r%d" % i)
        return link.stored

    assert asyncio.run(main()) == 1_000
    assert [p for _, p in Store(listener.path).read("aio")] == [b"r%d" % i for i in range(1_000)]


def test_the_loop_runs_while_connect_async_waits_for_a_silent_listener(silent: str) -> None:
    async def main() -> tuple[int, str, float]:
        ticker = Ticker()
        began = time.monotonic()
        with pytest.raises(purelink.ConnectError) as error:
            await purelink.connect_async(silent, stream="s", timeout=0.5)
        took = time.monotonic() - began
        ticker.stop()
        return ticker.ticks, str(error.value), took

    ticks, message, took = asyncio.run(main())
    assert 0.5 <= took < 3.0
    assert ticks >= 20, ticks  # 10 ms ticks through half a second: the loop was not held
    with pytest.raises(purelink.ConnectError) as blocking:
        purelink.connect(silent, stream="s", timeout=0.5)
    assert message == str(blocking.value)
    assert link_threads() == []


@pytest.mark.parametrize("how", ["timeout", "cancel"])
def test_cancelling_connect_async_stops_the_attempt(silent: str, how: str) -> None:
    async def main() -> float:
        began = time.monotonic()
        attempt = asyncio.ensure_future(purelink.connect_async(silent, stream="s", timeout=30))
        if how == "timeout":
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.3):
                    await attempt
        else:
            await asyncio.sleep(0.3)
            assert link_threads(), "the attempt's thread runs"
            attempt.cancel()
            with pytest.raises(asyncio.CancelledError):
                await attempt
        assert attempt.cancelled()
        assert link_threads() == []  # gone once the cancellation arrived, not later
        return time.monotonic() - began

    fds = open_fds()
    took = asyncio.run(main())
    assert took < 3.0  # not the connect timeout of 30 s
    assert open_fds() <= fds  # its socket, epoll and eventfd are closed


def test_connect_async_errors_are_connects(tmp_path: Path) -> None:
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    refused = "tcp://127.0.0.1:%d" % port.getsockname()[1]  # bound, not listening
    try:
        for url in (refused, refused.replace("tcp", "udp")):
            with pytest.raises(purelink.ConnectError) as blocking:
                purelink.connect(url, stream="s", timeout=5)
            with pytest.raises(purelink.ConnectError) as awaited:
                asyncio.run(purelink.connect_async(url, stream="s", timeout=5))
            assert str(awaited.value) == str(blocking.value)
            assert "connection refused" in str(awaited.value).lower()
    finally:
        port.close()
    with pytest.raises(ValueError, match="stream"):
        asyncio.run(purelink.connect_async("udp://127.0.0.1:9", stream="no/slash"))
    assert link_threads() == []


def test_leaving_async_with_waits_for_stored_without_holding_the_loop(tmp_path: Path) -> None:
    lst = purelink.Listener(tmp_path / "data", udp="127.0.0.1:0")
    lst.start()
    url = url_of(lst)

    async def main() -> tuple[int, float]:
        link = await purelink.connect_async(url, stream="s", close_timeout=0.6)
        lst.close()  # nobody stores what comes next
        link.queue(b"lost")
        ticker = Ticker()
        began = time.monotonic()
        with pytest.raises(purelink.LinkError, match="close_timeout"):
            async with link:
                pass
        ticker.stop()
        return ticker.ticks, time.monotonic() - began

    ticks, took = asyncio.run(main())
    assert took >= 0.6
    assert ticks >= 25, ticks  # the loop ran through the close's wait
    assert link_threads() == []


def test_a_build_cancelled_in_the_executor_is_closed_once_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A URL that names its host is built in the loop's executor (the lookup may
    block): cancelled meanwhile, the link built there is closed when it is done."""
    looked_up = threading.Event()
    release = threading.Event()
    built: list[str] = []

    def slow_lookup(host: str, port: int, kind: int = socket.SOCK_DGRAM) -> list[str]:
        looked_up.set()
        assert release.wait(10)
        built.append(host)
        return ["127.0.0.1"]

    monkeypatch.setattr(purelink._address, "addresses", slow_lookup)
    closed: list[bool] = []
    real_close = purelink.link.transport.UdpTransport.close

    def close(self: purelink.link.transport.UdpTransport) -> None:
        real_close(self)
        closed.append(True)

    monkeypatch.setattr(purelink.link.transport.UdpTransport, "close", close)

    async def main() -> None:
        fds = open_fds()
        ticker = Ticker()
        attempt = asyncio.ensure_future(purelink.connect_async("udp://slow.example:9", stream="s"))
        while not looked_up.is_set():
            await asyncio.sleep(0.01)
            assert ticker.ticks < 500
        attempt.cancel()
        with pytest.raises(asyncio.CancelledError):
            await attempt
        release.set()  # the build goes on in the executor, and ends: its socket is closed
        for _ in range(1_000):
            if closed:
                break
            await asyncio.sleep(0.01)
        assert built and closed, "the build finished, and what it built was closed"
        assert open_fds() <= fds
        ticker.stop()

    asyncio.run(main())
    assert link_threads() == []
