"""A data directory, the writer's side: `DataDir` (one per directory, one per listener).

Layout (docs/store.md)::

    DIR/purelink.lock                       flock'ed by the one writer
    DIR/streams/<name>/<base:020d>.seg      segments, base = first position in it
    DIR/streams/<name>/<base:020d>.sum      producers snapshot of a closed segment
    DIR/streams/<name>/epochs               epochs handed to named producers

`DataDir` takes an exclusive flock so that two listeners never write one
directory, then opens -- and so recovers -- every stream before returning.
Each stream is a `StreamLog` (log.py).

The open DataDirs of this process are registered by real path, so that a
reader in the same process (datadir_reader.py) finds the writer
(`live_writer`) and uses its published segment table and grace domain
instead of listing the folder.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from purelink.errors import Closed, Error
from purelink.protocol.names import NAME_RE, validate_stream_name

from .format import LOCK_FILE, STREAMS_DIR
from .log import StreamLog
from .retention import Retention, RetentionPolicy
from .segment import fsync_dir

__all__ = ["STREAM_NAME_RE", "DataDir", "live_writer", "validate_stream_name"]

STREAM_NAME_RE: Final = NAME_RE
"""A stream name (the README's naming rule): 1-200 of [A-Za-z0-9._-], not starting with '.'
(so never '.', '..' or a hidden file), matched with fullmatch.  The one rule
lives in purelink.protocol.names, shared with the listener core."""

_LIVE: dict[str, DataDir] = {}
"""The open DataDirs of this process, by the real path of their directory."""


def live_writer(real_path: str, stream: str) -> tuple[DataDir, StreamLog] | None:
    """The DataDir open on the directory at `real_path` in this process, and its
    open log of `stream`; None when either is not open here."""
    data = _LIVE.get(real_path)
    if data is None:
        return None
    log = data.open_log(stream)
    return None if log is None else (data, log)


class DataDir:
    """The writer's side of a data directory (one per directory, one per listener)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        segment_bytes: int = 64 << 20,
        max_streams: int = 10_000,
        retain_bytes: int | None = None,
        retain_age: float | None = None,
        retention: Mapping[str, tuple[int | None, float | None]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Create the directory if missing, lock it, and open (recover) every stream.

        `retain_bytes`/`retain_age` are the default retention of every stream,
        `retention` maps a stream to its own (bytes, age); see retention.py.
        `clock` (Unix seconds) is what retention ages segments by and what
        stamps each stored batch's time (times.py).
        """
        self.path = Path(path)
        """The data directory."""
        self._segment_bytes = segment_bytes
        self._clock = clock
        self._max_streams = max_streams
        self._logs: dict[str, StreamLog] = {}
        self._streams = self.path / STREAMS_DIR
        self._key: str | None = None
        self.retention = Retention(
            lambda: list(self._logs.values()),
            RetentionPolicy(retain_bytes, retain_age),
            {validate_stream_name(k): RetentionPolicy(*v) for k, v in (retention or {}).items()},
            clock=clock,
        )
        """Removes old segments (on a thread of its own only while a policy is set)."""
        self.grace = self.retention.grace
        """Readers (DataDirReader) of this process register here; retention waits for them."""
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
        self._key = os.path.realpath(self.path)
        _LIVE[self._key] = self
        if self.retention.active:
            self.retention.start()

    def __enter__(self) -> DataDir:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _open(self, name: str) -> StreamLog:
        log = StreamLog(
            self._streams / name, name, segment_bytes=self._segment_bytes, clock=self._clock
        )
        log.on_roll = self.retention.wake
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

    def open_log(self, name: str) -> StreamLog | None:
        """The log of stream `name` while it is open; None otherwise (never creates)."""
        log = self._logs.get(name)
        return None if log is None or log.closed else log

    def set_retention(
        self, stream: str, retain_bytes: int | None = None, retain_age: float | None = None
    ) -> None:
        """Give `stream` its own retention (None, None: keep everything); a pass follows."""
        self.retention.set_policy(
            validate_stream_name(stream), RetentionPolicy(retain_bytes, retain_age)
        )
        if self.retention.active and self._lock_fd is not None:
            self.retention.start()

    def close(self) -> None:
        """Close every log (no sync: the listener syncs first) and release the lock."""
        if self._key is not None and _LIVE.get(self._key) is self:
            del _LIVE[self._key]
        self.retention.close()
        for log in self._logs.values():
            log.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
