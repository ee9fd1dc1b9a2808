"""What one short tcp:// connection costs the listener: events and system calls.

Why it exists: a short link (connect, HELLO, one DATA, CLOSE) is paid for
mostly per connection, not per record, and the savings made there are easy
to undo without any test failing on behaviour.  Each test pins one of them
(listener/tcp.py's module header says why each is safe):

* a connection is accepted with its HELLO already in (TCP_DEFER_ACCEPT) and
  read at once: no readiness event of its own for the HELLO, no timer entry
  once it has a session; a silent one is still accepted, later, and timed out;
* a connection's handshake needs no cookie round trip (TCP proved the address);
* closing a connection makes no epoll_ctl call (closing the descriptor takes
  it out of the epoll set), unless another server holds a duplicate of it;
* an accepted socket is never switched to non-blocking (no FIONBIO per
  connection): its reads and writes pass MSG_DONTWAIT, so they never wait;
* the core's conn ids come from random bytes read ahead, not one getrandom
  call per session;
* a connection whose last session said CLOSE is closed without a timer entry,
  and without reading on to its peer's EOF when that is queued behind it;
* a short link's ACCEPT and ACK are packed from the session's fields, without
  message objects;
* the store's wakeup (an eventfd, edge-triggered) is never read back by the loop.
"""

from __future__ import annotations

import os
import select
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import purelink
from helpers.tcp import TIMEOUT, Host, closed_by_peer, connect_many, tcp_host, tcp_url
from purelink.listener.tail.server import TAKEN
from purelink.listener.tcp import TcpServer
from purelink.protocol import core_sessions, wire
from purelink.protocol.framing import FrameDecoder, encode_frame
from purelink.protocol.listener_core import ListenerCore
from purelink.testing import MemoryStore

ANON = (1 << 63) | 5


def hello_frame(nonce: int = 1, pid: int = ANON) -> bytes:
    return encode_frame(wire.encode_hello(wire.Hello(nonce, "s", "", pid, 1400, b"")))


def answers(peer: socket.socket) -> list[object]:
    """The messages waiting for `peer` now (at least one)."""
    decoder = FrameDecoder()
    peer.settimeout(TIMEOUT)
    frames = decoder.feed(peer.recv(65536))
    return [wire.decode_datagram(f) for f in frames]


class RecordingHost(Host):
    """A Host that records how it was asked to stop polling each descriptor."""

    def __init__(self) -> None:
        super().__init__()
        self.removed: list[tuple[int, bool]] = []

    def remove_source(self, fd: int, closing: bool = False) -> None:
        self.removed.append((fd, closing))
        super().remove_source(fd, closing)


@pytest.fixture
def deferred() -> Iterator[tuple[RecordingHost, TcpServer]]:
    """A TcpServer as the Listener makes it: accepts deferred to the first bytes."""
    yield from tcp_host(RecordingHost, max_connections=100, defer_accept=True)


def test_a_hello_is_read_with_its_accept_in_one_event(
    deferred: tuple[RecordingHost, TcpServer],
) -> None:
    h, server = deferred
    assert server._deferred  # Linux: TCP_DEFER_ACCEPT took
    (peer,) = connect_many(server, 1)  # returns before the listener may accept it
    peer.sendall(hello_frame())
    h.turn(now=1.0)  # one readiness event: the listening socket's
    assert (server.accept_drains, server.drains, server.accepts, server.frames) == (1, 1, 1, 1)
    (accept,) = answers(peer)  # at once: no RETRY, TCP proved the address
    assert isinstance(accept, wire.Accept)
    assert h.core.stats.retries == 0
    assert server.timeout(1.0) == -1.0  # it has a session: no timer entry was made
    assert server.connections == 1 and len(h.handlers) == 2  # polled from now on
    peer.sendall(encode_frame(wire.encode_close(accept.conn_id, accept.epoch)))
    h.turn(now=2.0)
    assert server.connections == 0 and server.drains == 2
    ((_, closing),) = h.removed
    assert closing  # closed by its only holder: no epoll_ctl(DEL)
    assert closed_by_peer(peer, TIMEOUT)
    peer.close()


def test_a_silent_connection_is_still_accepted_and_timed_out(
    deferred: tuple[RecordingHost, TcpServer],
) -> None:
    h, server = deferred
    (silent,) = connect_many(server, 1)
    while not server.accepts:  # after DEFER_ACCEPT seconds (~1 s), the kernel lets it in
        assert h.turn(now=5.0)
    assert server.connections == 1 and server.frames == 0
    assert 10.0 <= server.timeout(5.0) <= 10.1  # it owes its first frame
    server.expire(15.0)
    assert server.dropped == {"read_timeout": 1}
    assert closed_by_peer(silent, TIMEOUT)
    silent.close()


