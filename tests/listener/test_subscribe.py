"""Subscriptions over the listener's TCP port: `purelink.subscribe` and `purelink tail`.

Three kinds of tests:

* the bytes (protocol/tail.py): requests and replies, whole and byte by byte;
* `TailServer` alone over a socketpair, with a DataDir the test appends to
  and syncs by hand: what is sent is exactly what is stored (synced), never
  more, and a follower wakes on sync;
* a real Listener (and `purelink serve`) on loopback: from the middle, from
  position 1, past the end with follow, a subscriber disconnecting, a slow
  subscriber that does not slow the link, retention, secrets, the CLI.

Every wait has a deadline.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

import purelink
from purelink.errors import ProtocolError
from purelink.listener.tail.file import FileTailSource
from purelink.listener.tail.server import NOT_MINE, TailServer
from purelink.protocol.keys import Key, KeyTable
from purelink.protocol.tail import (
    END,
    ERROR,
    NOTICE,
    PREAMBLE,
    TailDecoder,
    decode_request,
    encode_control,
    encode_request,
    request_size,
)
from purelink.protocol.tail_seal import encode_sealed_request, open_sealed_request
from purelink.protocol.wire import batch_records, encode_batch, position_bytes, verify_batch
from purelink.store import DataDir
from purelink.store.log import StreamLog
from purelink.subscribe import Subscription
from purelink.testing.ports import free_port

TIMEOUT = 20.0
PURELINK = [sys.executable, "-m", "purelink"]


def payload(position: int) -> bytes:
    return f"record {position:07d}".encode()


def append(log: StreamLog, count: int) -> None:
    first = log.last_position + 1
    raw = encode_batch(5, 1, first, [payload(p) for p in range(first, first + count)])
    log.append([(raw, verify_batch(raw))])


def expected(start: int, stop: int) -> list[tuple[int, bytes]]:
    return [(p, payload(p)) for p in range(start, stop)]


def wait_until(condition: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    """Poll a condition about another thread's or process's state (bounded)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


# ---- the bytes ---------------------------------------------------------------------------


def test_request_round_trip_and_checks() -> None:
    raw = encode_request("orders", 42, True)
    assert raw.startswith(PREAMBLE)
    assert request_size(raw[:10]) is None
    assert request_size(raw[:18]) == len(raw)
    request = decode_request(raw)
    assert (request.stream, request.start, request.follow) == ("orders", 42, True)
    assert not decode_request(encode_request("o", 0, False)).follow
    bad = bytearray(raw)
    bad[20] ^= 1
    with pytest.raises(ProtocolError, match="bad_checksum"):
        decode_request(bytes(bad))
    with pytest.raises(ProtocolError, match="truncated"):
        decode_request(raw[:-1])
    since = decode_request(encode_request("o", 1_700_000_000_123, True, since=True))
    assert (since.start, since.follow, since.since) == (1_700_000_000_123, True, True)
    assert not request.since
    for flags in (0x08, 0x40, 0x7C):  # a bit the listener does not know is not ignored
        body = struct.pack("<8sQBB", PREAMBLE, 1, flags, 1) + b"s"
        with pytest.raises(ProtocolError, match="bad_flags"):
            decode_request(body + struct.pack("<I", crc32c(body)))
    with pytest.raises(ValueError):
        encode_request("../x", 1, True)
    with pytest.raises(ValueError):
        encode_request("x", -1, True)


