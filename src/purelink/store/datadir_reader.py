"""A data directory, the reader's side: `DataDirReader`, the body of `Store("DIR")`.

`DataDirReader` never takes the lock and never writes: it may run in any
process while a listener appends.  It relies on two facts about the writer
(datadir.py, log.py): bytes below a segment's size are whole written bytes (a
read may see a batch cut short by the file's end, never garbage in the
middle), and a segment is complete before its successor exists.  So a reader
stops quietly at an incomplete batch at the end of the last segment, and
treats anything else that fails its checks as corruption (raised, with the
file and offset).

Reads seek with a sparse per-segment index -- (position, offset) every
`INDEX_EVERY` bytes, built by scanning once and extended as the file grows --
and then read 1 MiB at a time, slicing records out of each verified batch.

A reader in the writer's process finds the writer (`live_writer`, by real
path) and uses its published segment table instead of listing the folder;
each read registers with the DataDir's grace domain and is online only while
it looks a segment up and opens its own fd on it, so retention
(retention.py) never unlinks a file a reader is about to open.
`read(follow=True)` is follow.py.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from bisect import bisect_right
from collections.abc import Callable, Generator, Iterator
from itertools import repeat
from pathlib import Path
from typing import Final, TypeVar

from purelink.errors import Error
from purelink.primitives.grace import GraceReader
from purelink.protocol.names import validate_stream_name
from purelink.protocol.wire import batch_records

from .datadir import STREAM_NAME_RE, DataDir, live_writer
from .follow import follow_records
from .format import CORRUPT, STREAMS_DIR, ScanState, has_valid_successor, scan_batches
from .log import StreamLog
from .reader import StreamInfo
from .segment import list_segments
from .times import SegmentTimes, last_time, seek_time

__all__ = ["INDEX_EVERY", "DataDirReader"]

INDEX_EVERY: Final = 64 << 10
"""Bytes between two entries of a reader's sparse index."""


class _SegmentIndex:
    """What a reader learned about one segment file: a verified prefix and
    sparse (position, offset) entries in it, for seeking."""

    __slots__ = ("base", "end", "end_position", "offsets", "path", "positions")

    def __init__(self, base: int, path: Path) -> None:
        self.base = base
        self.path = path
        self.positions = [base]
        self.offsets = [0]
        self.end = 0  # bytes verified from the start of the file
        self.end_position = base  # position of the first record after them

    def seek(self, position: int) -> tuple[int, int]:
        """(offset, position) of an indexed batch boundary at or before `position`."""
        if position >= self.end_position:
            return self.end, self.end_position
        i = bisect_right(self.positions, position) - 1
        return self.offsets[i], self.positions[i]


