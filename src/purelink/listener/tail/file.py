"""Subscriptions read from a data directory: segment byte ranges, by sendfile.

Why it exists: the file store's `TailSource` (source.py).  The reply is
the store format itself, so a subscriber is sent byte ranges of its segment
files with `os.sendfile` (out.py): no record is decoded, copied or
re-encoded on the way out, and the kernel moves page-cache pages to the
socket.

**Never a record before it is stored**: a batch is sent only when its last
record is at or below the stream's *stored* position -- `synced_position`
with sync="batch"/"always", what was written with sync="none" (where that is
what "stored" means) -- so a subscriber never sees what a link was not told.
A follower parks on the log's `synced_parker` (or `parker` with
sync="none"), which `sync` (`append`) unparks only while someone is parked.

Segments are found in the log's published table and opened while registered
(online) with the DataDir's grace domain, exactly as DataDirReaders are, so
retention never unlinks a segment a subscriber is about to open; one that
retention overtakes gets an ERROR ("records retained start at N").

Where a batch starts: closed segments are sent from the offset to their end
without looking inside (they are whole and synced).  Anywhere else the
cursor jumps to the nearest entry of the segment's sparse batch index
(`StreamLog.batch_index`, kept by the writer) and walks the batch headers
from there (u64 position, u32 length, u32 count), a few hundred KiB at
most, only up to the stored position.  The subscriber checks every CRC.
"""

from __future__ import annotations

import contextlib
import os
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path

from ...errors import Error
from ...primitives.parker import Parker
from ...store.datadir import DataDir
from ...store.datadir_reader import DataDirReader
from ...store.log import StreamLog, walk_batches
from ...store.reader import StreamInfo
from ...store.times import last_time
from .out import Out
from .source import Refused

__all__ = ["FileTailSource"]


class _Cursor:
    """Where a subscriber is in one segment: its own fd, the next batch's offset."""

    __slots__ = ("base", "fd", "offset", "path", "position")

    def __init__(self, fd: int, base: int, path: Path, offset: int, position: int) -> None:
        self.fd = fd
        self.base = base
        self.path = path
        self.offset = offset
        self.position = position  # of the batch at `offset`


class FileTailSource:
    """The streams of one data directory, as subscriptions read them."""

    def __init__(self, data: DataDir, *, sync: str) -> None:
        self.data = data
        self._reader = DataDirReader(data.path)
        self.stored: Callable[[StreamLog], int]
        self.parker_of: Callable[[StreamLog], Parker]
        if sync == "none":  # "stored" means written to the OS
            self.stored, self.parker_of = _last, _append_parker
        else:
            self.stored, self.parker_of = _synced, _sync_parker

    def open(self, stream: str, start: int, follow: bool) -> _FileReader | None:
        try:
            stream_log = self.data.stream(stream, create=False)
        except KeyError:
            return None
        return _FileReader(self, stream_log, stream, start, follow)

    def streams(self) -> list[StreamInfo]:
        infos = []
        for name in self.data.streams():
            stream_log = self.data.open_log(name)
            if stream_log is not None:
                infos.append(_info(stream_log, self.stored(stream_log)))
        return infos

    def position_at(self, stream: str, when: float) -> int:
        return self._reader.position_at(stream, when)  # the writer's segment table

    def wake(self) -> None:
        for name in self.data.streams():
            with contextlib.suppress(KeyError):
                stream_log = self.data.stream(name, create=False)
                stream_log.parker.unpark()
                stream_log.synced_parker.unpark()

    def close(self) -> None:
        """The data directory is the listener's: nothing of the source's own to free."""