def test_request_with_a_secret() -> None:
    """With a secret the plaintext request is the payload of an INIT (tail_seal.py)."""
    key = b"k" * 32
    keys = KeyTable([Key("app", key, write=(), read=("s*",))])
    raw, _ = encode_sealed_request("s", 1, False, "app", key)
    assert request_size(raw) == len(raw)
    request, *_ = open_sealed_request(raw, keys, 0.0)
    assert request == ("s", 1, False, False, False)  # not a listing, not a time
    raw, _ = encode_sealed_request("s", 1_700_000_000_000, False, "app", key, since=True)
    assert open_sealed_request(raw, keys, 0.0)[0] == ("s", 1_700_000_000_000, False, False, True)
    with pytest.raises(ProtocolError, match="unauthenticated"):
        open_sealed_request(encode_request("s", 1, False), keys, 0.0)  # plaintext
    with pytest.raises(ProtocolError, match="bad_secret"):
        open_sealed_request(encode_sealed_request("s", 1, False, "app", b"x" * 32)[0], keys, 0.0)
    with pytest.raises(ProtocolError, match="unknown_key"):
        open_sealed_request(encode_sealed_request("s", 1, False, "nope", key)[0], keys, 0.0)
    with pytest.raises(ProtocolError, match="forbidden"):
        open_sealed_request(encode_sealed_request("t", 1, False, "app", key)[0], keys, 0.0)
    flagged = bytearray(encode_request("s", 1, False))
    flagged[16] = 0x80  # an unknown flag (a MAC form this protocol does not have)
    body = bytes(flagged[:-4])
    with pytest.raises(ProtocolError, match="bad_flags"):
        decode_request(body + struct.pack("<I", crc32c(body)))


def stored_batches(first: int, sizes: list[int]) -> bytes:
    """Batches as they lie in a segment (stamped positions)."""
    out, position = b"", first
    for n in sizes:
        raw = encode_batch(5, 1, position, [payload(p) for p in range(position, position + n)])
        out += position_bytes(position) + raw[8:]
        position += n
    return out


def feed(decoder: TailDecoder, data: bytes, step: int) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []
    for at in range(0, len(data), step):
        got.extend(decoder.feed(data[at : at + step]))
    return got


@pytest.mark.parametrize("step", [1, 7, 100, 1 << 20])
def test_decoder_whole_and_byte_by_byte(step: int) -> None:
    reply = stored_batches(1, [3, 1, 5, 2]) + encode_control(END)
    decoder = TailDecoder(2)  # from inside the first batch
    assert feed(decoder, reply, step) == expected(2, 12)
    assert decoder.ended
    assert decoder.next_position == 12


def test_decoder_from_the_first_retained() -> None:
    decoder = TailDecoder(0)
    assert feed(decoder, stored_batches(50, [2, 2]), 1000) == expected(50, 54)


def test_decoder_takes_a_batch_larger_than_one_receive() -> None:
    big = b"x" * 60_000
    raw = encode_batch(5, 1, 1, [big, big, big])
    decoder = TailDecoder(1)
    got = feed(decoder, position_bytes(1) + raw[8:], 50_000)
    assert decoder.pending == 0
    assert got == [(1, big), (2, big), (3, big)]


def test_decoder_refuses_gaps_damage_and_reports_errors() -> None:
    with pytest.raises(ProtocolError, match="bad_position"):
        feed(TailDecoder(1), stored_batches(1, [2]) + stored_batches(4, [1]), 1000)
    damaged = bytearray(stored_batches(1, [3]))
    damaged[-1] ^= 0xFF
    with pytest.raises(ProtocolError):
        feed(TailDecoder(1), bytes(damaged), 1000)
    with pytest.raises(ProtocolError, match="refused: records retained start at 9"):
        feed(TailDecoder(1), encode_control(ERROR, "records retained start at 9"), 3)
    bad = bytearray(encode_control(END))
    bad[-1] ^= 1
    with pytest.raises(ProtocolError, match="bad_checksum"):
        feed(TailDecoder(1), bytes(bad), 1000)


def test_decoder_notices_say_whether_the_stream_is_held() -> None:
    decoder = TailDecoder(1)
    assert decoder.held is None
    reply = (
        encode_control(NOTICE, "disk_full")
        + stored_batches(1, [2])
        + encode_control(NOTICE, "")
        + stored_batches(3, [1])
        + encode_control(NOTICE, "stream_failed")
    )
    got = feed(decoder, reply[:30], 7)
    assert decoder.held == "disk_full" and got == []
    assert feed(decoder, reply[30:], 1) == expected(1, 4)
    assert decoder.held == "stream_failed" and not decoder.ended
    with pytest.raises(ProtocolError, match="bad_control"):
        feed(TailDecoder(1), encode_control(9, "?"), 100)


