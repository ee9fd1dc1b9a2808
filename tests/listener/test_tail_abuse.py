"""The subscription server under abuse: what a QA pass found, each pinned.

Why it exists: a subscription is served by a thread of the listener, from
bytes any peer may send.  These tests drive `TailServer` directly (its
`take` hook, as the listener's TCP server calls it) over socketpairs or
loopback sockets, and check that

* a stray byte after a request is read and refused, a hang-up is noticed,
  and no wait spins (QA #3);
* a request has one overall deadline, and a connection still sending its
  request holds no subscriber slot (QA #4);
* every refusal is counted by reason in `statistics().dropped` (QA #11);
* a subscription does not walk a big segment from its start: the log's
  sparse batch index takes it near its start position (QA #2);
* a request split inside the preamble gets NEED_MORE (QA #8).

Every wait has a deadline; nothing sleeps to hide a race.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import purelink.store.log as store_log
from purelink._crc32c import crc32c
from purelink.errors import ProtocolError
from purelink.listener.tail import file as tail_file
from purelink.listener.tail import server as tail_server
from purelink.listener.tail.file import FileTailSource
from purelink.listener.tail.server import TailServer
from purelink.protocol.handshake import Initiator
from purelink.protocol.keys import Key, KeyTable
from purelink.protocol.tail import FLAG_SEALED, PREAMBLE, TailDecoder, encode_request
from purelink.protocol.tail_seal import encode_sealed_request
from purelink.protocol.wire import encode_batch, verify_batch
from purelink.store import DataDir
from purelink.store.log import StreamLog

DEADLINE = 10.0


def payload(position: int, size: int = 20) -> bytes:
    return f"{position:010d}".encode().ljust(size, b".")


def append(log: StreamLog, count: int, size: int = 20) -> None:
    first = log.last_position + 1
    raw = encode_batch(5, 1, first, [payload(p, size) for p in range(first, first + count)])
    log.append([(raw, verify_batch(raw))])


def wait_until(condition: Callable[[], bool], timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


class Reply:
    """What a subscriber got: records, then END, an ERROR's text, or a hang-up."""

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes]] = []
        self.error: str | None = None
        self.ended = False
        self.closed = False


def read_reply(sock: socket.socket, start: int = 1, timeout: float = DEADLINE) -> Reply:
    """Read until END, an ERROR, or the server hangs up (fails after `timeout`)."""
    reply, decoder = Reply(), TailDecoder(start)
    deadline = time.monotonic() + timeout
    while not decoder.ended:
        left = deadline - time.monotonic()
        assert left > 0, "no END, ERROR or hang-up in time"
        sock.settimeout(left)
        try:
            data = sock.recv(1 << 20)
        except TimeoutError:
            continue
        except ConnectionResetError:
            data = b""
        if not data:
            reply.closed = True
            break
        try:
            reply.records.extend(decoder.feed(data))
        except ProtocolError as exc:
            reply.error = str(exc)
            break
    reply.ended = decoder.ended
    return reply


class Server:
    """A TailServer over a DataDir, and the client ends of what it was handed."""

    def __init__(self, data: DataDir, **options: Any) -> None:
        self.data = data
        self.tail = TailServer(FileTailSource(data, sync="batch"), **options)
        self.clients: list[socket.socket] = []

    def connect(self, head: bytes) -> tuple[socket.socket, object]:
        """A connection whose first bytes (as the listener read them) are `head`:
        the client's socket, and what `take` answered."""
        client, theirs = socket.socketpair()
        self.clients.append(client)
        try:
            answer = self.tail.take(theirs, memoryview(head))
        finally:
            theirs.close()  # as the listener does: the server keeps a duplicate
        return client, answer

    def dropped(self) -> dict[str, int]:
        return self.tail.statistics().dropped

    def close(self) -> None:
        for client in self.clients:
            client.close()
        self.tail.close()


@pytest.fixture
def data(tmp_path: Path) -> Iterator[DataDir]:
    with DataDir(tmp_path / "data") as d:
        log = d.stream("s")
        append(log, 5)
        log.sync()
        yield d


@pytest.fixture
def server(data: DataDir) -> Iterator[Server]:
    s = Server(data)
    yield s
    s.close()


# ---- QA #8: a request split inside the preamble ------------------------------------------


