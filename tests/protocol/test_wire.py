"""The wire format, tested three ways: whole, byte by byte,
and with trailing junk; plus every single-bit flip, the refused high type bit, and golden
bytes built by hand from the tables in docs/wire.md.

The one invariant behind all of it: a decoder returns a value or raises
`ProtocolError` (with a `.reason`), never anything else.  The Hypothesis side
of the same invariant lives in test_wire_fuzz.py.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable

import pytest
from crc32c import crc32c

from helpers.wire import BATCH_REASONS, DATAGRAM_REASONS
from purelink.errors import ProtocolError
from purelink.protocol import wire
from purelink.protocol.channel import OVERHEAD
from purelink.protocol.pmtu import BASE
from purelink.protocol.wire import (
    Accept,
    Ack,
    Close,
    Data,
    Fragment,
    Hello,
    MsgType,
    MtuAck,
    Probe,
    Refuse,
    RefuseReason,
    Retry,
)

# the CRC-32C residue: crc32c(m + crc32c(m) as u32 LE) is this for every m
CRC_RESIDUE = struct.pack("<I", 0x48674BC7)


# ---------------------------------------------------------------- helpers
def seal(
    kind: int,
    conn_id: int,
    body: bytes,
    *,
    magic: bytes = b"PL",
    version: int = 2,
) -> bytes:
    """A datagram built by hand from docs/wire.md, independently of wire._seal."""
    head = magic + struct.pack("<BBI", version, kind, conn_id)
    return head + body + struct.pack("<I", crc32c(head + body))


def reseal(datagram: bytes) -> bytes:
    """Recompute the trailer (the CRC) of a datagram whose
    header and body were edited; `datagram` is given without its trailer."""
    kind = datagram[3]
    conn_id = struct.unpack_from("<I", datagram, 4)[0]
    return seal(
        kind,
        conn_id,
        datagram[8:],
        magic=datagram[:2],
        version=datagram[2],
    )


def strip(datagram: bytes) -> bytes:
    """A datagram without its trailer (the CRC)."""
    return datagram[: len(datagram) - 4]


def reason_of(data: bytes) -> str:
    with pytest.raises(ProtocolError) as info:
        wire.decode_datagram(data)
    return info.value.reason


def batch_reason_of(data: bytes) -> str:
    with pytest.raises(ProtocolError) as info:
        wire.verify_batch(data)
    return info.value.reason


def rebatch(batch: bytes | bytearray) -> bytes:
    """Recompute the CRC of an edited batch."""
    out = bytearray(batch)
    out[8:12] = struct.pack("<I", crc32c(bytes(out[12:])))
    return bytes(out)


SMALL_RECORDS = [b"a", b"", b"hello, world", bytes(range(256)), b""]
SMALL_BATCH = wire.encode_batch(producer=11, epoch=3, first_seq=17, records=SMALL_RECORDS)
LARGE_RECORD = bytes(range(256)) * 20  # 5,120 bytes: more than a datagram
LARGE_BATCH = wire.encode_large_batch(producer=11, epoch=3, seq=22, record=LARGE_RECORD)

HELLO = Hello(0x0102030405060708, "orders", "api-1", 0, 1400, b"")
HELLO_COOKIE = Hello(9, "orders.eu-1", "", (1 << 63) | 5, 65507, bytes(range(20)))
RETRY = Retry(0x0102030405060708, bytes(range(20)))
ACCEPT = Accept(0xDEADBEEF, 0x0102030405060708, 77, 4, 1000, 1003, 4 << 20, 16 << 20)
ACK_PLAIN = Ack(0xDEADBEEF, 4, 1000, 1003, 4 << 20, 99, 250, (), ())
ACK_FULL = Ack(
    0xDEADBEEF,
    4,
    1000,
    1003,
    1 << 20,
    99,
    250,
    ((1005, 1009), (1011, 1011)),
    ((1004, ((0, 1344), (2688, 4032))), (1010, ((1344, 2688),))),
    (97, 98),
)
REFUSE_HELLO = Refuse(0, 9, 0, RefuseReason.BAD_STREAM)
REFUSE_FENCED = Refuse(0xDEADBEEF, 0, 4, RefuseReason.FENCED)
MTU_ACK = MtuAck(0xDEADBEEF, 4, 11, 1392)


def samples() -> dict[str, bytes]:
    """One valid datagram of each shape."""
    return {
        "hello": wire.encode_hello(HELLO),
        "hello_cookie": wire.encode_hello(HELLO_COOKIE),
        "retry": wire.encode_retry(RETRY),
        "accept": wire.encode_accept(ACCEPT),
        "data": wire.encode_data(0xDEADBEEF, 5, SMALL_BATCH),
        "data_padded": wire.encode_data(0xDEADBEEF, 6, SMALL_BATCH, pad_to=400),
        "data_large": wire.encode_data(0xDEADBEEF, 7, LARGE_BATCH),
        "fragment": wire.encode_fragment(0xDEADBEEF, 8, 4, 22, 5120, 1344, b"x" * 1344),
        "fragment_last": wire.encode_fragment(0xDEADBEEF, 9, 4, 22, 5120, 4032, b"y" * 1088),
        "ack": wire.encode_ack(ACK_PLAIN),
        "ack_full": wire.encode_ack(ACK_FULL),
        "probe": wire.encode_probe(0xDEADBEEF, 10, 4),
        "probe_padded": wire.encode_probe(0xDEADBEEF, 11, 4, pad_to=300),
        "mtu_ack": wire.encode_mtu_ack(MTU_ACK),
        "close": wire.encode_close(0xDEADBEEF, 4),
        "refuse": wire.encode_refuse(REFUSE_HELLO),
        "refuse_fenced": wire.encode_refuse(REFUSE_FENCED),
    }


SAMPLE_NAMES = list(samples())


# ------------------------------------------------------------ round trips
@pytest.mark.parametrize(
    ("msg", "encode"),
    [
        (HELLO, wire.encode_hello),
        (HELLO_COOKIE, wire.encode_hello),
        (Hello(1, "s", "ünïcødé-名前", 0, 128, b"\x00" * 255), wire.encode_hello),
        (Hello(1, "s" * 200, "p" * 255, 0, 0xFFFF, b""), wire.encode_hello),
        (RETRY, wire.encode_retry),
        (Retry(1, b""), wire.encode_retry),
        (Retry(0xFFFF_FFFF_FFFF_FFFF, b"\xff" * 255), wire.encode_retry),
        (ACCEPT, wire.encode_accept),
        (Accept(1, 2, 3, 4, 0, 0, 0, 0), wire.encode_accept),
        (ACK_PLAIN, wire.encode_ack),
        (ACK_FULL, wire.encode_ack),
        (REFUSE_HELLO, wire.encode_refuse),
        (REFUSE_FENCED, wire.encode_refuse),
        (MTU_ACK, wire.encode_mtu_ack),
        (MtuAck(0, 0, 0, 0), wire.encode_mtu_ack),
        (MtuAck(2**32 - 1, 2**32 - 1, 2**64 - 1, 0xFFFF), wire.encode_mtu_ack),
    ],
    ids=lambda v: type(v).__name__ if not callable(v) else "",
)
def test_message_round_trip(msg: object, encode: Callable[..., bytes]) -> None:
    datagram = encode(msg)
    assert wire.decode_datagram(datagram) == msg
    assert wire.decode_datagram(bytearray(datagram)) == msg
    assert wire.decode_datagram(memoryview(datagram)) == msg


def test_probe_close_round_trip() -> None:
    assert wire.decode_datagram(wire.encode_probe(7, 2**64 - 1, 2**32 - 1)) == Probe(
        7, 2**64 - 1, 2**32 - 1
    )
    assert wire.decode_datagram(wire.encode_close(2**32 - 1, 0)) == Close(2**32 - 1, 0)


@pytest.mark.parametrize("pad_to", [0, 24, 25, 41, 1200, 1400, 65507])
def test_padded_probe_round_trip(pad_to: int) -> None:
    """A path MTU probe is a PROBE padded with zeros to its size (no padding
    when `pad_to` is not above the unpadded size)."""
    datagram = wire.encode_probe(7, 8, 9, pad_to)
    unpadded = wire.PROBE_SIZE
    assert len(datagram) == max(pad_to, unpadded)
    assert wire.decode_datagram(datagram) == Probe(7, 8, 9, len(datagram) - unpadded)


def test_pieces_are_fragments_of_the_batch() -> None:
    """encode_pieces makes exactly the FRAGMENT datagrams of encode_fragment,
    one per `chunk` bytes of the batch, and their chunks put back together are
    the batch."""
    batch = wire.encode_batch(11, 3, 17, [bytes([i]) * 97 for i in range(40)])
    pieces = wire.encode_pieces(9, 100, 3, 17, batch, 0, len(batch), 1000)
    assert len(pieces) == -(-len(batch) // 1000)
    rebuilt = b""
    for k, datagram in enumerate(pieces):
        at = 1000 * k
        chunk = batch[at : at + 1000]
        assert datagram == wire.encode_fragment(9, 100 + k, 3, 17, len(batch), at, chunk)
        msg = wire.decode_datagram(datagram)
        assert isinstance(msg, Fragment)
        rebuilt += bytes(msg.chunk)
    assert rebuilt == batch
    full = 1000 + wire.FRAGMENT_OVERHEAD
    assert {len(p) for p in pieces[:-1]} == {full}  # equal datagrams: one GSO run
    # a middle range, as a resend cut smaller sends it
    again = wire.encode_pieces(9, 5, 3, 17, batch, 1000, 2500, 600)
    assert [wire.decode_datagram(d).offset for d in again] == [1000, 1600, 2200]  # type: ignore[union-attr]
    assert b"".join(bytes(wire.decode_datagram(d).chunk) for d in again) == batch[1000:2500]  # type: ignore[union-attr]
    assert wire.encode_pieces(9, 5, 3, 17, batch, 10, 10, 600) == []
    # the same from only those bytes of the batch (a piece cut smaller)
    part = batch[1000:2500]
    assert wire.encode_pieces(9, 5, 3, 17, part, 1000, 2500, 600, len(batch), 1000) == again


@pytest.mark.parametrize("name", ["data", "data_padded", "fragment", "probe", "probe_padded"])
def test_reseal_changes_only_the_packet_number(name: str) -> None:
    """DATA, FRAGMENT and PROBE all start their body with the packet number."""
    first = samples()[name]
    again = wire.reseal(first, 2**64 - 1)
    assert len(again) == len(first)
    assert strip(again)[:8] == strip(first)[:8]
    assert strip(again)[16:] == strip(first)[16:]
    assert struct.unpack_from("<Q", again, 8) == (2**64 - 1,)
    wire.decode_datagram(again)


@pytest.mark.parametrize("batch", [SMALL_BATCH, LARGE_BATCH], ids=["small", "large"])
def test_data_round_trip(batch: bytes) -> None:
    msg = wire.decode_datagram(wire.encode_data(42, 2**64 - 1, batch))
    assert isinstance(msg, Data)
    assert (msg.conn_id, msg.pn, bytes(msg.batch)) == (42, 2**64 - 1, batch)
    header = wire.verify_batch(msg.batch)
    assert header == wire.verify_batch(batch)


def test_fragment_round_trip() -> None:
    chunk = bytes(range(200))
    msg = wire.decode_datagram(wire.encode_fragment(3, 4, 5, 6, 1000, 800, chunk))
    assert isinstance(msg, Fragment)
    fields = (msg.conn_id, msg.pn, msg.epoch, msg.seq, msg.total, msg.offset)
    assert fields == (3, 4, 5, 6, 1000, 800)
    assert bytes(msg.chunk) == chunk
    # a memoryview chunk encodes the same as bytes
    same = wire.encode_fragment(3, 4, 5, 6, 1000, 800, memoryview(chunk))
    assert same == wire.encode_fragment(3, 4, 5, 6, 1000, 800, chunk)


@pytest.mark.parametrize("pad_to", [0, 100, 400, 1400])
@pytest.mark.parametrize("table", ["none", "array", "bytes"])
@pytest.mark.parametrize(
    "records", [[b""], SMALL_RECORDS, [b"x" * 1000, b"y"]], ids=["empty", "mixed", "big"]
)
def test_encode_data_batch_is_encode_data_of_encode_batch(
    records: list[bytes], table: str, pad_to: int
) -> None:
    """The link's one-pass DATA encoder makes exactly the two-step bytes."""
    lengths: array[int] | bytes | None = None
    if table != "none":
        lengths = array("H", map(len, records))
        if table == "bytes":
            lengths = lengths.tobytes()
    one = wire.encode_data_batch(7, 9, 11, 3, 17, records, lengths, pad_to)
    batch = wire.encode_batch(11, 3, 17, records)
    assert wire.encode_batch(11, 3, 17, records, lengths) == batch
    assert one == wire.encode_data(7, 9, batch, pad_to)
    msg = wire.decode_datagram(one)
    assert isinstance(msg, Data)
    assert wire.batch_records(msg.batch, wire.verify_batch(msg.batch)) == records