_FIELDS = {  # offset, struct format of each header field a crafted batch may change
    "magic": (12, "<2s"),
    "version": (14, "<B"),
    "flags": (15, "<B"),
    "count": (20, "<I"),
    "first_seq": (32, "<Q"),
    "first_length": (44, "<H"),
}


@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(st.binary(max_size=40), min_size=1, max_size=6),
    field=st.sampled_from(sorted(_FIELDS)),
    value=st.integers(0, 2**64 - 1),
)
def test_decoder_accepts_exactly_what_verify_batch_accepts(
    records: list[bytes], field: str, value: int
) -> None:
    """Crafted batches with a valid CRC but a changed header field: the
    subscriber's fused checks agree with wire.verify_batch, batch by batch."""
    raw = bytearray(position_bytes(1) + encode_batch(5, 1, 1, records)[8:])
    offset, fmt = _FIELDS[field]
    size = struct.calcsize(fmt)
    if fmt == "<2s":
        raw[offset : offset + 2] = value.to_bytes(8, "little")[:2]
    else:
        raw[offset : offset + size] = (value % (1 << (8 * size))).to_bytes(size, "little")
    raw[8:12] = crc32c(bytes(raw[12:])).to_bytes(4, "little")
    want: list[tuple[int, bytes]] | None
    try:
        header = verify_batch(bytes(raw))
        want = list(enumerate(batch_records(bytes(raw), header), start=1))
    except ProtocolError:
        want = None
    try:
        got: list[tuple[int, bytes]] | None = TailDecoder(1).feed(bytes(raw) + encode_control(END))
    except ProtocolError:
        got = None
    assert got == want


# ---- TailServer over a socketpair: stored means synced ------------------------------


class Pair:
    """A TailServer serving one subscriber through a socketpair."""

    def __init__(
        self,
        data: DataDir,
        sync: str = "batch",
        hold: Callable[[str], str | None] | None = None,
    ) -> None:
        self.server = TailServer(FileTailSource(data, sync=sync), hold=hold)
        self.client, theirs = socket.socketpair()
        self.theirs = theirs
        self.decoder: TailDecoder | None = None

    def subscribe(self, stream: str, start: int, follow: bool) -> None:
        request = encode_request(stream, start, follow)
        assert self.server.take(self.theirs, memoryview(request[:10]))  # the rest comes later
        self.theirs.close()  # the server keeps its own duplicate
        self.client.sendall(request[10:])
        self.decoder = TailDecoder(start)

    def receive(self, until: Callable[[list[tuple[int, bytes]]], bool]) -> list[tuple[int, bytes]]:
        assert self.decoder is not None
        got: list[tuple[int, bytes]] = []
        self.client.settimeout(TIMEOUT)
        while not until(got) and not self.decoder.ended:
            data = self.client.recv(1 << 20)
            assert data, "the server closed the connection"
            got.extend(self.decoder.feed(data))
        return got

    def close(self) -> None:
        self.client.close()
        self.server.close()


def test_only_synced_records_are_sent(tmp_path: Path) -> None:
    with DataDir(tmp_path) as data:
        log = data.stream("s")
        append(log, 10)
        log.sync()
        append(log, 5)  # written, not stored
        pair = Pair(data)
        try:
            pair.subscribe("s", 1, follow=False)
            assert pair.receive(lambda got: False) == expected(1, 11)
            assert pair.decoder is not None and pair.decoder.ended
        finally:
            pair.close()


def test_a_follower_wakes_on_sync_not_on_append(tmp_path: Path) -> None:
    with DataDir(tmp_path) as data:
        log = data.stream("s")
        append(log, 3)
        log.sync()
        pair = Pair(data)
        try:
            pair.subscribe("s", 1, follow=True)
            assert pair.receive(lambda got: len(got) >= 3) == expected(1, 4)
            wait_until(lambda: log.synced_parker.statistics().parked == 1)
            append(log, 4)  # not stored yet: the follower stays parked
            assert log.synced_parker.statistics().parked == 1
            pair.client.settimeout(0.05)
            with pytest.raises(TimeoutError):
                pair.client.recv(1)
            log.sync()
            assert pair.receive(lambda got: len(got) >= 4) == expected(4, 8)
            stats = log.synced_parker.statistics()
            assert stats.unparks >= 1
            assert stats.unparks <= stats.parks
        finally:
            pair.close()