class _FileReader:
    """One subscriber's read of one stream log (source.TailReader)."""

    def __init__(
        self, source: FileTailSource, stream_log: StreamLog, stream: str, start: int, follow: bool
    ) -> None:
        self._log = stream_log
        self._stream = stream
        self._stored = source.stored
        self.parker = source.parker_of(stream_log)
        self._limit = None if follow else self._stored(stream_log)
        self._position = start or stream_log.segments[0][0]  # 0: from the first retained
        self._cursor: _Cursor | None = None
        self._grace = source.data.grace.register("subscriber", online=False)

    def send(self, out: Out) -> bool:
        stream_log = self._log
        upto = self._stored(stream_log) if self._limit is None else self._limit
        while self._position <= upto:
            if self._cursor is None:
                self._cursor = self._open_at(self._position)
            self._position = _send(out, stream_log, self._cursor, upto)
            if self._cursor.fd < 0:
                self._cursor = None  # a closed segment sent to its end: on to the next
        return self._limit is not None

    def ready(self) -> bool:
        return self._stored(self._log) >= self._position or self._log.closed

    def ended(self) -> bool:
        return self._log.closed and self._stored(self._log) < self._position

    def close(self) -> None:
        if self._cursor is not None and self._cursor.fd >= 0:
            os.close(self._cursor.fd)
        self._cursor = None
        self._grace.unregister()

    def _open_at(self, position: int) -> _Cursor:
        """An fd on the segment holding `position`, found and opened under the grace
        domain, and the offset of the batch that holds it."""
        stream_log = self._log
        self._grace.online()
        try:
            table = stream_log.segments
            if position < table[0][0]:
                raise Refused(
                    "tail_below_retained",
                    f"stream {self._stream!r}: records retained start at {table[0][0]}, "
                    f"cannot read from {position} (start 1 reads from the first retained)",
                )
            i = bisect_right([base for base, _ in table], position) - 1
            base, path = table[i]
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        finally:
            self._grace.offline()
        cursor = _Cursor(fd, base, path, 0, base)
        if position > base:
            try:
                _skip(stream_log, cursor, position - 1, os.fstat(fd).st_size)
            except BaseException:
                os.close(fd)
                raise
        return cursor


def _send(out: Out, stream_log: StreamLog, cursor: _Cursor, upto: int) -> int:
    """Send the batches of the cursor's segment up to position `upto`; return the
    position that follows them.  Closes the cursor's fd once its (closed)
    segment was sent to its end."""
    table = stream_log.segments
    closed = cursor.base != table[-1][0]  # only the last one is ever written to
    i = bisect_right([base for base, _ in table], cursor.base) - 1
    size = os.fstat(cursor.fd).st_size
    start = cursor.offset
    if closed and i >= 0 and table[i][0] == cursor.base and table[i + 1][0] - 1 <= upto:
        cursor.offset, cursor.position = size, table[i + 1][0]  # whole and synced
    else:  # the active segment, or a closed one retention has retired meanwhile
        _skip(stream_log, cursor, upto, size)
    if cursor.offset == start and not (closed and start >= size):
        raise Refused("tail_damaged", f"segment {cursor.path}: no whole batch at {start}")
    out.file(cursor.fd, start, cursor.offset - start)
    if closed and cursor.offset >= size:
        os.close(cursor.fd)
        cursor.fd = -1
    return cursor.position


def _skip(stream_log: StreamLog, cursor: _Cursor, upto: int, size: int) -> None:
    """Move the cursor past every whole batch whose records are all <= `upto`:
    first to the segment's nearest indexed batch start at or below `upto + 1`
    (every batch before it holds positions <= upto), then header by header."""
    try:
        index = stream_log.batch_index(cursor.base, cursor.fd)
        position, offset = index.floor(upto + 1, cursor.fd)
        if offset > cursor.offset:
            cursor.offset, cursor.position = offset, position
        cursor.offset, cursor.position = walk_batches(
            cursor.fd, cursor.offset, cursor.position, upto, size
        )
    except Error as exc:
        raise Refused("tail_damaged", f"segment {cursor.path}: {exc}") from None


def _info(stream_log: StreamLog, stored: int) -> StreamInfo:
    """A stream's listing up to its stored position; bytes: its segment files."""
    segments = stream_log.segments
    first = segments[0][0] if segments and stored >= segments[0][0] else 0
    size = 0
    for _, path in segments:
        with contextlib.suppress(FileNotFoundError):  # retention removed it meanwhile
            size += path.stat().st_size
    records = stored - first + 1 if first else 0
    when = last_time([path for _, path in segments]) if first else None
    return StreamInfo(stream_log.name, first, stored if first else 0, records, size, when)


def _last(stream_log: StreamLog) -> int:
    return stream_log.last_position


def _synced(stream_log: StreamLog) -> int:
    return stream_log.synced_position


def _append_parker(stream_log: StreamLog) -> Parker:
    return stream_log.parker


def _sync_parker(stream_log: StreamLog) -> Parker:
    return stream_log.synced_parker
