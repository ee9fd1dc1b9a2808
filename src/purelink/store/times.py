"""Stored times: when each batch was stored, kept in a file beside its segment.

Why a file of its own: a stored batch is the wire batch byte for byte, and the
one field outside its CRC (the 8-byte position) is taken, so a time in the
batch would change the CRC scheme or the link's wire.  Instead each segment
``<base>.seg`` has a *times file* ``<base>.times``: a run of 28-byte entries

    u64 position   the first record of a batch
    u64 offset     where that batch starts in the segment
    u64 ms         milliseconds since the Unix epoch (UTC)
    u32 crc32c     of the 24 bytes before it

An entry says: the batch at `position`, and every batch after it up to the
next entry, was stored at `ms`.  The writer adds one for each chunk of
batches it writes in a millisecond it has not stamped yet, and for the first
chunk of every segment, so a segment's times start at its base.  Times never
go backwards within a stream (a clock stepped back is held at the last time
stamped), so a segment's entries are sorted by time as well as position, and
"the first record stored at or after T" is found by two binary searches:
over the segments by the time of their first entry (one 28-byte pread each),
then among the entries of one segment (`seek_time`) -- never by reading the
records.

Crash rules.  An entry is written *before* the batches it stamps and is
fdatasynced before them (on `sync`, and at a roll), so a batch that is
durable always has its time durable.  On open, recovery keeps the entries
that pass their CRC and stamp batches that survived (`recover_times`) and
cuts the rest: a torn entry, or one whose batches were cut as a torn tail.
A segment without a times file (written before times were kept) reads
with no times (`None`); the writer starts one when it next appends to it.
"""

from __future__ import annotations

import contextlib
import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from purelink.errors import Error

from .._crc32c import crc32c
from .format import parse_segment_name
from .segment import fsync_dir

__all__ = [
    "TIMES_SUFFIX",
    "TIME_ENTRY",
    "SegmentTimes",
    "TimesWriter",
    "first_time",
    "last_ms",
    "last_time",
    "recover_times",
    "seek_time",
    "times_path",
]

TIMES_SUFFIX: Final = ".times"
_ENTRY = struct.Struct("<QQQ")
_CRC = struct.Struct("<I")
TIME_ENTRY: Final = _ENTRY.size + _CRC.size  # 28


def times_path(segment: Path) -> Path:
    """The times file of a segment file."""
    return segment.with_suffix(TIMES_SUFFIX)


def encode_entry(position: int, offset: int, ms: int) -> bytes:
    """One entry's bytes."""
    body = _ENTRY.pack(position, offset, ms)
    return body + _CRC.pack(crc32c(body))


class SegmentTimes:
    """The entries of one times file: parallel arrays, sorted by position and time."""

    __slots__ = ("ms", "offsets", "positions", "valid")

    def __init__(self) -> None:
        self.positions = array("Q")
        self.offsets = array("Q")
        self.ms = array("Q")
        self.valid = 0
        """Bytes of whole, checksummed entries read (a torn or bad one ends them)."""

    @classmethod
    def decode(cls, data: bytes) -> SegmentTimes:
        """The entries up to the first torn or bad one (or one out of order)."""
        times = cls()
        for at in range(0, len(data) - TIME_ENTRY + 1, TIME_ENTRY):
            body = data[at : at + _ENTRY.size]
            if crc32c(body) != _CRC.unpack_from(data, at + _ENTRY.size)[0]:
                break
            position, offset, ms = _ENTRY.unpack(body)
            if times.positions and (position <= times.positions[-1] or ms < times.ms[-1]):
                break
            times.positions.append(position)
            times.offsets.append(offset)
            times.ms.append(ms)
            times.valid = at + TIME_ENTRY
        return times

    @classmethod
    def load(cls, segment: Path) -> SegmentTimes:
        """The entries of a segment's times file (none if it has no such file)."""
        try:
            return cls.decode(times_path(segment).read_bytes())
        except FileNotFoundError:
            return cls()

    def at(self, position: int) -> float | None:
        """When the batch holding `position` was stored (Unix seconds), or None
        if the segment has no time for it."""
        i = bisect_right(self.positions, position) - 1
        return self.ms[i] / 1000 if i >= 0 else None


def first_time(segment: Path) -> tuple[int, int] | None:
    """(position, ms) of a segment's first time entry, or None: one pread."""
    try:
        with open(times_path(segment), "rb") as f:
            times = SegmentTimes.decode(f.read(TIME_ENTRY))
    except FileNotFoundError:
        return None
    return (times.positions[0], times.ms[0]) if times.positions else None


def last_time(segments: Sequence[Path]) -> float | None:
    """When the newest of these segments' batches was stored (Unix seconds)."""
    for segment in reversed(segments):
        times = SegmentTimes.load(segment)
        if times.ms:
            return times.ms[-1] / 1000
    return None


