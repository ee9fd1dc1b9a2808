"""Encrypted links and subscriptions over real loopback sockets.

Why it exists: test_secure_sim.py proves the encrypted layer on virtual
time; this file proves the drivers with real sockets, real threads and real
time: the bytes on the wire (captured by a UDP proxy and a TCP relay) never
hold a record, a stream name or a producer name; a key writes and reads
only the streams its globs allow, over UDP, TCP and subscriptions, and is
refused with the reason otherwise; a reload while a link writes loses
nothing, lets a new key in at once, keeps the sessions of a changed key and
ends those of a removed one.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import purelink
from helpers.netproxy import Faults, NetProxy
from purelink.protocol.keys import Key, KeyTable

WRITER = b"w" * 32
READER = b"r" * 32
ALL = b"a" * 32
KEYS = KeyTable(
    [
        Key("writer", WRITER, write=("orders-*",), read=()),
        Key("reader", READER, write=(), read=("orders-*",)),
        Key("all", ALL),
    ]
)
MARK = b"PLAINTEXT-MARK-"


class TcpTap:
    """A TCP relay on loopback that keeps every byte it relays (both ways)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._server = socket.create_server(("127.0.0.1", 0))
        self.address = self._server.getsockname()[:2]
        self.seen = bytearray()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        self._stop = False
        self._accept = threading.Thread(target=self._run, daemon=True)
        self._accept.start()

    def _run(self) -> None:
        self._server.settimeout(0.2)
        while not self._stop:
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            up = socket.create_connection(self.upstream)
            self._socks += [client, up]
            for a, b in ((client, up), (up, client)):
                t = threading.Thread(target=self._pump, args=(a, b), daemon=True)
                t.start()
                self._threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(1 << 16):
                with self._lock:
                    self.seen += data
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def captured(self) -> bytes:
        with self._lock:
            return bytes(self.seen)

    def close(self) -> None:
        self._stop = True
        self._server.close()
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.close()
        for t in [self._accept, *self._threads]:
            t.join(5.0)


@contextlib.contextmanager
def listening(tmp_path: Path, keys: KeyTable = KEYS) -> Iterator[purelink.Listener]:
    with purelink.Listener(tmp_path / "d", udp="127.0.0.1:0", tcp="127.0.0.1:0", keys=keys) as lst:
        yield lst


def urls(lst: purelink.Listener) -> tuple[str, str]:
    assert lst.udp_address is not None and lst.tcp_address is not None
    return (
        "udp://%s:%d" % lst.udp_address,
        "tcp://%s:%d" % lst.tcp_address,
    )


def records(n: int) -> list[bytes]:
    return [MARK + b"%06d" % i + b"." * (i % 300) for i in range(n)]


def read_all(lst: purelink.Listener, stream: str) -> list[bytes]:
    return [p for _, p in purelink.Store(lst.path).read(stream)]


def test_udp_wire_bytes_never_hold_a_record(tmp_path: Path) -> None:
    with listening(tmp_path) as lst:
        assert lst.udp_address is not None
        faults = Faults(loss=0.02, duplicate=0.02, jitter=0.001)
        with NetProxy(lst.udp_address, seed=3, up=faults, capture=100_000) as proxy:
            host, port = proxy.address
            recs = records(3000)
            link = purelink.connect(
                f"udp://{host}:{port}",
                stream="orders-eu",
                producer="shop-7",
                secret=WRITER,
                key_id="writer",
            )
            for r in recs:
                link.queue(r)
            assert link.close(timeout=30)
            captured = proxy.captured()
        assert read_all(lst, "orders-eu") == recs
    assert len(captured) > 50
    for _, data in captured:
        assert MARK not in data
        assert b"orders-eu" not in data and b"shop-7" not in data


def test_tcp_link_and_subscription_bytes_never_hold_a_record(tmp_path: Path) -> None:
    with listening(tmp_path) as lst:
        assert lst.tcp_address is not None
        tap = TcpTap(lst.tcp_address)
        try:
            tcp = "tcp://%s:%d" % tap.address
            recs = records(2000)
            with purelink.connect(
                tcp, stream="orders-us", secret=ALL, key_id="all", producer="shop-9"
            ) as link:
                for r in recs:
                    link.queue(r)
                assert link.wait_stored(timeout=30)
            got = list(
                purelink.subscribe(tcp, "orders-us", follow=False, secret=READER, key_id="reader")
            )
            assert [p for _, p in got] == recs
            assert [pos for pos, _ in got] == list(range(1, len(recs) + 1))
            captured = tap.captured()
        finally:
            tap.close()
    assert len(captured) > 2 * sum(map(len, recs))  # both the link and the subscription
    assert MARK not in captured
    assert b"orders-us" not in captured and b"shop-9" not in captured


