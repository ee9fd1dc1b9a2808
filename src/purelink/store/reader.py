"""The reader interface: what every kind of store offers to read it.

Why it exists: a store is a data directory or a JetStream cluster, and both
are read the same way -- the streams, a stream's first and last positions,
its records in order, following its tail.  `StoreReader` is that contract;
`DataDirReader` (datadir_reader.py) and `JetStreamReader`
(jetstream/reader.py) implement it, and the public `Store` (store.py) opens
the one its argument names and delegates to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

__all__ = ["StoreReader", "StreamInfo"]


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
    """Bytes the store holds for the stream (segment files on disk; JetStream's, per replica)."""
    last_time: float | None = None
    """When its newest record was stored (Unix seconds; None when empty, or when
    it was stored without a time)."""


class StoreReader(Protocol):
    """Read-only access to one kind of store (the README's `Store` methods)."""

    def streams(self) -> list[str]:
        """Names of the streams, sorted."""
        ...

    def first(self, stream: str) -> int:
        """Position of the first record retained (0 when empty or unknown)."""
        ...

    def last(self, stream: str) -> int:
        """Position of the last record stored (0 when empty or unknown)."""
        ...

    def stream_info(self, stream: str) -> StreamInfo:
        """first, last, records and bytes of a stream (zeros when unknown)."""
        ...

    def read(
        self, stream: str, start: int = 1, stop: int | None = None, follow: bool = False
    ) -> Iterator[tuple[int, bytes]]:
        """(position, payload) from `start` (inclusive; 0 or 1: the first retained)
        to `stop` (exclusive; None: all stored when called, or for ever with
        `follow`), in order; a later start below the first retained raises."""
        ...

    def read_timed(
        self, stream: str, start: int = 1, stop: int | None = None, follow: bool = False
    ) -> Iterator[tuple[int, float | None, bytes]]:
        """As `read`, with when each record was stored: (position, Unix seconds,
        payload); the time is None for a record stored without one."""
        ...

    def position_at(self, stream: str, when: float) -> int:
        """The position of the first record stored at or after `when` (Unix
        seconds), by seeking, not by reading the records; the position after
        the last record when none is that recent.  purelink.Error when that
        cannot be told (records stored without a time come before it)."""
        ...

    def close(self) -> None:
        """Free what the reader holds (a connection). Idempotent."""
        ...
