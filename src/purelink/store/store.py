"""A data directory: the writer (`DataDir`) and the public read-only view (`Store`).

Layout (docs/store.md)::

    DIR/purelink.lock                       flock'ed by the one writer
    DIR/streams/<name>/<base:020d>.seg      segments, base = first position in it
    DIR/streams/<name>/<base:020d>.sum      producers snapshot of a closed segment
    DIR/streams/<name>/epochs               epochs handed to named producers

`DataDir` takes an exclusive flock so that two listeners never write one
directory, then opens -- and so recovers -- every stream before returning.

`Store` never takes the lock and never writes: it may run in any process
while a listener appends.  It relies on two facts about the writer: bytes
below a segment's size are whole written bytes (a read may see a batch cut
short by the file's end, never garbage in the middle), and a segment is
complete before its successor exists.  So a reader stops quietly at an
incomplete batch at the end of the last segment, and treats anything else
that fails its checks as corruption (raised, with the file and offset).

Reads seek with a sparse per-segment index -- (position, offset) every
`INDEX_EVERY` bytes, built by scanning once and extended as the file grows --
and then read 1 MiB at a time, slicing records out of each verified batch.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from purelink.errors import Closed, Error
from purelink.protocol.wire import batch_records

from .format import CORRUPT, LOCK_FILE, STREAMS_DIR, ScanState, has_valid_successor, scan_batches
from .log import StreamLog
from .segment import fsync_dir, list_segments

__all__ = [
    "INDEX_EVERY",
    "STREAM_NAME_RE",
    "DataDir",
    "Store",
    "StreamInfo",
    "validate_stream_name",
]

STREAM_NAME_RE: Final = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}", re.ASCII)
"""A stream name (SPEC section 1): 1-200 of [A-Za-z0-9._-], not starting with '.'
(so never '.', '..' or a hidden file), matched with fullmatch."""

INDEX_EVERY: Final = 64 << 10
"""Bytes between two entries of a reader's sparse index."""


def validate_stream_name(name: str) -> str:
    """Return `name` if it is a valid stream name, else raise ValueError."""
    if not isinstance(name, str):
        raise TypeError(f"stream name must be str, not {type(name).__name__}")
    if STREAM_NAME_RE.fullmatch(name) is None:
        raise ValueError(
            f"bad stream name {name[:40]!r}: use 1-200 characters of A-Z a-z 0-9 . _ -, "
            "not starting with '.'"
        )
    return name


# ====================================================================== writer


