"""tcp:// links and raw TCP peers against a listener's TCP side, for the TCP tests."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import purelink
from purelink.listener.tcp import TcpServer
from purelink.primitives.pool import BufferPool
from purelink.protocol.framing import FrameDecoder, encode_frames
from purelink.protocol.listener_core import ListenerCore
from purelink.protocol.sender import Sender, SenderConfig
from purelink.testing import MemoryStore

TIMEOUT = 30.0


def tcp_url(lst: purelink.Listener) -> str:
    assert lst.tcp_address is not None
    return "tcp://%s:%d" % lst.tcp_address


def records(lst: purelink.Listener | Path, stream: str) -> list[bytes]:
    path = lst.path if isinstance(lst, purelink.Listener) else lst
    return [p for _, p in purelink.Store(path).read(stream)]


def wait_for(predicate: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
    """Poll until true or `timeout` (bounded; the pause only paces the polling)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return predicate()
        threading.Event().wait(0.005)
    return True


def closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    """Whether the other side closes `sock` within `timeout` (reads and drops data)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select([sock], [], [], left)
        if ready:
            try:
                if not sock.recv(65536):
                    return True
            except ConnectionResetError:
                return True


def raw(lst: purelink.Listener) -> socket.socket:
    assert lst.tcp_address is not None
    return socket.create_connection(lst.tcp_address, timeout=TIMEOUT)


class RawLink:
    """The sans-IO Sender over a raw socket: a link whose every byte the test controls."""

    def __init__(self, lst: purelink.Listener, stream: str) -> None:
        self.sock = raw(lst)
        self.sender = Sender(SenderConfig(stream=stream))
        self.decoder = FrameDecoder()
        self.sender.connect(time.monotonic())
        self.sock.sendall(encode_frames(self.sender.datagrams_to_send(time.monotonic())))
        while self.sender.state != "open":
            data = self.sock.recv(65536)
            assert data, "the listener closed the connection during the handshake"
            for frame in self.decoder.feed(data):
                self.sender.receive_datagram(frame, time.monotonic())

    def frames_for(self, payloads: list[bytes]) -> bytes:
        self.sender.push(payloads)
        return encode_frames(self.sender.datagrams_to_send(time.monotonic()))


class Host:
    """A loop for a TcpServer (its `Loop`, a core, a pool, the round's buffers),
    turned by hand."""

    def __init__(self) -> None:
        self.pool = BufferPool(65536, 64)
        self.core = ListenerCore(MemoryStore())
        self.round_buffers: list[bytearray] = []
        self.routes: dict[Any, Callable[[bytes], None]] = {}
        self.handlers: dict[int, Callable[[float, int], None]] = {}
        self.epoll = select.epoll()

    def add_source(self, fd: int, handler: Callable[[float, int], None], events: int = 0) -> None:
        self.handlers[fd] = handler
        self.epoll.register(fd, events or select.EPOLLIN)

    def remove_source(self, fd: int, closing: bool = False) -> None:
        if self.handlers.pop(fd, None) is not None and not closing:
            self.epoll.unregister(fd)

    def turn(self, now: float, timeout: float = 5.0) -> int:
        """One round of the loop at time `now`: handlers, then the round's end."""
        ready = self.epoll.poll(timeout)
        for fd, mask in ready:
            handler = self.handlers.get(fd)
            if handler is not None:
                handler(now, mask)
        core = self.core
        core.take_writes()
        for buf in self.round_buffers:
            self.pool.put(buf)
        self.round_buffers.clear()
        for data, addr in core.datagrams_to_send(now):
            route = self.routes.get(addr)
            if route is not None:
                route(data)
        return len(ready)


H = TypeVar("H", bound=Host)


def tcp_host(
    make: Callable[[], H] = Host,  # type: ignore[assignment]  # H is Host when not given
    *,
    max_connections: int = 1000,
    defer_accept: bool = False,
) -> Iterator[tuple[H, TcpServer]]:
    """A TcpServer on a Host turned by hand (the `host` fixtures); by default
    silent connections are accepted at once (connect_many), where the
    Listener defers an accept to the first bytes."""
    h = make()
    server = TcpServer(
        h,
        h.core,
        "127.0.0.1",
        0,
        pool=h.pool,
        round_buffers=h.round_buffers,
        max_connections=max_connections,
        read_timeout=10.0,
        defer_accept=defer_accept,
    )
    server.start()
    yield h, server
    server.close()
    h.epoll.close()


def connect_many(server: TcpServer, n: int) -> list[socket.socket]:
    assert server._sock is not None
    address = server._sock.getsockname()
    # create_connection returns once the kernel completed the handshake: every
    # one of them is in the accept queue before the listener looks
    return [socket.create_connection(address, timeout=TIMEOUT) for _ in range(n)]
