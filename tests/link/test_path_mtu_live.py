"""DF, EMSGSIZE and path MTU probing with real sockets on loopback (the state
machine itself is tested in virtual time in test_pmtu.py).

* the link's UDP socket has DF set (IP_PMTUDISC_PROBE; IPv6 also IPV6_DONTFRAG),
  with the option numbers from `socket` or, where Python lacks them, Linux's;
* on loopback the first probe is answered, so the link sends full
  `datagram_size` datagrams, and its wire bytes stay within 5 % of payload;
* a kernel that refuses datagrams over an interface MTU (EMSGSIZE, here
  simulated below the socket) makes the link settle under that size, with
  GSO still on and every record stored;
* (slow, root) a real interface with MTU 1,280 between two network namespaces.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import purelink
from purelink.link import nogil, transport
from purelink.protocol import pmtu
from purelink.store.store import Store


def ship(url: str, records: list[bytes], **kwargs: object) -> purelink.LinkStats:
    with purelink.connect(url, stream="s", timeout=20, **kwargs) as link:  # type: ignore[arg-type]
        for r in records:
            link.queue(r)
        assert link.wait_stored(timeout=60)
        return link.stats()


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[purelink.Listener]:
    with purelink.Listener(tmp_path / "d", udp="127.0.0.1:0", sync="none") as lst:
        yield lst


def url_of(lst: purelink.Listener) -> str:
    assert lst.udp_address is not None
    return "udp://%s:%d" % lst.udp_address


def ship_until_searched(
    data: Path, records: list[bytes]
) -> tuple[purelink.LinkStats, pmtu.PathMtu]:
    """Ship `records` to a listener on `data`, then wait until the link's path MTU
    search is complete: its stats then and its search."""
    with (
        purelink.Listener(data, udp="127.0.0.1:0", sync="none") as lst,
        purelink.connect(url_of(lst), stream="s", timeout=20) as link,
    ):
        for r in records:
            link.queue(r)
        assert link.wait_stored(timeout=60)
        deadline = time.monotonic() + 20
        pm = link._sender._pmtu
        assert pm is not None
        while pm.state != pmtu.PmtuState.COMPLETE:
            assert time.monotonic() < deadline, vars(pm)
            time.sleep(0.01)
        return link.stats(), pm


def assert_settled_under(size: int, limit: int) -> None:
    """The live search ended at a size the path carries, above the base.  How
    close under the limit is the search's own (test_pmtu.py: within a STEP, in
    virtual time); live, a loaded machine can delay a probe's answer past
    MAX_PROBES timeouts and give up a size the path does carry -- lower, never
    higher."""
    assert pmtu.BASE < size <= limit


def test_option_numbers_come_from_socket_or_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    linux = {
        "IP_MTU_DISCOVER": 10,
        "IP_PMTUDISC_DO": 2,
        "IP_PMTUDISC_PROBE": 3,
        "IPV6_MTU_DISCOVER": 23,
        "IPV6_PMTUDISC_DO": 2,
        "IPV6_PMTUDISC_PROBE": 3,
        "IPV6_DONTFRAG": 62,
    }
    for name, value in linux.items():
        if sys.platform.startswith("linux"):
            assert getattr(transport, name) == value
        if hasattr(socket, name):
            assert getattr(transport, name) == getattr(socket, name)
    monkeypatch.delattr(socket, "IPV6_DONTFRAG", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    assert transport._linux("IPV6_DONTFRAG", 62) == 62
    monkeypatch.setattr(sys, "platform", "darwin")
    assert transport._linux("IPV6_DONTFRAG", 62) is None  # no guessing elsewhere
    monkeypatch.setattr(socket, "IPV6_DONTFRAG", 28, raising=False)
    assert transport._linux("IPV6_DONTFRAG", 62) == 28


class FussySocket:
    """setsockopt refuses the values listed."""

    def __init__(self, refuse: set[int]) -> None:
        self.refuse = refuse
        self.set: list[tuple[int, int, int]] = []

    def setsockopt(self, level: int, option: int, value: int) -> None:
        if value in self.refuse:
            raise OSError(errno.ENOPROTOOPT, "no")
        self.set.append((level, option, value))


def test_dont_fragment_falls_back_from_probe_to_do_to_nothing() -> None:
    probe, do = transport.IP_PMTUDISC_PROBE, transport.IP_PMTUDISC_DO
    assert probe is not None and do is not None
    sock = FussySocket({probe})
    assert transport.dont_fragment(sock, socket.AF_INET) == "do"  # type: ignore[arg-type]
    assert sock.set == [(socket.IPPROTO_IP, transport.IP_MTU_DISCOVER, do)]
    assert transport.dont_fragment(FussySocket({probe, do}), socket.AF_INET) == ""  # type: ignore[arg-type]


def test_the_link_socket_has_df_set(listener: purelink.Listener) -> None:
    with purelink.connect(url_of(listener), stream="s") as link:
        udp = link._transport
        assert isinstance(udp, transport.UdpTransport)
        assert udp.dont_fragment == "probe"
        value = udp._sock.getsockopt(socket.IPPROTO_IP, transport.IP_MTU_DISCOVER)  # type: ignore[arg-type]
        assert value == transport.IP_PMTUDISC_PROBE


def test_an_ipv6_link_socket_has_df_set(tmp_path: Path) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 in this Python")
    try:
        lst = purelink.Listener(tmp_path / "d", udp="[::1]:0", sync="none")
        lst.start()
    except OSError as exc:  # pragma: no cover - a kernel without ::1
        pytest.skip(f"no IPv6 loopback: {exc}")
    try:
        assert lst.udp_address is not None
        with purelink.connect("udp://[::1]:%d" % lst.udp_address[1], stream="s") as link:
            udp = link._transport
            assert isinstance(udp, transport.UdpTransport)
            assert udp.dont_fragment == "probe"
            sock = udp._sock
            mode = sock.getsockopt(socket.IPPROTO_IPV6, transport.IPV6_MTU_DISCOVER)  # type: ignore[arg-type]
            assert mode == transport.IPV6_PMTUDISC_PROBE
            assert sock.getsockopt(socket.IPPROTO_IPV6, transport.IPV6_DONTFRAG) == 1  # type: ignore[arg-type]
            link.queue(b"over IPv6")
            assert link.wait_stored(timeout=20)
    finally:
        lst.close()


def test_on_loopback_datagrams_are_full_size_and_cost_under_5_percent(
    listener: purelink.Listener,
) -> None:
    records = [i.to_bytes(4, "little") + bytes(996) for i in range(20_000)]
    stats = ship(url_of(listener), records)
    assert stats.datagram_size == 1400  # the first probe was answered
    assert stats.payload_bytes == 20_000_000
    # Loopback loses nothing of its own, but a loaded machine can: a listener
    # descheduled while its socket buffer fills drops there, and an answer held
    # up by the scheduler can make one datagram look lost.  Such resends are
    # rare and are not the framing's cost; each is at most one datagram.
    assert stats.retransmits <= stats.datagrams // 200, stats
    resent = stats.retransmits * stats.datagram_size
    assert (stats.bytes_sent - resent) / stats.payload_bytes <= 1.05, stats
    assert stats.wire_ratio == stats.bytes_sent / stats.payload_bytes
    assert listener.stats().mtu_probes >= 1  # the probe the listener answered


def test_emsgsize_makes_the_link_settle_under_the_interface_mtu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below the socket, a kernel whose interface carries 1,300 bytes refuses
    larger datagrams with EMSGSIZE (and a GSO send whose segments are larger
    with EINVAL).  The link's data and probes above 1,300 fail at once; it
    settles under 1,300, keeps GSO, and stores all."""
    limit = 1300
    refused: list[int] = []
    send, send_gso = nogil.NoGilSocket.send, nogil.NoGilSocket.send_gso

    def fussy_send(self: nogil.NoGilSocket, data: bytes) -> int:
        if len(data) > limit:
            refused.append(len(data))
            raise OSError(errno.EMSGSIZE, "Message too long")
        return send(self, data)

    def fussy_gso(self: nogil.NoGilSocket, data: bytes, segment: int) -> int:
        if segment > limit:
            raise OSError(errno.EINVAL, "Invalid argument")
        return send_gso(self, data, segment)

    monkeypatch.setattr(nogil.NoGilSocket, "send", fussy_send)
    monkeypatch.setattr(nogil.NoGilSocket, "send_gso", fussy_gso)
    monkeypatch.setattr(transport, "_send_run", None)  # the kernel is simulated above
    monkeypatch.setattr(transport, "_send_runs", None)
    records = [b"%d:" % i + bytes(i % 3000) for i in range(6000)]
    stats, _ = ship_until_searched(tmp_path / "d", records)
    assert_settled_under(stats.datagram_size, limit)
    assert stats.gso  # an MTU refusal is not a GSO refusal
    assert refused and max(refused) <= 1400  # the probe of 1,400 was refused
    assert [p for _, p in Store(tmp_path / "d").read("s")] == records