def test_a_follower_is_told_when_its_stream_is_held_and_when_it_goes_on(
    tmp_path: Path,
) -> None:
    held: dict[str, str] = {"s": "disk_full"}
    with DataDir(tmp_path) as data:
        log = data.stream("s")
        append(log, 3)
        log.sync()
        pair = Pair(data, hold=held.get)
        try:
            pair.subscribe("s", 1, follow=True)
            assert pair.decoder is not None
            decoder = pair.decoder
            assert pair.receive(lambda got: len(got) >= 3 and decoder.held is not None) == (
                expected(1, 4)
            )
            assert decoder.held == "disk_full"  # before it first waited
            del held["s"]
            pair.server.held_changed("s")  # the listener's loop thread, in the product
            assert pair.receive(lambda got: decoder.held is None) == []
            held["s"] = "stream_failed"
            pair.server.held_changed("other")  # another stream's followers only
            pair.client.settimeout(0.05)
            with pytest.raises(TimeoutError):
                pair.client.recv(1)
            pair.server.held_changed("s")
            assert pair.receive(lambda got: decoder.held == "stream_failed") == []
            append(log, 2)
            log.sync()
            assert pair.receive(lambda got: len(got) >= 2) == expected(4, 6)
        finally:
            pair.close()


def test_with_sync_none_written_is_stored(tmp_path: Path) -> None:
    with DataDir(tmp_path) as data:
        log = data.stream("s")
        append(log, 2)
        pair = Pair(data, sync="none")
        try:
            pair.subscribe("s", 1, follow=True)
            assert pair.receive(lambda got: len(got) >= 2) == expected(1, 3)
            append(log, 2)
            assert pair.receive(lambda got: len(got) >= 2) == expected(3, 5)
        finally:
            pair.close()


def test_closed_segments_go_whole_and_the_active_one_batch_by_batch(tmp_path: Path) -> None:
    with DataDir(tmp_path, segment_bytes=2000) as data:
        log = data.stream("s")
        for _ in range(60):
            append(log, 7)
        log.sync()
        assert len(log.segments) >= 5
        for start in (1, 5, 84, 85, 200, 419, 420):
            pair = Pair(data)
            try:
                pair.subscribe("s", start, follow=False)
                assert pair.receive(lambda got: False) == expected(start, 421)
            finally:
                pair.close()


def test_a_request_that_fails_gets_an_error_item(tmp_path: Path) -> None:
    with DataDir(tmp_path, segment_bytes=2000) as data:
        log = data.stream("s")
        for _ in range(30):
            append(log, 7)
        log.sync()
        assert log.retire(2)
        pair = Pair(data)
        try:
            pair.subscribe("s", 1, follow=True)
            with pytest.raises(ProtocolError, match="records retained start at"):
                pair.receive(lambda got: False)
            stats = pair.server.statistics()
            assert (stats.refused, stats.dropped) == (1, {"tail_below_retained": 1})
        finally:
            pair.close()


def test_take_leaves_links_alone(tmp_path: Path) -> None:
    with DataDir(tmp_path) as data:
        server = TailServer(FileTailSource(data, sync="batch"))
        a, b = socket.socketpair()
        try:
            assert server.take(a, memoryview(b"\xff\xff\xff\x7fjunk")) is NOT_MINE
        finally:
            a.close()
            b.close()
        assert server.statistics().subscribers == 0


# ---- a real listener ------------------------------------------------------------------


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[purelink.Listener]:
    with purelink.Listener(
        tmp_path / "data", udp="127.0.0.1:0", tcp="127.0.0.1:0", segment_bytes=64 << 10
    ) as lst:
        yield lst


