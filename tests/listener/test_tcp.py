"""tcp:// links and the listener's TCP side: end to end, bad input, drained accept, many links.

Why it exists: TCP is a second way into the same listener and store, with
its own failure modes -- a stream to cut into frames, connections to accept
by the thousand, peers that trickle, stall, lie about a frame's length or
vanish in the middle of one.  The link and integration tests run over tcp://
too (their `transport` fixture); this file holds what only TCP has.

Two kinds of tests:

* against a real `Listener` on loopback (its own thread), bounded waits only;
* against `TcpServer` alone with a `Host` that stands in for the listener and
  turns its loop by hand with a given `now`: drained accept and the timers
  are then deterministic (no thread, no clock).
"""

from __future__ import annotations

import concurrent.futures
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import purelink
import purelink.listener.tcp
from helpers.tcp import (
    TIMEOUT,
    Host,
    RawLink,
    closed_by_peer,
    connect_many,
    raw,
    records,
    tcp_host,
    tcp_url,
    wait_for,
)
from purelink.listener.tcp import TCP_PREFIX, TcpServer
from purelink.protocol import wire
from purelink.protocol.framing import encode_frame, encode_frames


@pytest.fixture
def tcp_listener(tmp_path: Path) -> Iterator[purelink.Listener]:
    with purelink.Listener(tmp_path / "data", udp=None, tcp="127.0.0.1:0", read_timeout=1.0) as lst:
        yield lst


# ------------------------------------------------------------ end to end


def test_udp_and_tcp_links_into_one_store(tmp_path: Path) -> None:
    with purelink.Listener(tmp_path / "d", udp="127.0.0.1:0", tcp="127.0.0.1:0") as lst:
        assert lst.udp_address is not None and lst.tcp_address is not None
        u = purelink.connect("udp://%s:%d" % lst.udp_address, stream="s")
        t = purelink.connect(tcp_url(lst), stream="s")
        for i in range(3000):
            u.queue(b"u%d" % i)
            t.queue(b"t%d" % i)
        assert u.close(timeout=TIMEOUT) and t.close(timeout=TIMEOUT)
        stats = lst.stats()
        assert stats.sessions == 2
        assert stats.accepts == 1
        assert stats.retries == 1  # the UDP link's cookie round trip; TCP needs none
    got = records(tmp_path / "d", "s")
    assert [r for r in got if r[:1] == b"u"] == [b"u%d" % i for i in range(3000)]
    assert [r for r in got if r[:1] == b"t"] == [b"t%d" % i for i in range(3000)]


def test_large_datagrams_over_tcp(tcp_listener: purelink.Listener) -> None:
    """TCP has no MTU: a link may use 64 KiB datagrams (and still split larger records)."""
    recs = [b"%d" % i * 500 for i in range(2000)] + [bytes(300_000)]
    with purelink.connect(tcp_url(tcp_listener), stream="big", datagram_size=65_000) as link:
        for r in recs:
            link.queue(r)
        assert link.wait_stored(timeout=TIMEOUT)
    assert records(tcp_listener, "big") == recs


def test_link_reconnects_when_its_connection_breaks(tcp_listener: purelink.Listener) -> None:
    link = purelink.connect(tcp_url(tcp_listener), stream="s", producer="p")
    for i in range(500):
        link.queue(b"a%d" % i)
    assert link.wait_stored(timeout=TIMEOUT)
    server = tcp_listener._tcp
    assert server is not None
    for conn in list(server._conns.values()):
        conn.sock.shutdown(socket.SHUT_RDWR)  # the connection dies under the link
    for i in range(500, 1000):
        link.queue(b"a%d" % i)
    assert link.wait_stored(timeout=TIMEOUT)
    assert link.stats().reconnects >= 1
    assert link.close(timeout=TIMEOUT)
    assert records(tcp_listener, "s") == [b"a%d" % i for i in range(1000)]
    assert wait_for(lambda: tcp_listener.stats().links == 0)  # the dead session ended too