def test_a_routers_too_big_report_on_the_next_call_costs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A router on a path of 1,252 bytes drops larger datagrams and answers with
    an ICMP "too big", which a connected socket reports as EMSGSIZE on its
    next call, whatever that call sends or receives (simulated below the
    socket).  The datagrams of that call are not lost for it, GSO stays on,
    each report fails the probe in flight at once, and the link settles
    under 1,252 with every record stored."""
    limit = 1252
    pending = [False]
    reports = [0]
    send, send_gso, recv = (
        nogil.NoGilSocket.send,
        nogil.NoGilSocket.send_gso,
        nogil.NoGilSocket.recv,
    )

    def report() -> None:
        if pending[0]:
            pending[0] = False
            reports[0] += 1
            raise OSError(errno.EMSGSIZE, "Message too long")

    def routed_send(self: nogil.NoGilSocket, data: bytes) -> int:
        report()
        if len(data) > limit:
            pending[0] = True  # the router drops it and reports
            return len(data)
        return send(self, data)

    def routed_gso(self: nogil.NoGilSocket, data: bytes, segment: int) -> int:
        report()
        return send_gso(self, data, segment)

    def routed_recv(self: nogil.NoGilSocket) -> bytes:
        report()
        return recv(self)

    monkeypatch.setattr(nogil.NoGilSocket, "send", routed_send)
    monkeypatch.setattr(nogil.NoGilSocket, "send_gso", routed_gso)
    monkeypatch.setattr(transport, "_send_run", None)  # the router is simulated above
    monkeypatch.setattr(transport, "_send_runs", None)
    monkeypatch.setattr(nogil.NoGilSocket, "recv", routed_recv)
    records = [b"%d:" % i + bytes(1000) for i in range(20000)]
    stats, pm = ship_until_searched(tmp_path / "d", records)
    assert_settled_under(stats.datagram_size, limit)
    assert reports[0] >= 1 and pm.too_big >= 1
    assert stats.gso  # a report is not a GSO refusal
    assert stats.send_errors == 0  # nor a datagram that could not be sent
    assert [p for _, p in Store(tmp_path / "d").read("s")] == records


# ------------------------------------------------- a real small interface

NETNS = shutil.which("ip") is not None and hasattr(os, "geteuid") and os.geteuid() == 0


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=20)


@pytest.mark.slow
@pytest.mark.skipif(not NETNS, reason="needs root and iproute2 (network namespaces)")
def test_a_real_1280_byte_interface(tmp_path: Path) -> None:
    """A listener in a network namespace behind a veth pair of MTU 1,280 (the
    IPv6 minimum): the kernel refuses larger datagrams with DF set, and the
    link settles at 1,280 - 28 = 1,252 bytes of UDP payload (IPv4) or just
    under, storing every record."""
    ns = f"plmtu{os.getpid()}"
    sh("ip", "netns", "add", ns)
    try:
        sh("ip", "link", "add", f"{ns}a", "type", "veth", "peer", "name", f"{ns}b")
        sh("ip", "link", "set", f"{ns}b", "netns", ns)
        sh("ip", "addr", "add", "10.231.7.1/30", "dev", f"{ns}a")
        sh("ip", "link", "set", f"{ns}a", "mtu", "1280", "up")
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", "10.231.7.2/30", "dev", f"{ns}b")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", f"{ns}b", "mtu", "1280", "up")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        serve = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "purelink", "serve",
             "--data", str(tmp_path / "d"), "--udp", "10.231.7.2:0", "--sync", "none",
             "--insecure"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert serve.stdout is not None
            line = serve.stdout.readline()
            port = int(line.split("udp=")[1].split()[0].rsplit(":", 1)[1])
            records = [b"%d:" % i + bytes(i % 2500) for i in range(3000)]
            with purelink.connect(f"udp://10.231.7.2:{port}", stream="s", timeout=20) as link:
                for r in records:
                    link.queue(r)
                assert link.wait_stored(timeout=60)
                pm = link._sender._pmtu
                assert pm is not None
                deadline = time.monotonic() + 20
                while pm.state != pmtu.PmtuState.COMPLETE:
                    assert time.monotonic() < deadline, vars(pm)
                    time.sleep(0.01)
                stats = link.stats()
            assert 1252 - pmtu.STEP < stats.datagram_size <= 1252
        finally:
            serve.terminate()
            serve.wait(10)
            if serve.stdout is not None:
                serve.stdout.close()
        assert [p for _, p in Store(tmp_path / "d").read("s")] == records
    finally:
        subprocess.run(
            ["ip", "link", "del", f"{ns}a"], capture_output=True, timeout=20, check=False
        )
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20, check=False)


def test_a_sealed_link_fills_its_datagrams_to_datagram_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a secret each datagram is sealed (32 bytes more): the sender inside
    packs 32 bytes smaller, so what goes on the wire is at most 1,400 bytes, the
    pieces exactly 1,400; link.stats() counts the sealing in its ratio and size."""
    sizes: list[int] = []
    send_gso = nogil.NoGilSocket.send_gso

    def counting_gso(self: nogil.NoGilSocket, data: bytes, segment: int) -> int:
        sizes.append(segment)
        return send_gso(self, data, segment)

    monkeypatch.setattr(nogil.NoGilSocket, "send_gso", counting_gso)
    monkeypatch.setattr(transport, "_send_runs", None)  # each run through _send_run, counted
    c_send = transport._send_run
    if c_send is not None:  # the compiled core's send: counted the same way

        def counting_run(
            fd: int, datagrams: list[bytes], i: int, j: int, segment: int, release: bool
        ) -> int:
            if j - i > 1:
                sizes.append(segment)
            return int(c_send(fd, datagrams, i, j, segment, release))

        monkeypatch.setattr(transport, "_send_run", counting_run)
    secret = b"s" * 32
    records = [i.to_bytes(4, "little") + bytes(996) for i in range(10_000)]
    with purelink.Listener(tmp_path / "d", udp="127.0.0.1:0", sync="none", secret=secret) as lst:
        stats = ship(url_of(lst), records, secret=secret)
    assert stats.datagram_size == 1400
    assert sizes and max(sizes) == 1400
    assert 1.05 < stats.wire_ratio <= 1.06, stats  # 72 bytes a datagram of 1,400
    assert [p for _, p in Store(tmp_path / "d").read("s")] == records