def test_a_connection_another_server_took_is_unregistered_before_close() -> None:
    """A subscription's connection is handed over as a dup of the socket: the
    descriptor the listener closes is then not the last one, so it must leave
    the epoll set by epoll_ctl (else epoll reports the other's socket for ever)."""
    h = RecordingHost()
    server = TcpServer(
        h, h.core, "127.0.0.1", 0, pool=h.pool, round_buffers=h.round_buffers,
        max_connections=10, read_timeout=10.0, defer_accept=False,
    )  # fmt: skip
    server.start()
    kept: list[socket.socket] = []

    def take(sock: socket.socket, head: Any) -> object:
        kept.append(sock.dup())
        return TAKEN

    server.foreign = take  # type: ignore[assignment]
    (peer,) = connect_many(server, 1)
    h.turn(now=1.0)
    peer.sendall(b"\xff\xff\xff\xffnot a frame")
    h.turn(now=2.0)
    assert len(kept) == 1 and server.connections == 0
    assert [closing for _, closing in h.removed] == [False]
    assert h.epoll.poll(0.05) == []  # nothing left in the set for that socket
    for s in (peer, *kept):
        s.close()
    server.close()
    h.epoll.close()


@pytest.fixture
def host() -> Iterator[tuple[Host, TcpServer]]:
    yield from tcp_host()


def test_accepted_sockets_stay_blocking_and_their_reads_never_wait(
    host: tuple[Host, TcpServer],
) -> None:
    h, server = host
    (peer,) = connect_many(server, 1)
    h.turn(now=1.0)
    (conn,) = server._conns.values()
    assert conn.sock.getblocking()  # no FIONBIO was made for it
    done = threading.Event()

    def read_nothing() -> None:
        server._on_ready(conn, 2.0, select.EPOLLIN)  # a spurious event: nothing to read
        done.set()

    threading.Thread(target=read_nothing, daemon=True).start()
    assert done.wait(2.0)  # MSG_DONTWAIT: EAGAIN, not a wait
    assert server.connections == 1
    peer.close()


