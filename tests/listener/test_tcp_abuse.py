"""The listener's TCP side against the peers an adversarial review found (session 3).

Why it exists: each test here is a defect a QA pass reproduced against a real
listener -- a connection kept open for ever by one junk frame, a flood of tiny
frames holding the loop, a healthy idle session timed out because its frames
filled the receive buffer exactly, whole frames thrown away with the bad
length behind them, unsent answers growing without a global bound, and a
stream the store could not open killing the loop.  Each fails without its fix.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import purelink
from helpers.serve_process import ServeProcess
from helpers.tcp import (
    TIMEOUT,
    RawLink,
    closed_by_peer,
    connect_many,
    raw,
    records,
    tcp_host,
    tcp_url,
    wait_for,
)
from purelink.listener.tcp import JUNK_LIMIT
from purelink.protocol import wire
from purelink.protocol.framing import encode_frame, encode_frames
from purelink.protocol.sender import Sender, SenderConfig
from purelink.protocol.tail import TailDecoder, encode_request
from purelink.store import DataDir
from purelink.store.log import StreamLog

READ_TIMEOUT = 0.5


@pytest.fixture
def lst(tmp_path: Path) -> purelink.Listener:
    listener = purelink.Listener(
        tmp_path / "data", udp=None, tcp="127.0.0.1:0", read_timeout=READ_TIMEOUT
    )
    listener.start()
    yield listener  # type: ignore[misc]
    listener.close()


def test_a_connection_that_sends_only_junk_frames_is_timed_out(lst: purelink.Listener) -> None:
    """One zero-length frame used to clear the read deadline for good: 4 bytes
    per connection filled the connection limit (QA #5)."""
    peers = [raw(lst) for _ in range(5)]
    for sock in peers:
        sock.sendall(b"\0\0\0\0")  # a whole frame, whose datagram is dropped
    assert all(closed_by_peer(sock, TIMEOUT) for sock in peers)
    assert lst.stats().dropped.get("read_timeout") == 5
    assert lst.stats().connections == 0
    for sock in peers:
        sock.close()


def test_a_refused_hello_does_not_keep_its_connection(lst: purelink.Listener) -> None:
    sock = raw(lst)
    hello = wire.Hello(1, "bad/name", "", (1 << 63) | 5, 1400, b"")  # refused: bad_stream
    sock.sendall(encode_frame(wire.encode_hello(hello)))
    assert closed_by_peer(sock, TIMEOUT)
    assert lst.stats().dropped.get("read_timeout") == 1
    sock.close()


def test_an_idle_session_owes_nothing(lst: purelink.Listener) -> None:
    link = RawLink(lst, "idle")
    assert not closed_by_peer(link.sock, READ_TIMEOUT * 4)  # idle, with a session: kept
    link.sock.sendall(link.frames_for([b"late"]))
    assert wait_for(lambda: records(lst, "idle") == [b"late"])
    link.sock.close()


def test_frames_that_fill_the_receive_buffer_exactly_clear_the_deadline(
    lst: purelink.Listener,
) -> None:
    """Two DATA frames of 65,536 bytes together, sent in two pieces, then idle:
    the buffer swap forgot they were fed, and the healthy session was timed
    out (QA #7)."""
    link = RawLink(lst, "exact")
    sender = Sender(SenderConfig(stream="exact2", datagram_size=40_000))
    now = time.monotonic()
    sender.connect(now)
    link.sock.sendall(encode_frames(sender.datagrams_to_send(now)))
    link.sock.settimeout(TIMEOUT)
    while sender.state != "open":
        for frame in link.decoder.feed(link.sock.recv(65536)):
            sender.receive_datagram(frame, time.monotonic())
    size = 32_698  # two such records make two frames of 32,768 bytes each
    sender.push([b"a" * size, b"b" * size])
    data = encode_frames(sender.datagrams_to_send(time.monotonic()))
    assert len(data) == 65_536
    link.sock.sendall(data[:1000])
    time.sleep(0.1)  # the two pieces must arrive in two reads: the first one partial
    link.sock.sendall(data[1000:])
    assert wait_for(lambda: len(records(lst, "exact2")) == 2)
    assert not closed_by_peer(link.sock, READ_TIMEOUT * 4)
    assert "read_timeout" not in lst.stats().dropped
    link.sock.close()


def test_whole_frames_before_a_bad_length_are_stored(lst: purelink.Listener) -> None:
    """A good DATA frame and a 4 GiB length in one send: the frame used to be
    thrown away, uncounted, with the connection (QA #10)."""
    link = RawLink(lst, "before")
    link.sock.sendall(link.frames_for([b"kept"]) + struct.pack("<I", 0xFFFF_FFFF))
    assert closed_by_peer(link.sock, TIMEOUT)
    assert wait_for(lambda: records(lst, "before") == [b"kept"])
    assert lst.stats().dropped.get("frame_too_large") == 1
    link.sock.close()


def test_a_flood_of_tiny_frames_is_cut_off_and_does_not_hold_others(
    lst: purelink.Listener,
) -> None:
    """Thousands of zero-length frames per send: each was a datagram through the
    core, 262,144 per readiness event; the connection is now closed once the
    core has dropped JUNK_LIMIT of its frames, and a link goes on (QA #6)."""
    with purelink.connect(tcp_url(lst), stream="live", timeout=TIMEOUT) as link:
        flood = raw(lst)
        try:
            for _ in range(64):  # 4 MiB of zero-length frames, unless it is cut off first
                flood.sendall(b"\0\0\0\0" * 16_384)
        except OSError:
            pass  # the listener closed it while we were still writing
        assert wait_for(lambda: lst.stats().dropped.get("junk_frames") == 1)
        t0 = time.monotonic()
        link.queue(b"meanwhile")
        assert link.wait_stored(timeout=TIMEOUT)
        assert time.monotonic() - t0 < 5.0
        flood.close()
    stats = lst.stats()
    assert stats.dropped.get("junk_frames") == 1
    assert stats.dropped.get("truncated", 0) == JUNK_LIMIT + 1  # then it was cut off


def test_unsent_answers_are_bounded_across_connections() -> None:
    """Peers that never read while answers pile up: each connection was bounded
    (`max_unsent`), their sum was not (QA #9).  On the hand-turned host, with
    answers handed straight to the connections' routes."""
    for h, server in tcp_host():
        server.max_unsent_total = 1 << 20
        clients = connect_many(server, 8)
        for sock in clients:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        while server.connections < len(clients):
            h.turn(0.0)
        answer = b"a" * 60_000
        sent = 0
        while not server.dropped.get("unsent_limit") and sent < 10_000:
            for route in list(h.routes.values()):
                route(answer)
                sent += 1
                assert server._unsent <= server.max_unsent_total
        assert server.dropped.get("unsent_limit", 0) >= 1
        assert server._unsent <= server.max_unsent_total
        assert server.dropped.get("slow_reader", 0) == 0  # the total, not each, was the limit
        for sock in clients:
            sock.close()
        for conn in list(server._conns.values()):
            server._close(conn, None)
        assert server._unsent == 0


def test_a_stream_the_store_cannot_open_is_refused_and_the_loop_lives(
    lst: purelink.Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of file descriptors when a HELLO opens a new stream: the OSError used
    to end the listener's loop thread (QA #1)."""
    opened = DataDir.stream

    def stream(self: DataDir, name: str, *, create: bool = True) -> StreamLog:
        if name == "doomed":
            raise OSError(24, "Too many open files")
        return opened(self, name, create=create)

    monkeypatch.setattr(DataDir, "stream", stream)
    with pytest.raises(purelink.ConnectError, match="refused the link: store_error"):
        purelink.connect(tcp_url(lst), stream="doomed", timeout=TIMEOUT)
    assert lst.stats().dropped.get("store_error") == 1
    with purelink.connect(tcp_url(lst), stream="fine", timeout=TIMEOUT) as link:
        link.queue(b"ok")
        assert link.wait_stored(timeout=TIMEOUT)
    assert lst.error is None


def test_a_write_the_store_refuses_is_never_answered_stored(
    lst: purelink.Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk error while appending (a segment roll, EIO): the loop used to die.
    Now those batches are counted `store_error` and never answered "stored";
    nothing more is written to that stream until a restart, even if the disk
    came back (a batch stored after the gap would make "stored" cover the
    records lost in it); its link is told so and waits, new sessions there
    are refused for now (`stream_failed`, not permanent); other streams go on."""
    append = StreamLog.append
    failures = [1]  # the disk fails once, then works again

    def flaky(self: StreamLog, batches: object) -> int:
        if self.name == "broken" and failures[0]:
            failures[0] -= 1
            raise purelink.Error("writing failed: [Errno 5] Input/output error")
        return append(self, batches)  # type: ignore[arg-type]

    monkeypatch.setattr(StreamLog, "append", flaky)
    broken = purelink.connect(tcp_url(lst), stream="broken", timeout=TIMEOUT)
    broken.queue(b"lost to the disk")
    assert wait_for(lambda: lst.stats().dropped.get("store_error", 0) == 1)
    broken.queue(b"after the gap")
    assert not broken.wait_stored(timeout=1.0)
    assert broken.stored == 0
    assert broken.stats().waiting == "stream_failed"
    assert records(lst, "broken") == []
    with pytest.raises(purelink.ConnectError, match="store failed on stream 'broken'") as held:
        purelink.connect(tcp_url(lst), stream="broken", timeout=1.0)
    assert not held.value.permanent  # a restart heals it
    with purelink.connect(tcp_url(lst), stream="fine", timeout=TIMEOUT) as link:
        link.queue(b"ok")
        assert link.wait_stored(timeout=TIMEOUT)
    assert lst.error is None
    broken.close(timeout=0.1)


def test_serve_exits_1_when_its_listener_stops_serving(tmp_path: Path) -> None:
    """A listener thread that dies (a bug) used to leave `purelink serve` up,
    bound and deaf; it now stops with exit code 1 and one line saying why."""
    script = (
        "import sys\n"
        "import purelink.listener.listener as L\n"
        "def boom(self): raise RuntimeError('injected')\n"
        "L.Listener._loop = boom\n"
        "from purelink.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    command = [sys.executable, "-c", script, "serve", "--data", str(tmp_path / "d")]
    proc = subprocess.run(
        [*command, "--udp", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.returncode == 1, proc.stderr
    assert "purelink listening" in proc.stdout
    assert "stopped serving: RuntimeError('injected')" in proc.stderr


def test_serve_takes_the_tcp_limits_from_its_command_line(tmp_path: Path) -> None:
    with ServeProcess(
        tmp_path / "d",
        transport="tcp",
        extra=["--read-timeout", "0.3", "--max-connections", "2"],
    ) as server:
        silent = [socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)]
        silent.append(socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT))
        third = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)
        assert closed_by_peer(third, TIMEOUT)  # over --max-connections: closed at once
        assert all(closed_by_peer(sock, TIMEOUT) for sock in silent)  # --read-timeout
        for sock in [*silent, third]:
            sock.close()
        assert server.stop() == 0
    assert server.last_stats is not None
    assert server.last_stats["dropped"]["connection_limit"] == 1
    assert server.last_stats["dropped"]["read_timeout"] == 2


@pytest.mark.parametrize("cut", [1, 4, 5, 7, 8, 12])
def test_a_subscription_request_split_anywhere_is_served(lst: purelink.Listener, cut: int) -> None:
    """The preamble read as a frame length is over the limit once 4 bytes are
    in, and a request cut at bytes 4-7 was dropped as `frame_too_large`: the
    subscription server could not yet tell it was one (QA #8)."""
    with purelink.connect(tcp_url(lst), stream="s", timeout=TIMEOUT) as link:
        for i in range(5):
            link.queue(b"r%d" % i)
        assert link.wait_stored(timeout=TIMEOUT)
    request = encode_request("s", 1, False)
    sock = raw(lst)
    sock.sendall(request[:cut])
    time.sleep(0.05)  # two reads on the listener's side: the cut must be seen
    sock.sendall(request[cut:])
    decoder = TailDecoder(1)
    got: list[tuple[int, bytes]] = []
    sock.settimeout(TIMEOUT)
    while not decoder.ended:
        data = sock.recv(65536)
        assert data, f"closed after {len(got)} records: {lst.stats().dropped}"
        got += decoder.feed(data)
    sock.close()
    assert [payload for _, payload in got] == [b"r%d" % i for i in range(5)]
    assert "frame_too_large" not in lst.stats().dropped


def test_expired_sessions_are_not_junk_of_whoever_swept_them(tmp_path: Path) -> None:
    """The idle sweep runs on some link's HELLO: its `session_expired` drops were
    charged to that connection's junk, and a link whose session expired was cut
    off for the `unknown_conn` burst it sent before its REFUSE came (review)."""
    listener = purelink.Listener(tmp_path / "d", udp=None, tcp="127.0.0.1:0", sync="none")
    listener._core_config = dataclasses.replace(listener._core_config, idle_timeout=0.5)
    with listener as lst:
        idle = [RawLink(lst, "s") for _ in range(JUNK_LIMIT + 20)]
        try:
            time.sleep(0.7)  # they all go idle past idle_timeout
            with purelink.connect(tcp_url(lst), stream="t", timeout=TIMEOUT) as link:  # sweeps
                link.queue(b"x")
                assert link.wait_stored(timeout=TIMEOUT)
                assert link.stats().reconnects == 0
            # one whose session is gone sends a burst of DATA before its REFUSE comes
            expired = idle[0].sender
            pid, epoch, conn_id = expired.producer_id, expired.epoch, expired.conn_id
            burst = [
                wire.encode_data(conn_id, pn, wire.encode_batch(pid, epoch, pn, [b"y"]))
                for pn in range(1, 2 * JUNK_LIMIT)
            ]
            idle[0].sock.sendall(encode_frames(burst))
            assert wait_for(lambda: lst.stats().dropped.get("unknown_conn", 0) > JUNK_LIMIT)
            dropped = lst.stats().dropped
            assert dropped["session_expired"] == JUNK_LIMIT + 20
            assert "junk_frames" not in dropped
        finally:
            for raw_link in idle:
                raw_link.sock.close()


def test_close_after_a_failed_fdatasync_lets_everything_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A failed fdatasync makes its log refuse all work; close() then raised on
    it, synced no stream after it and left the directory locked (review)."""
    real = os.fdatasync
    failing = [True]

    def flaky(fd: int) -> None:
        if failing[0]:
            failing[0] = False
            raise OSError(5, "Input/output error")
        real(fd)

    lst = purelink.Listener(tmp_path / "d", udp=None, tcp="127.0.0.1:0")
    lst.start()
    link = purelink.connect(tcp_url(lst), stream="a", timeout=TIMEOUT)
    monkeypatch.setattr(os, "fdatasync", flaky)
    link.queue(b"1")
    assert not link.wait_stored(timeout=1.0)  # its sync failed: never told stored
    link.close(timeout=0.1)
    monkeypatch.setattr(os, "fdatasync", real)
    lst.close()  # no exception
    assert any("stream a is stopped" in r.getMessage() for r in caplog.records)
    with purelink.Listener(tmp_path / "d", udp=None, tcp="127.0.0.1:0") as again:  # not locked
        assert again.tcp_address is not None
