"""Batches: the unit the listener stores, and the store's own format.

A batch carries a run of records of one producer.  The listener stores the
bytes of a batch exactly as they arrived and only stamps its first 8 bytes
with the stream position, which is why the batch CRC starts after them
(Kafka leaves its base offset out the same way).  Layout in docs/wire.md;
wire.py wraps batches in datagrams and re-exports every name here.

Every decoder returns a value or raises `ProtocolError`; the per-record work
is in C (`array`, `b"".join`, `crc32c`, a cached `struct.Struct` per layout).
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence
from typing import Final, NamedTuple

from .._crc32c import crc32c
from ..errors import ProtocolError

__all__ = [
    "BATCH_HEADER",
    "BATCH_MAGIC",
    "BATCH_TAIL",
    "FLAG_LARGE",
    "LITTLE_ENDIAN",
    "MAX_SMALL_RECORD",
    "VERSION",
    "BatchHeader",
    "batch_records",
    "decode_batch_header",
    "encode_batch",
    "encode_batch_of",
    "encode_large_batch",
    "position_bytes",
    "verify_batch",
]

VERSION: Final = 1
BATCH_MAGIC: Final = b"PB"
FLAG_LARGE: Final = 0x01
_U32 = struct.Struct("<I")

# ---------------------------------------------------------------- batches
#  0 u64 position   stamped by the listener, 0 on the wire, not under the CRC
#  8 u32 crc32c     of bytes [12:length]
# 12 2s  magic "PB"
# 14 u8  version
# 15 u8  flags      FLAG_LARGE: one record, no length table
# 16 u32 length     of the whole batch
# 20 u32 count      records in the batch
# 24 u64 producer   producer id
# 32 u64 first_seq  seq of the first record
# 40 u32 epoch      session generation of the producer
# 44 u16[count] lengths (absent with FLAG_LARGE), then the payloads back to back
_BATCH = struct.Struct("<QI2sBBIIQQI")
BATCH_HEADER: Final = _BATCH.size  # 44
BATCH_TAIL: Final = struct.Struct("<2sBBIIQQI")
"""The batch header from offset 12 (what the batch CRC covers of it)."""
_POS = struct.Struct("<Q")
_HEAD = struct.Struct("<QI")
_U32 = struct.Struct("<I")
MAX_SMALL_RECORD: Final = 0xFFFF
LITTLE_ENDIAN: Final = sys.byteorder == "little"  # array("H") is native-endian


class BatchHeader(NamedTuple):
    """The decoded fixed part of a batch.  (A NamedTuple, not a dataclass: one
    is made per datagram on the listener's hot path, and a tuple is built in C.)"""

    position: int
    """Stream position of the first record (0 until the listener stamps it)."""
    crc: int
    """CRC-32C of bytes 12..length."""
    flags: int
    """FLAG_LARGE or 0."""
    length: int
    """Total bytes of the batch, header included."""
    count: int  # type: ignore[assignment]  # shadows tuple.count, on purpose
    """Number of records."""
    producer: int
    """Producer id."""
    first_seq: int
    """Seq of the first record on its link."""
    epoch: int
    """The producer's session generation."""

    @property
    def last_seq(self) -> int:
        """Seq of the last record."""
        return self.first_seq + self.count - 1


def encode_batch(
    producer: int,
    epoch: int,
    first_seq: int,
    records: Sequence[bytes],
    lengths: bytes | array[int] | None = None,
) -> bytes:
    """Encode records (each at most 65,535 bytes) as one batch, position 0.

    `lengths`, if given, is the length table already made (an array("H") of the
    records' lengths, as the link keeps them): it saves a len() call per record.
    """
    count = len(records)
    if not count:
        raise ValueError("a batch holds at least one record")
    if lengths is None:
        lengths = array("H", map(len, records))
    if not LITTLE_ENDIAN:  # pragma: no cover - arrays are native, the wire is little-endian
        lengths = array("H", lengths)
        lengths.byteswap()
    return encode_batch_of(producer, epoch, first_seq, count, lengths, b"".join(records))


def encode_batch_of(
    producer: int,
    epoch: int,
    first_seq: int,
    count: int,
    lengths: bytes | array[int],
    payload: bytes,
) -> bytes:
    """`encode_batch` of records already joined into `payload`, with their length
    table `lengths` (little-endian u16s, or a native array("H") on a
    little-endian machine): the link joins the records anyway to count them."""
    length = BATCH_HEADER + 2 * count + len(payload)
    tail = BATCH_TAIL.pack(BATCH_MAGIC, VERSION, 0, length, count, producer, first_seq, epoch)
    crc = crc32c(payload, crc32c(lengths, crc32c(tail)))
    return b"".join((_HEAD.pack(0, crc), tail, lengths, payload))


def encode_large_batch(producer: int, epoch: int, seq: int, record: bytes) -> bytes:
    """Encode one record of any size as a batch without a length table."""
    length = BATCH_HEADER + len(record)
    tail = BATCH_TAIL.pack(BATCH_MAGIC, VERSION, FLAG_LARGE, length, 1, producer, seq, epoch)
    crc = crc32c(record, crc32c(tail))
    return b"".join((_POS.pack(0), _U32.pack(crc), tail, record))


def decode_batch_header(buf: bytes | bytearray | memoryview) -> BatchHeader:
    """Decode and sanity-check the fixed header of the batch at the start of buf.

    Does not check the CRC (see `verify_batch`); does check magic, version,
    flags and that the declared length and count are self-consistent.
    """
    if len(buf) < BATCH_HEADER:
        raise ProtocolError("truncated", "batch header")
    pos, crc, magic, version, flags, length, count, producer, first_seq, epoch = _BATCH.unpack_from(
        buf
    )
    if magic != BATCH_MAGIC:
        raise ProtocolError("bad_magic", "batch")
    if version != VERSION:
        raise ProtocolError("bad_version", f"batch version {version}")
    if flags & ~FLAG_LARGE:
        raise ProtocolError("malformed", "unknown batch flags")
    if flags & FLAG_LARGE:
        if count != 1:
            raise ProtocolError("malformed", "large batch must hold one record")
        if length < BATCH_HEADER:
            raise ProtocolError("malformed", "batch length")
    else:
        if count == 0:
            raise ProtocolError("malformed", "empty batch")
        if length < BATCH_HEADER + 2 * count:
            raise ProtocolError("malformed", "batch length")
    if first_seq == 0 or first_seq + count - 1 > 0xFFFF_FFFF_FFFF_FFFF:
        raise ProtocolError("malformed", "batch seq")
    return BatchHeader(pos, crc, flags, length, count, producer, first_seq, epoch)


def verify_batch(buf: bytes | bytearray | memoryview) -> BatchHeader:
    """Decode the header of a batch that fills buf exactly and check its CRC
    and its length table; raise ProtocolError if anything is off."""
    header = decode_batch_header(buf)
    view = memoryview(buf)
    if header.length != len(view):
        raise ProtocolError("malformed", "batch length does not match its container")
    if crc32c(view[12:]) != header.crc:
        raise ProtocolError("bad_checksum", "batch")
    if not header.flags & FLAG_LARGE:
        table_end = BATCH_HEADER + 2 * header.count
        lengths = array("H")
        lengths.frombytes(view[BATCH_HEADER:table_end])
        if not LITTLE_ENDIAN:  # pragma: no cover - the table is little-endian on the wire
            lengths.byteswap()
        if lengths.itemsize != 2:  # pragma: no cover - every platform we run on
            raise ProtocolError("malformed", "u16 is not 2 bytes here")
        if sum(lengths) != header.length - table_end:
            raise ProtocolError("malformed", "batch lengths do not add up")
    return header


_LAYOUTS: dict[bytes, struct.Struct] = {}
_LAYOUT_CACHE: Final = 4096  # layouts kept (cleared when full)
_LAYOUT_MAX_COUNT: Final = 512  # batches of more records are sliced one by one


def batch_records(buf: bytes | bytearray | memoryview, header: BatchHeader) -> list[bytes]:
    """The records of a verified batch, as bytes."""
    view = memoryview(buf)
    if header.flags & FLAG_LARGE:
        return [bytes(view[BATCH_HEADER : header.length])]
    table_end = BATCH_HEADER + 2 * header.count
    lengths = array("H")
    lengths.frombytes(view[BATCH_HEADER:table_end])
    if not LITTLE_ENDIAN:  # pragma: no cover - the table is little-endian on the wire
        lengths.byteswap()
    # One struct per layout ("61s61s..."), cached by the table's bytes: batches of
    # one producer tend to repeat their layout, and then all the records of a
    # batch come out of one C call.
    if header.count <= _LAYOUT_MAX_COUNT:
        table = bytes(view[BATCH_HEADER:table_end])
        layout = _LAYOUTS.get(table)
        if layout is None:
            if len(_LAYOUTS) >= _LAYOUT_CACHE:
                _LAYOUTS.clear()
            layout = _LAYOUTS[table] = struct.Struct("".join(f"{n}s" for n in lengths))
        return list(layout.unpack_from(view, table_end))
    data = bytes(view[table_end : header.length])  # a batch of very many (tiny) records
    out: list[bytes] = []
    append = out.append
    offset = 0
    for n in lengths:
        append(data[offset : offset + n])
        offset += n
    return out


def position_bytes(position: int) -> bytes:
    """The 8 bytes that replace a batch's first 8 when it is stored at `position`."""
    return _POS.pack(position)