class DataDirReader:
    """The reader of a data directory (a `StoreReader`; the body of `Store("DIR")`).

    Safe while a listener writes, in this process or another; never locks.
    One DataDirReader may be shared by threads.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Open the data directory at `path` for reading."""
        self.path = Path(path)
        """The data directory."""
        if not self.path.is_dir():
            raise Error(f"no purelink data directory at {self.path}")
        self._streams = self.path / STREAMS_DIR
        self._indexes: dict[str, dict[Path, _SegmentIndex]] = {}
        self._lock = threading.Lock()
        self._key = os.path.realpath(self.path)

    def __repr__(self) -> str:
        return f"<DataDirReader {str(self.path)!r}>"

    def close(self) -> None:
        """Nothing to free: every read opens (and closes) its own descriptors."""

    def streams(self) -> list[str]:
        """Names of the streams in the directory, sorted."""
        try:
            entries = list(os.scandir(self._streams))
        except FileNotFoundError:
            return []
        return sorted(
            e.name
            for e in entries
            if STREAM_NAME_RE.fullmatch(e.name) and e.is_dir(follow_symlinks=False)
        )

    def writer(self, stream: str) -> tuple[DataDir, StreamLog] | None:
        """The directory's writer and its log of `stream`, when it runs in this
        process (follow.py parks on that log)."""
        return live_writer(self._key, stream)

    def _segments(self, stream: str) -> list[_SegmentIndex]:
        """The stream's segments now, with what earlier calls learned of them:
        the writer's published table in its process, else the folder's listing."""
        validate_stream_name(stream)
        writer = self.writer(stream)
        if writer is not None:
            found: list[tuple[int, Path]] | tuple[tuple[int, Path], ...] = writer[1].segments
        else:
            try:
                found = list_segments(self._streams / stream)
            except (FileNotFoundError, NotADirectoryError):
                return []
        with self._lock:
            old = self._indexes.get(stream, {})
            new = {path: old.get(path) or _SegmentIndex(base, path) for base, path in found}
            self._indexes[stream] = new
            return list(new.values())

    def last(self, stream: str) -> int:
        """Position of the last record stored (0 when empty or unknown): what a
        read would reach, from the last segment's whole batches."""
        for _ in range(3):  # the last segment may roll and be retained away as we look
            segments = self._segments(stream)
            if not segments:
                return 0
            index = segments[-1]
            try:
                fd = _open_fd(index.path)
            except FileNotFoundError:
                continue
            try:
                self._extend(index, fd, os.fstat(fd).st_size, None, closed=False)
            finally:
                os.close(fd)
            return index.end_position - 1
        raise Error(f"stream {stream!r}: its last segment keeps disappearing")

    def first(self, stream: str) -> int:
        """Position of the first record retained (0 when empty or unknown)."""
        segments = self._segments(stream)
        if not segments:
            return 0
        return segments[0].base if self.last(stream) >= segments[0].base else 0

    def stream_info(self, stream: str) -> StreamInfo:
        """first, last, records and bytes of a stream (zeros when unknown)."""
        last = self.last(stream)
        first = self.first(stream)
        size = 0
        for index in self._segments(stream):
            with contextlib.suppress(FileNotFoundError):  # removed by retention meanwhile
                size += index.path.stat().st_size
        records = last - first + 1 if first else 0
        return StreamInfo(stream, first, last, records, size, self.last_time(stream))

    def position_at(self, stream: str, when: float) -> int:
        """The position of the first record stored at or after `when` (Unix
        seconds), found by seeking (times.py): the position after the last
        record when none is that recent, 1 for an unknown stream.  Raises
        purelink.Error when records stored without a time (by a purelink that
        kept none) come before it."""
        end = self.last(stream) + 1  # first: a segment that rolls meanwhile is listed below
        segments = self._segments(stream)
        if not segments:
            return 1
        ms = math.ceil(when * 1000 - 1e-6)  # a time given in whole ms stays that ms
        return seek_time(stream, [(s.base, s.path) for s in segments], ms, end)

    def last_time(self, stream: str) -> float | None:
        """When the newest batch of the stream was stored (Unix seconds; None
        when empty or stored without a time)."""
        return last_time([s.path for s in self._segments(stream)])

    def read_timed(
        self, stream: str, start: int = 1, stop: int | None = None, follow: bool = False
    ) -> Iterator[tuple[int, float | None, bytes]]:
        """As `read`, with each record's stored time: (position, Unix seconds or
        None when its batch was stored without a time, payload)."""
        return self._read(stream, start, stop, follow, _segment_timed)

    def read(
        self, stream: str, start: int = 1, stop: int | None = None, follow: bool = False
    ) -> Iterator[tuple[int, bytes]]:
        """(position, payload) of records from `start` (inclusive) to `stop`
        (exclusive; None = all stored when called), in order.  `start` 1 (the
        default) or 0 is the beginning of the stream: the first record
        retained, as for `purelink.subscribe`.  With follow=True, wait for
        more records instead of ending (until `stop`): see follow.py for how
        it waits.

        Raises ValueError for start < 0 or a bad name, and purelink.Error when
        a later `start` is below the first retained position, naming it (also
        when retention overtakes a slow reader: never a gap), or the stream is
        corrupt (naming the file and offset).  An unknown stream is empty.
        """
        return self._read(stream, start, stop, follow, _segment_plain)

    def _read(
        self, stream: str, start: int, stop: int | None, follow: bool, each: _Each[Item]
    ) -> Iterator[Item]:
        if start < 0:
            raise ValueError(f"start must be a position >= 1 (or 0: the beginning), not {start}")
        segments = self._segments(stream)
        if start <= 1:  # the beginning: the first retained (an empty stream starts at 1)
            start = segments[0].base if segments else 1
        elif segments and start < segments[0].base:
            raise _overtaken(stream, segments[0].base, start)
        if follow:
            if each is _segment_plain:
                return follow_records(self, stream, start, stop)
            return follow_records(
                self, stream, start, stop, read=lambda s, a, b: self._read(s, a, b, False, each)
            )
        if not segments or (stop is not None and stop <= start):
            return iter(())
        bases = [s.base for s in segments]
        i = max(bisect_right(bases, start) - 1, 0)
        try:
            snapshot = segments[-1].path.stat().st_size
        except FileNotFoundError:
            snapshot = 0
        return self._records(stream, segments[i:], start, stop, snapshot, each)

    def _records(
        self,
        stream: str,
        segments: list[_SegmentIndex],
        start: int,
        stop: int | None,
        snapshot: int,
        each: _Each[Item],
    ) -> Iterator[Item]:
        limit = stop if stop is not None else 1 << 64
        expected = segments[0].base
        opener = _SegmentOpener(stream, self.writer, self._segments)
        try:
            for k, index in enumerate(segments):
                if index.base != expected:
                    raise Error(
                        f"segment {index.path} starts at position {index.base} "
                        f"where position {expected} should come next"
                    )
                fd = opener.open(index, max(start, expected))
                try:
                    expected = yield from self._segment_records(
                        index, fd, start, limit, snapshot, each, closed=k + 1 < len(segments)
                    )
                finally:
                    os.close(fd)
                if expected >= limit:
                    return
        finally:
            opener.close()

    def _segment_records(
        self,
        index: _SegmentIndex,
        fd: int,
        start: int,
        limit: int,
        snapshot: int,
        each: _Each[Item],
        *,
        closed: bool,
    ) -> Generator[Item, None, int]:
        """Yield the records of one segment in [start, limit) (as `each` makes
        them of a batch); return the position that follows the last batch read."""
        end = os.fstat(fd).st_size if closed else snapshot
        if start >= index.end_position:
            self._extend(index, fd, end, start, closed=closed)
        with self._lock:  # another thread may be extending this index
            offset, position = index.seek(max(start, index.base))
        state = ScanState(offset, position)
        # loaded after the size was noted: the writer stamps a batch's time before it writes it
        times = SegmentTimes.load(index.path) if each is _segment_timed else None
        for _, batch, header in scan_batches(fd, state, end):
            pos, count = header.position, header.count
            if pos + count <= start:
                continue
            if pos >= limit:
                return pos
            records = batch_records(batch, header)
            lo = start - pos if start > pos else 0
            hi = limit - pos if limit < pos + count else count
            if lo or hi < count:
                records = records[lo:hi]
            yield from each(range(pos + lo, pos + hi), records, times, pos)
        self._judge(index, fd, state, end, closed=closed)
        return state.position

    def _extend(
        self, index: _SegmentIndex, fd: int, end: int, until: int | None, *, closed: bool
    ) -> None:
        """Verify the segment past its indexed prefix, up to byte `end` or to
        the batch holding position `until`, recording sparse index entries."""
        with self._lock:
            state = ScanState(index.end, index.end_position)
            positions, offsets = index.positions, index.offsets
            mark = offsets[-1]
            for offset, _, header in scan_batches(fd, state, end):
                if offset - mark >= INDEX_EVERY:
                    positions.append(header.position)
                    offsets.append(offset)
                    mark = offset
                if until is not None and state.position > until:
                    if offset != mark:
                        positions.append(header.position)
                        offsets.append(offset)
                    break
            index.end, index.end_position = state.offset, state.position
        if until is None or state.position <= until:
            self._judge(index, fd, state, end, closed=closed)

    @staticmethod
    def _judge(index: _SegmentIndex, fd: int, state: ScanState, end: int, *, closed: bool) -> None:
        """Raise if a scan that ended at `state` found corruption (anything
        in a closed segment; damage followed by good batches in the last)."""
        if state.problem is None:
            return
        if closed or (
            state.problem == CORRUPT and has_valid_successor(fd, state.offset, end, state.position)
        ):
            raise Error(f"segment {index.path} is corrupt at offset {state.offset}: {state.detail}")


