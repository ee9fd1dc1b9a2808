"""Hypothesis over the wire format (after h11's fuzz/afl-server.py).

The invariant everywhere: a decoder returns a value or raises `ProtocolError`
with a known `.reason` -- never struct.error, IndexError, UnicodeDecodeError,
ValueError, OverflowError or anything else.  Four sources of input:

(a) arbitrary bytes (also behind a valid magic and version, and sealed with a
    correct CRC so that they reach the body decoders);
(b) valid datagrams mutated: bit flips, truncation, extension, splices;
(c) valid datagrams whose header and body are mutated and then *re-sealed*
    (the CRC recomputed), so the fuzz gets past the
    checksum to the body decoders.  Whatever decodes must re-encode to the
    very same bytes: the format is canonical;
(d) batches: arbitrary, mutated and re-checksummed; a batch that verifies has
    exactly `count` records whose lengths add up to its payload.

Every valid message also round-trips through its encoder and decoder.
Example counts are kept small so that the whole file runs in a few seconds;
raise them with HYPOTHESIS_PROFILE=wire-long for a longer hunt.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable

from crc32c import crc32c
from hypothesis import assume, event, given
from hypothesis import strategies as st

from helpers.wire import (  # the reasons the decoders may give
    BATCH_REASONS,
    DATAGRAM_REASONS,
    FAST,
    batches,
    datagrams,
    mutated,
    records,
    seq64,
    u8,
    u16,
    u32,
    u64,
)
from purelink.errors import ProtocolError
from purelink.protocol import wire
from purelink.protocol.wire import (
    Accept,
    Ack,
    Close,
    Data,
    Fragment,
    Hello,
    MtuAck,
    Probe,
    Refuse,
    Retry,
)


# ----------------------------------------------------------------- helpers
def decode_or_reason(data: bytes) -> wire.Message | str:
    """decode_datagram's value, or its ProtocolError's reason (asserted known).
    Any other exception fails the test, which is the point."""
    try:
        return wire.decode_datagram(data)
    except ProtocolError as exc:
        assert exc.reason in DATAGRAM_REASONS, exc.reason
        return exc.reason


def verify_or_reason(data: bytes) -> wire.BatchHeader | str:
    try:
        header = wire.verify_batch(data)
    except ProtocolError as exc:
        assert exc.reason in BATCH_REASONS, exc.reason
        return exc.reason
    check_records(data, header)
    return header


def header_or_reason(data: bytes) -> wire.BatchHeader | str:
    try:
        return wire.decode_batch_header(data)
    except ProtocolError as exc:
        assert exc.reason in BATCH_REASONS, exc.reason
        return exc.reason


def check_records(data: bytes, header: wire.BatchHeader) -> None:
    """(d): a verified batch holds `count` records that fill its payload exactly."""
    recs = wire.batch_records(data, header)
    assert len(recs) == header.count
    table = 0 if header.flags & wire.FLAG_LARGE else 2 * header.count
    assert sum(map(len, recs)) == header.length - wire.BATCH_HEADER - table
    assert header.length == len(data)
    assert header.first_seq >= 1
    assert header.last_seq <= 0xFFFF_FFFF_FFFF_FFFF
    # the format is canonical: the same records re-encode to the same bytes
    if header.flags & wire.FLAG_LARGE:
        again = wire.encode_large_batch(header.producer, header.epoch, header.first_seq, recs[0])
    else:
        again = wire.encode_batch(header.producer, header.epoch, header.first_seq, recs)
    assert again[8:] == bytes(data[8:])


def seal(header_and_body: bytes) -> bytes:
    """Give edited header+body bytes a correct trailer (the CRC), exactly as
    docs/wire.md says a sender builds it (a type with its high bit set is
    left as it is: the decoder refuses it)."""
    return header_and_body + struct.pack("<I", crc32c(header_and_body))


def strip(datagram: bytes) -> bytes:
    return datagram[: len(datagram) - 4]


def reencode(msg: wire.Message, size: int) -> bytes:
    """Encode a decoded message again (DATA padded back to `size`)."""
    encoders: dict[type, Callable[[], bytes]] = {
        Hello: lambda: wire.encode_hello(msg),  # type: ignore[arg-type]
        Retry: lambda: wire.encode_retry(msg),  # type: ignore[arg-type]
        Accept: lambda: wire.encode_accept(msg),  # type: ignore[arg-type]
        Ack: lambda: wire.encode_ack(msg),  # type: ignore[arg-type]
        Refuse: lambda: wire.encode_refuse(msg),  # type: ignore[arg-type]
    }
    if isinstance(msg, Data):
        return wire.encode_data(msg.conn_id, msg.pn, bytes(msg.batch), pad_to=size)
    if isinstance(msg, Fragment):
        return wire.encode_fragment(
            msg.conn_id, msg.pn, msg.epoch, msg.seq, msg.total, msg.offset, msg.chunk
        )
    if isinstance(msg, Probe):
        return wire.encode_probe(msg.conn_id, msg.pn, msg.epoch, pad_to=size)
    if isinstance(msg, MtuAck):
        return wire.encode_mtu_ack(msg)
    if isinstance(msg, Close):
        return wire.encode_close(msg.conn_id, msg.epoch)
    return encoders[type(msg)]()


def check_canonical(data: bytes, msg: wire.Message) -> None:
    """What decodes re-encodes to something that decodes equal -- and, the
    format being canonical, to the very same bytes (HELLO and RETRY aside:
    their conn_id field is ignored on decoding and written as 0)."""
    again = reencode(msg, len(data))
    assert wire.decode_datagram(again) == msg
    if isinstance(msg, Hello | Retry) and data[4:8] != bytes(4):
        assert again[:4] == data[:4]
        assert strip(again)[8:] == strip(data)[8:]
    else:
        assert again == data


def assert_same(decoded: object, expected: object) -> None:
    assert decoded == expected, (decoded, expected)


# ------------------------------------------------------------ round trips
@FAST
@given(st.data())
def test_every_message_round_trips(data: st.DataObject) -> None:
    datagram, expected = data.draw(datagrams())
    decoded = wire.decode_datagram(datagram)
    assert_same(decoded, expected)
    check_canonical(datagram, decoded)
    if isinstance(decoded, Data):
        check_records(bytes(decoded.batch), wire.verify_batch(decoded.batch))


@FAST
@given(batches(), u64)
def test_every_batch_round_trips(batch: bytes, position: int) -> None:
    header = wire.verify_batch(batch)
    assert header == wire.decode_batch_header(batch)
    assert header.position == 0
    check_records(batch, header)
    stamped = wire.position_bytes(position) + batch[8:]
    assert wire.verify_batch(stamped).position == position
    assert wire.batch_records(stamped, header) == wire.batch_records(batch, header)


@FAST
@given(records, u64, u32, seq64)
def test_encode_batch_round_trips_records(
    recs: list[bytes], producer: int, epoch: int, s: int
) -> None:
    assume(s + len(recs) - 1 <= 0xFFFF_FFFF_FFFF_FFFF)
    batch = wire.encode_batch(producer, epoch, s, recs)
    header = wire.verify_batch(batch)
    assert (header.producer, header.epoch, header.first_seq, header.count) == (
        producer,
        epoch,
        s,
        len(recs),
    )
    assert wire.batch_records(batch, header) == recs


@FAST
@given(batches(), u32, u64, st.integers(0, 70_000))
def test_data_padding_is_exact(batch: bytes, conn_id: int, pn: int, pad_to: int) -> None:
    datagram = wire.encode_data(conn_id, pn, batch, pad_to)
    natural = wire.DATA_OVERHEAD + len(batch)
    assert len(datagram) == max(pad_to, natural)
    msg = wire.decode_datagram(datagram)
    assert isinstance(msg, Data)
    assert bytes(msg.batch) == batch
    assert (msg.conn_id, msg.pn) == (conn_id, pn)


@FAST
@given(records, u32, u64, u64, u32, seq64, st.integers(0, 5000), st.booleans(), u64)
def test_one_pass_data_encoding(
    recs: list[bytes],
    conn_id: int,
    pn: int,
    producer: int,
    epoch: int,
    first: int,
    pad_to: int,
    with_table: bool,
    new_pn: int,
) -> None:
    """encode_data_batch == encode_data(encode_batch(...)); reseal_data changes
    nothing but the packet number (and so the trailer)."""
    assume(first + len(recs) - 1 <= 0xFFFF_FFFF_FFFF_FFFF)
    table = array("H", map(len, recs)) if with_table else None
    one = wire.encode_data_batch(conn_id, pn, producer, epoch, first, recs, table, pad_to)
    batch = wire.encode_batch(producer, epoch, first, recs)
    assert one == wire.encode_data(conn_id, pn, batch, pad_to)
    again = wire.reseal_data(one, new_pn)
    assert again == wire.encode_data(conn_id, new_pn, batch, pad_to)


# ------------------------------------------------------ (a) arbitrary bytes
@FAST
@given(st.binary(max_size=300))
def test_arbitrary_bytes(data: bytes) -> None:
    decode_or_reason(data)


@FAST
@given(st.binary(max_size=300))
def test_arbitrary_bytes_behind_magic_and_version(data: bytes) -> None:
    decode_or_reason(b"PL\x02" + data)


# mostly the known types, and bodies of the sizes the fixed-size messages have
any_type = st.one_of(st.integers(1, 9), st.integers(0, 0x7F))
any_body = st.one_of(
    st.binary(max_size=300),
    st.sampled_from([4, 12, 13, 38, 44, 52, 60]).flatmap(
        lambda n: st.binary(min_size=n, max_size=n)
    ),
)


@FAST
@given(any_type, u32, any_body)
def test_arbitrary_bodies_sealed(kind: int, conn_id: int, body: bytes) -> None:
    """Any type byte, any body, a correct trailer: straight into the body decoders."""
    data = seal(b"PL\x02" + bytes([kind]) + struct.pack("<I", conn_id) + body)
    result = decode_or_reason(data)
    event(result if isinstance(result, str) else type(result).__name__)
    assert result not in {"truncated", "bad_magic", "bad_version", "bad_checksum"} or (
        result == "truncated" and kind == wire.MsgType.DATA
    )
    assert result != "unauthenticated"
    if not isinstance(result, str):
        check_canonical(data, result)


@FAST
@given(st.binary(max_size=400))
def test_arbitrary_bytes_as_a_batch(data: bytes) -> None:
    verify_or_reason(data)
    header_or_reason(data)


@FAST
@given(st.binary(min_size=32, max_size=400), st.integers(1, 5000))
def test_arbitrary_batch_behind_magic(data: bytes, length: int) -> None:
    """Past the magic and version, with a plausible length, for both decoders."""
    raw = bytearray(data[:8] + bytes(4) + b"PB\x01" + data[8:])
    raw[15] &= 0x01  # known flags only, most of the time
    if len(raw) >= 20:
        raw[16:20] = struct.pack("<I", min(length, len(raw)))
    raw[8:12] = struct.pack("<I", crc32c(bytes(raw[12:])))
    verify_or_reason(bytes(raw))
    header_or_reason(bytes(raw))


@FAST
@given(st.data())
def test_mutated_datagrams(data: st.DataObject) -> None:
    original, bad, how = data.draw(mutated())
    assume(bad != original)
    result = decode_or_reason(bad)
    if how in {"flip", "truncate", "join"}:
        # a CRC-32C catches every single-bit error; a truncated or extended
        # datagram has its trailer in the wrong place
        assert isinstance(result, str), (how, result)
    if not isinstance(result, str):
        check_canonical(bad, result)


@FAST
@given(st.data(), st.sampled_from([0, 16]))
def test_the_old_mac_flag_is_refused(data: st.DataObject, mac: int) -> None:
    """A type with its high bit set (once: "a MAC follows") is refused as
    `unauthenticated`, with or without the 16 bytes that MAC took."""
    original, _ = data.draw(datagrams())
    head = bytearray(strip(original))
    head[3] |= 0x80
    flagged = seal(bytes(head)) + bytes(mac)
    assert decode_or_reason(flagged) == "unauthenticated"


# ---------------------------------------- (c) re-sealed body mutations
@st.composite
def resealed(draw: st.DrawFn) -> bytes:
    """A valid datagram with its type, conn_id and body edited, then given a
    correct CRC: the checksum no longer shields the body decoders."""
    original, _ = draw(datagrams())
    data = bytearray(strip(original))
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["flip", "byte", "word", "cut", "grow", "insert", "type"]))
        if how == "type":
            data[3] = draw(st.integers(0, 12))
            continue
        if how == "grow":
            data += draw(st.binary(min_size=1, max_size=32))
            continue
        if len(data) <= 8:
            continue
        at = draw(st.integers(4, len(data) - 1))  # conn_id and body (type: above)
        if how == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif how == "byte":
            data[at] = draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF, draw(u8)]))
        elif how == "word":
            # counts and lengths: a whole little-endian field set to an edge value
            width = draw(st.sampled_from([1, 2, 4, 8]))
            value = draw(st.sampled_from([0, 1, 2 ** (8 * width) - 1, 2 ** (8 * width - 1)]))
            data[at : at + width] = value.to_bytes(width, "little")[: len(data) - at]
        elif how == "cut":
            data = data[: draw(st.integers(8, len(data)))]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
    return seal(bytes(data))


@FAST
@given(st.data())
def test_resealed_mutations(data: st.DataObject) -> None:
    sealed = data.draw(resealed())
    result = decode_or_reason(sealed)
    event(result if isinstance(result, str) else type(result).__name__)
    if isinstance(result, str):
        assert result in {"malformed", "truncated", "unknown_type"}, result
        return
    check_canonical(sealed, result)
    if isinstance(result, Data):
        verify_or_reason(bytes(result.batch))  # the listener's next step


# ------------------------------------------------------- (d) batches
@st.composite
def mutated_batches(draw: st.DrawFn) -> bytes:
    batch = bytearray(draw(batches()))
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["flip", "word", "cut", "grow"]))
        if how == "cut":
            batch = batch[: draw(st.integers(0, len(batch)))]
        elif how == "grow":
            batch += draw(st.binary(min_size=1, max_size=16))
        elif len(batch) > 12:
            at = draw(st.integers(12, len(batch) - 1))
            if how == "flip":
                batch[at] ^= 1 << draw(st.integers(0, 7))
            else:
                width = draw(st.sampled_from([1, 2, 4, 8]))
                value = draw(st.sampled_from([0, 1, 2, 2 ** (8 * width) - 1, draw(u16)]))
                value &= 2 ** (8 * width) - 1
                batch[at : at + width] = value.to_bytes(width, "little")[: len(batch) - at]
    if draw(st.booleans()) and len(batch) >= 12:
        batch[8:12] = struct.pack("<I", crc32c(bytes(batch[12:])))  # re-checksummed
    return bytes(batch)


@FAST
@given(mutated_batches())
def test_mutated_batches(batch: bytes) -> None:
    verify_or_reason(batch)
    header = header_or_reason(batch)
    if not isinstance(header, str):
        assert header.length >= wire.BATCH_HEADER
        assert header.count >= 1


@FAST
@given(batches(), st.binary(min_size=1, max_size=64))
def test_batch_with_trailing_junk(batch: bytes, junk: bytes) -> None:
    assert verify_or_reason(batch + junk) == "malformed"
    assert header_or_reason(batch + junk) == wire.decode_batch_header(batch)


@FAST
@given(batches(), st.data())
def test_batch_truncated(batch: bytes, data: st.DataObject) -> None:
    n = data.draw(st.integers(0, len(batch) - 1))
    assert verify_or_reason(batch[:n]) in {"truncated", "malformed"}


# The listener's answers made in one pack (wire.accept_datagram, plain_ack_datagram:
# every short link gets an ACCEPT and an ACK so) against the layout of docs/wire.md,
# spelled out here field by field, and against the message-object encoders.
_DOC_HEADER = struct.Struct("<2sBBI")  # magic, version, type, conn_id
_DOC_ACCEPT = struct.Struct("<QQIQQII")  # nonce, producer, epoch, stored, received, window, max
_DOC_ACK = struct.Struct("<IQQIQIBB")  # epoch ... ack_delay, n_ranges, n_fragments


def _documented(kind: int, conn_id: int, body: bytes) -> bytes:
    sealed = _DOC_HEADER.pack(b"PL", 2, kind, conn_id) + body
    return sealed + struct.pack("<I", crc32c(sealed))


@given(u32, u64, u64, u32, u64, u32, u32, u32)
def test_accept_datagram_is_the_documented_accept(
    conn_id: int,
    nonce: int,
    producer: int,
    epoch: int,
    stored: int,
    ahead: int,
    window: int,
    max_record: int,
) -> None:
    received = min(stored + ahead, 0xFFFF_FFFF_FFFF_FFFF)  # never below stored
    fields = (nonce, producer, epoch, stored, received, window, max_record)
    made = wire.accept_datagram(conn_id, *fields)
    assert made == _documented(3, conn_id, _DOC_ACCEPT.pack(*fields))
    assert made == wire.encode_accept(Accept(conn_id, *fields))
    assert wire.decode_datagram(made) == Accept(conn_id, *fields)


@given(u32, u32, u64, u32, u32, u64, st.integers(0, 1 << 40))
def test_plain_ack_datagram_is_the_documented_ack(
    conn_id: int,
    epoch: int,
    stored: int,
    ahead: int,
    window: int,
    largest_pn: int,
    delay: int,
) -> None:
    received = min(stored + ahead, 0xFFFF_FFFF_FFFF_FFFF)  # never below stored
    made = wire.plain_ack_datagram(conn_id, epoch, stored, received, window, largest_pn, delay)
    clamped = min(delay, 0xFFFF_FFFF)
    body = _DOC_ACK.pack(epoch, stored, received, window, largest_pn, clamped, 0, 0) + b"\0"
    assert made == _documented(6, conn_id, body)  # no ranges, no fragments, no duplicates
    ack = Ack(conn_id, epoch, stored, received, window, largest_pn, delay, (), (), ())
    assert made == wire.encode_ack(ack)
    assert wire.decode_datagram(made) == Ack(
        conn_id, epoch, stored, received, window, largest_pn, clamped, (), (), ()
    )