def urls(lst: purelink.Listener) -> tuple[str, str]:
    assert lst.udp_address is not None and lst.tcp_address is not None
    return "udp://127.0.0.1:%d" % lst.udp_address[1], "tcp://127.0.0.1:%d" % lst.tcp_address[1]


def send(url: str, stream: str, first: int, count: int) -> None:
    with purelink.connect(url, stream=stream) as link:
        for p in range(first, first + count):
            link.queue(payload(p))
        assert link.wait_stored(timeout=TIMEOUT)


def test_subscribe_from_position_1_and_from_the_middle(listener: purelink.Listener) -> None:
    udp, tcp = urls(listener)
    send(udp, "s", 1, 5000)
    assert list(purelink.subscribe(tcp, "s", follow=False)) == expected(1, 5001)
    with purelink.subscribe(tcp, "s", start=2345, follow=False) as sub:
        assert list(sub) == expected(2345, 5001)
        assert sub.next_position == 5001
    assert list(purelink.subscribe(tcp, "s", start=6000, follow=False)) == []
    assert list(purelink.subscribe(tcp, "nothing", follow=False)) == []


def test_subscribe_past_the_end_with_follow(listener: purelink.Listener) -> None:
    udp, tcp = urls(listener)
    send(udp, "s", 1, 10)
    with purelink.subscribe(tcp, "s", start=15) as sub:
        records = iter(sub)
        send(udp, "s", 11, 10)  # positions 11-20: the subscriber wants 15 on
        assert [next(records) for _ in range(6)] == expected(15, 21)
        send(udp, "s", 21, 1)
        assert next(records) == (21, payload(21))


def test_subscribe_follows_a_stream_not_created_yet(listener: purelink.Listener) -> None:
    udp, tcp = urls(listener)
    with purelink.subscribe(tcp, "later", start=1) as sub:
        records = iter(sub)
        send(udp, "later", 1, 3)
        assert [next(records) for _ in range(3)] == expected(1, 4)


def test_a_subscriber_disconnecting_mid_stream(listener: purelink.Listener) -> None:
    udp, tcp = urls(listener)
    send(udp, "s", 1, 50_000)
    tail = listener._tail
    assert tail is not None
    sub = purelink.subscribe(tcp, "s", follow=True)
    records = iter(sub)
    assert [next(records) for _ in range(10)] == expected(1, 11)
    sub.close()  # in the middle of 50,000 records
    wait_until(lambda: tail.statistics().subscribers == 0)
    send(udp, "s", 50_001, 10)  # the listener is fine
    assert list(purelink.subscribe(tcp, "s", start=50_001, follow=False)) == expected(
        50_001, 50_011
    )


