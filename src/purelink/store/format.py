"""Bytes on disk: file names, the batch scanner, and the two small side files.

The store format *is* the wire batch format (`purelink.protocol.wire`): a
segment file is nothing but whole batches back to back, each stamped by the
listener with the stream position of its first record.  This module adds no
framing of its own around them; it only knows how to walk them.

`scan_batches` is the one loop that walks a segment, shared by writer
recovery and by readers, so that both judge a batch by the same rules:

* a batch is *whole* when its 44-byte header and its declared length fit in
  the bytes we look at;
* it is *valid* when magic, version, flags and the length table check out
  (`wire.verify_batch`, CRC-32C included) and its position is exactly the
  one that follows its predecessor (the position is outside the CRC, so
  contiguity is what protects it).

A scan stops at the first batch that is not whole (`INCOMPLETE`: a torn or
still-being-written tail) or not valid (`CORRUPT`).  Whether a corrupt batch
is a torn tail or damage in the middle of the log is told by
`has_valid_successor` (damage followed by a good batch that continues the
positions is in the middle: readers refuse to read past it) and measured by
`valid_after` (how many batches past the damage still pass their CRC: what
the writer's recovery throws away when it cuts there, and says so).

Side files, each protected by its own CRC-32C so a torn write is recognised
and ignored:

* ``epochs`` -- one 16-byte record per epoch handed to a named producer;
* ``<base>.sum`` -- a snapshot of the producers' state written when a segment
  is closed, so reopening a long stream reads one small file instead of the
  headers of every closed segment.  It is an optimisation only: when missing
  or bad, recovery scans headers instead.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final

from purelink.errors import ProtocolError
from purelink.protocol.wire import (
    BATCH_HEADER,
    BATCH_MAGIC,
    VERSION,
    BatchHeader,
    decode_batch_header,
    verify_batch,
)

from .._crc32c import crc32c

__all__ = [
    "CHUNK",
    "CORRUPT",
    "EPOCHS_FILE",
    "EPOCH_RECORD",
    "INCOMPLETE",
    "LOCK_FILE",
    "SEGMENT_SUFFIX",
    "STREAMS_DIR",
    "SUMMARY_SUFFIX",
    "ProducerState",
    "Salvage",
    "ScanState",
    "Summary",
    "decode_epochs",
    "decode_summary",
    "encode_epoch",
    "encode_summary",
    "has_valid_successor",
    "parse_segment_name",
    "scan_batches",
    "segment_name",
    "valid_after",
]

LOCK_FILE: Final = "purelink.lock"
STREAMS_DIR: Final = "streams"
EPOCHS_FILE: Final = "epochs"
SEGMENT_SUFFIX: Final = ".seg"
SUMMARY_SUFFIX: Final = ".sum"
_BASE_DIGITS: Final = 20

CHUNK: Final = 1 << 20
"""Bytes read per pread while scanning: big enough that syscalls do not matter."""

INCOMPLETE: Final = "incomplete"
CORRUPT: Final = "corrupt"

# magic, version, (flags skipped), length -- read at offset 12 to size up a batch
_PEEK = struct.Struct("<2sBxI")
_COUNT = struct.Struct("<I")  # at offset 20


@dataclass(slots=True)
class ProducerState:
    """What the log knows of one producer on its stream."""

    epoch: int
    """Highest epoch seen for this producer (from its batches and the epochs file)."""
    last_seq: int
    """Last seq of this producer written in the log (0 if none)."""
    owner: int = field(default=0, compare=False)
    """The link instance the highest epoch was handed to (from the epochs file;
    0 when unknown).  A reconnecting session of an older epoch is fenced, unless
    it is that very instance (whose ACCEPT was lost)."""


def segment_name(base: int) -> str:
    """File name of the segment whose first record is at position `base`."""
    return f"{base:0{_BASE_DIGITS}d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """The base position encoded in a segment file name, or None if it is not one."""
    stem = name[: -len(SEGMENT_SUFFIX)]
    if (
        len(name) != _BASE_DIGITS + len(SEGMENT_SUFFIX)
        or not name.endswith(SEGMENT_SUFFIX)
        or not stem.isascii()
        or not stem.isdigit()
    ):
        return None
    base = int(stem)
    return base if base >= 1 else None


# ------------------------------------------------------------------ scanning


@dataclass(slots=True)
class ScanState:
    """Where a scan is; `scan_batches` moves it past each batch it yields."""

    offset: int
    """File offset of the next batch."""
    position: int
    """Stream position the next batch must carry."""
    problem: str | None = None
    """Why the scan stopped before its end: INCOMPLETE, CORRUPT, or None."""
    detail: str = ""
    """A few words on the problem, for logs and errors."""


def scan_batches(
    fd: int, state: ScanState, end: int, *, verify: bool = True, chunk: int = CHUNK
) -> Iterator[tuple[int, memoryview, BatchHeader]]:
    """Yield (offset, bytes, header) of each whole, valid batch in fd from
    state.offset up to byte `end`.

    `state` is advanced past each batch *before* it is yielded, so a consumer
    that stops early still knows how far the good bytes go.  At the first
    problem the scan records it in `state` and ends.  With verify=False only
    headers and positions are checked (no CRC), for closed segments whose
    content was checked when they were the active one.
    """
    buf = b""
    view = memoryview(buf)
    base = state.offset  # file offset of buf[0]
    peek = _PEEK.unpack_from
    check = verify_batch if verify else decode_batch_header
    while state.offset < end:
        offset = state.offset
        at = offset - base
        if len(buf) - at < BATCH_HEADER:
            buf = os.pread(fd, min(chunk, end - offset), offset)
            view, base, at = memoryview(buf), offset, 0
            if len(buf) < BATCH_HEADER:
                _stop(state, INCOMPLETE, f"{len(buf)} bytes where a batch header should be")
                return
        magic, version, length = peek(buf, at + 12)
        if magic != BATCH_MAGIC or version != VERSION or length < BATCH_HEADER:
            _stop(state, CORRUPT, "not a batch header (magic, version or length)")
            return
        if offset + length > end:
            _stop(state, INCOMPLETE, f"batch of {length} bytes runs past byte {end}")
            return
        if len(buf) - at < length:
            buf = os.pread(fd, min(max(chunk, length), end - offset), offset)
            view, base, at = memoryview(buf), offset, 0
            if len(buf) < length:  # the file shrank under us
                _stop(state, INCOMPLETE, "file ends inside the batch")
                return
        batch = view[at : at + length]
        try:
            header = check(batch)
        except ProtocolError as exc:
            _stop(state, CORRUPT, str(exc))
            return
        if header.position != state.position:
            _stop(state, CORRUPT, f"position {header.position}, expected {state.position}")
            return
        state.offset = offset + length
        state.position += header.count
        yield offset, batch, header


def _stop(state: ScanState, problem: str, detail: str) -> None:
    state.problem = problem
    state.detail = detail


def has_valid_successor(fd: int, offset: int, end: int, position: int) -> bool:
    """After a corrupt batch at `offset` that should have held `position`: is
    there a whole, checksummed batch right after it that continues the
    positions?  If so the damage is in the middle of the log, not a torn tail."""
    head = os.pread(fd, BATCH_HEADER, offset)
    if len(head) < BATCH_HEADER:
        return False
    magic, version, length = _PEEK.unpack_from(head, 12)
    if magic != BATCH_MAGIC or version != VERSION or length < BATCH_HEADER:
        return False
    (count,) = _COUNT.unpack_from(head, 20)
    after = ScanState(offset + length, position + count)
    return any(True for _ in scan_batches(fd, after, end, chunk=BATCH_HEADER))


@dataclass(frozen=True, slots=True)
class Salvage:
    """Batches found past a damaged batch that still pass their own checks."""

    batches: int = 0
    """How many."""
    records: int = 0
    """Records in them."""
    first_position: int = 0
    """Lowest position stamped on them (0 if none); stamps are outside the CRC."""
    last_position: int = 0
    """Highest position stamped on their records (0 if none)."""


def valid_after(fd: int, offset: int, end: int) -> Salvage:
    """Batches between byte `offset` + 1 and `end` that pass `verify_batch`
    (CRC included), found as a resynchronising reader would: by looking for
    the batch magic at every byte, since the damaged batch's own length may
    be what is damaged.  A batch found is skipped whole, so batches carried
    inside a good batch's payload are not counted.  Positions are not
    checked.  This reads the rest of the file: it is for the rare damaged
    segment only."""
    batches = records = 0
    low = high = 0
    base, buf = offset, b""
    at = offset + 13  # the first magic that belongs to a batch starting past offset
    while at + 2 <= end:
        if at + 2 > base + len(buf):
            base, buf = at, os.pread(fd, min(CHUNK, end - at), at)
            if len(buf) < 2:
                break
        j = buf.find(BATCH_MAGIC, at - base)
        if j == -1:
            at = base + len(buf) - 1  # a magic may straddle the window's end
            base, buf = at, b""
            continue
        start = base + j - 12
        header = _verified_at(fd, start, end)
        if header is None:
            at = base + j + 1
            continue
        batches += 1
        records += header.count
        low = header.position if not low else min(low, header.position)
        high = max(high, header.position + header.count - 1)
        at = start + header.length + 12
    return Salvage(batches, records, low, high)


def _verified_at(fd: int, start: int, end: int) -> BatchHeader | None:
    head = os.pread(fd, BATCH_HEADER, start)
    if len(head) < BATCH_HEADER:
        return None
    magic, version, length = _PEEK.unpack_from(head, 12)
    if magic != BATCH_MAGIC or version != VERSION or length < BATCH_HEADER:
        return None
    if start + length > end:
        return None
    try:
        return verify_batch(os.pread(fd, length, start))
    except ProtocolError:
        return None


# ------------------------------------------------------------------ epochs file
# record: u64 producer, u32 epoch, u64 owner (the link instance it was handed to),
# u32 crc32c of the 20 bytes before it
_EPOCH = struct.Struct("<QIQ")
_CRC = struct.Struct("<I")
EPOCH_RECORD: Final = _EPOCH.size + _CRC.size  # 24


def encode_epoch(producer: int, epoch: int, owner: int = 0) -> bytes:
    """One epochs-file record."""
    body = _EPOCH.pack(producer, epoch, owner)
    return body + _CRC.pack(crc32c(body))


def decode_epochs(data: bytes) -> tuple[dict[int, int], int, int, dict[int, int]]:
    """(highest epoch per producer, bytes of whole valid records, records, the owner
    of each producer's highest epoch) of an epochs file; reading stops at the
    first torn or bad record."""
    epochs: dict[int, int] = {}
    owners: dict[int, int] = {}
    valid = 0
    records = 0
    for at in range(0, len(data) - EPOCH_RECORD + 1, EPOCH_RECORD):
        body = data[at : at + _EPOCH.size]
        (crc,) = _CRC.unpack_from(data, at + _EPOCH.size)
        if crc32c(body) != crc:
            break
        producer, epoch, owner = _EPOCH.unpack(body)
        if epoch > epochs.get(producer, 0):
            epochs[producer] = epoch
            owners[producer] = owner
        valid = at + EPOCH_RECORD
        records += 1
    return epochs, valid, records, owners


# ------------------------------------------------------------------ segment summary
# head: 4s "PSUM", u8 version, 3 pad, u64 base, u64 size, u64 next_position, u32 count
# then count x (u64 producer, u32 epoch, u64 last_seq), then u32 crc32c of all before it
_SUM_MAGIC: Final = b"PSUM"
_SUM_HEAD = struct.Struct("<4sB3xQQQI")
_SUM_ITEM = struct.Struct("<QIQ")


@dataclass(frozen=True, slots=True)
class Summary:
    """The producers' state as of the end of a closed segment."""

    base: int
    """The segment's base position."""
    size: int
    """The segment's size in bytes when it was closed."""
    next_position: int
    """The position after the segment's last record."""
    producers: tuple[tuple[int, int, int], ...]
    """(producer, epoch, last_seq) of every producer known at that point."""


def encode_summary(
    base: int, size: int, next_position: int, producers: Iterable[tuple[int, int, int]]
) -> bytes:
    """A summary file's bytes."""
    items = [_SUM_ITEM.pack(p, e, s) for p, e, s in producers]
    body = b"".join((_SUM_HEAD.pack(_SUM_MAGIC, 1, base, size, next_position, len(items)), *items))
    return body + _CRC.pack(crc32c(body))


def decode_summary(data: bytes) -> Summary | None:
    """A summary, or None when the bytes are not a whole, checksummed one."""
    if len(data) < _SUM_HEAD.size + _CRC.size:
        return None
    magic, version, base, size, next_position, count = _SUM_HEAD.unpack_from(data)
    end = _SUM_HEAD.size + count * _SUM_ITEM.size
    if magic != _SUM_MAGIC or version != 1 or len(data) != end + _CRC.size:
        return None
    if crc32c(memoryview(data)[:end]) != _CRC.unpack_from(data, end)[0]:
        return None
    producers = tuple(_SUM_ITEM.iter_unpack(memoryview(data)[_SUM_HEAD.size : end]))
    return Summary(base, size, next_position, producers)
