"""What a tcp:// link is answered, and when its connection ends.

Why it exists: over TCP nothing is lost on the way, so the listener holds an
ACK that would say "received" ahead of "stored" for the sync in flight (at
most `ack_hold`), and closes a connection whose last session said CLOSE
instead of waiting for the peer's EOF (protocol/listener_core.py, listener/tcp.py).
These tests pin both, sans-IO where they can (a hand-stepped clock), and
check that UDP peers are answered as before.  The last one stresses the sync
thread's "wake only when asleep" hand-off (listener.py): a lost wakeup would
leave a record unstored for ever.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

import purelink
from helpers.tcp import TIMEOUT, Host, closed_by_peer, connect_many, tcp_host, wait_for
from purelink.listener.tcp import TcpServer
from purelink.protocol import wire
from purelink.protocol.framing import FrameDecoder, encode_frame
from purelink.protocol.listener_core import CoreConfig, ListenerCore
from purelink.testing import MemoryStore

TCP = ("tcp:127.0.0.1", 40000)  # a proven peer: a TCP connection's key
UDP = ("127.0.0.1", 5000)
ANON = (1 << 63) | 99
HOLD = CoreConfig().ack_hold


def hello(nonce: int = 7, cookie: bytes = b"", pid: int = ANON) -> bytes:
    return wire.encode_hello(wire.Hello(nonce, "s", "", pid, 1400, cookie))


def accept_tcp(core: ListenerCore, now: float) -> wire.Accept:
    core.receive_datagram(hello(), TCP, now, True)
    ((data, addr),) = core.datagrams_to_send(now)
    accept = wire.decode_datagram(data)
    assert isinstance(accept, wire.Accept) and addr == TCP
    return accept


def accept_udp(core: ListenerCore, now: float) -> wire.Accept:
    core.receive_datagram(hello(), UDP, now)
    ((data, _),) = core.datagrams_to_send(now)
    retry = wire.decode_datagram(data)
    assert isinstance(retry, wire.Retry)
    core.receive_datagram(hello(cookie=retry.cookie), UDP, now)
    ((data, _),) = core.datagrams_to_send(now)
    accept = wire.decode_datagram(data)
    assert isinstance(accept, wire.Accept)
    return accept


def send_data(core: ListenerCore, a: wire.Accept, addr: tuple[str, int], now: float) -> None:
    """One record in one DATA datagram, written to the (fake) store at once."""
    batch = wire.encode_batch(a.producer, a.epoch, 1, [b"r" * 128])
    core.receive_datagram(wire.encode_data(a.conn_id, 1, batch), addr, now, addr == TCP)
    assert [h.first_seq for _, h in core.take_writes()["s"]] == [1]
    core.written("s", 1)


def acks(out: list[tuple[bytes, object]]) -> list[wire.Ack]:
    decoded = [wire.decode_datagram(data) for data, _ in out]
    assert all(isinstance(m, wire.Ack) for m in decoded)
    return decoded  # type: ignore[return-value]


@pytest.fixture
def core() -> ListenerCore:
    return ListenerCore(MemoryStore())


# ------------------------------------------------------ held ACKs (sans-IO)


def test_a_tcp_peer_gets_one_ack_when_the_sync_lands(core: ListenerCore) -> None:
    a = accept_tcp(core, 100.0)
    assert core.timeout(100.0) == -1.0  # nothing held: no timer
    send_data(core, a, TCP, 100.0)
    assert core.datagrams_to_send(100.0) == []  # "received" alone is held for the sync
    assert core.timeout(100.0) == pytest.approx(HOLD)
    assert core.timeout(100.0 + HOLD / 2) == pytest.approx(HOLD / 2)
    core.synced("s", 1)
    (ack,) = acks(core.datagrams_to_send(100.001))
    assert (ack.received, ack.stored, ack.largest_pn) == (1, 1, 1)
    assert 900 <= ack.ack_delay <= 1100  # the held time is reported, for the link's RTT
    assert core.timeout(100.001) == -1.0
    assert core.stats.acks == 1
    assert core.datagrams_to_send(100.002) == []


def test_a_held_ack_goes_out_by_ack_hold_when_the_sync_is_slow(core: ListenerCore) -> None:
    a = accept_tcp(core, 100.0)
    send_data(core, a, TCP, 100.0)
    assert core.datagrams_to_send(100.0) == []
    more = wire.encode_probe(a.conn_id, 2, a.epoch)  # news after the hold began
    core.receive_datagram(more, TCP, 100.0 + HOLD / 2, True)
    assert core.datagrams_to_send(100.0 + HOLD / 2) == []  # the deadline does not move
    assert core.timeout(100.0 + HOLD / 2) == pytest.approx(HOLD / 2)
    (ack,) = acks(core.datagrams_to_send(100.0 + HOLD))
    assert (ack.received, ack.stored, ack.largest_pn) == (1, 0, 2)
    assert core.timeout(100.0 + HOLD) == -1.0
    core.synced("s", 1)  # the sync lands later: its own ACK, as before
    (ack,) = acks(core.datagrams_to_send(100.1))
    assert (ack.received, ack.stored) == (1, 1)
    assert core.stats.acks == 2


def test_udp_peers_and_ack_hold_0_answer_received_at_once() -> None:
    for core, addr in (
        (ListenerCore(MemoryStore()), UDP),
        (ListenerCore(MemoryStore(), dataclasses.replace(CoreConfig(), ack_hold=0.0)), TCP),
    ):
        a = accept_udp(core, 100.0) if addr == UDP else accept_tcp(core, 100.0)
        send_data(core, a, addr, 100.0)
        (ack,) = acks(core.datagrams_to_send(100.0))
        assert (ack.received, ack.stored) == (1, 0)
        assert core.timeout(100.0) == -1.0


def test_a_closed_session_leaves_no_timer_behind(core: ListenerCore) -> None:
    a = accept_tcp(core, 100.0)
    send_data(core, a, TCP, 100.0)
    assert core.datagrams_to_send(100.0) == []
    core.disconnected(TCP)  # the connection broke while its ACK was held
    assert core.datagrams_to_send(100.0 + HOLD) == []
    assert core.timeout(100.0 + HOLD) == -1.0  # the loop does not spin on a stale deadline


# ------------------------------------------------- finished peers (sans-IO)


def test_finished_once_after_the_last_session_of_a_tcp_peer_closes(core: ListenerCore) -> None:
    a = accept_tcp(core, 100.0)
    assert not core.finished(TCP)  # open: not finished
    core.receive_datagram(wire.encode_close(a.conn_id, a.epoch), TCP, 100.0, True)
    assert core.links == 0
    assert core.finished(TCP)
    assert not core.finished(TCP)  # said once
    u = accept_udp(core, 100.0)
    core.receive_datagram(wire.encode_close(u.conn_id, u.epoch), UDP, 100.0)
    assert not core.finished(UDP)  # a UDP peer has no connection to end


def test_a_new_session_after_a_close_unfinishes_the_peer(core: ListenerCore) -> None:
    """A CLOSE and a new HELLO in the same read: the connection now carries the
    new session and must not be closed under it."""
    a = accept_tcp(core, 100.0)
    core.receive_datagram(wire.encode_close(a.conn_id, a.epoch), TCP, 100.0, True)
    core.receive_datagram(hello(nonce=8, pid=ANON + 1), TCP, 100.0, True)
    assert core.links == 1
    assert not core.finished(TCP)


def test_a_stale_close_does_not_finish_a_peer(core: ListenerCore) -> None:
    a = accept_tcp(core, 100.0)
    core.receive_datagram(wire.encode_close(a.conn_id, a.epoch + 1), TCP, 100.0, True)
    assert core.links == 1 and not core.finished(TCP)
    assert core.stats.dropped == {"stale_epoch": 1}


# ------------------------------------------- the connection ends on CLOSE


@pytest.fixture
def host() -> Iterator[tuple[Host, TcpServer]]:
    yield from tcp_host()


def read_accept(peer: socket.socket) -> wire.Accept:
    peer.settimeout(TIMEOUT)
    decoder = FrameDecoder()
    while True:
        data = peer.recv(65536)
        assert data, "closed during the handshake"
        frames = decoder.feed(data)
        if frames:
            accept = wire.decode_datagram(frames[0])
            assert isinstance(accept, wire.Accept)
            return accept


def test_the_listener_closes_a_connection_whose_session_said_close(
    host: tuple[Host, TcpServer],
) -> None:
    h, server = host
    done, other = connect_many(server, 2)
    h.turn(now=1.0)  # accepts both
    for peer, pid in ((done, ANON), (other, ANON + 1)):  # two links: two producers
        peer.sendall(encode_frame(hello(pid=pid)))
        while server.frames < (1 if peer is done else 2):
            h.turn(now=2.0)
    a = read_accept(done)
    read_accept(other)
    done.sendall(encode_frame(wire.encode_close(a.conn_id, a.epoch)))
    h.turn(now=3.0)  # the CLOSE's read event: the connection goes in the same event
    assert server.connections == 1
    assert closed_by_peer(done, TIMEOUT)
    assert server.dropped == {}
    core = h.core
    assert core.links == 1  # the other link is untouched
    assert not closed_by_peer(other, 0.05)
    done.close()
    other.close()


def test_a_tcp_link_s_connection_is_gone_when_it_closes(tmp_path: Path) -> None:
    with purelink.Listener(tmp_path / "d", udp=None, tcp="127.0.0.1:0") as lst:
        assert lst.tcp_address is not None
        url = "tcp://%s:%d" % lst.tcp_address
        for i in range(20):
            with purelink.connect(url, stream="s", timeout=TIMEOUT) as link:
                link.queue(b"%d" % i)
                assert link.wait_stored(timeout=TIMEOUT)
        assert wait_for(lambda: lst.stats().connections == 0)
        stats = lst.stats()
        assert stats.links == 0
        assert stats.dropped == {}
        assert stats.sessions == 20
    assert [p for _, p in purelink.Store(tmp_path / "d").read("s")] == [
        b"%d" % i for i in range(20)
    ]


# ------------------------------------------ the sync thread's wake-up


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_the_sync_thread_never_misses_a_wakeup(tmp_path: Path, transport: str) -> None:
    """400 times: one record, wait until it is stored (fdatasync'ed), next.  Each
    wait needs the sync thread to have been woken from its sleep exactly when the
    loop wrote; a lost wakeup shows as a wait that times out."""
    with purelink.Listener(tmp_path / "d", udp="127.0.0.1:0", tcp="127.0.0.1:0") as lst:
        address = lst.udp_address if transport == "udp" else lst.tcp_address
        assert address is not None
        with purelink.connect(f"{transport}://%s:%d" % address, stream="s") as link:
            for i in range(400):
                seq = link.queue(b"%d" % i)
                assert link.wait_stored(seq, timeout=TIMEOUT), f"record {i} never stored"
        assert lst.stats().syncs >= 1
    assert sum(1 for _ in purelink.Store(tmp_path / "d").read("s")) == 400