def seek_time(stream: str, segments: Sequence[tuple[int, Path]], ms: int, end: int) -> int:
    """The position of the first record stored at or after `ms`, among
    `segments` ((base, path), oldest first) of which `end` is the position
    after the last record; `end` when nothing is that recent.

    Raises purelink.Error when that record follows records stored without a
    time (by a purelink that kept none): which of them are recent enough
    cannot be told."""
    firsts: dict[int, tuple[int, int] | None] = {}

    def first(i: int) -> tuple[int, int] | None:
        if i not in firsts:
            base, path = segments[i]
            found = first_time(path)
            if found is None and not path.exists():  # retention removed it meanwhile:
                found = (base, -1)  # older than any time, not a segment without times
            firsts[i] = found
        return firsts[i]

    lo, hi = 0, len(segments)  # k = segments whose first time is before ms (untimed count)
    while lo < hi:
        mid = (lo + hi) // 2
        found = first(mid)
        if found is None or found[1] < ms:
            lo = mid + 1
        else:
            hi = mid
    k = lo
    if k > 0:
        times = SegmentTimes.load(segments[k - 1][1])
        i = bisect_left(times.ms, ms)  # >= 1: the segment's first time is before ms
        if i < len(times.ms):
            return int(times.positions[i])
    if k == len(segments):
        if segments and first(k - 1) is None:  # the newest records have no time
            raise _untimed(stream, end, ms)
        return end
    found = first(k)
    assert found is not None  # the search put k where the first time is >= ms
    untimed_head = found[0] > segments[k][0]
    if untimed_head or (k > 0 and first(k - 1) is None):
        raise _untimed(stream, found[0], ms)
    return found[0]


def _untimed(stream: str, position: int, ms: int) -> Error:
    return Error(
        f"stream {stream!r}: records before position {position} were stored without a time "
        f"(by a purelink that kept none), so which of them were stored at or after "
        f"{ms / 1000:.3f} (Unix time) cannot be told; read them by position (start=/--from)"
    )


class TimesWriter:
    """The writer's side of the active segment's times file.

    `stamp` belongs to the appending thread; `sync` may run on any thread
    (under the log's lock, as the segment's fdatasync does)."""

    __slots__ = ("_dirty", "_fresh", "fd", "last_ms", "path", "size")

    def __init__(self, fd: int, path: Path, size: int, last_ms: int) -> None:
        self.fd = fd
        """The open file (read-write)."""
        self.path = path
        """The file."""
        self.size = size
        """Bytes of whole entries: where the next one goes."""
        self.last_ms = last_ms
        """The last time stamped on the stream (times never go back)."""
        self._fresh = size == 0  # the segment's first chunk must get an entry
        self._dirty = False

    @classmethod
    def open(cls, segment: Path, size: int, last_ms: int, *, new: bool = False) -> TimesWriter:
        """Open the times file of `segment`, `size` bytes of it kept; `new`: of a
        segment about to be created (the file is created or emptied; the
        segment's creation makes the name durable)."""
        path = times_path(segment)
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | (os.O_TRUNC if new else 0)
        fd = os.open(path, flags, 0o644)
        return cls(fd, path, size, last_ms)

    def stamp(self, position: int, offset: int, now: float) -> int:
        """Before the chunk of batches starting at `position`/`offset` is written:
        add an entry when the time (ms) is new or the segment has none yet.
        Returns the size before (to `cut` back to if the chunk's write fails).
        Raises OSError."""
        before = self.size
        ms = int(now * 1000)
        if ms <= self.last_ms and not self._fresh:
            return before
        ms = max(ms, self.last_ms)
        data = encode_entry(position, offset, ms)
        written = os.pwrite(self.fd, data, before)
        if written != len(data):
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, before)
            raise OSError(f"short write to {self.path}")
        self.size = before + len(data)
        self.last_ms = ms
        self._fresh = False
        self._dirty = True
        return before

    def cut(self, size: int) -> None:
        """The chunk stamped at `size` was not written: drop its entry."""
        if self.size > size:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, size)
            self.size = size
            self._fresh = size == 0

    def sync(self) -> None:
        """fdatasync the entries written since the last sync (before the
        segment's own fdatasync: a durable batch has a durable time)."""
        if self._dirty:
            self._dirty = False
            os.fdatasync(self.fd)

    def close(self) -> None:
        """Close the file (no sync)."""
        os.close(self.fd)


def recover_times(
    segment: Path, last_position: int, segment_size: int, floor_ms: int
) -> TimesWriter:
    """Open the active segment's times file after recovery cut the segment at
    `segment_size` bytes (last record `last_position`): keep the whole entries
    that stamp batches still there, cut the rest, make the cut durable."""
    path = times_path(segment)
    try:
        data = path.read_bytes()
        existed = True
    except FileNotFoundError:
        data, existed = b"", False
    times = SegmentTimes.decode(data)
    keep = 0
    for i, (position, offset) in enumerate(zip(times.positions, times.offsets, strict=True)):
        if position > last_position or offset >= segment_size:
            break
        keep = (i + 1) * TIME_ENTRY
        floor_ms = max(floor_ms, times.ms[i])
    writer = TimesWriter.open(segment, keep, floor_ms)
    try:
        if len(data) != keep:
            os.ftruncate(writer.fd, keep)
            os.fdatasync(writer.fd)
        if not keep and segment_size and (existed or floor_ms):
            # the segment's first entry did not reach the disk (a power cut before
            # the times file's pages did): its batches take the segment's last
            # change, no earlier than any of them was stored -- a `since` may then
            # start early, never late
            base = parse_segment_name(segment.name)
            if base is not None:
                writer.stamp(base, 0, max(floor_ms / 1000, segment.stat().st_mtime))
                writer.sync()
        if not existed:
            fsync_dir(segment.parent)
    except BaseException:
        writer.close()
        raise
    return writer


def last_ms(segment: Path) -> int:
    """The newest time (ms) in a segment's times file, 0 if none."""
    times = SegmentTimes.load(segment)
    return int(times.ms[-1]) if times.ms else 0