@pytest.mark.parametrize("pad_to", [0, 400])
def test_reseal_data_changes_only_the_packet_number(pad_to: int) -> None:
    first = wire.encode_data(7, 5, SMALL_BATCH, pad_to)
    again = wire.reseal_data(first, 2**64 - 1)
    assert again == wire.encode_data(7, 2**64 - 1, SMALL_BATCH, pad_to)
    assert wire.reseal_data(again, 5) == first
    msg = wire.decode_datagram(again)
    assert isinstance(msg, Data)
    assert (msg.pn, bytes(msg.batch)) == (2**64 - 1, SMALL_BATCH)


def test_ack_delay_saturates_at_u32() -> None:
    ack = Ack(1, 1, 0, 0, 0, 1, 2**40, (), ())
    decoded = wire.decode_datagram(wire.encode_ack(ack))
    assert isinstance(decoded, Ack)
    assert decoded.ack_delay == 0xFFFF_FFFF


@pytest.mark.parametrize("pad_to", [0, 100, 200, 201, 1400, 1500, 65507])
def test_data_padding(pad_to: int) -> None:
    natural = len(wire.encode_data(1, 2, SMALL_BATCH))
    datagram = wire.encode_data(1, 2, SMALL_BATCH, pad_to=pad_to)
    assert len(datagram) == max(pad_to, natural)
    msg = wire.decode_datagram(datagram)
    assert isinstance(msg, Data)
    assert bytes(msg.batch) == SMALL_BATCH
    assert wire.verify_batch(msg.batch).length == len(SMALL_BATCH)


