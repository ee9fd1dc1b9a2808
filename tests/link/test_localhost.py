"""`localhost` names both loopbacks: a link tries 127.0.0.1 and ::1, and the
first that answers is its listener, whichever family the listener is bound on."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import purelink
from purelink import _address
from purelink.store.store import Store


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize("scheme", ["udp", "tcp"])
@pytest.mark.parametrize(
    "bound",
    [
        "127.0.0.1",
        pytest.param(
            "::1",
            marks=pytest.mark.skipif(not has_ipv6_loopback(), reason="no IPv6 loopback here"),
        ),
    ],
)
def test_localhost_finds_a_listener_bound_on_one_family_only(
    tmp_path: Path, scheme: str, bound: str
) -> None:
    address = _address.format_hostport(bound, 0)
    udp, tcp = (address, None) if scheme == "udp" else (None, address)
    with purelink.Listener(tmp_path / "data", udp=udp, tcp=tcp) as lst:
        host, port = (lst.udp_address if scheme == "udp" else lst.tcp_address) or ("", 0)
        assert host == bound  # that family only
        with purelink.connect(f"{scheme}://localhost:{port}", stream="s", timeout=5) as link:
            link.queue(b"found")
            assert link.wait_stored(timeout=10)
    assert [p for _, p in Store(tmp_path / "data").read("s")] == [b"found"]


def test_localhost_refused_on_both_says_so_for_each() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(purelink.ConnectError, match="every address refused") as refused:
        purelink.connect(f"udp://localhost:{port}", stream="s", timeout=5)
    assert f"udp://127.0.0.1:{port}: connection refused" in str(refused.value)


def test_addresses() -> None:
    assert _address.addresses("localhost", 1) == ["127.0.0.1", "::1"]
    assert _address.addresses("10.0.0.1", 1) == ["10.0.0.1"]
    assert _address.addresses("::1", 1) == ["::1"]
    assert _address.addresses("no-such-host.invalid", 1) == ["no-such-host.invalid"]
    assert _address.expand([("udp", "localhost", 7), ("tcp", "127.0.0.2", 8)]) == [
        ("udp", "127.0.0.1", 7),
        ("udp", "::1", 7),
        ("tcp", "127.0.0.2", 8),
    ]


@pytest.mark.skipif(not has_ipv6_loopback(), reason="no IPv6 loopback here")
def test_subscribing_at_localhost_finds_a_listener_on_ipv6_only(tmp_path: Path) -> None:
    with purelink.Listener(tmp_path / "data", udp="[::1]:0", tcp="[::1]:0") as lst:
        assert lst.udp_address is not None and lst.tcp_address is not None
        with purelink.connect(f"udp://localhost:{lst.udp_address[1]}", stream="s") as link:
            link.queue(b"back")
            assert link.wait_stored(timeout=10)
        url = f"tcp://localhost:{lst.tcp_address[1]}"
        with purelink.subscribe(url, "s", follow=False, timeout=5) as sub:
            assert [record for _, record in sub] == [b"back"]
