"""Where the kernel lacks GSO or GRO (or libc is out of reach), purelink falls
back cleanly: the same records arrive, only the number of system calls changes."""

from __future__ import annotations

import errno
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
