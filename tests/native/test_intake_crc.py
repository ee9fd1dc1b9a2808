"""The compiled intake's batch CRC, joined from its pieces, decides as a pass over the batch.

Why: when the pieces of a batch come in order through the C intake, it checks
the batch's CRC against one joined from the pieces' datagram CRCs
(src/speedups/crcjoin.c) instead of a second pass over the batch's bytes.
That is right only while the bytes it followed are the bytes in the buffer: a
piece the Python path writes over them (a piece that overlaps what is there,
with other bytes and a right datagram CRC) must send the batch back to a pass
over its bytes.  So: the join itself against crc32c of the whole, and the two
cores fed the link's pieces with such a piece among them, through `take` and
through `drain`, must stay equal after every datagram (the batch stored by
both, or dropped by both as bad_checksum).
"""

from __future__ import annotations

import struct
from array import array

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.wire import PROFILE
from native.test_intake import ADDR, Pair, packed, reseal
from native.test_intake_drain import Drained, check, drained_link, gro_pair
from purelink.protocol import wire
from purelink.protocol.core_intake import INTAKE
from purelink.protocol.listener_core import CoreConfig
from purelink.protocol.packing import Flight, Packer

pytestmark = pytest.mark.skipif(INTAKE is None, reason="the compiled intake is not in use")

FRAGMENT_HEAD = 36  # magic, version, kind, conn id, pn, epoch, seq, total, offset


@settings(PROFILE)
@given(a=st.binary(max_size=300), b=st.binary(max_size=3000), tables=st.booleans())
def test_joined_crc_is_the_crc_of_the_whole(a: bytes, b: bytes, tables: bool) -> None:
    assert INTAKE is not None
    assert INTAKE.join_crc(crc32c(a), crc32c(b), len(b), tables) == crc32c(a + b)