def test_with_a_default_socket_timeout_accepted_sockets_are_made_non_blocking(
    host: tuple[Host, TcpServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    h, server = host
    monkeypatch.setattr(socket, "getdefaulttimeout", lambda: 5.0)
    (peer,) = connect_many(server, 1)
    h.turn(now=1.0)
    (conn,) = server._conns.values()
    assert conn.sock.gettimeout() == 0.0  # else its calls would wait up to 5 s
    peer.close()


def test_conn_ids_read_random_bytes_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    core = ListenerCore(MemoryStore())
    calls = []
    real = core_sessions.os.urandom

    def urandom(n: int) -> bytes:
        calls.append(n)
        return real(n)

    monkeypatch.setattr(core_sessions.os, "urandom", urandom)
    ids = set()
    for i in range(600):  # past two read-aheads
        core.receive_datagram(hello_frame(i + 1, ANON + i)[4:], ("tcp:h", i), 1.0, True)
        for data, _ in core.datagrams_to_send(1.0):
            accept = wire.decode_datagram(data)
            assert isinstance(accept, wire.Accept)
            ids.add(accept.conn_id)
    assert len(ids) == 600 and 0 not in ids
    assert calls == [1024] * 3  # 256 ids a call


def short_link_open(h: Host, server: TcpServer) -> tuple[socket.socket, wire.Accept]:
    """A peer connected to `server` whose HELLO was read and answered (at time 1)."""
    (peer,) = connect_many(server, 1)
    peer.sendall(hello_frame())
    h.turn(now=1.0)
    (accept,) = answers(peer)
    assert isinstance(accept, wire.Accept)
    return peer, accept


def test_a_closed_link_leaves_no_timer_entry(deferred: tuple[RecordingHost, TcpServer]) -> None:
    """The CLOSE's read closes the connection: nothing is owed, so no entry goes
    in the timer queue (which would keep the loop waking up to drop it)."""
    h, server = deferred
    peer, accept = short_link_open(h, server)
    peer.sendall(encode_frame(wire.encode_close(accept.conn_id, accept.epoch)))
    h.turn(now=2.0)
    assert server.connections == 0
    assert not server._timers and server.timeout(2.0) == -1.0
    peer.close()


class CountingSocket:
    """A connection's socket that counts its receive calls."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.receives = 0

    def recv_into(self, *args: Any) -> int:
        self.receives += 1
        return self.sock.recv_into(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


def test_a_close_with_the_eof_behind_it_is_not_read_on(
    deferred: tuple[RecordingHost, TcpServer],
) -> None:
    """The peer's CLOSE and its EOF are both queued (EPOLLRDHUP): one receive
    takes the CLOSE, which closes the connection; the EOF is not read."""
    h, server = deferred
    peer, accept = short_link_open(h, server)
    (conn,) = server._conns.values()
    counting = CountingSocket(conn.sock)
    conn.sock = counting  # type: ignore[assignment]
    peer.sendall(encode_frame(wire.encode_close(accept.conn_id, accept.epoch)))
    peer.shutdown(socket.SHUT_WR)  # loopback: the FIN is queued behind the CLOSE now
    h.turn(now=2.0)
    assert server.connections == 0 and server.dropped == {}
    assert counting.receives == 1
    assert closed_by_peer(peer, TIMEOUT)
    peer.close()


def test_a_short_links_answers_are_made_without_message_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ACCEPT and the "stored" ACK of a short link (nothing held, nothing seen
    twice) are packed from the session's fields: no wire.Accept or wire.Ack is
    made for them (the bytes are the same: tests/protocol/test_wire_fuzz.py)."""

    def made(*args: object) -> None:
        raise AssertionError("a message object was made for an answer")

    core = ListenerCore(MemoryStore())
    key = ("tcp:h", 1)
    with monkeypatch.context() as patch:
        patch.setattr(wire, "Accept", made)
        patch.setattr(wire, "Ack", made)
        core.receive_datagram(hello_frame()[4:], key, 1.0, True)
        ((accept_bytes, _),) = core.datagrams_to_send(1.0)
    accept = wire.decode_datagram(accept_bytes)
    assert isinstance(accept, wire.Accept)
    batch = wire.encode_batch(accept.producer, accept.epoch, 1, [b"r" * 128])
    with monkeypatch.context() as patch:
        patch.setattr(wire, "Accept", made)
        patch.setattr(wire, "Ack", made)
        core.receive_datagram(wire.encode_data(accept.conn_id, 1, batch), key, 1.0, True)
        assert [h.last_seq for _, h in core.take_writes()["s"]] == [1]
        core.written("s", 1)
        core.synced("s", 1)
        ((ack_bytes, _),) = core.datagrams_to_send(1.001)
    ack = wire.decode_datagram(ack_bytes)
    assert isinstance(ack, wire.Ack)
    assert (ack.stored, ack.received, ack.largest_pn, ack.ranges) == (1, 1, 1, ())


def test_the_loop_never_reads_the_store_wakeup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's eventfd is edge-triggered in the loop's epoll: each sync's
    write wakes the loop, which takes the events without reading the count."""
    read: list[int] = []
    real = os.eventfd_read

    def eventfd_read(fd: int) -> int:
        read.append(fd)
        return real(fd)

    monkeypatch.setattr(os, "eventfd_read", eventfd_read)
    with purelink.Listener(tmp_path / "data", udp=None, tcp="127.0.0.1:0") as lst:
        synced_fd = lst._synced_fd
        for _ in range(3):  # one sync each: the link waits for its record to be stored
            with purelink.connect(tcp_url(lst), stream="s", timeout=TIMEOUT) as link:
                link.queue(b"r")
                assert link.wait_stored(timeout=TIMEOUT)
        assert lst.stats().syncs >= 3 and lst.stats().records_stored == 3
    assert synced_fd not in read
    assert read  # the sync thread's own wakeups still go through it


def test_a_sync_that_lands_while_the_loop_works_does_not_wake_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store wakes the loop only when it sleeps in epoll: a sync that lands
    while the loop is in a handler writes no eventfd, and its record is still
    told stored (the loop takes the store's events at the end of its round)."""
    writes: list[int] = []
    real_write = os.eventfd_write

    def eventfd_write(fd: int, value: int) -> None:
        writes.append(fd)
        real_write(fd, value)

    monkeypatch.setattr(os, "eventfd_write", eventfd_write)
    syncing, busy, woke = threading.Event(), threading.Event(), threading.Event()
    with purelink.Listener(tmp_path / "data", udp=None, tcp="127.0.0.1:0") as lst:
        files, tcp = lst._files, lst._tcp
        assert files is not None and tcp is not None and tcp._sock is not None
        listening = tcp._sock.fileno()
        on_accept = lst._handlers[listening]
        real_sync, real_wake = files._timed_sync, files._wake

        def accept_while_a_sync_lands(now: float, mask: int) -> None:
            busy.set()  # the loop is in a handler now...
            assert woke.wait(TIMEOUT)  # ...while the sync thread says its sync landed
            on_accept(now, mask)

        def sync_once_the_loop_works(log: Any) -> int:
            syncing.set()
            assert busy.wait(TIMEOUT)
            return real_sync(log)

        def wake() -> None:
            real_wake()
            woke.set()

        with purelink.connect(tcp_url(lst), stream="s", timeout=TIMEOUT) as link:
            lst._handlers[listening] = accept_while_a_sync_lands
            files._timed_sync = sync_once_the_loop_works  # type: ignore[method-assign]
            files._wake = wake
            synced_fd = lst._synced_fd
            link.queue(b"r")  # written, then synced once the loop is busy with:
            assert syncing.wait(TIMEOUT)
            other = socket.create_connection(tcp._sock.getsockname(), timeout=TIMEOUT)
            other.sendall(hello_frame())  # (accepted once its HELLO is in)
            assert link.wait_stored(timeout=TIMEOUT)
            files._timed_sync = real_sync  # type: ignore[method-assign]
            assert synced_fd not in writes  # the loop was never woken for that sync
            other.close()
        assert lst.stats().records_stored == 1
