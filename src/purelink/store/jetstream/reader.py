"""`JetStreamReader`: the reader of purelink streams kept in JetStream (`Store("nats://...")`).

Why it exists: wherever a data directory is read (`Store`, `purelink read`,
`purelink streams`), a JetStream cluster can be named instead, and it reads
the same: `(position, payload)` in order, from the first record retained,
with `follow=True` waiting for more.  The layout it reads is layout.py's.

How it reads.  A position is found by binary search over the JetStream
stream's sequence numbers (each probe one get from the stream leader, ~log2(messages)
round trips); from there messages are fetched in order, several requests
ahead, and each body is split into its batches, every one checked
(`verify_batch`: magic, version, lengths, CRC-32C) and its position checked
to follow the one before.  Nothing that fails is ever yielded: a message
that does not check out raises `purelink.Error` naming its sequence.
Epoch markers (no records) are skipped.  A follower that has read all that
was stored reads on through a `Feed` (feed.py): a pull consumer of its own,
which waits in the cluster until a quorum stored more -- no polling; a
follower of a stream not created yet looks for it every 10 ms doubling to
1 s.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Coroutine, Generator, Iterator
from typing import Any, Final, TypeVar

from purelink.errors import Error
from purelink.protocol.batch import batch_records, verify_batch
from purelink.protocol.names import validate_stream_name

from ..reader import StreamInfo
from .client import NatsThread, NoAnswer, say
from .feed import GIVE_UP, WAIT, Feed, Message
from .layout import (
    METADATA_KEY,
    STREAM_PREFIX,
    BatchHeaders,
    decode_headers,
    decode_marker,
    stream_name,
)

__all__ = ["BatchParts", "BelowRetained", "JetStreamReader", "split_batches"]

T = TypeVar("T")
AHEAD = 16
"""Direct gets in flight while reading."""
STREAM_POLL_MIN = 0.01
STREAM_POLL_MAX = 1.0
"""A follower of a stream not created yet looks for it every 10 ms doubling to 1 s."""


class BelowRetained(Error):
    """A read from a position below the first record retained."""


def split_batches(body: bytes, h: BatchHeaders, seq: int) -> Iterator[tuple[int, list[bytes]]]:
    """(position, records) of each batch of one message's body, checked."""
    view = memoryview(body)
    offset = 0
    position = h.position
    records = 0
    while offset < len(view):
        try:
            header = verify_batch(view[offset : offset + _length_at(view, offset)])
        except Exception as exc:
            raise Error(f"JetStream message {seq}: batch at byte {offset} is bad: {exc}") from None
        if header.position != position:
            raise Error(
                f"JetStream message {seq}: batch at byte {offset} is at position "
                f"{header.position}, {position} should come next"
            )
        yield position, batch_records(view[offset : offset + header.length], header)
        position += header.count
        records += header.count
        offset += header.length
    if records != h.count:
        raise Error(f"JetStream message {seq}: {records} records, its headers say {h.count}")


class BatchParts:
    """Joins a batch that was cut into parts, one message each (layout.py):
    parts 1..n arrive in a row; anything else is a gap, raised."""

    __slots__ = ("_parts", "_stream")

    def __init__(self, stream: str) -> None:
        self._stream = stream
        self._parts: list[bytes] = []

    def whole(self, h: BatchHeaders, part: bytes, seq: int) -> bytes | None:
        """The whole body once message `seq` (headers `h`, body `part`) completes
        its batch; None while parts are still to come."""
        if h.parts <= 1:
            return part
        if h.part == 1:
            self._parts = [part]
        elif self._parts and h.part == len(self._parts) + 1:
            self._parts.append(part)
        else:
            raise Error(
                f"stream {self._stream!r}: JetStream message {seq} is part "
                f"{h.part}/{h.parts} of a batch whose earlier parts are missing"
            )
        if h.part < h.parts:
            return None
        body = b"".join(self._parts)
        self._parts = []
        return body