def test_take_answers_need_more_for_a_beginning_of_the_preamble(server: Server) -> None:
    for k in range(1, len(PREAMBLE)):
        client, answer = server.connect(PREAMBLE[:k])
        assert answer is tail_server.NEED_MORE
        assert not answer  # falsy, as NOT_MINE: a caller of the old contract drops it
    for junk in (b"PLTX", b"\xff\xff\xff\x7fjunk", b"PLTAIL02" + bytes(20), b"X"):
        assert server.connect(junk)[1] is tail_server.NOT_MINE
    assert server.tail.statistics().pending == 0  # nothing was taken
    request = encode_request("s", 2, False)
    for k in range(4, len(PREAMBLE)):  # the listener asks again once more bytes came
        client, answer = server.connect(request[:k])
        assert answer is tail_server.NEED_MORE
        client, answer = server.connect(request[: k + 5])
        assert answer is tail_server.TAKEN
        assert answer
        client.sendall(request[k + 5 :])
        reply = read_reply(client, start=2)
        assert reply.ended and reply.records == [(p, payload(p)) for p in range(2, 6)]
    assert server.dropped() == {}


# ---- QA #3: a stray byte, and hang-ups ------------------------------------------------------


@pytest.mark.parametrize("when", ["with_the_request", "after_it"])
def test_a_stray_byte_after_the_request_is_refused(server: Server, when: str) -> None:
    """A follower of a stream that does not exist yet sends one byte too many:
    the server reads it, refuses, hangs up -- it used to peek at it for ever,
    spinning a core and holding the slot."""
    request = encode_request("not_yet", 1, True)
    if when == "with_the_request":
        client, answer = server.connect(request + b"x")
    else:
        client, answer = server.connect(request)
        client.sendall(b"x")
    assert answer
    reply = read_reply(client)
    assert reply.error is not None and "after the request" in reply.error
    wait_until(lambda: server.dropped() == {"tail_trailing_bytes": 1})
    wait_until(lambda: server.tail.statistics().subscribers == 0)  # its thread ended
    stats = server.tail.statistics()
    assert (stats.pending, stats.refused) == (0, 1)