Item = TypeVar("Item", tuple[int, bytes], tuple[int, float | None, bytes])
_Each = Callable[[range, list[bytes], SegmentTimes | None, int], Iterator[Item]]


def _segment_plain(
    positions: range, records: list[bytes], times: SegmentTimes | None, pos: int
) -> Iterator[tuple[int, bytes]]:
    """A batch's records as `read` yields them."""
    return zip(positions, records, strict=True)


def _segment_timed(
    positions: range, records: list[bytes], times: SegmentTimes | None, pos: int
) -> Iterator[tuple[int, float | None, bytes]]:
    """A batch's records as `read_timed` yields them: one stored time for all."""
    at = times.at(pos) if times is not None else None
    return zip(positions, repeat(at), records, strict=False)


def _overtaken(stream: str, first: int, position: int) -> Error:
    return Error(
        f"stream {stream!r}: records retained start at {first}, cannot read from {position} "
        "(start 1 reads from the first retained)"
    )


class _SegmentOpener:
    """Opens a reader's own fd on each segment it reads, safely against retention.

    In the writer's process: the reader is registered with the DataDir's grace
    domain, comes online, checks the segment is still in the published table,
    opens it and goes offline again, so retention (which unpublishes, waits for
    a grace period, then unlinks) cannot unlink it in between.  Offline the
    rest of the time -- also while the caller holds the iterator between two
    records -- it never holds a grace period up.  In another process a lost
    race with the unlink is reported the same way: never a gap.
    """

    __slots__ = ("_reader", "_segments", "_stream", "_writer")

    def __init__(
        self,
        stream: str,
        writer: Callable[[str], tuple[DataDir, StreamLog] | None],
        segments: Callable[[str], list[_SegmentIndex]],
    ) -> None:
        """`writer` and `segments` are the DataDirReader's, for `stream`."""
        self._stream = stream
        self._writer = writer
        self._segments = segments
        self._reader: GraceReader | None = None

    def open(self, index: _SegmentIndex, position: int) -> int:
        """A read-only fd on the segment; purelink.Error if retention removed it."""
        writer = self._writer(self._stream)
        if writer is None:
            try:
                return _open_fd(index.path)
            except FileNotFoundError:
                segments = self._segments(self._stream)
                first = segments[0].base if segments else 0
                raise _overtaken(self._stream, first, position) from None
        data, log = writer
        reader = self._reader
        if reader is None or reader.domain is not data.grace:
            self.close()
            reader = self._reader = data.grace.register("store-reader", online=False)
        reader.online()
        try:
            table = log.segments
            if index.base < table[0][0]:
                raise _overtaken(self._stream, table[0][0], position)
            try:
                return _open_fd(index.path)
            except FileNotFoundError:  # not retention's doing: somebody removed it
                raise Error(f"segment {index.path} was removed while reading") from None
        finally:
            reader.offline()

    def close(self) -> None:
        if self._reader is not None:
            self._reader.unregister()
            self._reader = None


def _open_fd(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
