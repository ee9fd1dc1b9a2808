"""Where the kernel lacks GSO or GRO (or libc is out of reach), purelink falls
back cleanly: the same records arrive, only the number of system calls changes."""

from __future__ import annotations

import errno
import socket
from pathlib import Path

import pytest

import purelink
import purelink.listener.listener
from purelink.link import nogil, transport
from purelink.store.store import Store


def ship(lst: purelink.Listener, n: int = 5000) -> purelink.Link:
    assert lst.udp_address is not None
    link = purelink.connect("udp://%s:%d" % lst.udp_address, stream="s")
    for i in range(n):
        link.queue(b"r%d" % i)
    assert link.wait_stored(timeout=30)
    return link


def test_gso_refused_falls_back_to_one_send_per_datagram(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: object, data: bytes, segment: int) -> int:
        raise OSError(errno.EIO, "no GSO here")

    monkeypatch.setattr(nogil.NoGilSocket, "send_gso", refuse)
    # the refusal is simulated in NoGilSocket: the compiled send is not asked
    # (what the transport does about it is the same Python either way)
    monkeypatch.setattr(transport, "_send_run", None)
    monkeypatch.setattr(transport, "_send_runs", None)
    with purelink.Listener(tmp_path / "d", udp="127.0.0.1:0") as lst:
        link = ship(lst)
        stats = link.stats()
        link.close()
    assert stats.gso is False
    assert stats.send_calls >= stats.datagrams - 1  # one call per datagram (after the first try)
    assert [p for _, p in Store(tmp_path / "d").read("s")] == [b"r%d" % i for i in range(5000)]


def test_without_libc_the_socket_module_does_the_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nogil, "available", False)
    with purelink.Listener(tmp_path / "d", udp="127.0.0.1:0") as lst:
        link = ship(lst)
        assert link._transport._fast is None  # type: ignore[attr-defined]
        link.close()
    assert Store(tmp_path / "d").last("s") == 5000


def test_listener_without_gro(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(purelink.listener.listener, "UDP_GRO", 0x7FFF)  # an option no kernel has
    with purelink.Listener(tmp_path / "d", udp="127.0.0.1:0") as lst:
        assert lst.stats().gro is False
        ship(lst).close()
        assert lst.stats().records_stored == 5000


def _connected(monkeypatch: pytest.MonkeyPatch, option: int | None) -> tuple[int, int]:
    """A TcpTransport to a listening socket, with TCP_THIN_LINEAR_TIMEOUTS as
    `option`; what its socket says of that option (0 where it was not asked
    for) and of TCP_USER_TIMEOUT."""
    monkeypatch.setattr(transport, "TCP_THIN_LINEAR_TIMEOUTS", option)
    with socket.create_server(("127.0.0.1", 0)) as server:
        tcp = transport.TcpTransport("127.0.0.1", server.getsockname()[1])
        try:
            sock = tcp._sock
            assert sock is not None
            linear = sock.getsockopt(socket.IPPROTO_TCP, THIN_LINEAR) if THIN_LINEAR else 0
            return linear, sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)
        finally:
            tcp.close()


THIN_LINEAR = transport.TCP_THIN_LINEAR_TIMEOUTS


@pytest.mark.skipif(THIN_LINEAR is None, reason="TCP_THIN_LINEAR_TIMEOUTS is Linux's")
def test_a_tcp_link_asks_for_linear_timeouts_and_goes_on_without_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After an outage a connection resumes within an RTO of the path's
    return (transport.py's docstring); a kernel without the option leaves
    the link connected with its own backoff."""
    assert _connected(monkeypatch, THIN_LINEAR) == (1, transport.TCP_USER_TIMEOUT_MS)
    assert _connected(monkeypatch, None) == (0, transport.TCP_USER_TIMEOUT_MS)
    # an option the kernel refuses: the link connects all the same
    assert _connected(monkeypatch, 0x7FFF)[1] == transport.TCP_USER_TIMEOUT_MS
