"""How the JetStream writer turns batches into messages (store/jetstream/batching.py).

Why it exists: a message holds one producer's consecutive batches of one
epoch and at most MAX_BODY bytes (docs/jetstream.md); the writer merges the
small messages of many drains into one while a round is in flight.  These
are pure functions: no cluster needed.
"""

from __future__ import annotations

from collections import deque

from purelink.protocol.batch import decode_batch_header, encode_batch, encode_large_batch
from purelink.store.jetstream.batching import Message, group, stamp, take
from purelink.store.jetstream.layout import MAX_BODY


def write(producer: int, first: int, records: list[bytes], epoch: int = 1) -> tuple:
    b = encode_batch(producer, epoch, first, records)
    return memoryview(b), decode_batch_header(b)


def test_group_splits_by_producer_epoch_and_gap() -> None:
    writes = [
        write(1, 1, [b"a", b"b"]),
        write(1, 3, [b"c"]),  # continues producer 1
        write(2, 1, [b"x"]),  # another producer
        write(1, 4, [b"d"]),  # producer 1 again: a new message (order is kept)
        write(1, 6, [b"f"]),  # a gap in its seqs: a new message
        write(1, 7, [b"g"], epoch=2),  # a new epoch: a new message
    ]
    msgs = group(5, writes)
    assert [(m.producer, m.epoch, m.seq, m.count, len(m.batches)) for m in msgs] == [
        (1, 1, 1, 3, 2),
        (2, 1, 1, 1, 1),
        (1, 1, 4, 1, 1),
        (1, 1, 6, 1, 1),
        (1, 2, 7, 1, 1),
    ]
    assert all(m.ticket == 5 for m in msgs)
    assert msgs[0].size == sum(h.length for _, h in writes[:2])


def test_group_copies_the_batches() -> None:
    data = bytearray(encode_batch(1, 1, 1, [b"payload"]))
    (m,) = group(1, [(memoryview(data), decode_batch_header(data))])
    data[-1] ^= 0xFF  # the receive buffer is reused at once
    assert bytes(m.batches[0]).endswith(b"payload")


def test_group_cuts_a_batch_larger_than_a_message_into_parts() -> None:
    big = encode_large_batch(3, 1, 1, bytes(2 * MAX_BODY + 10))
    msgs = group(1, [(memoryview(big), decode_batch_header(big)), write(3, 2, [b"after"])])
    assert [(m.part, m.parts, m.seq) for m in msgs] == [(1, 3, 1), (2, 3, 1), (3, 3, 1), (1, 1, 2)]
    assert b"".join(b"".join(m.batches) for m in msgs[:3]) == big
    assert all(m.size <= MAX_BODY for m in msgs)


def test_take_merges_what_continues_the_first_message() -> None:
    queue: deque[Message] = deque()
    for ticket, (first, n) in enumerate([(1, 10), (11, 5), (16, 1)], 1):
        queue.extend(group(ticket, [write(7, first, [b"r"] * n)]))
    queue.extend(group(4, [write(8, 1, [b"other"])]))
    m = take(queue)
    assert (m.producer, m.seq, m.count, len(m.batches), m.ticket) == (7, 1, 16, 3, 1)
    assert [(n.producer, n.ticket) for n in queue] == [(8, 4)]  # the other producer waits


def test_take_stops_at_a_gap_an_epoch_a_part_and_the_body_limit() -> None:
    def queue_of(*writes: tuple) -> deque[Message]:
        q: deque[Message] = deque()
        for i, w in enumerate(writes, 1):
            q.extend(group(i, [w]))
        return q

    assert take(q := queue_of(write(1, 1, [b"a"]), write(1, 3, [b"c"]))).count == 1 and q
    assert take(q := queue_of(write(1, 1, [b"a"]), write(1, 2, [b"b"], epoch=2))).count == 1
    assert q
    half = [bytes(60_000)] * 9  # ~540 KB a batch: two do not fit one message
    assert take(q := queue_of(write(1, 1, half), write(1, 10, half))).count == 9 and q
    big = encode_large_batch(1, 1, 2, bytes(MAX_BODY + 1))
    q = queue_of(write(1, 1, [b"a"]))
    q.extend(group(2, [(memoryview(big), decode_batch_header(big))]))
    assert take(q).count == 1 and q[0].parts == 2


def test_stamp_writes_each_batch_position() -> None:
    (m,) = group(1, [write(1, 1, [b"a", b"b"]), write(1, 3, [b"c"])])
    m.position = 41
    stamp(m)
    assert [int.from_bytes(b[0:8], "little") for b in m.batches] == [41, 43]