def _length_at(view: memoryview, offset: int) -> int:
    if len(view) - offset < 20:
        raise Error("a batch header is cut short")
    return int.from_bytes(view[offset + 16 : offset + 20], "little")


log = logging.getLogger("purelink.store")

RETRY_FOR: Final = 30.0
"""Seconds a read asks again while the cluster does not answer or has no
leader: several times a JetStream election (a few seconds each)."""


class JetStreamReader:
    """The reader of the streams kept in the JetStream cluster at `url`
    (`nats://h1:4222,...`): a `StoreReader` (store/reader.py), the body of
    `Store("nats://...")`."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 5.0,
        nats: NatsThread | None = None,
        retry_for: float = RETRY_FOR,
    ) -> None:
        """Connects to `url`, or reads over `nats`, a connection someone else
        owns and closes (a listener's, whose subscriptions read through it).
        `retry_for`: seconds a read asks again through an election (`_call`)."""
        self.url = url
        self.retry_for = retry_for
        self._owned = nats is None
        self._nats = NatsThread(url, timeout=timeout) if nats is None else nats
        self._js: Any = self._nats.js

    def __repr__(self) -> str:
        return f"<JetStreamReader {self.url!r}>"

    @property
    def js(self) -> Any:
        """The connection's JetStream context (use it on the connection's loop)."""
        return self._js

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run `coro` on the connection's loop; its future (listener/tail/jetstream.py)."""
        return self._nats.submit(coro)

    def close(self) -> None:
        """Close the connection, if it is this reader's own. Idempotent."""
        if self._owned:
            self._nats.close()

    def __enter__(self) -> JetStreamReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------ listing
    def streams(self) -> list[str]:
        """Names of the purelink streams in the cluster, sorted."""

        async def names() -> list[str]:
            out = []
            for info in await self._js.streams_info():
                cfg = info.config
                meta = cfg.metadata or {}
                if cfg.name.startswith(STREAM_PREFIX) and METADATA_KEY in meta:
                    out.append(meta[METADATA_KEY])
            return sorted(out)

        return list(self._call(names))

    def _info(self, stream: str) -> Any:
        """The JetStream stream's info, or None when it does not exist."""
        validate_stream_name(stream)
        nats = _nats_module()

        async def info() -> Any:
            try:
                return await self._js.stream_info(stream_name(stream))
            except nats.js.errors.NotFoundError:
                return None

        return self._call(info)

    def last(self, stream: str) -> int:
        """Position of the last record stored (0 when empty or unknown)."""
        info = self._info(stream)
        if info is None or not info.state.messages:
            return 0
        return int(self._call(lambda: self._last_end(stream_name(stream), info.state.last_seq))) - 1

    def first(self, stream: str) -> int:
        """Position of the first record retained (0 when empty or unknown)."""
        info = self._info(stream)
        if info is None or not info.state.messages:
            return 0
        found = self._call(
            lambda: self._batch_at_or_after(stream_name(stream), info.state.first_seq)
        )
        return 0 if found is None else found[1].position

    def stream_info(self, stream: str) -> StreamInfo:
        """first, last, records and bytes (the JetStream stream's, per replica)."""
        info = self._info(stream)
        if info is None:
            return StreamInfo(stream, 0, 0, 0, 0)
        first, last = self.first(stream), self.last(stream)
        newest = (
            self._call(lambda: self._get(stream_name(stream), info.state.last_seq))
            if info.state.messages
            else None
        )
        return StreamInfo(
            stream,
            first,
            last,
            last - first + 1 if first else 0,
            info.state.bytes,
            newest[3] if newest is not None else None,
        )

    # ------------------------------------------------------------ reading
    def read(
        self, stream: str, start: int = 1, stop: int | None = None, follow: bool = False
    ) -> Iterator[tuple[int, bytes]]:
        """(position, payload) from `start` (inclusive) to `stop` (exclusive;
        None = all stored when called), as the file store's `read`: `start` 0 or
        1 is the first record retained; a later start below it raises."""
        return ((p, r) for p, _, r in self.read_timed(stream, start, stop, follow))

    def read_timed(
        self, stream: str, start: int = 1, stop: int | None = None, follow: bool = False
    ) -> Iterator[tuple[int, float | None, bytes]]:
        """As `read`, with when each record was stored: the JetStream message's
        own time (the cluster stamps every message it stores), Unix seconds."""
        if start < 0:
            raise ValueError(f"start must be >= 0, not {start}")
        validate_stream_name(stream)
        return self._read(stream, start, stop, follow)

    def position_at(self, stream: str, when: float) -> int:
        """The position of the first record stored at or after `when` (Unix
        seconds): a binary search over the messages' own times, ~log2(messages)
        gets; the position after the last record when none is that recent, 1
        for an unknown stream."""
        validate_stream_name(stream)
        info = self._info(stream)
        if info is None:
            return 1
        name, state = stream_name(stream), info.state
        found = self._call(lambda: self._seek_time(name, state.first_seq, state.last_seq, when))
        return found if found is not None else self.last(stream) + 1

    def locate(self, stream: str, start: int) -> tuple[int, int, int] | None:
        """Where a read from position `start` (0 or 1: the first retained) begins:
        (the JetStream sequence to read from, the start position, the stream's
        last sequence now); None when the stream does not exist.  The start
        position is 0 when the stream holds no batch yet and `start` is the
        beginning: the first batch to come sets it.  Raises BelowRetained for a
        later start below the first record retained."""
        name = stream_name(stream)
        info = self._info(stream)
        if info is None:
            return None
        state = info.state
        first = (
            self._call(lambda: self._batch_at_or_after(name, state.first_seq))
            if state.messages
            else None
        )
        if first is None:  # nothing yet, or epoch markers only
            return state.last_seq + 1, 0 if start <= 1 else start, state.last_seq
        retained = first[1].position
        if start <= 1:
            start = retained
        elif start < retained:
            raise BelowRetained(
                f"stream {stream!r}: records retained start at {retained}, cannot read from {start}"
            )
        seq = self._call(lambda: self._seek(name, state.first_seq, state.last_seq, start))
        return seq, start, state.last_seq

    def _read(
        self, stream: str, start: int, stop: int | None, follow: bool
    ) -> Iterator[tuple[int, float | None, bytes]]:
        name = stream_name(stream)
        limit = stop if stop is not None else 1 << 64
        if limit <= start:
            return
        found = self._locate_following(stream, start) if follow else self.locate(stream, start)
        if found is None:
            return
        seq, start, end_seq = found
        feeds: list[Feed] = []  # the one a follower makes once it caught up
        try:
            yield from self._records(stream, name, seq, start, end_seq, limit, follow, feeds)
        finally:
            for feed in feeds:  # best effort: the cluster drops it anyway
                with contextlib.suppress(Exception):
                    self._nats.submit(feed.close(wait=True))

    def _locate_following(self, stream: str, start: int) -> tuple[int, int, int]:
        """`locate` for a follower: waits for the stream to exist, and rides over a
        cluster that fails to answer for up to GIVE_UP seconds (a stream being
        created has no leader for a moment, a leader may be elected anew)."""
        pause = STREAM_POLL_MIN
        failing = 0.0
        while True:
            try:
                found = self.locate(stream, start)
            except BelowRetained:
                raise
            except Error:
                now = time.monotonic()
                failing = failing or now
                if now - failing > GIVE_UP:
                    raise
                found = None
            else:
                failing = 0.0
            if found is not None:
                return found
            time.sleep(pause)
            pause = min(pause * 2, STREAM_POLL_MAX)

    def _records(
        self,
        stream: str,
        name: str,
        seq: int,
        position: int,
        end_seq: int,
        limit: int,
        follow: bool,
        feeds: list[Feed],
    ) -> Iterator[tuple[int, float | None, bytes]]:
        parts = BatchParts(stream)
        while position < limit:
            if seq <= end_seq:  # stored when the read began (or when it last looked)
                ahead = min(end_seq, seq + AHEAD - 1)
                msgs = self._call(functools.partial(self._fetch, name, seq, ahead))
            elif not follow:
                return
            else:  # caught up: from here on the cluster tells when there is more
                if not feeds:
                    feeds.append(Feed(self._js, name, seq, AHEAD))
                msgs = self._follow(feeds, name, seq)
                if not msgs:
                    continue
                end_seq = max(end_seq, msgs[-1][0])
            for mseq, headers, part, when in msgs:
                if mseq < seq:
                    continue  # a feed made again may bring a message twice
                seq = mseq + 1
                position = yield from self._message_records(
                    stream, (mseq, headers, part, when), parts, position, limit
                )
                if position >= limit:
                    return
            if not msgs:
                seq = end_seq + 1

    def _follow(self, feeds: list[Feed], name: str, seq: int) -> list[Any]:
        """The feed's next messages.  Through an election the feed is made again
        from `seq` (not asked again: a fetch cut short may have pulled messages
        it never handed over), for up to `retry_for` seconds."""
        deadline = time.monotonic() + self.retry_for
        pause = 0.05
        while True:
            try:
                return list(self._nats.call(feeds[0].fetch(), WAIT + 3 * self._nats.timeout))
            except Exception as exc:
                if not _transient(exc) or time.monotonic() >= deadline:
                    if isinstance(exc, Error):
                        raise
                    raise Error(f"JetStream at {self.url}: {say(exc)}") from None
                log.debug("JetStream at %s: %s; following again from %d", self.url, say(exc), seq)
                with contextlib.suppress(Exception):
                    self._nats.call(feeds[0].close())
                feeds[:] = [Feed(self._js, name, seq, AHEAD)]
                time.sleep(pause)
                pause = min(pause * 2, 1.0)

    def _message_records(
        self,
        stream: str,
        message: Message,
        parts: BatchParts,
        position: int,
        limit: int,
    ) -> Generator[tuple[int, float | None, bytes], None, int]:
        """Yield the records of a message from `position` (0: from the
        first batch's) up to `limit`; return the position wanted next."""
        mseq, headers, part, when = message
        if decode_marker(headers) is not None:
            return position  # an epoch marker holds no records
        h = self._headers(headers, mseq)
        body = parts.whole(h, part, mseq)
        if body is None:
            return position  # the batch's later parts come in the next messages
        if position == 0:  # from the beginning of a stream that was empty
            position = h.position
        if h.end <= position:
            return position
        if h.position > position:
            raise Error(
                f"stream {stream!r}: JetStream message {mseq} starts at position "
                f"{h.position} where {position} should come next"
            )
        for pos, records in split_batches(body, h, mseq):
            for i, record in enumerate(records):
                p = pos + i
                if p >= limit:
                    return position
                if p >= position:
                    yield p, when, record
                    position = p + 1
        return position

    # ------------------------------------------------------------ on the loop
    async def _get(self, name: str, seq: int) -> Message | None:
        """The message at `seq` or the next one after it; None past the end."""
        nats = _nats_module()
        try:
            msg = await self._js.get_msg(name, seq, next=True)
        except nats.js.errors.NotFoundError:
            return None
        when = msg.time.timestamp() if msg.time is not None else None
        return msg.seq, dict(msg.headers or {}), msg.data or b"", when

    async def _fetch(self, name: str, lo: int, hi: int) -> list[Message]:
        """Messages lo..hi in order (fewer where some were removed)."""
        got = await asyncio.gather(*(self._get(name, s) for s in range(lo, hi + 1)))
        out: list[Message] = []
        last = lo - 1
        for m in got:
            if m is not None and m[0] > last:  # `next` may return the same later message twice
                out.append(m)
                last = m[0]
        return out

    async def _batch_at_or_after(self, name: str, seq: int) -> tuple[int, BatchHeaders] | None:
        while True:
            m = await self._get(name, seq)
            if m is None:
                return None
            if decode_marker(m[1]) is None:
                return m[0], self._headers(m[1], m[0])
            seq = m[0] + 1

    async def _last_end(self, name: str, last_seq: int) -> int:
        """The position after the last record: from the last batch message,
        walking back over epoch markers."""
        seq = last_seq
        while seq >= 1:
            m = await self._get(name, seq)
            if m is not None and m[0] == seq and decode_marker(m[1]) is None:
                return self._headers(m[1], seq).end
            seq -= 1
        return 1

    async def _seek_time(self, name: str, lo: int, hi: int, when: float) -> int | None:
        """The position of the first batch in a message stored at or after
        `when`, by a binary search over the sequences lo..hi; None if none."""
        first = None
        while lo <= hi:
            mid = (lo + hi) // 2
            m = await self._get(name, mid)
            if m is None or m[0] > hi:
                hi = mid - 1
            elif m[3] is not None and m[3] >= when:
                first, hi = m[0], mid - 1
            else:
                lo = m[0] + 1
        if first is None:
            return None
        found = await self._batch_at_or_after(name, first)  # past epoch markers
        return found[1].position if found is not None else None

    async def _seek(self, name: str, lo: int, hi: int, position: int) -> int:
        """The first sequence whose batch may hold `position` (the last batch
        message starting at or before it)."""
        best, part = lo, 1
        while lo <= hi:
            mid = (lo + hi) // 2
            found = await self._batch_at_or_after(name, mid)
            if found is None or found[0] > hi:
                hi = mid - 1
                continue
            mseq, h = found
            if h.position <= position:
                best, part = mseq, h.part
                lo = mseq + 1
            else:
                hi = mid - 1
        return best - (part - 1)  # a cut batch is read from its first part

    @staticmethod
    def _headers(headers: dict[str, str], seq: int) -> BatchHeaders:
        try:
            return decode_headers(headers)
        except ValueError as exc:
            raise Error(f"JetStream message {seq}: {exc}") from None

    def _call(self, make: Callable[[], Coroutine[Any, Any, T]], timeout: float | None = None) -> T:
        """Run the coroutine `make()` gives on the connection's loop, and return its
        result.  Through a leader election or a node going down -- no answer in
        time, "no responders", JetStream unavailable -- it asks again (a new
        `make()`: every call here only reads) for up to `retry_for` seconds, and
        says so at debug level; anything else, or still no answer after that,
        raises purelink.Error."""
        deadline: float | None = None
        pause = 0.05
        while True:
            try:
                return self._nats.call(make(), timeout)
            except Exception as exc:
                if not _transient(exc):
                    if isinstance(exc, Error):
                        raise
                    raise Error(f"JetStream at {self.url}: {say(exc)}") from None
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.retry_for
                if now >= deadline:
                    raise Error(
                        f"JetStream at {self.url}: {say(exc)} "
                        f"(asked again for {self.retry_for:g} s)"
                    ) from None
                log.debug("JetStream at %s: %s; asking again", self.url, say(exc))
                time.sleep(min(pause, deadline - now))
                pause = min(pause * 2, 1.0)


def _transient(exc: BaseException) -> bool:
    """Whether a failed read may pass if asked again: no answer in time, no
    responders, JetStream unavailable (a meta or stream leader election)."""
    if isinstance(exc, NoAnswer | TimeoutError):
        return True
    nats = _nats_module()
    return isinstance(
        exc,
        nats.errors.TimeoutError
        | nats.errors.NoRespondersError
        | nats.errors.ConnectionReconnectingError
        | nats.js.errors.ServiceUnavailableError,
    )


def _nats_module() -> Any:
    import nats.js.errors  # noqa: PLC0415 - optional dependency

    return nats