def test_joined_crc_over_long_and_odd_lengths() -> None:
    assert INTAKE is not None
    for n in (0, 1, 7, 8, 12, 1364, 1365, 65535, 1 << 20, (1 << 20) + 3):
        b = bytes(range(256)) * (n // 256) + bytes(n % 256)
        for tables in (False, True):
            assert INTAKE.join_crc(crc32c(b"head"), crc32c(b), n, tables) == crc32c(b"head" + b)


def with_overlap(out: list[bytes], at: int, back: int, change: bool) -> tuple[list[bytes], bool]:
    """The link's datagrams with one more piece before piece `at`: the same
    bytes, begun `back` bytes before them -- over what the batch's pieces
    before it carried, or other bytes there when `change` -- with a packet
    number of its own and a right datagram CRC; and whether bytes changed."""
    piece = out[at]
    if piece[3] != wire.MsgType.FRAGMENT:
        return out, False
    (seq,) = struct.unpack_from("<Q", piece, 20)
    (offset,) = struct.unpack_from("<I", piece, 32)
    before = b"".join(
        d[FRAGMENT_HEAD:-4]
        for d in out[:at]
        if d[3] == wire.MsgType.FRAGMENT and struct.unpack_from("<Q", d, 20)[0] == seq
    )
    back = min(back, offset, len(before))
    fill = bytes([0xA5]) * back if change else before[len(before) - back :]
    raw = bytearray(piece[:FRAGMENT_HEAD])
    struct.pack_into("<Q", raw, 8, 1 << 40)
    struct.pack_into("<I", raw, 32, offset - back)
    extra = reseal(bytes(raw) + fill + piece[FRAGMENT_HEAD:])
    return [*out[:at], extra, *out[at:]], change and back > 0


pieces = {
    "sizes": st.lists(st.integers(300, 3000), min_size=1, max_size=6),
    "datagram": st.sampled_from([200, 600, 1400]),
    "at": st.integers(1, 40),
    "back": st.integers(1, 700),
    "change": st.booleans(),
}


@settings(PROFILE, max_examples=max(PROFILE.max_examples // 2, 10))
@given(**pieces)
def test_a_piece_python_wrote_over_sends_the_batch_to_a_pass(
    sizes: list[int], datagram: int, at: int, back: int, change: bool
) -> None:
    pair = Pair(CoreConfig(max_record=4096, max_reorder=1 << 14))
    accept = pair.open()
    records = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    out = packed(accept, records, datagram)
    sent, changed = with_overlap(out, at % len(out), back, change)
    for d in sent:
        pair.feed(d)  # both cores equal after each
    stored = pair.drain()
    if not changed:
        assert [r for b, h in stored for r in wire.batch_records(b, h)] == records
    else:  # (bad_checksum, or malformed where the bytes changed were the header's)
        assert sum(pair.c.stats.dropped.values()) >= 1


@settings(PROFILE, max_examples=max(PROFILE.max_examples // 4, 10), deadline=None)
@given(**pieces)
def test_the_same_through_drain(
    sizes: list[int], datagram: int, at: int, back: int, change: bool
) -> None:
    with drained_link(sizes, datagram) as (pair, drained, where, records, out):
        sent, changed = with_overlap(out, at % len(out), back, change)
        check(pair, drained, where, sent)  # both cores equal after each receive
        stored = pair.drain()
    if not changed:
        assert [r for b, h in stored for r in wire.batch_records(b, h)] == records


def test_a_batch_in_order_is_checked_by_its_joined_crc() -> None:
    """The joined CRC is what decides (white box): bytes changed in the buffer
    behind every writer's back, after the C followed them, go unseen -- which
    no writer of the product does; the Python path's writes are seen above."""
    assert INTAKE is not None
    pair = Pair(CoreConfig(max_record=1 << 16, max_reorder=1 << 20))
    accept = pair.open()
    out = packed(accept, [b"r" * 61] * 300, 1400)
    assert all(d[3] == wire.MsgType.FRAGMENT for d in out)
    for d in out[:-1]:
        assert INTAKE.take(pair.c, d, ADDR, 100.0)
    (producer,) = pair.c.producers()
    (part,) = producer.partials.values()
    part.buf[-5] ^= 1  # a record's byte
    assert INTAKE.take(pair.c, out[-1], ADDR, 100.0)
    assert pair.c.stats.batches == 1


def two_lengths(accept: wire.Accept, records: list[bytes]) -> list[bytes]:
    """The link's pieces of `records` when the path shrank in the middle of
    their batch: the later pieces are shorter."""
    packer = Packer(1400)
    packer.start(accept.conn_id, accept.producer, accept.epoch, 1)
    lens = array("H", (min(len(r), 0xFFFF) for r in records))
    out: list[bytes] = []
    flights: dict[int, Flight] = {}
    pn = packer.fill(records, lens, 1, len(records), 1, 0.0, 5, 1 << 40, out, flights)[0]
    packer.size = 700
    packer.fill(records, lens, 1, len(records), pn, 0.0, 1 << 30, 1 << 40, out, flights)
    assert all(d[3] == wire.MsgType.FRAGMENT for d in out)
    assert len({len(d) for d in out[1:-1]}) == 2  # middle pieces of two lengths
    return out


LARGE = CoreConfig(max_record=1 << 17, max_reorder=1 << 20)
TWO_LENGTHS = pytest.mark.parametrize(
    "records",
    [[b"r" * 61] * 300, [bytes(range(256)) * 400]],
    ids=["many records", "one record larger than a batch of many"],
)


@TWO_LENGTHS
def test_pieces_of_two_lengths_make_the_same_batch(records: list[bytes]) -> None:
    """The C joins the CRC over middle pieces of one length only, and checks
    a batch of pieces of two lengths by a pass over its bytes: both cores
    store it whole."""
    pair = Pair(LARGE)
    for d in two_lengths(pair.open(), records):
        pair.feed(d)  # both cores equal after each
    stored = pair.drain()
    assert [r for b, h in stored for r in wire.batch_records(b, h)] == records
    assert pair.c.stats.batches == pair.py.stats.batches == 1


@TWO_LENGTHS
def test_pieces_of_two_lengths_through_drain(records: list[bytes]) -> None:
    with gro_pair() as (rx, tx):
        where = tx.getsockname()
        pair = Pair(LARGE)
        out = two_lengths(pair.open(addr=where), records)
        check(pair, Drained(pair.c, rx, tx), where, out)  # both cores equal after each receive
        stored = pair.drain()
    assert [r for b, h in stored for r in wire.batch_records(b, h)] == records
