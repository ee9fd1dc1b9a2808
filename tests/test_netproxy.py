"""The loopback proxy (tests/helpers/netproxy.py) drives the path model on real sockets.

Why it exists: the live tests' faults are only worth what the proxy does
with the model's answers -- the copies it sends, when, and what it counts.
A UDP socket on loopback stands for the listener; every wait is bounded.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from helpers.netproxy import Faults, NetProxy


def listener() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5.0)
    return sock


def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll `condition` (the proxy's thread counts after it sends) for at most `timeout` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.005)


def receive(sock: socket.socket, count: int) -> list[bytes]:
    got = []
    sock.settimeout(5.0)
    while len(got) < count:
        got.append(sock.recv(2048))
    return got


def test_the_proxy_sends_the_models_copies_after_its_delay_and_counts_them() -> None:
    with (
        listener() as up,
        NetProxy(up.getsockname(), seed=1, up=Faults(duplicate=1.0, delay=0.02)) as proxy,
    ):
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with client:
            started = time.monotonic()
            for i in range(20):
                client.sendto(b"d%d" % i, proxy.address)
            got = receive(up, 40)
            assert time.monotonic() - started >= 0.02  # none before the delay
            assert sorted(got) == sorted([b"d%d" % i for i in range(20)] * 2)
            until(lambda: proxy.stats().up.forwarded == 40)
        st = proxy.stats().up
        assert (st.packets, st.duplicated, st.forwarded, st.delayed) == (20, 20, 40, 40)
        assert proxy.stats().faults()["duplicated"] == 20


def test_a_lossy_proxy_forwards_nothing_and_its_schedule_is_the_models() -> None:
    with listener() as up:
        proxy = NetProxy(
            up.getsockname(), seed=2, up=Faults(loss=1.0), down=Faults(), blackout_every=(3.0, 1.0)
        )
        for model in (proxy._up.model, proxy._down.model):
            cfg = model.config
            assert (cfg.blackout_every, cfg.blackout_for, cfg.blackout_first) == (3.0, 1.0, 2.0)
        with proxy, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
            for _ in range(50):
                client.sendto(b"x", proxy.address)
            until(lambda: proxy.stats().up.lost == 50)
            up.settimeout(0.2)
            try:
                extra = up.recv(2048)
            except TimeoutError:
                extra = b""
            assert extra == b""
            stats = proxy.stats()
            assert (stats.up.lost, stats.up.forwarded, stats.blackouts) == (50, 0, 0)
            proxy.blackout(0.5)
            assert proxy.stats().blackouts == 1