def test_a_follower_that_sends_a_byte_and_leaves_while_parked_is_let_go(
    server: Server, data: DataDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the idle tail of a stream, a follower sends a byte and hangs up: the
    hang-up watch wakes it at once, it reads the byte (a peek would never see
    the hang-up behind it) and lets the subscription go -- without the
    heartbeat, which is set far beyond the test's deadline."""
    monkeypatch.setattr(tail_server, "HEARTBEAT", 3600.0)
    client, _ = server.connect(encode_request("s", 6, True))
    log = data.stream("s")
    wait_until(lambda: log.synced_parker.statistics().parked == 1)
    assert server.tail.statistics().subscribers == 1
    client.sendall(b"x")
    client.close()
    wait_until(lambda: server.tail.statistics().subscribers == 0, timeout=5.0)
    assert server.dropped() == {"tail_trailing_bytes": 1}


def test_a_follower_of_a_missing_stream_that_hangs_up_is_let_go(server: Server) -> None:
    client, _ = server.connect(encode_request("not_yet", 1, True))
    wait_until(lambda: server.tail.statistics().subscribers == 1)
    client.shutdown(socket.SHUT_RDWR)
    wait_until(lambda: server.tail.statistics().subscribers == 0)
    assert server.dropped() == {}  # a hang-up is not a refusal


# ---- QA #4: slow requests and slots --------------------------------------------------------


def test_incomplete_requests_hold_no_subscriber_slot(server: Server) -> None:
    server.tail.max_subscribers = 2
    for _ in range(4):  # each sent the preamble only, and then nothing
        assert server.connect(PREAMBLE)[1]
    client, _ = server.connect(encode_request("s", 1, False))
    reply = read_reply(client)
    assert reply.error is None
    assert reply.ended and reply.records == [(p, payload(p)) for p in range(1, 6)]
    stats = server.tail.statistics()
    assert (stats.pending, stats.subscriptions) == (4, 1)  # counted as soon as taken
    assert server.dropped() == {}


def test_a_request_dribbled_byte_by_byte_times_out_overall(server: Server) -> None:
    """The deadline is for the whole request, not for each receive: a peer that
    sends one byte of a 277-byte request whenever 50 ms pass without an answer
    is cut after 0.3 s (it used to have 10 s per receive, so for ever)."""
    server.tail.request_timeout = 0.3
    client, _ = server.connect(struct.pack("<8sQBB", PREAMBLE, 1, 0, 255))  # a 255-byte name
    started = time.monotonic()
    answer = b""
    for _ in range(200):  # at most 10 s
        client.settimeout(0.05)
        try:
            answer = client.recv(1 << 16)
            break
        except TimeoutError:
            try:
                client.sendall(b"n")
            except (BrokenPipeError, ConnectionResetError):
                # cut between the receive's timeout and this byte: its answer came
                # first, and a socket reads what it was sent before the reset
                client.settimeout(1.0)
                answer = client.recv(1 << 16)
                break
    assert answer, "the dribbling request was never cut"
    assert time.monotonic() - started < 3.0
    with pytest.raises(ProtocolError, match=r"no whole request within 0\.3 s"):
        TailDecoder(1).feed(answer)
    wait_until(lambda: server.dropped() == {"tail_request_timeout": 1})
    assert server.tail.statistics().pending == 0


def test_too_many_incomplete_requests_are_refused_at_once(server: Server) -> None:
    server.tail.max_pending = 2
    server.tail.request_timeout = 0.5
    slow = [server.connect(PREAMBLE)[0] for _ in range(2)]
    third, answer = server.connect(PREAMBLE)
    assert answer  # taken, and refused without a thread
    reply = read_reply(third)
    assert reply.error is not None and "too many incomplete requests" in reply.error
    client, _ = server.connect(encode_request("s", 4, False))  # a whole one is still served
    assert read_reply(client, start=4).records == [(4, payload(4)), (5, payload(5))]
    for sock in slow:
        assert "no whole request" in (read_reply(sock).error or "")
    wait_until(lambda: server.dropped() == {"tail_too_many_pending": 1, "tail_request_timeout": 2})
    assert server.tail.statistics().pending == 0


# ---- QA #11: refusals by reason ---------------------------------------------------------------


def test_every_refusal_is_counted_by_reason(tmp_path: Path) -> None:
    secret = b"k" * 32
    keys = KeyTable([Key("", secret, write=(), read=("s",))])

    def sealed(stream: str, start: int, follow: bool, key: bytes = secret) -> bytes:
        return encode_sealed_request(stream, start, follow, "", key)[0]

    with DataDir(tmp_path, segment_bytes=2000) as data:
        log = data.stream("s")
        for _ in range(30):
            append(log, 7)
        log.sync()
        assert log.retire(2)
        first = log.first_position
        server = Server(data, keys=keys)
        try:
            server.tail.max_subscribers = 1
            bad = bytearray(sealed("s", 1, False))
            bad[-2] ^= 1  # the CRC
            cases = [  # every one refused before a session: a plaintext ERROR
                (bytes(bad), "bad_checksum"),
                (encode_request("s", first, False), "unauthenticated"),
                (sealed("s", first, False, b"w" * 32), "wrong secret"),
                (sealed("t", first, False), "may not read this stream"),
            ]
            for request, text in cases:
                reply = read_reply(server.connect(request)[0])
                assert reply.error is not None and text in reply.error
            # the refused one's thread ends after its ERROR went: then the slot is free
            wait_until(lambda: server.tail.statistics().subscribers == 0)
            server.connect(sealed("s", first, True))  # holds the one slot
            wait_until(lambda: server.tail.statistics().subscribers == 1)
            served: list[object] = []
            serve = server.tail._serve
            server.tail._serve = lambda *args: (served.append(args), serve(*args))  # type: ignore[method-assign]
            reply = read_reply(server.connect(sealed("s", first, False))[0])
            assert reply.error is not None and "too many subscribers" in reply.error
            assert served == []  # refused in take(), on the loop, with no thread started
            server.tail._serve = serve  # type: ignore[method-assign]
            gone, _ = server.connect(PREAMBLE)
            gone.close()  # hangs up in the middle of its request
            wait_until(lambda: server.tail.statistics().refused == 6)
            stats = server.tail.statistics()
            assert stats.dropped == {
                "tail_bad_request": 1,
                "tail_unauthenticated": 1,
                "tail_bad_secret": 1,
                "tail_forbidden": 1,
                "tail_too_many_subscribers": 1,
                "tail_truncated_request": 1,
            }
            stats.dropped.clear()  # a snapshot: the server's counts are its own
            assert server.tail.statistics().refused == 6
            assert stats.subscribers == 1 and stats.subscriptions == 1  # the follower
        finally:
            server.close()


def _all_bytes(sock: socket.socket) -> bytes:
    """Everything the server sends until it hangs up."""
    sock.settimeout(DEADLINE)
    out = bytearray()
    while chunk := sock.recv(1 << 16):
        out += chunk
    return bytes(out)


def _sealed_any(stream: str, secret: bytes) -> bytes:
    """A sealed request for any name, even one encode_request refuses (tail_seal.py's
    layout, by hand)."""
    name = stream.encode()
    plain = struct.pack("<8sQBB", PREAMBLE, 1, 0, len(name)) + name
    init = Initiator("", secret, plain + struct.pack("<I", crc32c(plain)))
    body = struct.pack("<8sQBB", PREAMBLE, len(init.message), FLAG_SEALED, 0) + init.message
    return body + struct.pack("<I", crc32c(body))


def test_a_sealed_request_refused_after_it_opened_names_nothing_in_clear(
    tmp_path: Path,
) -> None:
    """A refusal sent before the session's RESP is plaintext: after the INIT opened
    (a stream the key may not read, a bad name inside) it must not carry the
    stream name the INIT kept from the path."""
    secret = b"k" * 32
    keys = KeyTable([Key("", secret, write=(), read=("s",))])
    with DataDir(tmp_path) as data:
        server = Server(data, keys=keys)
        try:
            for stream, reason in (("payments-eu-7", b"forbidden"), ("x/payments-eu-7", b"bad")):
                raw = _all_bytes(server.connect(_sealed_any(stream, secret))[0])
                assert raw.startswith(b"\0\0\0\0") and reason in raw  # a refusal, with why
                assert b"payments" not in raw
        finally:
            server.close()


def test_a_subscription_whose_key_a_reload_removed_while_it_opened_is_ended(
    tmp_path: Path,
) -> None:
    """A reload between the request's check and the subscription's registration
    must still end it: else a removed key's follower reads on for ever."""
    secret = b"k" * 32
    with DataDir(tmp_path) as data:
        log = data.stream("s")
        append(log, 3)
        log.sync()
        server = Server(data, keys=KeyTable([Key("a", secret, write=(), read=("s",))]))
        try:
            decode = server.tail._decode

            def decode_then_reload(raw: bytes) -> Any:
                out = decode(raw)
                server.tail.set_keys(KeyTable([Key("b", secret)]))  # "a" is gone
                return out

            server.tail._decode = decode_then_reload  # type: ignore[method-assign]
            client, _ = server.connect(encode_sealed_request("s", 1, True, "a", secret)[0])
            client.settimeout(DEADLINE)
            _all_bytes(client)  # the server hangs up (before, it followed on)
            wait_until(lambda: server.tail.statistics().subscribers == 0)
            assert server.tail.statistics().dropped == {"tail_key_revoked": 1}
        finally:
            server.close()


def test_new_subscriptions_are_rate_limited_per_source_address(data: DataDir) -> None:
    tail = TailServer(FileTailSource(data, sync="batch"), subscribe_rate=0.001, subscribe_burst=2)
    lsock = socket.create_server(("127.0.0.1", 0))
    clients: list[socket.socket] = []

    def subscribe_from(source: str) -> Reply:
        client = socket.create_connection(lsock.getsockname(), source_address=(source, 0))
        clients.append(client)
        client.sendall(encode_request("s", 5, False))
        conn, _ = lsock.accept()
        with conn:
            assert tail.take(conn, memoryview(conn.recv(1 << 10)))
        return read_reply(client, start=5)

    try:
        assert [r.ended for r in (subscribe_from("127.0.0.1") for _ in range(2))] == [True] * 2
        refused = subscribe_from("127.0.0.1")
        assert refused.error is not None and "too many new subscriptions" in refused.error
        other = subscribe_from("127.0.0.2")  # another source has a bucket of its own
        assert other.ended and other.records == [(5, payload(5))]
        assert tail.statistics().dropped == {"tail_rate_limited": 1}
    finally:
        for client in clients:
            client.close()
        lsock.close()
        tail.close()


# ---- QA #2: the batch index ---------------------------------------------------------------------


def pread_counter(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the bytes listener/tail/file.py and store/log.py read with os.pread: the
    header walks (sendfile moves the batches themselves)."""
    counted: list[int] = []

    def pread(fd: int, n: int, offset: int) -> bytes:
        data = os.pread(fd, n, offset)
        counted.append(len(data))
        return data

    fake = SimpleNamespace(**{k: getattr(os, k) for k in dir(os) if not k.startswith("__")})
    fake.pread = pread
    monkeypatch.setattr(tail_file, "os", fake)
    monkeypatch.setattr(store_log, "os", fake)
    return counted


def test_a_subscription_reads_little_of_a_big_active_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Wherever it starts, a subscription to a 12 MiB active segment walks at
    most about one index step of batch headers (it used to walk from the
    segment's start: ~0.45 ms of CPU per MiB, per request)."""
    with DataDir(tmp_path) as data:
        log = data.stream("s")
        for _ in range(1200):  # 1,200 batches of 100 records of 100 B: ~12 MiB
            append(log, 100, size=100)
        log.sync()
        assert len(log.segments) == 1
        last = log.last_position
        counted = pread_counter(monkeypatch)
        server = Server(data)
        try:
            for start in (last, last // 2 + 17, 1):
                counted.clear()
                client, _ = server.connect(encode_request("s", start, False))
                reply = read_reply(client, start=start)
                assert reply.ended and len(reply.records) == last - start + 1
                assert reply.records[0] == (start, payload(start, 100))
                assert reply.records[-1] == (last, payload(last, 100))
                assert 0 < sum(counted) <= 2 << 20  # of 12 MiB: ~1 index step and 1 pread
        finally:
            server.close()


def entries_are_batch_starts(log: StreamLog, base: int, path: Path) -> list[tuple[int, int]]:
    fd = os.open(path, os.O_RDONLY)
    try:
        index = log.batch_index(base, fd)
        index.floor(base, fd)  # builds the part walked on demand, if any
        entries = index.entries()
        for position, offset in entries:
            assert struct.unpack("<Q", os.pread(fd, 8, offset))[0] == position
        assert entries[0] == (base, 0)
        offsets = [offset for _, offset in entries]
        gaps = [b - a for a, b in itertools.pairwise(offsets)]
        assert all(gap > 0 for gap in gaps)
        # at least INDEX_EVERY apart, but where the part walked on demand (the
        # bytes recovered on open) meets the part the writer added since
        assert sum(gap < store_log.INDEX_EVERY for gap in gaps) <= 1
        return entries
    finally:
        os.close(fd)


def test_the_index_is_sparse_and_survives_rolls_and_restarts(tmp_path: Path) -> None:
    segment = 1 << 20
    with DataDir(tmp_path, segment_bytes=segment) as data:
        log = data.stream("s")
        for _ in range(320):  # ~3.3 MiB: 3 closed segments and an active one
            append(log, 100, size=100)
        log.sync()
        assert len(log.segments) == 4
        for base, path in log.segments:
            entries = entries_are_batch_starts(log, base, path)
            assert len(entries) <= segment // store_log.INDEX_EVERY + 1
    with DataDir(tmp_path, segment_bytes=segment) as data:  # recovered: nothing indexed yet
        log = data.stream("s")
        for _ in range(40):  # and more after the restart
            append(log, 100, size=100)
        log.sync()
        server = Server(data)
        try:
            last = log.last_position
            for start in (1, 2_345, 17_001, 31_999, last - 50, last):
                reply = read_reply(server.connect(encode_request("s", start, False))[0], start)
                assert reply.ended
                assert [p for p, _ in reply.records] == list(range(start, last + 1))
                assert all(r == payload(p, 100) for p, r in reply.records)
        finally:
            server.close()
        for base, path in log.segments:
            entries_are_batch_starts(log, base, path)


def test_closed_indexes_are_bounded_and_go_with_retention(tmp_path: Path) -> None:
    with DataDir(tmp_path, segment_bytes=1024) as data:
        log = data.stream("s")
        for _ in range(400):
            append(log, 10)
        log.sync()
        assert len(log.segments) > 80
        for base, path in log.segments:
            fd = os.open(path, os.O_RDONLY)
            try:
                log.batch_index(base, fd)
            finally:
                os.close(fd)
        assert len(log._closed_indexes) == 64  # the most recently used
        victims = log.retire(len(log.segments) - 3)
        assert victims
        assert set(log._closed_indexes) <= {base for base, _ in log.segments}