def test_cli_serve_tcp_send_and_read(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-m", "purelink", "serve", "--data", str(data), "--no-udp",
         "--tcp", "127.0.0.1:0"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], TIMEOUT)
        assert ready, "serve printed no ready line"
        line = proc.stdout.readline().decode()
        address = line.split("tcp=")[1].split()[0]
        lines = b"".join(b"line %d\n" % i for i in range(100))
        sent = subprocess.run(
            [sys.executable, "-m", "purelink", "send", f"tcp://{address}", "--stream", "cli"],
            input=lines, capture_output=True, timeout=TIMEOUT, check=False,
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr
    finally:
        proc.terminate()
        proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0
    read = subprocess.run(
        [sys.executable, "-m", "purelink", "read", "--data", str(data), "--stream", "cli"],
        capture_output=True, timeout=TIMEOUT, check=True,
    )  # fmt: skip
    assert read.stdout == lines


def test_an_idle_tcp_link_and_listener_sleep(tcp_listener: purelink.Listener) -> None:
    server = tcp_listener._tcp
    assert server is not None
    with purelink.connect(tcp_url(tcp_listener), stream="idle") as link:
        link.queue(b"one")
        assert link.wait_stored(timeout=TIMEOUT)
        # the accept's read deadline comes due once (1 s), then no timer is armed
        assert wait_for(lambda: server.timeout(time.monotonic()) == -1.0)
        sleeps, drains = link.stats().sleeps, tcp_listener.stats().drains
        threading.Event().wait(0.5)  # the window in which nothing may happen
        assert link.stats().sleeps == sleeps  # the link thread never woke
        assert tcp_listener.stats().drains == drains
        assert server.timeout(time.monotonic()) == -1.0


# ------------------------------------------------------------ bad input


def test_a_4_gib_frame_length_drops_that_connection_only(tcp_listener: purelink.Listener) -> None:
    with purelink.connect(tcp_url(tcp_listener), stream="good") as link:
        bad = raw(tcp_listener)
        bad.sendall(struct.pack("<I", 0xFFFF_FFFF) + b"x" * 100)
        assert closed_by_peer(bad, TIMEOUT)
        bad.close()
        for i in range(100):
            link.queue(b"%d" % i)
        assert link.wait_stored(timeout=TIMEOUT)
    stats = tcp_listener.stats()
    assert stats.dropped.get("frame_too_large") == 1
    assert records(tcp_listener, "good") == [b"%d" % i for i in range(100)]


def test_a_peer_trickling_bytes_is_timed_out_and_never_stalls_others(
    tcp_listener: purelink.Listener,
) -> None:
    slow = RawLink(tcp_listener, "slow")
    frames = slow.frames_for([b"never stored"])
    stop = threading.Event()

    def trickle() -> None:  # one byte every 50 ms: the frame never completes in time
        for byte in frames[:-1]:
            if stop.wait(0.05):
                return
            try:
                slow.sock.send(bytes([byte]))
            except OSError:
                return

    thread = threading.Thread(target=trickle)
    thread.start()
    try:
        with purelink.connect(tcp_url(tcp_listener), stream="fast") as link:
            for i in range(2000):
                link.queue(b"%d" % i)
            assert link.wait_stored(timeout=TIMEOUT)  # not held up by the slow peer
            assert closed_by_peer(slow.sock, TIMEOUT)
    finally:
        stop.set()
        thread.join()
        slow.sock.close()
    assert tcp_listener.stats().dropped.get("read_timeout") == 1
    assert records(tcp_listener, "slow") == []
    assert len(records(tcp_listener, "fast")) == 2000


def test_a_connection_that_never_speaks_is_timed_out(tcp_listener: purelink.Listener) -> None:
    silent = raw(tcp_listener)
    half = raw(tcp_listener)
    half.sendall(struct.pack("<I", 100) + b"0123456789")  # a frame that never finishes
    assert closed_by_peer(silent, TIMEOUT)
    assert closed_by_peer(half, TIMEOUT)
    silent.close()
    half.close()
    assert wait_for(lambda: tcp_listener.stats().connections == 0)
    assert tcp_listener.stats().dropped.get("read_timeout") == 2


def test_disconnect_mid_frame_stores_only_whole_frames(tcp_listener: purelink.Listener) -> None:
    peer = RawLink(tcp_listener, "cut")
    whole = peer.frames_for([b"first"])
    cut = peer.frames_for([b"second"])
    peer.sock.sendall(whole + cut[: len(cut) // 2])
    peer.sock.close()
    assert wait_for(lambda: tcp_listener.stats().dropped.get("truncated_frame") == 1)
    assert wait_for(lambda: tcp_listener.stats().links == 0)
    assert records(tcp_listener, "cut") == [b"first"]


def test_junk_datagrams_in_good_frames_are_counted_not_fatal(
    tcp_listener: purelink.Listener,
) -> None:
    peer = RawLink(tcp_listener, "junk")
    junk = [b"", b"PL", b"\x00" * 40, wire.encode_close(12345, 1)]
    peer.sock.sendall(encode_frames(junk) + peer.frames_for([b"after the junk"]))
    assert wait_for(lambda: records(tcp_listener, "junk") == [b"after the junk"])
    dropped = tcp_listener.stats().dropped
    assert dropped.get("truncated", 0) >= 2
    assert dropped.get("unknown_conn") == 1
    assert tcp_listener.stats().connections == 1
    peer.sock.close()


def test_a_flood_of_silent_connections_is_bounded(tmp_path: Path) -> None:
    with purelink.Listener(
        tmp_path / "d", udp=None, tcp="127.0.0.1:0", max_connections=20, read_timeout=2.0
    ) as lst:
        link = purelink.connect(tcp_url(lst), stream="s")
        flood = [raw(lst) for _ in range(40)]
        # the 21st and later are accepted and closed at once; the 19 others time out
        assert wait_for(lambda: lst.stats().dropped.get("connection_limit") == 21)
        for i in range(200):
            link.queue(b"%d" % i)
        assert link.wait_stored(timeout=TIMEOUT)  # the live link never stalled
        assert all(closed_by_peer(s, TIMEOUT) for s in flood)
        assert wait_for(lambda: lst.stats().dropped.get("read_timeout") == 19)
        assert lst.stats().connections == 1
        with purelink.connect(tcp_url(lst), stream="s") as late:  # room again
            late.queue(b"late")
        assert link.close(timeout=TIMEOUT)
        for s in flood:
            s.close()
    assert len(records(tmp_path / "d", "s")) == 201


def test_unfinished_frames_are_bounded_in_total(tcp_listener: purelink.Listener) -> None:
    server = tcp_listener._tcp
    assert server is not None
    server.max_buffered = 1000
    peers = [raw(tcp_listener) for _ in range(3)]
    for p in peers:
        p.sendall(struct.pack("<I", 5000) + b"x" * 400)  # 404 bytes held each
    assert wait_for(lambda: tcp_listener.stats().dropped.get("memory_limit") == 1)
    for p in peers:
        p.close()


# ------------------------------------------------- TcpServer by hand


@pytest.fixture
def host() -> Iterator[tuple[Host, TcpServer]]:
    yield from tcp_host()


@pytest.mark.parametrize(("budget", "per_event"), [(64, [64, 36, 0]), (1, [1, 1, 1])])
def test_one_readiness_event_accepts_until_eagain_within_the_budget(
    host: tuple[Host, TcpServer],
    budget: int,
    per_event: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, server = host
    # 1 = the naive way, the benchmark's "before" (bench/connections.py sets it so too)
    monkeypatch.setattr(purelink.listener.tcp, "ACCEPT_BUDGET", budget)
    clients = connect_many(server, 100)
    taken = []
    for _ in per_event:
        before = server.accepts
        server._on_accept(0.0, select.EPOLLIN)
        taken.append(server.accepts - before)
    assert taken == per_event
    assert server.accept_drains == 3
    assert server.connections == sum(per_event)
    for c in clients:
        c.close()


def test_timers_sleep_unless_a_connection_owes_bytes(host: tuple[Host, TcpServer]) -> None:
    h, server = host
    assert server.timeout(0.0) == -1.0  # no connection: the loop sleeps without a timer
    quiet, talker = connect_many(server, 2)
    h.turn(now=100.0)  # accepts both: each owes its first frame by 110
    assert 10.0 <= server.timeout(100.0) <= 10.1
    hello = wire.encode_hello(wire.Hello(1, "s", "", (1 << 63) | 3, 1400, b""))
    talker.sendall(encode_frame(hello))
    h.turn(now=101.0)  # a whole frame: the talker owes nothing now
    assert closed_by_peer(talker, 0.05) is False  # it got its ACCEPT and stays
    server.expire(109.9)
    assert server.connections == 2
    server.expire(110.0)  # the quiet one is gone; the talker's entry just ends
    assert server.connections == 1
    assert server.dropped == {"read_timeout": 1}
    assert server.timeout(110.0) == -1.0  # an idle connection arms no timer
    assert closed_by_peer(quiet, TIMEOUT)
    quiet.close()
    talker.close()


def test_frames_go_to_the_core_as_views_into_pooled_buffers(host: tuple[Host, TcpServer]) -> None:
    h, server = host
    (peer,) = connect_many(server, 1)
    h.turn(now=1.0)
    hello = encode_frame(wire.encode_hello(wire.Hello(1, "s", "", (1 << 63) | 3, 1400, b"")))
    peer.sendall(hello + hello[:7])  # a whole frame and the start of the next
    seen: list[int] = []
    core = h.core
    real = core.receive_datagram

    def spy(data: bytes | memoryview, addr: Any, now: float, proven: bool = False) -> None:
        assert isinstance(data, memoryview) and proven and addr[0].startswith(TCP_PREFIX)
        seen.append(len(data))
        real(data, addr, now, proven)

    core.receive_datagram = spy  # type: ignore[method-assign]
    ready = h.epoll.poll(5.0)
    for fd, mask in ready:
        h.handlers[fd](2.0, mask)
    assert seen == [len(hello) - 4]
    assert len(h.round_buffers) == 1  # held until the round's writes are done
    conn = next(iter(server._conns.values()))
    assert conn.partial == hello[:7]  # only the unfinished tail is kept, as a copy
    assert server._buffered == 7
    peer.close()


# --------------------------------------------------- many short links


def short_links(lst: purelink.Listener, count: int, concurrency: int = 200) -> None:
    """`count` links, `concurrency` at a time: connect, queue 128 B, wait stored, close."""
    url = tcp_url(lst)

    def one(i: int) -> None:
        link = purelink.connect(url, stream="short", capacity=16, timeout=TIMEOUT)
        link.queue(b"%08d" % i + b"x" * 120)
        assert link.wait_stored(timeout=TIMEOUT)
        assert link.close(timeout=TIMEOUT)

    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        for future in [pool.submit(one, i) for i in range(count)]:
            future.result(timeout=120)
    got = records(lst, "short")
    assert sorted(got) == [b"%08d" % i + b"x" * 120 for i in range(count)]  # each once
    assert wait_for(lambda: lst.stats().connections == 0)
    stats = lst.stats()
    assert stats.accepts == count
    assert stats.sessions == count
    assert stats.links == 0


def test_300_short_links_200_at_a_time(tmp_path: Path) -> None:
    with purelink.Listener(tmp_path / "d", udp=None, tcp="127.0.0.1:0") as lst:
        short_links(lst, 300)


@pytest.mark.slow
def test_10000_short_links_200_at_a_time(tmp_path: Path) -> None:
    with purelink.Listener(tmp_path / "d", udp=None, tcp="127.0.0.1:0") as lst:
        short_links(lst, 10_000)
        assert lst.stats().accepts > lst.stats().accept_drains  # drained: >1 per event
