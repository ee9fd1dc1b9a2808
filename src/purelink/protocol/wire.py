"""Bytes on the wire and on disk: pure encode/decode functions.

Two layers, both little-endian, both written down in docs/wire.md (the
batch layer's code is in batch.py, the message values in messages.py; their
names are re-exported here):

* a **batch** carries a run of records of one producer.  It is the unit the
  listener stores: the store format *is* the wire batch format, and the
  listener only stamps the first 8 bytes (the stream position), which is why
  the batch CRC starts after them (Kafka leaves its base offset out the same
  way).
* a **datagram** wraps one message (a handshake, a batch, a piece of a batch
  larger than one datagram, an answer) in a magic, a version, a type, the
  connection id and a trailing CRC-32C over everything before it (the
  encrypted mode seals whole datagrams a layer below: channel.py).  A type
  with its high bit set is refused as `unauthenticated`: no mode sends one.
  Datagrams are version 2
  (`DATAGRAM_VERSION`): a FRAGMENT carries a piece of a batch, not of a bare
  record; batches (and so the store) are still version 1 (`VERSION`).

Every decoder either returns a value or raises `ProtocolError` with a short
reason that the listener uses as a drop counter's name; nothing else escapes.
The hot paths (`encode_batch`, `encode_data`, `decode_datagram`) do their
per-record work in C-level calls: `array`, `b"".join`, `crc32c`.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable, Sequence
from typing import Final

from .._crc32c import crc32c
from ..errors import ProtocolError
from .batch import (
    BATCH_HEADER,
    BATCH_MAGIC,
    BATCH_TAIL,
    FLAG_LARGE,
    LITTLE_ENDIAN,
    MAX_SMALL_RECORD,
    VERSION,
    BatchHeader,
    batch_records,
    decode_batch_header,
    encode_batch,
    encode_batch_of,
    encode_large_batch,
    position_bytes,
    verify_batch,
)
from .messages import (
    Accept,
    Ack,
    Close,
    Data,
    Fragment,
    Hello,
    Message,
    MsgType,
    MtuAck,
    Probe,
    Refuse,
    RefuseReason,
    Retry,
)

__all__ = [
    "BATCH_HEADER",
    "BATCH_MAGIC",
    "DATAGRAM_MAGIC",
    "DATAGRAM_VERSION",
    "DATA_OVERHEAD",
    "FLAG_LARGE",
    "FRAGMENT_OVERHEAD",
    "LITTLE_ENDIAN",
    "MAX_SMALL_RECORD",
    "PROBE_SIZE",
    "VERSION",
    "Accept",
    "Ack",
    "BatchHeader",
    "Close",
    "Data",
    "Fragment",
    "Hello",
    "MsgType",
    "MtuAck",
    "Probe",
    "Refuse",
    "RefuseReason",
    "Retry",
    "accept_datagram",
    "batch_records",
    "decode_batch_header",
    "decode_datagram",
    "encode_accept",
    "encode_ack",
    "encode_batch",
    "encode_batch_of",
    "encode_close",
    "encode_data",
    "encode_data_batch",
    "encode_fragment",
    "encode_hello",
    "encode_large_batch",
    "encode_mtu_ack",
    "encode_pieces",
    "encode_probe",
    "encode_refuse",
    "encode_retry",
    "plain_ack_datagram",
    "position_bytes",
    "reseal",
    "reseal_data",
    "verify_batch",
]

DATAGRAM_MAGIC: Final = b"PL"
DATAGRAM_VERSION: Final = 2
_U32 = struct.Struct("<I")
_HIGH_BIT: Final = 0x80  # a type with it set is refused (see the module header)

# -------------------------------------------------------------- datagrams
# header: 2s magic "PL", u8 version, u8 type, u32 conn_id
# trailer: u32 crc32c of everything before it
_HDR = struct.Struct("<2sBBI")
HEADER: Final = _HDR.size  # 8
_TRAILER: Final = 4


_HELLO = struct.Struct("<QQIHBBB")
_RETRY = struct.Struct("<QB")
_ACCEPT = struct.Struct("<QQIQQII")
_PN = struct.Struct("<Q")
_FRAG = struct.Struct("<QIQII")
_ACK = struct.Struct("<IQQIQIBB")
_RANGE = struct.Struct("<QQ")
_U8 = struct.Struct("<B")
_FRAG_HEAD = struct.Struct("<QB")
_BYTE_RANGE = struct.Struct("<II")
_PROBE = struct.Struct("<QI")
_CLOSE = struct.Struct("<I")
_REFUSE = struct.Struct("<QIB")
_MTU_ACK = struct.Struct("<IQH")

DATA_OVERHEAD: Final = HEADER + _PN.size + _TRAILER  # bytes around a batch in a DATA datagram
_DATA_HEAD = struct.Struct("<2sBBIQQI")  # datagram header, pn, batch position and CRC
_ZEROS: Final = bytes(65536)
FRAGMENT_OVERHEAD: Final = HEADER + _FRAG.size + _TRAILER  # bytes around a piece of a batch
PROBE_SIZE: Final = HEADER + _PROBE.size + _TRAILER  # an unpadded PROBE (24 bytes)
_FRAG_DATAGRAM = struct.Struct("<2sBBIQIQII")  # datagram header and fragment head
# whole datagrams less their CRC, for the answers a listener makes per session: an
# ACCEPT, and an ACK that holds no ranges, fragments or duplicates (most ACKs)
_ACCEPT_DATAGRAM = struct.Struct("<2sBBIQQIQQII")
_PLAIN_ACK_DATAGRAM = struct.Struct("<2sBBIIQQIQIBBB")


def _seal(kind: int, conn_id: int, parts: Sequence[bytes]) -> bytes:
    body = b"".join((_HDR.pack(DATAGRAM_MAGIC, DATAGRAM_VERSION, kind, conn_id), *parts))
    return body + _U32.pack(crc32c(body))


def _name(text: str) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > 255:
        raise ValueError("name longer than 255 bytes")
    return raw


def encode_hello(msg: Hello) -> bytes:
    """HELLO: u64 nonce, u64 producer_id, u32 epoch, u16 max_datagram, u8 stream_len,
    u8 producer_len, u8 cookie_len, then the three byte strings."""
    stream, producer = _name(msg.stream), _name(msg.producer)
    if len(msg.cookie) > 255:
        raise ValueError("cookie longer than 255 bytes")
    head = _HELLO.pack(
        msg.nonce,
        msg.producer_id,
        msg.epoch,
        msg.max_datagram,
        len(stream),
        len(producer),
        len(msg.cookie),
    )
    return _seal(MsgType.HELLO, 0, (head, stream, producer, msg.cookie))


def encode_retry(msg: Retry) -> bytes:
    """RETRY: u64 nonce, u8 cookie_len, cookie."""
    return _seal(MsgType.RETRY, 0, (_RETRY.pack(msg.nonce, len(msg.cookie)), msg.cookie))


def encode_accept(msg: Accept) -> bytes:
    """ACCEPT: u64 nonce, u64 producer, u32 epoch, u64 stored, u64 received,
    u32 window, u32 max_record."""
    return accept_datagram(
        msg.conn_id,
        msg.nonce,
        msg.producer,
        msg.epoch,
        msg.stored,
        msg.received,
        msg.window,
        msg.max_record,
    )


def accept_datagram(
    conn_id: int,
    nonce: int,
    producer: int,
    epoch: int,
    stored: int,
    received: int,
    window: int,
    max_record: int,
) -> bytes:
    """`encode_accept` of an `Accept` of these fields, without making one: the
    listener answers every HELLO so (one pack and one CRC)."""
    body = _ACCEPT_DATAGRAM.pack(
        DATAGRAM_MAGIC, DATAGRAM_VERSION, MsgType.ACCEPT, conn_id,
        nonce, producer, epoch, stored, received, window, max_record,
    )  # fmt: skip
    return body + _U32.pack(crc32c(body))


def encode_data(conn_id: int, pn: int, batch: bytes, pad_to: int = 0) -> bytes:
    """DATA: u64 pn, the batch, then zero padding so that the whole datagram is
    `pad_to` bytes (UDP GSO wants equal-sized segments; the batch's own length
    field tells the receiver where the batch ends, and the decoder refuses
    padding that is not all zero)."""
    pad = pad_to - (DATA_OVERHEAD + len(batch))
    if pad > 0:
        return _seal(MsgType.DATA, conn_id, (_PN.pack(pn), batch, bytes(pad)))
    return _seal(MsgType.DATA, conn_id, (_PN.pack(pn), batch))


def encode_data_batch(
    conn_id: int,
    pn: int,
    producer: int,
    epoch: int,
    first_seq: int,
    records: Sequence[bytes],
    lengths: bytes | array[int] | None = None,
    pad_to: int = 0,
    payload: bytes | None = None,
) -> bytes:
    """A DATA datagram carrying `records` as one batch, built in one pass:
    the same bytes as encode_data(conn_id, pn, encode_batch(...), pad_to)
    with one join instead of two (the link's hot path).  `payload`, if given,
    is b"".join(records) already made."""
    count = len(records)
    if lengths is None:
        lengths = array("H", map(len, records))
    if not LITTLE_ENDIAN:  # pragma: no cover - arrays are native, the wire is little-endian
        lengths = array("H", lengths)
        lengths.byteswap()
    if payload is None:
        payload = b"".join(records)
    length = BATCH_HEADER + 2 * count + len(payload)
    tail = BATCH_TAIL.pack(BATCH_MAGIC, VERSION, 0, length, count, producer, first_seq, epoch)
    bcrc = crc32c(payload, crc32c(lengths, crc32c(tail)))
    head = _DATA_HEAD.pack(DATAGRAM_MAGIC, DATAGRAM_VERSION, MsgType.DATA, conn_id, pn, 0, bcrc)
    pad = pad_to - (DATA_OVERHEAD + length)
    if pad > 0:
        body = b"".join((head, tail, lengths, payload, _ZEROS[:pad]))
    else:
        body = b"".join((head, tail, lengths, payload))
    return body + _U32.pack(crc32c(body))


def reseal(datagram: bytes, pn: int) -> bytes:
    """The DATA, FRAGMENT or PROBE datagram `datagram` again under packet number
    `pn` (a retransmission): every one of them starts its body with the pn."""
    body = bytearray(memoryview(datagram)[: len(datagram) - _TRAILER])
    _PN.pack_into(body, HEADER, pn)
    return bytes(body) + _U32.pack(crc32c(body))


reseal_data = reseal  # the name of its first use


def encode_fragment(
    conn_id: int,
    pn: int,
    epoch: int,
    seq: int,
    total: int,
    offset: int,
    chunk: bytes | memoryview,
) -> bytes:
    """FRAGMENT: u64 pn, u32 epoch, u64 seq, u32 total, u32 offset, then the piece
    (bytes [offset, offset + len(chunk)) of the batch whose first seq is `seq`
    and whose length is `total`)."""
    head = _FRAG.pack(pn, epoch, seq, total, offset)
    return _seal(MsgType.FRAGMENT, conn_id, (head, bytes(chunk)))


def encode_pieces(
    conn_id: int,
    pn: int,
    epoch: int,
    seq: int,
    batch: bytes | memoryview,
    start: int,
    end: int,
    chunk: int,
    total: int | None = None,
    origin: int = 0,
) -> list[bytes]:
    """FRAGMENT datagrams of batch bytes [start, end), `chunk` bytes each (the
    last may be shorter), under packet numbers pn, pn + 1, ...: the same bytes
    as encode_fragment() of each piece, in one loop (the link's hot path).
    `batch` is the whole batch, or (with `total`, the batch's length) only its
    bytes from `origin` on: a piece being cut smaller."""
    kind = MsgType.FRAGMENT
    if total is None:
        total = len(batch)
    view = memoryview(batch)
    pack = _FRAG_DATAGRAM.pack
    crc_of = _U32.pack
    join = b"".join
    out: list[bytes] = []
    append = out.append
    at = start
    while at < end:
        stop = min(at + chunk, end)
        body = join(
            (
                pack(DATAGRAM_MAGIC, DATAGRAM_VERSION, kind, conn_id, pn, epoch, seq, total, at),
                view[at - origin : stop - origin],
            )
        )
        append(body + crc_of(crc32c(body)))
        pn += 1
        at = stop
    return out


def encode_ack(msg: Ack) -> bytes:
    """ACK: u32 epoch, u64 stored, u64 received, u32 window, u64 largest_pn,
    u32 ack_delay, u8 n_ranges, u8 n_fragments, n_ranges x (u64 first, u64 last),
    then per fragment entry: u64 seq, u8 n, n x (u32 start, u32 end); then u8
    n_duplicates, n_duplicates x u64 pn."""
    if not msg.ranges and not msg.fragments and not msg.duplicates:
        return plain_ack_datagram(
            msg.conn_id,
            msg.epoch,
            msg.stored,
            msg.received,
            msg.window,
            msg.largest_pn,
            msg.ack_delay,
        )
    parts = [
        _ACK.pack(
            msg.epoch,
            msg.stored,
            msg.received,
            msg.window,
            msg.largest_pn,
            min(msg.ack_delay, 0xFFFF_FFFF),
            len(msg.ranges),
            len(msg.fragments),
        )
    ]
    parts.extend(_RANGE.pack(a, b) for a, b in msg.ranges)
    for seq, spans in msg.fragments:
        parts.append(_FRAG_HEAD.pack(seq, len(spans)))
        parts.extend(_BYTE_RANGE.pack(a, b) for a, b in spans)
    parts.append(_U8.pack(len(msg.duplicates)))
    parts.extend(_PN.pack(pn) for pn in msg.duplicates)
    return _seal(MsgType.ACK, msg.conn_id, parts)


def plain_ack_datagram(
    conn_id: int,
    epoch: int,
    stored: int,
    received: int,
    window: int,
    largest_pn: int,
    ack_delay: int,
) -> bytes:
    """`encode_ack` of an `Ack` of these fields and no ranges, fragments or
    duplicates (what nearly every ACK holds), without making one: one pack
    and one CRC."""
    body = _PLAIN_ACK_DATAGRAM.pack(
        DATAGRAM_MAGIC, DATAGRAM_VERSION, MsgType.ACK, conn_id, epoch, stored, received,
        window, largest_pn, min(ack_delay, 0xFFFF_FFFF), 0, 0, 0,
    )  # fmt: skip
    return body + _U32.pack(crc32c(body))


def encode_probe(conn_id: int, pn: int, epoch: int, pad_to: int = 0) -> bytes:
    """PROBE: u64 pn, u32 epoch, then zero padding so that the whole datagram is
    `pad_to` bytes (a path MTU probe; none when `pad_to` is not above the
    unpadded size)."""
    pad = pad_to - PROBE_SIZE
    if pad > 0:
        return _seal(MsgType.PROBE, conn_id, (_PROBE.pack(pn, epoch), _ZEROS[:pad]))
    return _seal(MsgType.PROBE, conn_id, (_PROBE.pack(pn, epoch),))


def encode_mtu_ack(msg: MtuAck) -> bytes:
    """MTU_ACK: u32 epoch, u64 pn, u16 size."""
    return _seal(MsgType.MTU_ACK, msg.conn_id, (_MTU_ACK.pack(msg.epoch, msg.pn, msg.size),))


def encode_close(conn_id: int, epoch: int) -> bytes:
    """CLOSE: u32 epoch."""
    return _seal(MsgType.CLOSE, conn_id, (_CLOSE.pack(epoch),))


def encode_refuse(msg: Refuse) -> bytes:
    """REFUSE: u64 nonce, u32 epoch, u8 reason."""
    return _seal(MsgType.REFUSE, msg.conn_id, (_REFUSE.pack(msg.nonce, msg.epoch, msg.reason),))


def decode_datagram(data: bytes | bytearray | memoryview) -> Message:
    """Decode one datagram, checking magic, version and CRC.

    Raises ProtocolError(reason) with reason one of: truncated, bad_magic,
    bad_version, bad_checksum, unauthenticated, unknown_type, malformed.
    """
    view = memoryview(data)
    size = len(view)
    if size < HEADER + _TRAILER:
        raise ProtocolError("truncated", "datagram shorter than its header")
    magic, version, kind, conn_id = _HDR.unpack_from(view)
    if magic != DATAGRAM_MAGIC:
        raise ProtocolError("bad_magic", "datagram")
    if version != DATAGRAM_VERSION:
        raise ProtocolError("bad_version", f"datagram version {version}")
    if kind & _HIGH_BIT:
        raise ProtocolError("unauthenticated", f"type {kind}: no mode sends a flagged type")
    body_end = size - _TRAILER
    (crc,) = _U32.unpack_from(view, body_end)
    if crc32c(view[:body_end]) != crc:
        raise ProtocolError("bad_checksum", "datagram")
    body = view[HEADER:body_end]
    try:
        decoder = _DECODERS[kind]
    except KeyError:
        raise ProtocolError("unknown_type", f"type {kind}") from None
    try:
        return decoder(conn_id, body)
    except struct.error as exc:
        raise ProtocolError("malformed", str(exc)) from None
    except UnicodeDecodeError:
        raise ProtocolError("malformed", "name is not UTF-8") from None


def _exact(body: memoryview, size: int) -> None:
    if len(body) != size:
        raise ProtocolError("malformed", f"body is {len(body)} bytes, expected {size}")


def _d_hello(conn_id: int, body: memoryview) -> Hello:
    nonce, producer_id, epoch, max_datagram, n_stream, n_producer, n_cookie = _HELLO.unpack_from(
        body
    )
    at = _HELLO.size
    _exact(body, at + n_stream + n_producer + n_cookie)
    stream = str(body[at : at + n_stream], "utf-8")
    at += n_stream
    producer = str(body[at : at + n_producer], "utf-8")
    at += n_producer
    return Hello(
        nonce, stream, producer, producer_id, max_datagram, bytes(body[at : at + n_cookie]), epoch
    )


def _d_retry(conn_id: int, body: memoryview) -> Retry:
    nonce, n_cookie = _RETRY.unpack_from(body)
    _exact(body, _RETRY.size + n_cookie)
    return Retry(nonce, bytes(body[_RETRY.size :]))


def _d_accept(conn_id: int, body: memoryview) -> Accept:
    _exact(body, _ACCEPT.size)
    nonce, producer, epoch, stored, received, window, max_record = _ACCEPT.unpack_from(body)
    if received < stored:
        raise ProtocolError("malformed", "received below stored")
    return Accept(conn_id, nonce, producer, epoch, stored, received, window, max_record)


def _d_data(conn_id: int, body: memoryview) -> Data:
    if len(body) < _PN.size + BATCH_HEADER:
        raise ProtocolError("truncated", "data")
    (pn,) = _PN.unpack_from(body)
    (length,) = _U32.unpack_from(body, _PN.size + 16)
    end = _PN.size + length
    if length < BATCH_HEADER or end > len(body):
        raise ProtocolError("malformed", "batch length past the datagram")
    if end < len(body):
        pad = body[end:]
        if bytes(pad) != bytes(len(pad)):
            raise ProtocolError("malformed", "padding is not zero")
    return Data(conn_id, pn, body[_PN.size : end])


def _d_fragment(conn_id: int, body: memoryview) -> Fragment:
    pn, epoch, seq, total, offset = _FRAG.unpack_from(body)
    chunk = body[_FRAG.size :]
    if seq == 0 or not chunk or offset + len(chunk) > total or total < BATCH_HEADER:
        raise ProtocolError("malformed", "fragment bounds")
    return Fragment(conn_id, pn, epoch, seq, total, offset, chunk)


def _d_ack(conn_id: int, body: memoryview) -> Ack:
    epoch, stored, received, window, largest_pn, delay, n_ranges, n_frags = _ACK.unpack_from(body)
    if received < stored:
        raise ProtocolError("malformed", "received below stored")
    at = _ACK.size
    ranges = []
    for _ in range(n_ranges):
        a, b = _RANGE.unpack_from(body, at)
        at += _RANGE.size
        if not received + 1 < a <= b:
            raise ProtocolError("malformed", "ack range")
        ranges.append((a, b))
    fragments = []
    for _ in range(n_frags):
        seq, n = _FRAG_HEAD.unpack_from(body, at)
        at += _FRAG_HEAD.size
        spans = []
        for _ in range(n):
            a, b = _BYTE_RANGE.unpack_from(body, at)
            at += _BYTE_RANGE.size
            if a >= b:
                raise ProtocolError("malformed", "fragment range")
            spans.append((a, b))
        fragments.append((seq, tuple(spans)))
    (n_dups,) = _U8.unpack_from(body, at)
    at += _U8.size
    dups = struct.unpack_from(f"<{n_dups}Q", body, at)
    at += 8 * n_dups
    _exact(body, at)
    return Ack(
        conn_id, epoch, stored, received, window, largest_pn, delay, tuple(ranges),
        tuple(fragments), dups,
    )  # fmt: skip


def _d_probe(conn_id: int, body: memoryview) -> Probe:
    pn, epoch = _PROBE.unpack_from(body)
    padding = len(body) - _PROBE.size
    if padding and bytes(body[_PROBE.size :]) != _ZEROS[:padding]:
        raise ProtocolError("malformed", "padding is not zero")
    return Probe(conn_id, pn, epoch, padding)


def _d_mtu_ack(conn_id: int, body: memoryview) -> MtuAck:
    _exact(body, _MTU_ACK.size)
    epoch, pn, size = _MTU_ACK.unpack_from(body)
    return MtuAck(conn_id, epoch, pn, size)


def _d_close(conn_id: int, body: memoryview) -> Close:
    _exact(body, _CLOSE.size)
    (epoch,) = _CLOSE.unpack_from(body)
    return Close(conn_id, epoch)


def _d_refuse(conn_id: int, body: memoryview) -> Refuse:
    _exact(body, _REFUSE.size)
    nonce, epoch, reason = _REFUSE.unpack_from(body)
    return Refuse(conn_id, nonce, epoch, reason)


_DECODERS: Final[dict[int, Callable[[int, memoryview], Message]]] = {
    MsgType.HELLO: _d_hello,
    MsgType.RETRY: _d_retry,
    MsgType.ACCEPT: _d_accept,
    MsgType.DATA: _d_data,
    MsgType.FRAGMENT: _d_fragment,
    MsgType.ACK: _d_ack,
    MsgType.PROBE: _d_probe,
    MsgType.CLOSE: _d_close,
    MsgType.REFUSE: _d_refuse,
    MsgType.MTU_ACK: _d_mtu_ack,
}