def test_data_padding_to_exactly_the_natural_size_adds_nothing() -> None:
    natural = wire.encode_data(1, 2, SMALL_BATCH)
    assert wire.encode_data(1, 2, SMALL_BATCH, pad_to=len(natural)) == natural
    assert len(natural) == wire.DATA_OVERHEAD + len(SMALL_BATCH)


def test_data_padding_must_be_zero() -> None:
    padded = wire.encode_data(1, 2, SMALL_BATCH, pad_to=400)
    body = bytearray(strip(padded))
    body[-1] = 1
    assert reason_of(reseal(bytes(body))) == "malformed"


# ----------------------------------------------------------------- batches
@pytest.mark.parametrize(
    "records",
    [
        [b""],
        [b"", b"", b""],
        [b"x"],
        SMALL_RECORDS,
        [b"\xff" * 65535],
        [bytes([i % 251]) * (i % 97) for i in range(3000)],
        [b""] * 40_000,
    ],
    ids=["one_empty", "three_empty", "one_byte", "mixed", "max_small", "many", "many_empty"],
)
def test_batch_round_trip(records: list[bytes]) -> None:
    batch = wire.encode_batch(producer=2**64 - 1, epoch=2**32 - 1, first_seq=5, records=records)
    header = wire.verify_batch(batch)
    assert header == wire.decode_batch_header(batch)
    assert (header.position, header.flags, header.count) == (0, 0, len(records))
    assert (header.producer, header.epoch) == (2**64 - 1, 2**32 - 1)
    assert (header.first_seq, header.last_seq) == (5, 4 + len(records))
    assert (
        header.length == len(batch) == wire.BATCH_HEADER + 2 * len(records) + sum(map(len, records))
    )
    assert wire.batch_records(batch, header) == records
    assert wire.batch_records(memoryview(batch), header) == records


@pytest.mark.parametrize("size", [0, 1, 65535, 65536, 1 << 20])
def test_large_batch_round_trip(size: int) -> None:
    record = bytes(i % 253 for i in range(size))
    batch = wire.encode_large_batch(producer=9, epoch=1, seq=2**64 - 1, record=record)
    header = wire.verify_batch(batch)
    assert header.flags == wire.FLAG_LARGE
    assert (header.count, header.first_seq, header.last_seq) == (1, 2**64 - 1, 2**64 - 1)
    assert header.length == len(batch) == wire.BATCH_HEADER + size
    assert wire.batch_records(batch, header) == [record]