class DataDir:
    """The writer's side of a data directory (one per directory, one per listener)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        segment_bytes: int = 64 << 20,
        max_streams: int = 10_000,
    ) -> None:
        """Create the directory if missing, lock it, and open (recover) every stream."""
        self.path = Path(path)
        """The data directory."""
        self._segment_bytes = segment_bytes
        self._max_streams = max_streams
        self._logs: dict[str, StreamLog] = {}
        self._streams = self.path / STREAMS_DIR
        try:
            self._streams.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise Error(f"cannot create the data directory {self.path}: {exc}") from exc
        lock = self.path / LOCK_FILE
        self._lock_fd: int | None = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise Error(
                f"data directory {self.path} is in use by another listener ({lock} is locked)"
            ) from None
        try:
            os.ftruncate(self._lock_fd, 0)
            os.pwrite(self._lock_fd, f"{os.getpid()}\n".encode(), 0)
            for entry in sorted(os.scandir(self._streams), key=lambda e: e.name):
                if entry.is_dir(follow_symlinks=False) and STREAM_NAME_RE.fullmatch(entry.name):
                    self._open(entry.name)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> DataDir:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _open(self, name: str) -> StreamLog:
        log = StreamLog(self._streams / name, name, segment_bytes=self._segment_bytes)
        self._logs[name] = log
        return log

    def stream(self, name: str, *, create: bool = True) -> StreamLog:
        """The log of stream `name`, created if missing (when `create`).

        Raises ValueError for a bad name, KeyError for a missing stream with
        create=False, purelink.Error when `max_streams` streams exist, and
        purelink.Closed when creating one after `close`.  Safe to call from
        another thread for a stream that exists (the sync thread does).
        """
        log = self._logs.get(name)
        if log is not None:
            return log
        validate_stream_name(name)
        if self._lock_fd is None:
            raise Closed(f"data directory {self.path} is closed")
        if not create:
            raise KeyError(name)
        if len(self._logs) >= self._max_streams:
            raise Error(f"stream limit reached ({self._max_streams} streams)")
        folder = self._streams / name
        folder.mkdir(exist_ok=True)
        fsync_dir(self._streams)
        return self._open(name)

    def streams(self) -> list[str]:
        """Names of the open streams, sorted."""
        return sorted(self._logs)

    def close(self) -> None:
        """Close every log (no sync: the listener syncs first) and release the lock."""
        for log in self._logs.values():
            log.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


# ====================================================================== reader


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """What `purelink streams` prints for one stream."""

    name: str
    """The stream."""
    first: int
    """First position retained (0 when empty)."""
    last: int
    """Last position stored (0 when empty)."""
    records: int
    """Records retained."""
    bytes: int
    """Bytes of segment files on disk."""


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


class Store:
    """The read-only view of a data directory (SPEC section 3).

    Safe while a listener writes, in this process or another; never locks.
    One Store may be shared by threads.
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

    def __repr__(self) -> str:
        return f"<Store {str(self.path)!r}>"

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

    def _segments(self, stream: str) -> list[_SegmentIndex]:
        """The stream's segments now, with what earlier calls learned of them."""
        validate_stream_name(stream)
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
        """Position of the last record stored (0 when empty or unknown)."""
        segments = self._segments(stream)
        if not segments:
            return 0
        index = segments[-1]
        with _open(index.path) as fd:
            self._extend(index, fd, os.fstat(fd).st_size, None, closed=False)
        return index.end_position - 1

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
        return StreamInfo(stream, first, last, last - first + 1 if first else 0, size)

    def read(
        self, stream: str, start: int = 1, stop: int | None = None
    ) -> Iterator[tuple[int, bytes]]:
        """(position, payload) of records from `start` (inclusive) to `stop`
        (exclusive; None = all stored when called), in order.

        Raises ValueError for start < 1 or a bad name, and purelink.Error when
        `start` is below the first retained position or the stream is
        corrupt (naming the file and offset).  An unknown stream is empty.
        """
        if start < 1:
            raise ValueError(f"start must be >= 1, not {start}")
        segments = self._segments(stream)
        if not segments or (stop is not None and stop <= start):
            return iter(())
        if start < segments[0].base:
            raise Error(
                f"stream {stream!r}: records retained start at {segments[0].base}, "
                f"cannot read from {start}"
            )
        bases = [s.base for s in segments]
        i = max(bisect_right(bases, start) - 1, 0)
        try:
            snapshot = segments[-1].path.stat().st_size
        except FileNotFoundError:
            snapshot = 0
        return self._records(segments[i:], start, stop, snapshot)

    def _records(
        self,
        segments: list[_SegmentIndex],
        start: int,
        stop: int | None,
        snapshot: int,
    ) -> Iterator[tuple[int, bytes]]:
        limit = stop if stop is not None else 1 << 64
        expected = segments[0].base
        for k, index in enumerate(segments):
            closed = k + 1 < len(segments)
            if index.base != expected:
                raise Error(
                    f"segment {index.path} starts at position {index.base} "
                    f"where position {expected} should come next"
                )
            with _open(index.path) as fd:
                end = os.fstat(fd).st_size if closed else snapshot
                if start >= index.end_position:
                    self._extend(index, fd, end, start, closed=closed)
                with self._lock:  # another thread may be extending this index
                    offset, position = index.seek(max(start, index.base))
                state = ScanState(offset, position)
                for _, batch, header in scan_batches(fd, state, end):
                    pos, count = header.position, header.count
                    if pos + count <= start:
                        continue
                    if pos >= limit:
                        return
                    records = batch_records(batch, header)
                    lo = start - pos if start > pos else 0
                    hi = limit - pos if limit < pos + count else count
                    if lo or hi < count:
                        records = records[lo:hi]
                    yield from zip(range(pos + lo, pos + hi), records, strict=True)
                self._judge(index, fd, state, end, closed=closed)
            expected = state.position

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


@contextlib.contextmanager
def _open(path: Path) -> Iterator[int]:
    """A read-only fd on a segment, closed on exit."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Error(f"segment {path} was removed while reading") from None
    try:
        yield fd
    finally:
        os.close(fd)
