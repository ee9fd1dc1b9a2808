"""Subscriptions read from a JetStream cluster: the stream's message bodies, as they are.

Why it exists: a JetStream cluster's `TailSource` (source.py), so that a
listener on `nats://...` serves `purelink.subscribe` / `purelink tail` on its
TCP port exactly as one on a data directory does.  A message's body is
already the store's batch format (docs/jetstream.md), so the reply is built
without decoding a record: the bodies are sent back to back, the first one
cut to start at the batch that holds the start position, a batch cut into
parts joined first.  No sendfile (the bytes come over the network from the
cluster, into memory); the subscriber checks every CRC, as it does for a
data directory.

**Stored means quorum-stored**: JetStream delivers a message to a consumer
only once its Raft group committed it, that is once a quorum of replicas
appended it -- what its PubAck, and so the link's "stored", waits for.  A
subscriber therefore never sees a record before it is stored.

**Waiting without spinning**: each subscriber has a `Feed` of its own
(store/jetstream/feed.py: an ephemeral pull consumer, which waits in the
cluster for more and is made again should its server die), starting at the
message that holds the start position (found by binary search,
store/jetstream/reader.py).  One fetch of at most `BATCH` messages is in
flight at a time, on the listener's NATS connection (the one its writer
publishes on: one connection a listener); its completion
unparks the subscriber's thread, which asks for the next ones and sends
what came meanwhile.  A slow subscriber holds at most two fetches: 2 x
`BATCH` messages of at most 1 MiB.  Positions are checked to follow on: a
gap is an ERROR, never a silent skip.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from typing import Final

from ...errors import Error
from ...primitives.parker import Parker
from ...store.jetstream.client import NatsThread, say
from ...store.jetstream.feed import Feed, Message
from ...store.jetstream.layout import (
    BatchHeaders,
    decode_headers,
    decode_marker,
    stream_name,
)
from ...store.jetstream.reader import BatchParts, BelowRetained, JetStreamReader
from ...store.reader import StreamInfo
from .out import Out
from .source import Refused

__all__ = ["BATCH", "JetStreamTailSource"]

BATCH: Final = 4
"""Messages one fetch asks for (each at most 1 MiB)."""


class JetStreamTailSource:
    """The purelink streams of the JetStream cluster that `nats` is connected to, as
    subscriptions read them.  The connection is the listener's: it closes it,
    after this source."""

    def __init__(self, nats: NatsThread) -> None:
        self.store = JetStreamReader(nats.url, nats=nats)
        self._lock = threading.Lock()
        self._readers: set[_JetStreamTailReader] = set()

    def open(self, stream: str, start: int, follow: bool) -> _JetStreamTailReader | None:
        try:
            found = self.store.locate(stream, start)
        except BelowRetained as exc:
            raise Refused("tail_below_retained", str(exc)) from None
        if found is None:
            return None
        seq, position, last_seq = found
        reader = _JetStreamTailReader(self, stream, seq, position, None if follow else last_seq)
        with self._lock:
            self._readers.add(reader)
        return reader

    def position_at(self, stream: str, when: float) -> int:
        return self.store.position_at(stream, when)

    def forget(self, reader: _JetStreamTailReader) -> None:
        with self._lock:
            self._readers.discard(reader)

    def streams(self) -> list[StreamInfo]:
        return [self.store.stream_info(name) for name in self.store.streams()]

    def wake(self) -> None:
        with self._lock:
            readers = list(self._readers)
        for reader in readers:
            reader.parker.unpark()

    def close(self) -> None:
        self.store.close()


class _JetStreamTailReader:
    """One subscriber's read of one JetStream stream (source.TailReader)."""

    def __init__(
        self,
        source: JetStreamTailSource,
        stream: str,
        seq: int,
        position: int,
        end_seq: int | None,
    ) -> None:
        self.parker = Parker()
        self._source = source
        self._stream = stream
        self._name = stream_name(stream)
        self._next_seq = seq
        """The JetStream sequence wanted next."""
        self._position = position
        """The position wanted next (0: whatever the first batch holds)."""
        self._end_seq = end_seq
        """Without follow: the stream's last sequence when the read began."""
        self._parts = BatchParts(stream)
        self._feed: Feed | None = None  # made at the first fetch
        self._fetch: concurrent.futures.Future[list[Message]] | None = None

    # ---- the subscriber's thread ----------------------------------------------------

    def send(self, out: Out) -> bool:
        while True:
            if self._end_seq is not None and self._next_seq > self._end_seq:
                return True
            fetch = self._fetch
            if fetch is None:
                fetch = self._start()
            if not fetch.done():
                return False
            self._fetch = None
            try:
                messages = fetch.result()
            except Error:
                raise
            except Exception as exc:
                raise Error(f"JetStream at {self._source.store.url}: {say(exc)}") from None
            if messages and (self._end_seq is None or messages[-1][0] < self._end_seq):
                self._start()  # the next fetch comes while these are sent
            for message in messages:
                self._take(out, *message)

    def _start(self) -> concurrent.futures.Future[list[Message]]:
        if self._feed is None:
            self._feed = Feed(self._source.store.js, self._name, self._next_seq, BATCH)
        self._fetch = fetch = self._source.store.submit(self._feed.fetch())
        fetch.add_done_callback(self._wake)
        return fetch

    def _wake(self, _: object) -> None:
        self.parker.unpark()

    def ready(self) -> bool:
        fetch = self._fetch
        return fetch is None or fetch.done()

    def ended(self) -> bool:
        return False

    def close(self) -> None:
        self._source.forget(self)
        fetch = self._fetch
        if fetch is not None:
            fetch.cancel()
        with contextlib.suppress(Exception):  # best effort: the cluster drops it anyway
            if self._feed is not None:
                self._source.store.submit(self._feed.close(wait=True))

    def _take(
        self, out: Out, seq: int, headers: dict[str, str], part: bytes, _: float | None = None
    ) -> None:
        """Send what message `seq` holds past the position wanted next."""
        if seq < self._next_seq:
            return  # delivered twice (a consumer made again)
        self._next_seq = seq + 1
        if self._end_seq is not None and seq > self._end_seq:
            return  # after the end of a read without follow: it is done
        if decode_marker(headers) is not None:
            return  # an epoch marker holds no records
        h = self._headers(headers, seq)
        body = self._parts.whole(h, part, seq)
        if body is None:
            return  # the batch's later parts come in the next messages
        position = self._position or h.position
        if h.end <= position:
            return
        if h.position > position:
            raise Error(
                f"stream {self._stream!r}: JetStream message {seq} starts at position "
                f"{h.position} where {position} should come next"
            )
        out.batches(memoryview(body)[_offset_of(body, h.position, position, seq) :])
        self._position = h.end

    def _headers(self, headers: dict[str, str], seq: int) -> BatchHeaders:
        try:
            return decode_headers(headers)
        except ValueError as exc:
            raise Error(f"JetStream message {seq}: {exc}") from None


def _offset_of(body: bytes, first: int, position: int, seq: int) -> int:
    """The byte offset in `body` (batches from position `first`) of the batch
    holding `position`: the walk of docs/jetstream.md over the batch headers."""
    offset = 0
    while True:
        if len(body) - offset < 24:
            raise Error(f"JetStream message {seq}: no batch holds position {position}")
        length = int.from_bytes(body[offset + 16 : offset + 20], "little")
        count = int.from_bytes(body[offset + 20 : offset + 24], "little")
        if length < 24:
            raise Error(f"JetStream message {seq}: a batch header at byte {offset} is bad")
        if first + count > position:
            return offset
        first += count
        offset += length