def test_small_record_limit() -> None:
    with pytest.raises(OverflowError):
        wire.encode_batch(1, 1, 1, [b"x" * 65536])


def test_empty_record_list_does_not_make_a_batch() -> None:
    with pytest.raises(ValueError):
        wire.encode_batch(1, 1, 1, [])


@pytest.mark.parametrize("batch", [SMALL_BATCH, LARGE_BATCH], ids=["small", "large"])
def test_batch_position_is_outside_the_crc(batch: bytes) -> None:
    stamped = wire.position_bytes(123_456_789) + batch[8:]
    header = wire.verify_batch(stamped)
    assert header.position == 123_456_789
    assert wire.batch_records(stamped, header) == wire.batch_records(
        batch, wire.verify_batch(batch)
    )
    assert wire.position_bytes(2**64 - 1) == b"\xff" * 8


@pytest.mark.parametrize("batch", [SMALL_BATCH, LARGE_BATCH], ids=["small", "large"])
def test_batch_byte_by_byte(batch: bytes) -> None:
    """Every proper prefix fails verify_batch; decode_batch_header needs only
    the 44-byte header (the store's scanner relies on that)."""
    full = wire.decode_batch_header(batch)
    for n in range(len(batch)):
        prefix = batch[:n]
        reason = batch_reason_of(prefix)
        if n < wire.BATCH_HEADER:
            assert reason == "truncated"
            with pytest.raises(ProtocolError, match="truncated"):
                wire.decode_batch_header(prefix)
        else:
            assert reason == "malformed"  # the declared length is not the container's
            assert wire.decode_batch_header(prefix) == full


@pytest.mark.parametrize("batch", [SMALL_BATCH, LARGE_BATCH], ids=["small", "large"])
@pytest.mark.parametrize("junk", [b"\x00", b"\x00" * 4, CRC_RESIDUE, b"PB\x01", None])
def test_batch_with_trailing_junk(batch: bytes, junk: bytes | None) -> None:
    tail = batch if junk is None else junk
    assert batch_reason_of(batch + tail) == "malformed"
    # the header alone still decodes: a scanner walks batches back to back
    assert wire.decode_batch_header(batch + tail) == wire.decode_batch_header(batch)


