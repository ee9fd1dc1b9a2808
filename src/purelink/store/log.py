"""One stream's log: append batches, sync them, remember its producers.

Theory of operation.  The listener thread appends verified batches; a sync
thread makes them durable (group commit).  Positions are stamped here, in
order, contiguously: batch k gets `last_position + 1` and moves
`last_position` by its record count.  The bytes of each batch are written as
they arrived except for their first 8, which become the position -- two iovec
entries per batch, one `pwritev` per 512 batches, no record re-encoded.

Invariants that make `sync` safe from another thread without slowing `append`:

* `_last` is published only after the bytes holding it were written, so any
  position <= `_last` is in the page cache of the active segment or of a
  closed segment;
* a segment is fdatasynced *before* its successor becomes active, and the
  swap happens under `_lock`;
* `sync` reads (`_active`, `_last`) under `_lock` and fdatasyncs that segment
  while holding it, so the fd cannot be closed under it and every position
  it reports is durable.  `append` takes the lock only to roll a segment
  (once per `segment_bytes`), never around its writes.

A failed fdatasync is not retried into success: after one, the page cache may
have dropped the dirty pages (the 2018 "fsyncgate"), so the log refuses all
further work and the listener must stop.  A failed write is cut back and
raised; the log stays usable.

A sparse batch index per segment (`BatchIndex`) lets a subscriber start
anywhere in a segment without walking its batch headers from the start
(listener/tail/server.py: a walk costs ~0.45 ms of GIL-held CPU per MiB, and a storm
of subscriptions once slowed a writer 240x).  The writer adds one entry,
O(1), at the first chunk written at least `every` bytes after the previous
entry; the bytes of a segment that was not written by this log (the part
recovered on open, or a closed segment of an earlier run) are walked once,
on first use, by the reader that needs them.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import time
from array import array
from bisect import bisect_right
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from purelink.errors import Closed, Error
from purelink.primitives.parker import Parker
from purelink.protocol.wire import BATCH_HEADER, BatchHeader, position_bytes

from .epochs import EpochsFile
from .format import EPOCHS_FILE, ProducerState, segment_name
from .segment import SegmentWriter, list_segments, recover, write_summary
from .times import TimesWriter, last_ms, recover_times

__all__ = ["INDEX_EVERY", "IOV_MAX", "BatchIndex", "ProducerState", "StreamLog", "walk_batches"]

IOV_MAX: Final = 1024
"""Linux's limit on buffers per writev; each batch takes two."""
_BATCHES_PER_WRITE: Final = IOV_MAX // 2
_MAX_EPOCH: Final = 0xFFFF_FFFF
INDEX_EVERY: Final = 256 << 10
"""Least bytes between two entries of a segment's batch index (more for
segments over 64 MiB: at most ~256 entries, 16 bytes each, per segment)."""
_MAX_CLOSED_INDEXES: Final = 64
"""Indexes of closed segments kept per stream (least recently used go first)."""
_WALK_CHUNK: Final = 64 << 10  # under malloc's mmap threshold: no fresh pages per read
_HEAD = struct.Struct("<Q8xII")  # a stored batch's position, (crc..flags), length, count