@pytest.mark.parametrize(
    ("key_id", "secret", "stream", "write", "read"),
    [
        ("writer", WRITER, "orders-1", True, False),
        ("writer", WRITER, "payments", False, False),
        ("reader", READER, "orders-1", False, True),
        ("reader", READER, "payments", False, False),
        ("all", ALL, "payments", True, True),
    ],
)
def test_the_permission_matrix(
    tmp_path: Path, key_id: str, secret: bytes, stream: str, write: bool, read: bool
) -> None:
    with listening(tmp_path) as lst:
        udp, tcp = urls(lst)
        with purelink.connect(udp, stream=stream, secret=ALL, key_id="all") as seed:
            seed.queue(b"seed")
            assert seed.wait_stored(timeout=10)
        for url in (udp, tcp):
            if write:
                with purelink.connect(url, stream=stream, secret=secret, key_id=key_id) as link:
                    link.queue(b"x")
                    assert link.wait_stored(timeout=10)
            else:
                with pytest.raises(purelink.ConnectError, match="forbidden"):
                    purelink.connect(url, stream=stream, secret=secret, key_id=key_id, timeout=5)
        sub = purelink.subscribe(tcp, stream, follow=False, secret=secret, key_id=key_id)
        if read:
            assert next(p for _, p in sub) == b"seed"
        else:
            with pytest.raises(purelink.Error, match="may not read"):
                list(sub)
        dropped = lst.stats().dropped
        assert dropped.get("forbidden", 0) == (0 if write else 2)
        assert read_all(lst, stream) == [b"seed"] + ([b"x", b"x"] if write else [])


def test_unknown_key_and_wrong_secret_are_refused_with_the_reason(tmp_path: Path) -> None:
    with listening(tmp_path) as lst:
        udp, tcp = urls(lst)
        for url in (udp, tcp):
            with pytest.raises(purelink.ConnectError, match="unknown key id"):
                purelink.connect(url, stream="orders-1", secret=ALL, key_id="nobody", timeout=5)
            with pytest.raises(purelink.ConnectError, match="wrong secret"):
                purelink.connect(url, stream="orders-1", secret=READER, key_id="all", timeout=5)
        with pytest.raises(purelink.Error, match="no key 'nobody'"):
            list(purelink.subscribe(tcp, "orders-1", follow=False, secret=ALL, key_id="nobody"))
        dropped = lst.stats().dropped
        assert dropped["unknown_key"] == 2 and dropped["bad_secret"] == 2
        assert purelink.Store(lst.path).streams() == []


def test_a_reload_under_load_loses_nothing(tmp_path: Path) -> None:
    """A link writes while the keys change twice: first its secret changes and a
    new key is added (the link runs on, the new key works at once, the old secret
    no longer opens anything), then its key goes (the link fails: key revoked)."""
    with listening(tmp_path) as lst:
        udp, _ = urls(lst)
        link = purelink.connect(udp, stream="orders-1", secret=WRITER, key_id="writer")
        stop = threading.Event()
        queued: list[bytes] = []

        def write() -> None:
            i = 0
            while not stop.is_set() and i < 200_000:
                with contextlib.suppress(purelink.Full):
                    record = b"%d" % i
                    link.queue(record)
                    queued.append(record)
                    i += 1
                if i % 500 == 0:
                    time.sleep(0.001)

        writer = threading.Thread(target=write)
        writer.start()
        try:
            time.sleep(0.3)
            lst.set_keys(
                KeyTable(
                    [
                        Key("writer", b"W" * 32, write=("orders-*",), read=()),
                        Key("new", b"n" * 32),
                    ]
                )
            )
            with purelink.connect(udp, stream="orders-2", secret=b"n" * 32, key_id="new") as other:
                other.queue(b"new key")
                assert other.wait_stored(timeout=10)
            with pytest.raises(purelink.ConnectError, match="wrong secret"):
                purelink.connect(udp, stream="orders-1", secret=WRITER, key_id="writer", timeout=5)
            time.sleep(0.3)
        finally:
            stop.set()
            writer.join()
        assert link.wait_stored(timeout=30)
        assert read_all(lst, "orders-1") == queued
        lst.set_keys(KeyTable([Key("new", b"n" * 32)]))
        deadline = time.monotonic() + 10
        with pytest.raises(purelink.LinkError, match="key revoked"):
            while time.monotonic() < deadline:
                link.queue(b"after")
                time.sleep(0.01)
        assert lst.stats().dropped.get("key_revoked") == 1
        link.close(timeout=1)


def test_a_reload_ends_the_subscriptions_of_a_removed_key(tmp_path: Path) -> None:
    with listening(tmp_path) as lst:
        udp, tcp = urls(lst)
        with purelink.connect(udp, stream="orders-1", secret=ALL, key_id="all") as link:
            link.queue(b"one")
            assert link.wait_stored(timeout=10)
        kept = purelink.subscribe(tcp, "orders-1", secret=ALL, key_id="all")
        gone = purelink.subscribe(tcp, "orders-1", secret=READER, key_id="reader")
        assert next(kept) == (1, b"one") and next(gone) == (1, b"one")
        outcome: list[BaseException] = []

        def follow() -> None:
            try:
                for _ in gone:
                    pass
            except purelink.Error as exc:
                outcome.append(exc)

        follower = threading.Thread(target=follow)
        follower.start()
        lst.set_keys(KeyTable([Key("all", ALL)]))
        follower.join(15)  # a parked follower notices within its heartbeat (5 s)
        assert not follower.is_alive() and outcome
        with purelink.connect(udp, stream="orders-1", secret=ALL, key_id="all") as link:
            link.queue(b"two")
            assert link.wait_stored(timeout=10)
        assert next(kept) == (2, b"two")  # the other key's subscription runs on
        kept.close()
        assert lst._tail is not None
        assert lst._tail.statistics().dropped.get("tail_key_revoked") == 1