@pytest.mark.parametrize("batch", [SMALL_BATCH, LARGE_BATCH], ids=["small", "large"])
def test_batch_every_bit_flip_past_the_position_is_rejected(batch: bytes) -> None:
    for i in range(8 * 8, 8 * len(batch)):
        flipped = bytearray(batch)
        flipped[i // 8] ^= 1 << (i % 8)
        assert batch_reason_of(bytes(flipped)) in BATCH_REASONS, i


def _batch_edit(batch: bytes, offset: int, fmt: str, value: int | bytes) -> bytes:
    out = bytearray(batch)
    struct.pack_into(fmt, out, offset, value)
    return rebatch(out)


@pytest.mark.parametrize(
    ("batch", "offset", "fmt", "value", "reason"),
    [
        (SMALL_BATCH, 12, "<2s", b"PL", "bad_magic"),
        (SMALL_BATCH, 14, "<B", 2, "bad_version"),
        (SMALL_BATCH, 14, "<B", 0, "bad_version"),
        (SMALL_BATCH, 15, "<B", 0x02, "malformed"),  # unknown flag
        (SMALL_BATCH, 15, "<B", 0x81, "malformed"),
        (SMALL_BATCH, 20, "<I", 0, "malformed"),  # count 0
        (SMALL_BATCH, 20, "<I", 10_000, "malformed"),  # length table past the batch
        (SMALL_BATCH, 20, "<I", 4, "malformed"),  # lengths do not add up
        (SMALL_BATCH, 16, "<I", 43, "malformed"),
        (SMALL_BATCH, 16, "<I", 2**32 - 1, "malformed"),
        (SMALL_BATCH, 32, "<Q", 0, "malformed"),  # first_seq 0
        (SMALL_BATCH, 32, "<Q", 2**64 - 4, "malformed"),  # last seq past u64
        (SMALL_BATCH, 44, "<H", 2, "malformed"),  # a length changed: sum is off
        (LARGE_BATCH, 20, "<I", 2, "malformed"),  # large with two records
        (LARGE_BATCH, 20, "<I", 0, "malformed"),
        (LARGE_BATCH, 16, "<I", 43, "malformed"),
        (LARGE_BATCH, 32, "<Q", 0, "malformed"),
    ],
)
def test_batch_header_reasons(
    batch: bytes, offset: int, fmt: str, value: int | bytes, reason: str
) -> None:
    assert batch_reason_of(_batch_edit(batch, offset, fmt, value)) == reason


def test_batch_checksum() -> None:
    broken = bytearray(SMALL_BATCH)
    broken[-1] ^= 0x40
    assert batch_reason_of(bytes(broken)) == "bad_checksum"
    assert wire.decode_batch_header(bytes(broken)) == wire.decode_batch_header(SMALL_BATCH)
    broken = bytearray(SMALL_BATCH)
    broken[8] ^= 1  # the CRC field itself
    assert batch_reason_of(bytes(broken)) == "bad_checksum"


def test_large_batch_may_hold_an_empty_record() -> None:
    batch = wire.encode_large_batch(1, 1, 1, b"")
    assert wire.batch_records(batch, wire.verify_batch(batch)) == [b""]


# ------------------------------------------------ golden bytes (docs/wire.md)
def test_golden_batch() -> None:
    records = [b"ab", b"", b"cde"]
    tail = struct.pack("<2sBBIIQQI", b"PB", 1, 0, 44 + 6 + 5, 3, 0x1122, 7, 2)
    lengths = struct.pack("<3H", 2, 0, 3)
    crc = crc32c(tail + lengths + b"abcde")
    expected = struct.pack("<QI", 0, crc) + tail + lengths + b"abcde"
    assert wire.encode_batch(0x1122, 2, 7, records) == expected
    large_tail = struct.pack("<2sBBIIQQI", b"PB", 1, 1, 44 + 3, 1, 0x1122, 7, 2)
    expected = struct.pack("<QI", 0, crc32c(large_tail + b"xyz")) + large_tail + b"xyz"
    assert wire.encode_large_batch(0x1122, 2, 7, b"xyz") == expected


def test_golden_datagrams() -> None:
    cid = 0xDEADBEEF
    assert wire.encode_hello(HELLO) == seal(
        1,
        0,
        struct.pack("<QQIHBBB", HELLO.nonce, 0, 0, 1400, 6, 5, 0) + b"orders" + b"api-1",
    )
    assert wire.encode_retry(RETRY) == seal(
        2, 0, struct.pack("<QB", RETRY.nonce, 20) + RETRY.cookie
    )
    assert wire.encode_accept(ACCEPT) == seal(
        3, cid, struct.pack("<QQIQQII", ACCEPT.nonce, 77, 4, 1000, 1003, 4 << 20, 16 << 20)
    )
    assert wire.encode_data(cid, 5, SMALL_BATCH) == seal(4, cid, struct.pack("<Q", 5) + SMALL_BATCH)
    padded = seal(4, cid, struct.pack("<Q", 5) + SMALL_BATCH + bytes(100))
    assert wire.encode_data(cid, 5, SMALL_BATCH, pad_to=len(padded)) == padded
    assert wire.encode_fragment(cid, 8, 4, 22, 5120, 1344, b"xy") == seal(
        5, cid, struct.pack("<QIQII", 8, 4, 22, 5120, 1344) + b"xy"
    )
    ack_body = (
        struct.pack("<IQQIQIBB", 4, 1000, 1003, 1 << 20, 99, 250, 2, 2)
        + struct.pack("<QQ", 1005, 1009)
        + struct.pack("<QQ", 1011, 1011)
        + struct.pack("<QB", 1004, 2)
        + struct.pack("<II", 0, 1344)
        + struct.pack("<II", 2688, 4032)
        + struct.pack("<QB", 1010, 1)
        + struct.pack("<II", 1344, 2688)
        + struct.pack("<BQQ", 2, 97, 98)  # the duplicates: pns received twice
    )
    assert wire.encode_ack(ACK_FULL) == seal(6, cid, ack_body)
    plain_body = struct.pack("<IQQIQIBBB", 4, 1000, 1003, 4 << 20, 99, 250, 0, 0, 0)
    assert wire.encode_ack(ACK_PLAIN) == seal(6, cid, plain_body)
    assert wire.encode_probe(cid, 10, 4) == seal(7, cid, struct.pack("<QI", 10, 4))
    padded_probe = seal(7, cid, struct.pack("<QI", 11, 4) + bytes(300 - 24))
    assert wire.encode_probe(cid, 11, 4, pad_to=300) == padded_probe
    assert len(padded_probe) == 300
    assert wire.encode_mtu_ack(MTU_ACK) == seal(10, cid, struct.pack("<IQH", 4, 11, 1392))
    assert wire.encode_close(cid, 4) == seal(8, cid, struct.pack("<I", 4))
    assert wire.encode_refuse(REFUSE_FENCED) == seal(9, cid, struct.pack("<QIB", 0, 4, 1))


def test_the_largest_ack_fits_the_base_datagram() -> None:
    """32 ranges, fragment entries filling the listener's fragment room, and 8
    duplicates: an ACK no larger than 1,200 bytes, sealed (pmtu.BASE; the
    encrypted layer adds channel.OVERHEAD)."""
    from purelink.protocol import receiver  # noqa: PLC0415

    ranges = tuple((2000 + 4 * i, 2001 + 4 * i) for i in range(receiver.MAX_ACK_RANGES))
    frags = []
    room = receiver.FRAGMENT_ROOM
    seq = 1004
    while room >= 9 + 8:
        n = min(receiver.MAX_FRAGMENT_SPANS, (room - 9) // 8)
        frags.append((seq, tuple((100 * j, 100 * j + 50) for j in range(n))))
        room -= 9 + 8 * n
        seq += 1
    dups = tuple(range(10, 10 + receiver.MAX_ACK_DUPLICATES))
    ack = Ack(0xDEADBEEF, 4, 1000, 1003, 1 << 20, 99, 250, ranges, tuple(frags), dups)
    assert len(wire.encode_ack(ack)) + OVERHEAD <= BASE


def test_constants() -> None:
    assert (wire.VERSION, wire.DATAGRAM_VERSION) == (1, 2)  # batches 1, datagrams 2
    assert (wire.DATAGRAM_MAGIC, wire.BATCH_MAGIC) == (b"PL", b"PB")
    assert wire.PROBE_SIZE == 8 + 12 + 4
    assert (wire.BATCH_HEADER, wire.HEADER) == (44, 8)
    assert wire.DATA_OVERHEAD == 8 + 8 + 4
    assert wire.FRAGMENT_OVERHEAD == 8 + 28 + 4
    assert list(range(1, 11)) == [
        MsgType.HELLO,
        MsgType.RETRY,
        MsgType.ACCEPT,
        MsgType.DATA,
        MsgType.FRAGMENT,
        MsgType.ACK,
        MsgType.PROBE,
        MsgType.CLOSE,
        MsgType.REFUSE,
        MsgType.MTU_ACK,
    ]
    assert RefuseReason.NAMES == {
        1: "fenced",
        2: "unknown",
        3: "bad_stream",
        4: "limit",
        5: "bad_request",
        6: "forbidden (the key may not use this stream)",
        7: "key revoked",
        8: "unknown key id",
        9: "wrong secret",
        10: "expired key",
        11: "max_links",
        12: "max_streams",
        13: "store_error",
        14: "bad_producer",
        15: "bad_datagram_size",
        16: "disk_full",
        17: "stream_failed",
    }
    assert set(RefuseReason.MEANINGS) <= set(RefuseReason.NAMES.values())


# ------------------------------------------- whole, byte by byte, with junk
@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_byte_by_byte(name: str) -> None:
    """No proper prefix of a valid datagram decodes."""
    datagram = samples()[name]
    for n in range(len(datagram)):
        reason = reason_of(datagram[:n])
        if n < 12:
            assert reason == "truncated", n
        else:
            assert reason == "bad_checksum", n
    wire.decode_datagram(datagram)  # and the whole one does


@pytest.mark.parametrize("name", SAMPLE_NAMES)
@pytest.mark.parametrize(
    "junk",
    [b"\x00", b"\x00" * 4, b"\xff" * 3, b"\x00" * 16, b"PL\x01\x07", None],
    ids=["zero", "zeros4", "ones3", "zeros16", "magic", "itself"],
)
def test_trailing_junk(name: str, junk: bytes | None) -> None:
    """The CRC covers the whole datagram: nothing may follow it."""
    datagram = samples()[name]
    tail = datagram if junk is None else junk
    reason = reason_of(datagram + tail)
    assert reason == "bad_checksum"


@pytest.mark.parametrize("name", [n for n in SAMPLE_NAMES if not n.startswith("fragment")])
def test_crc_residue_extension_is_caught_by_the_body_decoders(name: str) -> None:
    """Any CRC has a fixed residue: a datagram followed by these 4 bytes passes
    the CRC again.  Exact body lengths (and DATA's zero padding) still refuse
    it.  A FRAGMENT's chunk runs to the trailer, so only the encrypted layer
    protects it against this; docs/wire.md says so."""
    extended = samples()[name] + CRC_RESIDUE
    assert reason_of(extended) == "malformed"


SHORT_SAMPLES = [n for n in SAMPLE_NAMES if len(samples()[n]) <= 600]


@pytest.mark.parametrize("name", SHORT_SAMPLES)
def test_every_bit_flip_is_rejected(name: str) -> None:
    """Exhaustively, for every sample up to 600 bytes (the long ones are the
    same code with more bytes; test_every_bit_flip_of_a_large_data_datagram)."""
    datagram = samples()[name]
    for i in range(8 * len(datagram)):
        flipped = bytearray(datagram)
        flipped[i // 8] ^= 1 << (i % 8)
        reason = reason_of(bytes(flipped))
        if i // 8 < 2:
            assert reason == "bad_magic", i
        elif i // 8 == 2:
            assert reason == "bad_version", i
        elif i == 3 * 8 + 7:
            assert reason == "unauthenticated", i  # the high type bit: no mode sends it
        else:
            assert reason == "bad_checksum", i


def test_every_bit_flip_of_a_large_data_datagram() -> None:
    datagram = wire.encode_data(1, 2, wire.encode_large_batch(3, 4, 5, bytes(1300)))
    for i in range(8 * 4, 8 * len(datagram)):
        flipped = bytearray(datagram)
        flipped[i // 8] ^= 1 << (i % 8)
        assert reason_of(bytes(flipped)) in {"bad_checksum", "unauthenticated"}, i


# ------------------------------------------------- the old MAC flag
@pytest.mark.parametrize("name", SAMPLE_NAMES)
@pytest.mark.parametrize("mac", [0, 16], ids=["bare", "with-16-bytes"])
def test_the_old_mac_flag_is_refused(name: str, mac: int) -> None:
    """A type with its high bit set (once: "a MAC follows") is refused as
    `unauthenticated`, with or without the 16 bytes that MAC took."""
    body = bytearray(strip(samples()[name]))
    body[3] |= 0x80
    assert reason_of(reseal(bytes(body)) + bytes(mac)) == "unauthenticated"


def test_a_short_datagram_with_the_old_mac_flag() -> None:
    datagram = b"PL\x02\x87" + bytes(4) + bytes(4) + bytes(15)
    assert reason_of(datagram) == "unauthenticated"


# --------------------------------------------------- header-level reasons
@pytest.mark.parametrize("magic", [b"PB", b"pl", b"\x00\x00", b"LP"])
def test_wrong_magic(magic: bytes) -> None:
    datagram = samples()["probe"]
    assert reason_of(magic + datagram[2:]) == "bad_magic"
    assert reason_of(reseal(magic + strip(datagram)[2:])) == "bad_magic"


@pytest.mark.parametrize("version", [0, 1, 3, 0x82, 255])  # 1: the format before pieces
def test_wrong_version(version: int) -> None:
    body = strip(samples()["probe"])
    edited = body[:2] + bytes([version]) + body[3:]
    assert reason_of(reseal(edited)) == "bad_version"
    assert reason_of(edited + bytes(20)) == "bad_version"  # checked before the CRC


@pytest.mark.parametrize("kind", [0, 11, 12, 0x40, 0x7F])
def test_unknown_type(kind: int) -> None:
    datagram = seal(kind, 1, struct.pack("<QI", 1, 1))
    assert reason_of(datagram) == "unknown_type"
    # an unknown type is only reported once the trailer checks out
    broken = bytearray(datagram)
    broken[10] ^= 1
    assert reason_of(bytes(broken)) in {"bad_checksum", "unauthenticated"}


# ------------------------------------------------------ body-level reasons
def _body(name: str) -> bytes:
    return strip(samples()[name])[8:]


def _with_body(name: str, body: bytes) -> bytes:
    return reseal(strip(samples()[name])[:8] + body)


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_body_one_byte_short_or_long(name: str) -> None:
    """Every body, re-sealed one byte shorter or longer, is refused -- except
    where the body has no declared size: a FRAGMENT's chunk runs to the
    trailer (so a shorter or longer chunk is a different, valid fragment) and
    DATA and PROBE padding may be any number of zero bytes."""
    body = _body(name)
    shorter, longer = _with_body(name, body[:-1]), _with_body(name, body + b"\0")
    if name.startswith("fragment"):
        msg = wire.decode_datagram(shorter)
        assert isinstance(msg, Fragment)
        assert bytes(msg.chunk) == body[28:-1]
        if name == "fragment_last":  # the chunk ends at `total`: one more byte is past it
            assert reason_of(longer) == "malformed"
        return
    if name in {"probe", "probe_padded"}:
        if name == "probe":
            assert reason_of(shorter) == "malformed"
        else:
            assert wire.decode_datagram(shorter) == Probe(0xDEADBEEF, 11, 4, len(body) - 13)
        assert wire.decode_datagram(longer) == Probe(
            0xDEADBEEF, 10 + (name != "probe"), 4, len(body) - 11
        )
        assert reason_of(_with_body(name, body + b"\1")) == "malformed"
        return
    if name == "data_padded":
        assert wire.decode_datagram(shorter) == wire.decode_datagram(longer)
        assert reason_of(_with_body(name, body + b"\1")) == "malformed"
        return
    assert reason_of(shorter) in {"malformed", "truncated"}
    if name.startswith("data"):
        assert wire.decode_datagram(longer) is not None  # one zero byte of padding
        assert reason_of(_with_body(name, body + b"\1")) == "malformed"
    else:
        assert reason_of(longer) == "malformed"


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_body_empty(name: str) -> None:
    reason = reason_of(_with_body(name, b""))
    assert reason == ("truncated" if name.startswith("data") else "malformed")


def _hello_body(stream: bytes, producer: bytes, cookie: bytes, lens: tuple[int, ...] = ()) -> bytes:
    n = lens or (len(stream), len(producer), len(cookie))
    return struct.pack("<QQIHBBB", 1, 0, 0, 1400, *n) + stream + producer + cookie


@pytest.mark.parametrize(
    "body",
    [
        _hello_body(b"\xff", b"", b""),  # not UTF-8
        _hello_body(b"ok", b"\xc3", b""),  # cut UTF-8
        _hello_body(b"ok", b"\xed\xa0\x80", b""),  # a surrogate
        _hello_body(b"ok", b"p", b"c", (3, 1, 1)),  # lengths past the body
        _hello_body(b"ok", b"p", b"c", (1, 1, 1)),  # lengths short of the body
        _hello_body(b"ok", b"p", b"c")[:24],  # shorter than the fixed part
    ],
)
def test_hello_malformed(body: bytes) -> None:
    assert reason_of(_with_body("hello", body)) == "malformed"


def test_hello_names_too_long_to_encode() -> None:
    with pytest.raises(ValueError, match="255"):
        wire.encode_hello(Hello(1, "s" * 256, "", 0, 1400, b""))
    with pytest.raises(ValueError, match="255"):
        wire.encode_hello(Hello(1, "s", "é" * 128, 0, 1400, b""))
    with pytest.raises(ValueError, match="255"):
        wire.encode_hello(Hello(1, "s", "", 0, 1400, bytes(256)))


@pytest.mark.parametrize(
    "body",
    [
        struct.pack("<QB", 1, 5) + b"abcd",
        struct.pack("<QB", 1, 3) + b"abcd",
        struct.pack("<Q", 1),
    ],
)
def test_retry_malformed(body: bytes) -> None:
    assert reason_of(_with_body("retry", body)) == "malformed"


def test_accept_received_below_stored() -> None:
    body = struct.pack("<QQIQQII", 1, 2, 3, 10, 9, 0, 0)
    assert reason_of(_with_body("accept", body)) == "malformed"


def _ack_body(
    stored: int,
    received: int,
    ranges: list[tuple[int, int]] = (),  # type: ignore[assignment]
    frags: list[tuple[int, list[tuple[int, int]]]] = (),  # type: ignore[assignment]
    counts: tuple[int, int] | None = None,
) -> bytes:
    n_ranges, n_frags = counts or (len(ranges), len(frags))
    out = struct.pack("<IQQIQIBB", 1, stored, received, 0, 0, 0, n_ranges, n_frags)
    out += b"".join(struct.pack("<QQ", a, b) for a, b in ranges)
    for seq, spans in frags:
        out += struct.pack("<QB", seq, len(spans))
        out += b"".join(struct.pack("<II", a, b) for a, b in spans)
    return out


@pytest.mark.parametrize(
    "body",
    [
        _ack_body(10, 9),  # received below stored
        _ack_body(1, 5, [(6, 8)]),  # a range must start above received + 1 (a gap)
        _ack_body(1, 5, [(5, 8)]),  # ... and above received
        _ack_body(1, 5, [(9, 8)]),  # first > last
        _ack_body(1, 5, [], [(7, [(10, 10)])]),  # empty byte range
        _ack_body(1, 5, [], [(7, [(10, 4)])]),  # backwards byte range
        _ack_body(1, 5, [(7, 8)], counts=(2, 0)),  # more ranges announced than sent
        _ack_body(1, 5, [], [(7, [(0, 4)])], counts=(0, 2)),
        _ack_body(1, 5, [(7, 8)], counts=(0, 0)),  # trailing bytes
        _ack_body(1, 5)[:-1],
    ],
)
def test_ack_malformed(body: bytes) -> None:
    assert reason_of(_with_body("ack", body)) == "malformed"


@pytest.mark.parametrize(
    "head",
    [
        struct.pack("<QIQII", 1, 1, 0, 10, 0),  # seq 0
        struct.pack("<QIQII", 1, 1, 5, 10, 8),  # offset + len(chunk) > total
        struct.pack("<QIQII", 1, 1, 5, 2, 0),  # total below the chunk
        struct.pack("<QIQII", 1, 1, 5, 2**32 - 1, 2**32 - 2),
        struct.pack("<QIQII", 1, 1, 5, 43, 0),  # total below a batch header
    ],
)
def test_fragment_malformed(head: bytes) -> None:
    assert reason_of(_with_body("fragment", head + b"abc")) == "malformed"


def test_fragment_without_a_chunk() -> None:
    assert reason_of(_with_body("fragment", struct.pack("<QIQII", 1, 1, 5, 10, 0))) == "malformed"


def test_fragment_chunk_may_end_exactly_at_total() -> None:
    body = struct.pack("<QIQII", 1, 1, 5, 44, 41) + b"abc"
    msg = wire.decode_datagram(_with_body("fragment", body))
    assert isinstance(msg, Fragment)
    assert (msg.offset, msg.total, bytes(msg.chunk)) == (41, 44, b"abc")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (struct.pack("<Q", 1) + SMALL_BATCH[:43], "truncated"),
        (struct.pack("<Q", 1) + SMALL_BATCH[:-1], "malformed"),  # batch length past the end
        (struct.pack("<Q", 1) + _batch_edit(SMALL_BATCH, 16, "<I", 43), "malformed"),
        (struct.pack("<Q", 1) + _batch_edit(SMALL_BATCH, 16, "<I", 0), "malformed"),
    ],
)
def test_data_malformed(body: bytes, reason: str) -> None:
    assert reason_of(_with_body("data", body)) == reason


def test_data_does_not_verify_its_batch() -> None:
    """decode_datagram only frames the batch; the listener calls verify_batch."""
    broken = bytearray(SMALL_BATCH)
    broken[-1] ^= 1
    msg = wire.decode_datagram(wire.encode_data(1, 2, bytes(broken)))
    assert isinstance(msg, Data)
    with pytest.raises(ProtocolError) as info:
        wire.verify_batch(msg.batch)
    assert info.value.reason == "bad_checksum"


@pytest.mark.parametrize(("name", "size"), [("mtu_ack", 14), ("close", 4), ("refuse", 13)])
def test_fixed_bodies(name: str, size: int) -> None:
    assert len(_body(name)) == size
    for n in (0, size - 1, size + 1, size + 8):
        assert reason_of(_with_body(name, bytes(n))) == "malformed"


def test_probe_body() -> None:
    """A PROBE body is 12 bytes, then only zeros (any number of them)."""
    for n in range(12):
        assert reason_of(_with_body("probe", bytes(n))) == "malformed"
    head = struct.pack("<QI", 1, 2)
    assert wire.decode_datagram(_with_body("probe", head + bytes(5))) == Probe(0xDEADBEEF, 1, 2, 5)
    for junk in (b"\1", bytes(9) + b"\x80", b"\xff" * 4):
        assert reason_of(_with_body("probe", head + junk)) == "malformed"


def test_refuse_with_an_unknown_reason_decodes() -> None:
    """Unknown refuse reasons are passed up (the sender treats them as a refusal)."""
    msg = wire.decode_datagram(wire.encode_refuse(Refuse(1, 2, 3, 200)))
    assert msg == Refuse(1, 2, 3, 200)


def test_hello_and_retry_ignore_the_conn_id() -> None:
    body = strip(wire.encode_hello(HELLO))
    edited = body[:4] + struct.pack("<I", 77) + body[8:]
    assert wire.decode_datagram(reseal(edited)) == HELLO


def test_protocol_error_reason_attribute() -> None:
    with pytest.raises(ProtocolError) as info:
        wire.decode_datagram(b"")
    assert info.value.reason == "truncated"
    assert str(info.value).startswith("truncated")
    assert {reason_of(b"x" * n) for n in range(12)} == {"truncated"}
    assert reason_of(b"x" * 12) == "bad_magic"
    # the reasons decode_datagram documents are the ones listed here
    doc = (wire.decode_datagram.__doc__ or "").split("reason one of:")[1]
    assert {w.strip(" .\n") for w in doc.split(",")} == DATAGRAM_REASONS


def test_examples_in_docs() -> None:
    """The hex examples of docs/wire.md, and its CRC-32C check value."""
    assert crc32c(b"123456789") == 0xE3069283
    assert wire.encode_probe(1, 2, 3).hex(" ") == (
        "50 4c 02 07 01 00 00 00 02 00 00 00 00 00 00 00 03 00 00 00 a0 7a a5 a9"
    )
    assert wire.encode_batch(5, 1, 1, [b"hi", b""]).hex(" ") == (
        "00 00 00 00 00 00 00 00 04 a1 2a f5 50 42 01 00 32 00 00 00 02 00 00 00 "
        "05 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 01 00 00 00 02 00 00 00 68 69"
    )
    assert crc32c(b"any bytes" + struct.pack("<I", crc32c(b"any bytes"))) == 0x48674BC7
    assert struct.unpack("<I", CRC_RESIDUE) == (0x48674BC7,)
    assert len(wire.encode_retry(Retry(1, bytes(20)))) == 41
    assert len(wire.encode_hello(Hello(1, "", "", 0, 1400, b""))) == 37


@pytest.mark.parametrize("records", [[b""], SMALL_RECORDS, [b"x" * 65535, b"y"]])
def test_encode_batch_of_joined_records_is_encode_batch(records: list[bytes]) -> None:
    lengths = array("H", map(len, records))
    joined = b"".join(records)
    batch = wire.encode_batch_of(11, 3, 17, len(records), lengths, joined)
    assert batch == wire.encode_batch(11, 3, 17, records)
    assert wire.encode_batch_of(11, 3, 17, len(records), lengths.tobytes(), joined) == batch