class BatchIndex:
    """Where some batches of one segment start: sparse (position, offset) pairs.

    Two parts.  The writer's part starts at (`start`) and grows as the log
    appends to the segment, one entry per `every` bytes at most, under a
    lock that readers take too (once per 256 KiB written: nothing to the
    writer, and safe without a GIL as with one).  The head part
    covers the bytes before the writer's part (`head_end`: a segment
    recovered on open, or a closed segment indexed by a reader): it is built
    by walking the batch headers, once, by the first reader that needs it.
    """

    __slots__ = (
        "_fill_lock",
        "_head",
        "_head_end",
        "_lock",
        "_next",
        "_offsets",
        "_positions",
        "base",
        "every",
    )

    def __init__(self, base: int, start: tuple[int, int] | None, head_end: int, every: int) -> None:
        self.base = base
        """The segment's base position."""
        self.every = every
        """Least bytes between two entries."""
        self._positions = array("Q")
        self._offsets = array("Q")
        self._next = 0  # the writer adds an entry at or after this offset
        self._lock = threading.Lock()
        if start is not None:
            self.add(*start)
        self._head_end = head_end
        empty: tuple[array[int], array[int]] = (array("Q"), array("Q"))
        self._head: tuple[array[int], array[int]] | None = empty if head_end == 0 else None
        self._fill_lock = threading.Lock()

    def entries(self) -> list[tuple[int, int]]:
        """The (position, offset) pairs known now, in order (for tests and tools)."""
        head = self._head or ((), ())
        with self._lock:
            tail = list(zip(self._positions, self._offsets, strict=True))
        return [*zip(*head, strict=True), *tail]

    def add(self, position: int, offset: int) -> None:
        """The writer: the batch at `position` starts at `offset` (written already)."""
        if offset >= self._next:
            with self._lock:
                self._offsets.append(offset)
                self._positions.append(position)
            self._next = offset + self.every

    def floor(self, position: int, fd: int) -> tuple[int, int]:
        """(p, offset) of an indexed batch start with base <= p <= `position`, the
        nearest one known (`fd`: the segment, read if the head part is not built
        yet).  Raises purelink.Error if the segment is damaged."""
        with self._lock:
            positions = self._positions
            if positions and positions[0] <= position:
                i = bisect_right(positions, position) - 1
                return positions[i], self._offsets[i]
        head = self._head or self._fill(fd)
        i = bisect_right(head[0], position) - 1
        return (head[0][i], head[1][i]) if i >= 0 else (self.base, 0)

    def _fill(self, fd: int) -> tuple[array[int], array[int]]:
        with self._fill_lock:
            if self._head is None:
                self._head = _walk_headers(fd, self.base, self._head_end, self.every)
            return self._head


def _walk_headers(fd: int, base: int, end: int, every: int) -> tuple[array[int], array[int]]:
    """Index the batches of bytes [0, end) of a segment (one entry per `every` bytes)."""
    positions, offsets = array("Q"), array("Q")
    walk_batches(fd, 0, base, _NO_LIMIT, end, (positions, offsets, every))
    return positions, offsets


_NO_LIMIT: Final = 1 << 64


def walk_batches(
    fd: int,
    offset: int,
    position: int,
    upto: int,
    end: int,
    index: tuple[array[int], array[int], int] | None = None,
) -> tuple[int, int]:
    """Walk a segment's batch headers from the batch at (`offset`, `position`)
    past every whole batch, within `end` bytes, whose records are all <= `upto`;
    return the (offset, position) where it stopped.  With `index` (positions,
    offsets, every), note a batch start every `every` bytes on the way.
    Raises purelink.Error where the headers do not follow on."""
    unpack = _HEAD.unpack_from
    due = offset
    while offset < end:
        buf = os.pread(fd, min(_WALK_CHUNK, end - offset), offset)
        at = 0
        while len(buf) - at >= BATCH_HEADER:
            pos, length, count = unpack(buf, at)
            if pos != position or length < BATCH_HEADER or count == 0:
                raise Error(f"damaged at offset {offset + at}")
            if pos + count - 1 > upto or offset + at + length > end:
                return offset + at, position
            if index is not None and offset + at >= due:
                index[0].append(pos)
                index[1].append(offset + at)
                due = offset + at + index[2]
            at += length
            position += count
        if at == 0:  # a header cut by `end`: not written yet
            break
        offset += at
    return min(offset, end), position


