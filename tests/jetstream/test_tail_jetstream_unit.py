"""What a JetStream subscription sends for the messages it is handed (no cluster).

Why it exists: listener/tail/jetstream.py turns JetStream messages into the tail
reply -- markers skipped, parts joined, the first body cut at the batch that
holds the start, duplicates (a consumer made again) dropped, gaps refused,
the end of a read without follow respected.  These tests hand it messages
built by the layout's own rules and decode what it sent with the
subscriber's decoder (protocol/tail.py), which checks every CRC.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from purelink.errors import Error
from purelink.listener.tail.jetstream import _JetStreamTailReader
from purelink.protocol.batch import encode_batch as encode_unplaced
from purelink.protocol.tail import TailDecoder
from purelink.store.jetstream.layout import (
    BatchHeaders,
    EpochMarker,
    encode_headers,
    encode_marker,
)

PRODUCER = 7


def encode_batch(producer: int, epoch: int, seq: int, records: list[bytes], position: int) -> bytes:
    """A batch whose records start at `position` (its first 8 bytes, outside the CRC)."""
    raw = bytearray(encode_unplaced(producer, epoch, seq, records))
    raw[:8] = position.to_bytes(8, "little")
    return bytes(raw)


class FakeOut:
    """Collects what a reader sends."""

    def __init__(self) -> None:
        self.sent = bytearray()

    def batches(self, data: bytes | memoryview) -> None:
        self.sent += data


def message(
    position: int, records: list[list[bytes]], seq: int = 1
) -> tuple[dict[str, str], bytes]:
    """A batch message: its headers and a body of one batch per list of records."""
    body = b""
    p = position
    for batch in records:
        body += encode_batch(PRODUCER, 1, p, batch, position=p)
        p += len(batch)
    h = BatchHeaders(position, p - position, PRODUCER, seq, 1)
    return encode_headers(h), body


def parts(position: int, record: bytes, n: int) -> list[tuple[dict[str, str], bytes]]:
    """One batch of one large record cut into `n` messages."""
    body = encode_batch(PRODUCER, 1, position, [record], position=position)
    size = -(-len(body) // n)
    out = []
    for i in range(n):
        h = BatchHeaders(position, 1, PRODUCER, position, 1, part=i + 1, parts=n)
        out.append((encode_headers(h), body[i * size : (i + 1) * size]))
    return out


def stream() -> tuple[list[tuple[dict[str, str], bytes]], list[tuple[int, bytes]]]:
    """Messages 1.. of a stream and the records they hold: two batches in one
    message, one, an epoch marker, a large record in 3 parts, one more."""
    recs = [b"r%d" % i for i in range(1, 26)]
    big = b"B" * 5000
    msgs = [
        message(1, [recs[0:5], recs[5:10]]),
        message(11, [recs[10:20]]),
        (encode_marker(EpochMarker(2, 0, 20)), b""),
        *parts(21, big, 3),
        message(22, [recs[21:25]]),
    ]
    head = zip(range(1, 21), recs[:20], strict=True)
    tail = zip(range(22, 26), recs[21:25], strict=True)
    return msgs, [*head, (21, big), *tail]


def reader(start: int, end_seq: int | None = None, seq: int = 1) -> _JetStreamTailReader:
    return _JetStreamTailReader(SimpleNamespace(), "s", seq, start, end_seq)  # type: ignore[arg-type]


def feed(r: _JetStreamTailReader, msgs: list[tuple[int, dict[str, str], bytes]]) -> bytes:
    out = FakeOut()
    for seq, headers, body in msgs:
        r._take(out, seq, headers, body)  # type: ignore[arg-type]
    return bytes(out.sent)


def numbered(msgs: list[tuple[dict[str, str], bytes]]) -> list[tuple[int, dict[str, str], bytes]]:
    return [(i, h, b) for i, (h, b) in enumerate(msgs, 1)]


@pytest.mark.parametrize("start", [0, 1, 3, 5, 6, 10, 11, 20, 21, 22, 25, 26])
def test_the_reply_from_any_start_decodes_to_the_records_from_there(start: int) -> None:
    msgs, records = stream()
    sent = feed(reader(start), numbered(msgs))
    decoder = TailDecoder(start)
    assert decoder.feed(sent) == records[max(start, 1) - 1 :]
    assert decoder.pending == 0


def test_the_first_body_is_cut_at_the_batch_that_holds_the_start() -> None:
    msgs, _ = stream()
    sent = feed(reader(7), numbered(msgs[:1]))
    first = len(encode_batch(PRODUCER, 1, 1, [b"r%d" % i for i in range(1, 6)], position=1))
    assert sent == msgs[0][1][first:]  # the second batch (positions 6-10) as it is
    assert int.from_bytes(sent[:8], "little") == 6


def test_messages_delivered_twice_are_sent_once() -> None:
    msgs, records = stream()
    numbered_msgs = numbered(msgs)
    again = [*numbered_msgs[:2], *numbered_msgs[:2], *numbered_msgs[2:]]
    assert TailDecoder(1).feed(feed(reader(1), again)) == records


def test_a_gap_in_positions_is_an_error() -> None:
    msgs, _ = stream()
    with pytest.raises(Error, match="starts at position 11 where 1 should come next"):
        feed(reader(1), [(2, *msgs[1])])


def test_a_part_without_its_first_is_an_error() -> None:
    msgs, _ = stream()
    numbered_msgs = numbered(msgs)
    with pytest.raises(Error, match="part 2/3"):
        feed(reader(21, seq=5), numbered_msgs[4:])


def test_a_read_without_follow_ends_at_its_last_sequence() -> None:
    msgs, records = stream()
    sent = feed(reader(1, end_seq=2), numbered(msgs))
    assert TailDecoder(1).feed(sent) == records[:20]


def test_bad_headers_are_an_error() -> None:
    headers: dict[str, Any] = {"Purelink-Position": "x"}
    with pytest.raises(Error, match="JetStream message 1"):
        feed(reader(1), [(1, headers, b"")])


def test_a_read_without_follow_ends_even_when_its_last_message_is_gone() -> None:
    """The stream's last message when the read began was deleted since: the next
    one delivered, past the end, ends the read (and is not sent)."""
    msgs, records = stream()
    r = reader(1, end_seq=3)
    numbered_msgs = numbered(msgs)
    sent = feed(r, [*numbered_msgs[:2], numbered_msgs[4]])  # 3 gone, 5 delivered
    assert TailDecoder(1).feed(sent) == records[:20]
    assert r._next_seq > 3  # send() sees the read done
