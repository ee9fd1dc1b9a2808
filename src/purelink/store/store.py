"""`purelink.Store`: the public read-only view of a store, whichever kind it is.

Why it exists: the README's `Store(where)` takes a data directory or a
JetStream cluster (`nats://h1:4222,...`, docs/jetstream.md) and reads both
the same way.  `open_reader` opens the `StoreReader` (reader.py) that
`where` names -- a `DataDirReader` (datadir_reader.py) or a
`JetStreamReader` (jetstream/reader.py, imported only then: the NATS client
is optional) -- and `Store` delegates every call to it, so the type a caller
gets is the type it was promised.  Delegation costs one call per method
call, never one per record: `read` hands back the reader's own iterator.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from .._when import When, unix_seconds
from .datadir_reader import DataDirReader
from .reader import StoreReader, StreamInfo

__all__ = ["Store", "open_reader"]


def open_reader(where: str | os.PathLike[str]) -> StoreReader:
    """The reader of the store at `where`: a JetStream cluster for `nats://...`,
    else a data directory (purelink.Error if there is none)."""
    if isinstance(where, str) and where.startswith("nats://"):
        from .jetstream.reader import JetStreamReader  # noqa: PLC0415 -- optional

        return JetStreamReader(where)
    return DataDirReader(where)


class Store:
    """The read-only view of a store (the README's Python API).

    `Store("DIR")` reads a data directory: safe while a listener writes, in
    this process or another; never locks.  `Store("nats://h1:4222,...")`
    reads the streams a listener keeps in a JetStream cluster, over a
    connection of its own that `close()` (or leaving a `with` block) ends.
    One Store may be shared by threads.
    """

    __slots__ = ("_reader", "_where", "path")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Open the store at `path`: a data directory, or `nats://...`."""
        self._reader = open_reader(path)
        where = os.fspath(path)
        self.path: Path | None = None if where.startswith("nats://") else Path(where)
        """The data directory (None for a JetStream cluster)."""
        self._where = where if self.path is None else str(self.path)

    def __repr__(self) -> str:
        return f"<Store {self._where!r}>"

    def streams(self) -> list[str]:
        """Names of the streams in the store, sorted."""
        return self._reader.streams()

    def first(self, stream: str) -> int:
        """Position of the first record retained (0 when empty or unknown)."""
        return self._reader.first(stream)

    def last(self, stream: str) -> int:
        """Position of the last record stored (0 when empty or unknown)."""
        return self._reader.last(stream)

    def stream_info(self, stream: str) -> StreamInfo:
        """first, last, records and bytes of a stream (zeros when unknown)."""
        return self._reader.stream_info(stream)

    def position_at(self, stream: str, when: When) -> int:
        """The position of the first record stored at or after `when` -- a
        `datetime` (no zone: UTC) or seconds ago -- found by seeking, not by
        reading the records; the position after the last record when none is
        that recent.  Raises purelink.Error when records stored without a time
        (by a purelink that kept none) come before it: which of them are that
        recent cannot be told."""
        return self._reader.position_at(stream, unix_seconds(when))

    def read_timed(
        self,
        stream: str,
        start: int = 1,
        stop: int | None = None,
        follow: bool = False,
        *,
        since: When | None = None,
        until: When | None = None,
    ) -> Iterator[tuple[int, float | None, bytes]]:
        """As `read`, with when each record was stored: (position, stored time,
        payload), the time in Unix seconds (millisecond precision), None for a
        record stored without one."""
        start, stop = self._span(stream, start, stop, since, until)
        return self._reader.read_timed(stream, start, stop, follow)

    def _span(
        self, stream: str, start: int, stop: int | None, since: When | None, until: When | None
    ) -> tuple[int, int | None]:
        """(start, stop) with `since`/`until` turned into positions."""
        if since is not None:
            if start not in (0, 1):
                raise ValueError("give start or since, not both")
            start = self.position_at(stream, since)
        if until is not None:
            if stop is not None:
                raise ValueError("give stop or until, not both")
            stop = self.position_at(stream, until)
        return start, stop

    def read(
        self,
        stream: str,
        start: int = 1,
        stop: int | None = None,
        follow: bool = False,
        *,
        since: When | None = None,
        until: When | None = None,
    ) -> Iterator[tuple[int, bytes]]:
        """(position, payload) of records from `start` (inclusive) to `stop`
        (exclusive; None = all stored when called), in order.  `start` 1 (the
        default) or 0 is the beginning of the stream: the first record
        retained, as for `purelink.subscribe`.  With follow=True, wait for
        more records instead of ending (until `stop`).

        `since` starts at the first record stored at or after a time, `until`
        stops before the first one stored at or after another: a `datetime`
        (no zone: UTC) or seconds ago, found by seeking (`position_at`).

        Raises ValueError for start < 0 or a bad name, and purelink.Error when
        a later `start` is below the first retained position, naming it (also
        when retention overtakes a slow reader: never a gap), or the stream is
        corrupt (naming where).  An unknown stream is empty.
        """
        start, stop = self._span(stream, start, stop, since, until)
        return self._reader.read(stream, start, stop, follow)

    def close(self) -> None:
        """Close the store's connection (a JetStream cluster's; nothing for a
        directory). Idempotent."""
        self._reader.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