def test_a_follower_that_disconnects_while_idle_is_let_go(
    listener: purelink.Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    import purelink.listener.tail.server as tail_module  # noqa: PLC0415

    monkeypatch.setattr(tail_module, "HEARTBEAT", 3600.0)  # the hang-up watch, not a timer
    udp, tcp = urls(listener)
    send(udp, "s", 1, 3)
    tail = listener._tail
    assert tail is not None
    sub = purelink.subscribe(tcp, "s")
    records = iter(sub)
    assert [next(records) for _ in range(3)] == expected(1, 4)
    wait_until(lambda: tail.statistics().subscribers == 1)
    sub.close()
    wait_until(lambda: tail.statistics().subscribers == 0, timeout=5.0)


def test_a_slow_subscriber_never_slows_the_writers(listener: purelink.Listener) -> None:
    """A follower that reads nothing: the link's records are all stored, and the
    follower later gets every one, in order (TCP held them back, nobody else)."""
    udp, tcp = urls(listener)
    sub = purelink.subscribe(tcp, "s")
    started = time.monotonic()
    send(udp, "s", 1, 100_000)  # ~2.4 MB: more than the socket buffers hold
    assert time.monotonic() - started < TIMEOUT
    tail = listener._tail
    assert tail is not None
    assert tail.statistics().bytes_sent < 2_400_000  # held back by TCP
    got = []
    for record in sub:
        got.append(record)
        if len(got) == 100_000:
            break
    sub.close()
    assert got == expected(1, 100_001)


def test_retention_overtaking_a_subscriber_is_an_error(tmp_path: Path) -> None:
    with purelink.Listener(
        tmp_path, udp="127.0.0.1:0", tcp="127.0.0.1:0", segment_bytes=4096
    ) as lst:
        udp, tcp = urls(lst)
        for first in range(1, 2001, 100):  # 20 batches at least (a link's may hold 64 KiB)
            send(udp, "s", first, 100)
        lst.set_retention("s", retain_bytes=8192)
        data = lst._data
        assert data is not None
        wait_until(lambda: data.stream("s").first_position > 1)
        first = data.stream("s").first_position
        with pytest.raises(purelink.Error, match=f"records retained start at {first}"):
            list(purelink.subscribe(tcp, "s", start=2, follow=False))
        got = list(purelink.subscribe(tcp, "s", start=0, follow=False))  # the first retained
        assert got == expected(first, 2001)
        assert list(purelink.subscribe(tcp, "s", start=1, follow=False)) == got  # the beginning


def test_a_secret_is_needed_when_the_listener_has_one(tmp_path: Path) -> None:
    secret = b"s" * 32
    with purelink.Listener(tmp_path, udp="127.0.0.1:0", tcp="127.0.0.1:0", secret=secret) as lst:
        _, tcp = urls(lst)
        with pytest.raises(purelink.Error, match="unauthenticated"):
            list(purelink.subscribe(tcp, "s", follow=False))
        assert list(purelink.subscribe(tcp, "s", follow=False, secret=secret)) == []


def test_closing_the_listener_ends_a_follower_with_an_error(tmp_path: Path) -> None:
    lst = purelink.Listener(tmp_path, udp="127.0.0.1:0", tcp="127.0.0.1:0")
    lst.start()
    try:
        udp, tcp = urls(lst)
        send(udp, "s", 1, 2)
        sub = purelink.subscribe(tcp, "s")
        records = iter(sub)
        assert [next(records) for _ in range(2)] == expected(1, 3)
        outcome: list[BaseException] = []

        def wait_more() -> None:
            try:
                next(records)
            except BaseException as exc:
                outcome.append(exc)

        waiter = threading.Thread(target=wait_more)
        waiter.start()
    finally:
        lst.close()
    waiter.join(TIMEOUT)
    assert outcome and isinstance(outcome[0], purelink.Error)
    assert "closed the subscription" in str(outcome[0])


def follow_in_thread(
    sub: Subscription,
) -> tuple[threading.Thread, list[tuple[int, bytes]], list[BaseException]]:
    """Iterate `sub` in a started thread: (the thread, the records so far, what it raised)."""
    got: list[tuple[int, bytes]] = []
    failed: list[BaseException] = []

    def follow() -> None:
        try:
            for record in sub:
                got.append(record)
        except BaseException as exc:
            failed.append(exc)

    follower = threading.Thread(target=follow)
    follower.start()
    return follower, got, failed


def test_a_follower_with_reconnect_resumes_across_a_listener_restart(tmp_path: Path) -> None:
    """The listener stops and comes back on the same ports: a subscription with
    `reconnect` resumes at its next position, with no record lost or repeated."""
    lst = purelink.Listener(tmp_path, udp="127.0.0.1:0", tcp="127.0.0.1:0", segment_bytes=4096)
    lst.start()
    udp, tcp = urls(lst)
    addresses = (udp.removeprefix("udp://"), tcp.removeprefix("tcp://"))
    send(udp, "s", 1, 300)
    sub = purelink.subscribe(tcp, "s", reconnect=30)
    follower, got, failed = follow_in_thread(sub)
    try:
        wait_until(lambda: len(got) == 300)
        lst.close()  # the follower's connection breaks; it retries meanwhile
        lst = purelink.Listener(tmp_path, udp=addresses[0], tcp=addresses[1], segment_bytes=4096)
        lst.start()
        send(udp, "s", 301, 200)
        wait_until(lambda: len(got) == 500)
        assert sub.resumes >= 1
    finally:
        sub.close()
        follower.join(TIMEOUT)
        lst.close()
    assert not follower.is_alive() and not failed  # close() ends it quietly
    assert got == expected(1, 501)


def test_an_idle_follower_gets_a_new_budget_for_each_outage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower of an idle stream resumes after one listener restart and then
    hears nothing (there is nothing to send); a second restart, after more than
    `reconnect` seconds, is a new outage with a whole new budget, not the
    first one's, long spent."""
    # the module, not the function purelink.subscribe that shadows its name
    monkeypatch.setattr(sys.modules["purelink.subscribe"], "OUTAGE_OVER", 0.3)
    lst = purelink.Listener(tmp_path, udp="127.0.0.1:0", tcp="127.0.0.1:0")
    lst.start()
    udp, tcp = urls(lst)
    ports = (udp.removeprefix("udp://"), tcp.removeprefix("tcp://"))
    sub = purelink.subscribe(tcp, "s", reconnect=1.0)
    follower, got, failed = follow_in_thread(sub)
    try:
        for k in range(2):
            lst.close()
            lst = purelink.Listener(tmp_path, udp=ports[0], tcp=ports[1])
            lst.start()
            wait_until(lambda k=k: sub.resumes >= k + 1 and sub._sock is not None)
            time.sleep(1.5)  # idle, and longer than `reconnect`: the test's point
            assert not failed
        send(udp, "s", 1, 3)
        wait_until(lambda: len(got) == 3)
        assert sub.resumes == 2
    finally:
        sub.close()
        follower.join(TIMEOUT)
        lst.close()
    assert not failed and got == expected(1, 4)


def test_reconnect_gives_up_after_its_time(tmp_path: Path) -> None:
    lst = purelink.Listener(tmp_path, udp="127.0.0.1:0", tcp="127.0.0.1:0")
    lst.start()
    udp, tcp = urls(lst)
    send(udp, "s", 1, 5)
    sub = purelink.subscribe(tcp, "s", reconnect=0.5)
    records = iter(sub)
    assert [next(records) for _ in range(5)] == expected(1, 6)
    lst.close()  # for good
    started = time.monotonic()
    with pytest.raises(purelink.Error, match=r"could not resume within 0.5 s"):
        next(records)
    assert time.monotonic() - started < TIMEOUT


def test_reconnect_gives_up_on_a_listener_that_accepts_and_closes() -> None:
    """A listener at its connection limit accepts and closes at once: each new
    connection "succeeds", but the outage goes on, and `reconnect` bounds it
    as a whole, not per connection."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(128)
    stop = threading.Event()

    def accept_and_close() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conn.close()

    acceptor = threading.Thread(target=accept_and_close)
    acceptor.start()
    try:
        sub = purelink.subscribe("tcp://127.0.0.1:%d" % srv.getsockname()[1], "s", reconnect=1.0)
        started = time.monotonic()
        with pytest.raises(purelink.Error, match="could not resume within 1 s"):
            list(sub)
        assert time.monotonic() - started < 5
        assert sub.resumes >= 1  # it did get connections, and gave up all the same
    finally:
        stop.set()
        acceptor.join(TIMEOUT)
        srv.close()


def test_close_during_a_connect_leaves_no_socket_behind(tmp_path: Path) -> None:
    """close() from another thread while the subscription is connecting: the
    new socket must not outlive it (a blocked recv on it would never end)."""
    lst = purelink.Listener(tmp_path, udp="127.0.0.1:0", tcp="127.0.0.1:0")
    lst.start()
    try:
        _, tcp = urls(lst)
        sub = purelink.subscribe(tcp, "s")
        sub.close()
        sub._closed.clear()  # as if close() had run just before _connect stored its socket
        real_set = sub._closed.is_set
        calls = {"n": 0}

        def closed_after_the_connect() -> bool:
            calls["n"] += 1
            if sub._sock is not None:
                sub._closed.set()  # close() lands between the store and the check
            return real_set()

        sub._closed.is_set = closed_after_the_connect  # type: ignore[method-assign]
        sub._connect()
        assert calls["n"] >= 1
        assert sub._sock is None  # the late close() was honoured
    finally:
        lst.close()


def test_close_stops_a_subscription_waiting_to_resume(tmp_path: Path) -> None:
    lst = purelink.Listener(tmp_path, udp="127.0.0.1:0", tcp="127.0.0.1:0")
    lst.start()
    _, tcp = urls(lst)
    sub = purelink.subscribe(tcp, "s", reconnect=60)
    ended: list[object] = []

    def follow() -> None:
        try:
            ended.append(list(sub))
        except BaseException as exc:
            ended.append(exc)

    follower = threading.Thread(target=follow)
    follower.start()
    lst.close()  # the follower starts retrying, for up to a minute
    wait_until(lambda: sub._sock is None)  # it is between attempts now
    started = time.monotonic()
    sub.close()
    follower.join(TIMEOUT)
    assert not follower.is_alive() and time.monotonic() - started < 5
    assert ended == [[]]  # it ended quietly, with no error


def test_bad_arguments_and_an_unreachable_listener() -> None:
    with pytest.raises(ValueError, match="tcp://"):
        purelink.subscribe("udp://127.0.0.1:9", "s")
    with pytest.raises(ValueError):
        purelink.subscribe("tcp://127.0.0.1:9", "bad/name")
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="reconnect"):
            purelink.subscribe("tcp://127.0.0.1:9", "s", reconnect=bad)
    port = free_port()  # nobody listens there now
    with pytest.raises(purelink.ConnectError):
        purelink.subscribe(f"tcp://127.0.0.1:{port}", "s", timeout=2)


# ---- the command line ---------------------------------------------------------------------


def run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*PURELINK, *args], input=stdin, capture_output=True, timeout=60, check=False
    )


@contextlib.contextmanager
def tail_follower(*args: str) -> Iterator[IO[bytes]]:
    """`purelink tail ARGS --follow` as a child process; yields its stdout.  On
    leaving the block SIGINT ends it, cleanly: exit 130 and no traceback."""
    follower = subprocess.Popen(
        [*PURELINK, "tail", *args, "--follow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert follower.stdout is not None
        yield follower.stdout
        follower.send_signal(signal.SIGINT)
        _, err = follower.communicate(timeout=TIMEOUT)
        assert follower.returncode == 130
        assert b"Traceback" not in err
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.communicate()


def test_cli_tail(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from helpers.serve_process import ServeProcess  # noqa: PLC0415

    with ServeProcess(tmp_path / "data", transport="tcp") as server:
        url = server.url
        lines = b"".join(b"line %d\n" % i for i in range(1, 1001))
        assert run("send", url, "--stream", "t", stdin=lines).returncode == 0
        out = run("tail", url, "--stream", "t")
        assert (out.returncode, out.stdout) == (0, lines)
        out = run("tail", url, "--stream", "t", "--from", "999", "--format", "json")
        assert out.returncode == 0
        rows = [json.loads(line) for line in out.stdout.splitlines()]
        assert [r["position"] for r in rows] == [999, 1000]
        assert run("tail", "udp://127.0.0.1:9", "--stream", "t").returncode == 2

        with tail_follower(url, "--stream", "t", "--from", "1001") as out:
            assert run("send", url, "--stream", "t", stdin=b"new one\n").returncode == 0
            assert out.readline() == b"new one\n"

        # --reconnect: a follower rides through a restart of the listener process
        with tail_follower(url, "--stream", "t", "--from", "1002", "--reconnect", "30") as out:
            assert run("send", url, "--stream", "t", stdin=b"before\n").returncode == 0
            assert out.readline() == b"before\n"
            assert server.stop() == 0
            server.restart()
            assert run("send", url, "--stream", "t", stdin=b"after\n").returncode == 0
            assert out.readline() == b"after\n"
        assert run("tail", url, "--stream", "t", "--reconnect", "soon").returncode == 2
