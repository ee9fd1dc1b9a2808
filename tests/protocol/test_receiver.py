"""A producer's receiver (protocol/receiver.py) stores each record once, in seq order.

Why: `Producer` is where the listener decides what is in order, what waits
and what is a duplicate.  A real link's batches never overlap, but a peer
may send any batches at all (a link of another version, a bug, a forger
with the key): overlapping batches are cut to what is new (`_trim`), held
batches passed by another way are dropped or cut, pieces come in any order.
Whatever arrives, what goes to the store must be each record once, in seq
order, and the memory reckoned for held data must come back to zero.  The
model: every record 1..n delivered, in batches of any ranges, whole or in
pieces, in any order and twice, then the whole range once more in order.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.wire import PROFILE
from purelink.protocol import wire
from purelink.protocol.messages import Fragment
from purelink.protocol.receiver import Producer, Write

PID, EPOCH = 7, 3


def records_of(n: int) -> list[bytes]:
    return [bytes([i % 251]) * (i % 37) for i in range(1, n + 1)]


def batch(records: list[bytes], first: int, last: int) -> bytes:
    return wire.encode_batch(PID, EPOCH, first, records[first - 1 : last])


def deliver(
    producer: Producer,
    data: bytes,
    pieces: list[int] | None,
    writes: list[Write],
    whole: bool = True,
) -> list[str]:
    """`data` as one batch (pieces None), or in pieces cut at `pieces`
    (offsets), sent in the order they name and then, when `whole`, every one
    of them: what each call answered."""
    if pieces is None:
        return [producer.on_batch(data, wire.verify_batch(data), writes)]
    seq = wire.decode_batch_header(data).first_seq
    cuts = sorted({0, len(data), *(c % len(data) for c in pieces)})
    spans = list(pairwise(cuts))
    order = [spans[i % len(spans)] for i in pieces] + (spans if whole else [])
    out = []
    for a, b in order:
        frag = Fragment(1, 1, EPOCH, seq, len(data), a, memoryview(data)[a:b])
        out.append(producer.on_fragment(frag, writes))
    return out


def stored(writes: list[Write]) -> list[tuple[int, bytes]]:
    """The (seq, record) pairs the writes carry, in order."""
    out = []
    for data, header in writes:
        for i, record in enumerate(wire.batch_records(data, header)):
            out.append((header.first_seq + i, record))
    return out


deliveries = st.lists(
    st.tuples(
        st.integers(1, 40),  # first
        st.integers(0, 12),  # how many more
        st.one_of(st.none(), st.lists(st.integers(0, 10_000), min_size=1, max_size=5)),
        st.booleans(),  # twice
        st.booleans(),  # every piece (else only those named: the batch stays a partial)
    ),
    max_size=25,
)


@settings(PROFILE)
@given(n=st.integers(1, 40), script=deliveries, reorder=st.sampled_from([1 << 20, 300]))
def test_each_record_once_in_order_whatever_the_batches(
    n: int, script: list[Any], reorder: int
) -> None:
    records = records_of(n)
    producer = Producer("s", PID, EPOCH, 0, max_reorder=reorder)
    writes: list[Write] = []
    # (pieces of two different batches named by one first seq: the later ones
    # do not fit the partial the first began, and are malformed)
    allowed = {"stored", "held", "duplicate", "reorder_full", "malformed"}
    for start, more, pieces, twice, whole in script:
        first = min(start, n)
        data = batch(records, first, min(first + more, n))
        for _ in range(2 if twice else 1):
            assert set(deliver(producer, data, pieces, writes, whole)) <= allowed
            assert 0 <= producer.held_bytes <= reorder
            assert stored(writes) == [(s, records[s - 1]) for s in range(1, producer.received + 1)]
    for first in range(1, n + 1, 5):  # the whole range once more, in order
        deliver(producer, batch(records, first, min(first + 4, n)), None, writes)
    assert stored(writes) == list(enumerate(records, 1))
    assert producer.received == n
    assert not producer.held and not producer.partials and producer.held_bytes == 0


def test_a_batch_over_what_was_received_is_cut_to_the_new_records() -> None:
    records = records_of(10)
    producer = Producer("s", PID, EPOCH, 0)
    writes: list[Write] = []
    assert deliver(producer, batch(records, 1, 4), None, writes) == ["stored"]
    assert deliver(producer, batch(records, 3, 7), None, writes) == ["stored"]
    data, header = writes[-1]
    assert (header.first_seq, header.last_seq) == (5, 7)
    assert wire.batch_records(data, header) == records[4:7]


def test_a_held_batch_passed_by_another_is_cut_or_dropped() -> None:
    records = records_of(12)
    producer = Producer("s", PID, EPOCH, 0)
    writes: list[Write] = []
    assert deliver(producer, batch(records, 4, 6), None, writes) == ["held"]
    assert deliver(producer, batch(records, 8, 12), None, writes) == ["held"]
    assert deliver(producer, batch(records, 1, 9), None, writes) == ["stored"]
    assert stored(writes) == list(enumerate(records, 1))
    assert not producer.held and producer.held_bytes == 0