class StreamLog:
    """The writer's view of one stream: a folder of segment files.

    `append`, `new_epoch`, `forget` and `close` belong to one thread (the
    listener's); `sync` may be called from any thread at any time.
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        name: str,
        *,
        segment_bytes: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Open (and recover) the stream in `folder`, which must exist.  `clock`
        (Unix seconds) stamps each chunk of batches with its stored time
        (times.py)."""
        if segment_bytes < 1:
            raise ValueError("segment_bytes must be positive")
        self.name = name
        """The stream's name."""
        self.folder = Path(folder)
        """The stream's folder."""
        self.producers: dict[int, ProducerState] = {}
        """Every producer known on the stream (rebuilt on open, updated by append)."""
        self._segment_bytes = segment_bytes
        self._lock = threading.Lock()
        self._closed = False
        self._failed: OSError | None = None
        self._first, self._active, self._last = recover(self.folder, name, self.producers)
        self._synced = self._last
        self._synced_size = self._active.size  # the active segment's bytes known durable
        self._clock = clock
        try:
            self._times = self._recover_times()
        except BaseException:
            self._active.close()
            raise
        try:
            self._epochs = EpochsFile(self.folder / EPOCHS_FILE)
        except BaseException:
            self._active.close()
            self._times.close()
            raise
        owners = self._epochs.owners
        for producer, epoch in self._epochs.epochs.items():
            state = self.producers.get(producer)
            if state is None:
                self.producers[producer] = ProducerState(epoch, 0, owners.get(producer, 0))
            elif epoch >= state.epoch:
                state.epoch = epoch
                state.owner = owners.get(producer, 0)
        self.segments: tuple[tuple[int, Path], ...] = tuple(list_segments(self.folder))
        """(base, path) of the segments readers may open, oldest first: replaced
        whole (never changed in place) on a roll and by retention (`retire`)."""
        self.parker = Parker()
        """Unparked after every append (and on close): `Store.read(follow=True)`
        in this process parks on it; free while nobody waits."""
        self.synced_parker = Parker()
        """Unparked after every `sync` (and on close): subscribers (listener/tail/server.py)
        wait on it for records that are stored, not just written."""
        self.on_roll: Callable[[StreamLog], None] | None = None
        """Called (on the appending thread) after a segment rolled: retention's wake."""
        self._every = max(INDEX_EVERY, segment_bytes // 256)
        active = self._active
        self._index = BatchIndex(
            active.base, (self._last + 1, active.size), active.size, self._every
        )
        self._closed_indexes: dict[int, BatchIndex] = {}  # least recently used first
        self._index_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<StreamLog {self.name!r} last={self._last} synced={self._synced}>"

    def _recover_times(self) -> TimesWriter:
        """The active segment's times file, cut to the batches recovery kept;
        times go on from the newest one stamped (the closed segment's if none)."""
        active = self._active
        try:
            before = 0
            if active.base > self._first:
                segments = list_segments(self.folder)
                older = [path for base, path in segments if base < active.base]
                before = last_ms(older[-1]) if older else 0
            return recover_times(active.path, self._last, active.size, before)
        except OSError as exc:
            raise Error(f"stream {self.name!r}: cannot open times of {active.path}: {exc}") from exc

    @property
    def last_position(self) -> int:
        """Position of the last record written (0 when empty)."""
        return self._last

    @property
    def synced_position(self) -> int:
        """Position of the last record known durable."""
        return self._synced

    @property
    def first_position(self) -> int:
        """Position of the first record retained (0 when empty)."""
        return self._first if self._last >= self._first else 0

    # ------------------------------------------------------------ writing

    def append(self, batches: Sequence[tuple[bytes | memoryview, BatchHeader]]) -> int:
        """Write verified batches in order, stamping their positions; return
        the new last position.  The records are in the OS page cache only
        until `sync`.

        Raises ValueError if a batch's length is not its header's, Closed
        after `close`, and purelink.Error if the disk refuses (the batches
        not written are left out; `last_position` says how far it got).
        """
        if self._failed is not None or self._closed:
            self._check()
        seg = self._active
        limit = self._segment_bytes
        stamp = position_bytes
        position = self._last + 1
        size = seg.size
        iov: list[bytes | memoryview] = []
        chunk: list[BatchHeader] = []
        total = 0
        for batch, header in batches:
            length = header.length
            if len(batch) != length:
                if chunk:
                    self._flush(seg, iov, total, chunk, position)
                raise ValueError(f"batch is {len(batch)} bytes, its header says {length}")
            if size + total + length > limit and size + total > 0:
                if chunk:
                    self._flush(seg, iov, total, chunk, position)
                    iov, chunk, total = [], [], 0
                seg = self._roll(position)
                size = 0
            iov.append(stamp(position))
            iov.append(memoryview(batch)[8:] if isinstance(batch, bytes) else batch[8:])
            chunk.append(header)
            total += length
            position += header.count
            if len(chunk) == _BATCHES_PER_WRITE:
                self._flush(seg, iov, total, chunk, position)
                size = seg.size
                iov, chunk, total = [], [], 0
        if chunk:
            self._flush(seg, iov, total, chunk, position)
        self.parker.unpark()
        return self._last

    def _flush(
        self,
        seg: SegmentWriter,
        iov: list[bytes | memoryview],
        total: int,
        chunk: list[BatchHeader],
        end_position: int,
    ) -> None:
        """Write one chunk of batches, then publish it (index, producers, last)."""
        offset = seg.size
        times = self._times
        try:
            mark = times.stamp(self._last + 1, offset, self._clock())
        except OSError as exc:  # the time goes first: nothing of the chunk is written
            raise Error(f"stream {self.name!r}: writing {times.path} failed: {exc}") from exc
        try:
            seg.write(iov, total)
        except OSError as exc:
            times.cut(mark)
            if os.fstat(seg.fd).st_size > seg.size:  # could not cut the partial write back
                self._failed = exc
            raise Error(f"stream {self.name!r}: writing {seg.path} failed: {exc}") from exc
        producers = self.producers
        for h in chunk:
            state = producers.get(h.producer)
            if state is None:
                producers[h.producer] = ProducerState(h.epoch, h.first_seq + h.count - 1)
            else:
                state.last_seq = h.first_seq + h.count - 1
                if h.epoch > state.epoch:  # noqa: PLR1730 - a compare is cheaper than max()
                    state.epoch = h.epoch
        self._index.add(self._last + 1, offset)  # the chunk's first batch; O(1), per chunk
        self._last = end_position - 1  # published last: the bytes are written

    def _roll(self, base: int) -> SegmentWriter:
        """Close the active segment (synced first) and start one at `base`."""
        with self._lock:
            old = self._active
            try:
                self._times.sync()
                os.fdatasync(old.fd)
            except OSError as exc:
                self._failed = exc
                raise Error(f"stream {self.name!r}: fdatasync of {old.path} failed: {exc}") from exc
            self._synced = self._last
            self._synced_size = old.size
            try:  # the times file first: the segment's creation makes both names durable
                times = TimesWriter.open(
                    self.folder / segment_name(base), 0, self._times.last_ms, new=True
                )
            except OSError as exc:
                raise Error(f"stream {self.name!r}: cannot create a times file: {exc}") from exc
            try:
                new = SegmentWriter.create(self.folder, base)
            except OSError as exc:
                times.close()
                raise Error(f"stream {self.name!r}: cannot create a segment: {exc}") from exc
            self._times.close()
            self._times = times
            # the summary speeds up the next open, and retention keeps the newest
            # removed one as the producers' state; recovery scans without it
            with contextlib.suppress(OSError):
                write_summary(self.folder, old.base, old.size, base, self.producers)
            self._active = new
            self._synced_size = new.size
            with self._index_lock:  # the old index stays findable while it is swapped
                self._keep_closed_index(self._index)
                self._index = BatchIndex(base, (base, 0), 0, self._every)
            self.segments = (*self.segments, (base, new.path))
            old.close()
        if self.on_roll is not None:
            self.on_roll(self)
        return new

    def retire(self, count: int) -> tuple[tuple[int, Path], ...]:
        """Unpublish the `count` oldest segments (never the active one) and
        return them; the caller unlinks them after a grace period (retention.py)."""
        with self._lock:
            count = min(count, len(self.segments) - 1)
            if count <= 0:
                return ()
            victims, self.segments = self.segments[:count], self.segments[count:]
            self._first = self.segments[0][0]
        with self._index_lock:
            for base, _ in victims:
                self._closed_indexes.pop(base, None)
        return victims

    def batch_index(self, base: int, fd: int) -> BatchIndex:
        """The batch index of segment `base`, open as `fd` (any thread).  The
        active segment's is kept by the writer; a closed segment's is made on
        first use, and the most recently used `_MAX_CLOSED_INDEXES` are kept."""
        index = self._index
        if index.base == base:
            return index
        with self._index_lock:
            index = self._index
            if index.base == base:
                return index
            found = self._closed_indexes.pop(base, None)
            if found is None:
                found = BatchIndex(base, None, os.fstat(fd).st_size, self._every)
            self._keep_closed_index(found)
        return found

    def _keep_closed_index(self, index: BatchIndex) -> None:
        """Keep a closed segment's index, as the most recently used (under _index_lock)."""
        kept = self._closed_indexes
        kept[index.base] = index
        while len(kept) > _MAX_CLOSED_INDEXES:
            del kept[next(iter(kept))]

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._closed

    @property
    def failed(self) -> bool:
        """Whether the log refuses all work: an fsync failed, or a write that
        failed could not be cut back."""
        return self._failed is not None

    def sync(self) -> int:
        """fdatasync what was appended so far; return the position now durable.

        Safe from any thread while another appends.  Raises purelink.Error
        if an fdatasync ever failed on this log.
        """
        with self._lock:
            if self._failed is not None:
                self._check()
            if self._closed:
                return self._synced
            last = self._last
            if last > self._synced:
                active = self._active
                size = active.size  # with `last`: what this sync makes durable
                try:
                    self._times.sync()  # a durable batch has a durable time
                    os.fdatasync(active.fd)
                except OSError as exc:
                    self._failed = exc
                    cut = self._cut_unsynced(active)
                    raise Error(
                        f"stream {self.name!r}: fdatasync of {active.path} failed: {exc}{cut}"
                    ) from exc
                self._synced = last
                self._synced_size = size
            synced = self._synced
        self.synced_parker.unpark()  # subscribers wait for stored, not written, records
        return synced

    def _cut_unsynced(self, active: SegmentWriter) -> str:
        """After a failed fdatasync the kernel may have dropped the dirty pages and
        marked them clean (fsyncgate): the bytes after the last good sync may
        read back as written yet never reach the disk.  Cut them off, durably,
        so that a restart recovers only what was durable (its links resend the
        rest); the log refuses all work from here on.  What to add to the error."""
        try:
            os.ftruncate(active.fd, self._synced_size)
            os.fdatasync(active.fd)
        except OSError as exc:
            return (
                f"; its unsynced tail could not be cut ({exc}): a restart may read "
                "records that were never made durable"
            )
        active.size = self._synced_size
        return f"; cut back to position {self._synced}, the last one made durable"

    def _check(self) -> None:
        if self._failed is not None:
            raise Error(
                f"stream {self.name!r} failed earlier and accepts no more work: {self._failed}"
            )
        raise Closed(f"stream {self.name!r} is closed")

    # ------------------------------------------------------------ producers

    def new_epoch(self, producer: int, *, durable: bool, owner: int = 0) -> int:
        """The next epoch for `producer`: 1 + the highest known, handed to the
        link instance `owner`.  With durable=True (named producers) it is recorded
        in the epochs file and fdatasynced first, so no restart hands it out again."""
        if self._failed is not None or self._closed:
            self._check()
        state = self.producers.get(producer)
        epoch = (state.epoch if state is not None else 0) + 1
        if epoch > _MAX_EPOCH:
            raise Error(f"stream {self.name!r}: producer {producer} ran out of epochs")
        if durable:
            try:
                self._epochs.record(producer, epoch, owner)
            except OSError as exc:
                raise Error(f"stream {self.name!r}: cannot record an epoch: {exc}") from exc
        if state is None:
            self.producers[producer] = ProducerState(epoch, 0, owner)
        else:
            state.epoch = epoch
            state.owner = owner
        return epoch

    def forget(self, producer: int) -> None:
        """Drop an anonymous producer's state from memory: its link said CLOSE with
        every record durable, so it never comes back, or its session ended
        before it had a record stored, so there is nothing to deduplicate
        against (the next roll's `.sum` snapshot leaves it out too)."""
        self.producers.pop(producer, None)

    def close(self) -> None:
        """Close the files; does not sync (call `sync` first).  Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._active.close()
            self._times.close()
            self._epochs.close()
        self.parker.unpark()  # followers in this process move on to watching the files
        self.synced_parker.unpark()
