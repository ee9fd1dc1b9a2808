"""The storage driver: one backend-neutral mover of batches between the core and a backend.

Why it exists: the protocol core hands out batches in order (`take_writes`)
and is told when they are durable (`written`, then `synced`); how a backend
gets them durable differs -- the file backend appends and fdatasyncs with
group commit, the JetStream backend publishes and waits for a quorum's
PubAck, the simulation's backends (testing/backends.py) do it in virtual
time -- but the driving does not.  So
the listener's loop (listener.py) and the simulation (testing/sim.py) run
this same `StorageDriver`, over any `Backend`:

* `append(stream, writes)` takes one drain's in-order batches of a stream
  (their memoryviews point into receive buffers: a store copies what it
  keeps before it returns) and returns a *ticket*, a number that grows per
  stream; it raises `Error` or `OSError` when the store cannot write;
* `flush()` ends a drain's appends (the file store hands its dirty streams
  to its sync thread there);
* durability comes back as *events* on the store's `events` deque, in
  order: ``(STORED, stream, t)`` -- everything of `stream` up to ticket `t`
  is durable -- or ``(FENCED, stream, producer)`` -- a newer session of that
  producer lives elsewhere (a shared store); the driver hands them to the
  core (`synced`, `fence_producer`) when `take_events()` is called.  One
  deque keeps them in the order the store said them: a producer is fenced
  before a ticket covering its refused batches is told.

The core compares only the numbers it was given in `written` with those in
`synced`, so the file store's positions serve as tickets as well as
JetStream's counters do.

No room is not a failure.  A write that fails because the disk is full
(ENOSPC, EDQUOT) leaves the log cut back to its last whole batch (the log
does that); the driver tells the core (`write_full`: the stream's sessions
end with REFUSE(disk_full) and its links wait, then resend what was not
stored) and looks again after a backoff (0.1 s, doubling to 5 s): once the
stream's file system has `RESUME_ROOM` bytes free above the min-free mark,
the stream goes on, without a restart.  The min-free mark (`min_free`: bytes,
or a fraction of the file system) is looked at every `SPACE_EVERY` seconds
while streams are written: below it, the streams on that file system are
treated as full before the disk is, and only they.

Any other write failure, and a failed sync (FAILED: after fsyncgate, the
kernel may have dropped the dirty pages, so nothing written since the last
good sync can be trusted), stops a stream: nothing more of it is told
stored, nothing more is written to it until a restart (a later batch stored
after the gap would make its producer's "stored" cover the records lost in
it), and its sessions end, and new ones are refused, with `stream_failed`:
the links wait, and a restart recovers the stream from its files.
"""

from __future__ import annotations

import errno
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from ..errors import Error
from ..protocol.batch import BatchHeader
from ..protocol.listener_core import ListenerCore

__all__ = [
    "FAILED",
    "FENCED",
    "RESUME_ROOM",
    "SPACE_EVERY",
    "STORED",
    "Backend",
    "MinFree",
    "NoRoom",
    "StorageDriver",
    "StorageEvent",
    "no_room",
]

log = logging.getLogger("purelink.listener")

STORED: Final = 0
FENCED: Final = 1
FAILED: Final = 2
StorageEvent = tuple[int, str, int]
"""(STORED, stream, ticket), (FENCED, stream, producer id), or (FAILED, stream,
0): a sync of the stream failed, and nothing of it is told stored any more."""
SPACE_EVERY: Final = 0.5
"""Seconds between looks at the free space of the file systems being written."""
RESUME_ROOM: Final = 1 << 20
"""Bytes free above the min-free mark before a stream with no room goes on (or
1/64 of the file system, on one smaller than 64 MiB)."""
_BACKOFF: Final = (0.1, 5.0)  # first and longest wait before a full stream is looked at again
_NO_ROOM: Final = frozenset({errno.ENOSPC, errno.EDQUOT})


def no_room(exc: BaseException) -> bool:
    """Whether a store's failure was a full disk or quota (ENOSPC, EDQUOT),
    raised as such or as the cause of the store's own Error."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _NO_ROOM:
            return True
        seen = seen.__cause__
    return False


class NoRoom(Error):
    """A backend's append ran out of room: `ticket` covers the batches it did
    write before that (None: none), which it makes durable as any others."""

    def __init__(self, message: str, ticket: int | None) -> None:
        super().__init__(message)
        self.ticket = ticket


@dataclass(frozen=True)
class MinFree:
    """The low-space mark: `bytes`, or `fraction` of the file system's size."""

    bytes: int = 0
    fraction: float = 0.0

    def of(self, total: int) -> int:
        return max(self.bytes, int(self.fraction * total))

    def __str__(self) -> str:
        return f"{self.fraction * 100:g}%" if self.fraction else f"{self.bytes:,} bytes"


@dataclass
class _NoRoom:
    """A stream the store has no room for, and when to look again."""

    why: str  # "disk_full" or "min_free"
    next_look: float
    wait: float


class Backend(Protocol):
    """A backend: one kind of store as the listener writes it -- what the driver
    needs of it (the core's ProducerTable is apart)."""

    events: deque[StorageEvent]
    """Durability and fencing, in order; the driver takes them from the left."""
    failed: set[str]
    """Streams a write failed on: nothing more is written there."""

    def space(self, stream: str) -> tuple[int, int, int] | None:
        """(device, free bytes, size) of the file system that holds `stream`, or
        None where there is no such thing (a replicated store)."""

    def append(self, stream: str, writes: Sequence[tuple[bytes | memoryview, BatchHeader]]) -> int:
        """Take these batches of `stream` (in order); their ticket."""

    def flush(self) -> None:
        """The drain's appends are done."""


class StorageDriver:
    """Moves batches from a core to a backend, and durability back."""

    def __init__(
        self,
        core: ListenerCore,
        backend: Backend,
        min_free: MinFree = MinFree(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.core = core
        self.backend = backend
        self.min_free = min_free
        self._clock = clock
        self.store_errors = 0
        """Batches received that the store failed to write."""
        self.stream_records: dict[str, int] = {}
        """Records handed to the store since start, per stream."""
        self.stream_bytes: dict[str, int] = {}
        self.no_room: dict[str, _NoRoom] = {}
        """Streams the store has no room for now (their links wait)."""
        self.free: dict[int, tuple[int, int]] = {}
        """(free, size) bytes of each file system written, as last looked at."""
        self._device: dict[str, int] = {}
        self._low: set[int] = set()  # file systems below the min-free mark
        self._need: dict[int, int] = {}  # a low one's drain that did not fit above the mark
        self._wrote = False  # since the last look at the free space
        self._next_space = 0.0
        self._last_wait: dict[str, tuple[float, float]] = {}  # stream: (its last wait, resumed at)
        self._bytes_since = 0  # written since the last look at the free space
        self._look_after = 0  # bytes: look again before half the room to the mark is gone
        self.on_hold: Callable[[str], None] | None = None
        """Called (on the loop thread) when a stream is held or goes on: the
        subscription server tells the stream's followers (`hold`)."""

    def write(self) -> None:
        """Hand the core's in-order batches to the store (after each drain)."""
        core = self.core
        backend = self.backend
        failed = backend.failed
        records, sizes = self.stream_records, self.stream_bytes
        for stream, writes in core.take_writes().items():
            if not writes:
                continue
            if stream in failed:  # see the module header: nothing more is written there
                self.store_errors += len(writes)
                core.stream_failed(stream, final=False)
                continue
            size = sum([h.length for _, h in writes])
            if self._bytes_since + size >= self._look_after:  # near the mark: look first
                self._look_at_space(stream, size)
            if self._low and self._device_of(stream) in self._low:
                self._out_of_room(stream, "min_free", None)
                continue
            try:
                ticket = backend.append(stream, writes)
            except (Error, OSError) as exc:
                if no_room(exc):
                    part = exc.ticket if isinstance(exc, NoRoom) else None
                    self._out_of_room(stream, "disk_full", exc, part)
                    continue
                self.store_errors += len(writes)
                self._fail(stream, final=False)
                log.error(
                    "stream %s is stopped: %s; its links wait, and a restart of "
                    "the listener recovers it from its files",
                    stream,
                    exc,
                )
                continue
            self._wrote = True
            core.written(stream, ticket)
            records[stream] = records.get(stream, 0) + sum([h.count for _, h in writes])
            sizes[stream] = sizes.get(stream, 0) + size
            self._bytes_since += size
        backend.flush()

    # ------------------------------------------------------------ held streams
    def hold(self, stream: str) -> str | None:
        """Why `stream` stores nothing now -- "stream_failed" or "disk_full" (no
        room, or below the min-free mark) -- or None (any thread)."""
        if stream in self.backend.failed:
            return "stream_failed"
        return "disk_full" if stream in self.no_room else None

    def _held(self, stream: str) -> None:
        if self.on_hold is not None:
            self.on_hold(stream)

    def _fail(self, stream: str, *, final: bool) -> None:
        self.backend.failed.add(stream)
        self.core.stream_failed(stream, final=final)
        self._held(stream)

    # ------------------------------------------------------------ room
    def rooms(self) -> dict[str, str]:
        """{stream: why} of the streams with no room (a copy: any thread)."""
        return {stream: state.why for stream, state in list(self.no_room.items())}

    def free_by_stream(self) -> dict[str, int]:
        """{stream: free bytes of its file system, as last looked at} (any thread)."""
        free = dict(self.free)
        return {s: free[d][0] for s, d in list(self._device.items()) if d in free}

    def check(self, now: float) -> float | None:
        """Look at the free space (every SPACE_EVERY while streams are written) and
        at the streams with no room whose wait is over; the time this wants to be
        called again (None: only after more writes)."""
        if self._wrote and now >= self._next_space:
            self._wrote = False
            self._next_space = now + SPACE_EVERY
            self._look_at_space()
        due = None
        for stream, state in list(self.no_room.items()) if self.no_room else ():
            if now >= state.next_look:
                if self._has_room(stream, state):
                    del self.no_room[stream]
                    self._last_wait[stream] = (state.wait, now)
                    self.core.stream_resumed(stream)
                    log.warning("stream %s has room again: storing", stream)
                    self._held(stream)
                    continue
                state.wait = min(state.wait * 2, _BACKOFF[1])
                state.next_look = now + state.wait
            if due is None or state.next_look < due:
                due = state.next_look
        if self._wrote and (due is None or self._next_space < due):
            due = self._next_space
        return due

    def _look_at_space(self, writing: str | None = None, pending: int = 0) -> None:
        """Below the min-free mark, a file system's streams have no room (with
        `pending` bytes about to be written to `writing`'s: a drain that would
        pass the mark is not written).  The next look comes after SPACE_EVERY, or sooner: before a
        write that would take half the room left above the mark on any file
        system (or 64 KiB, whichever is more)."""
        self._bytes_since = 0
        margin: int | None = None
        looked: set[int] = set()
        streams = list(self.stream_records)
        if writing is not None and writing not in self.stream_records:
            streams.append(writing)  # its first write
        for stream in streams:
            space = self.backend.space(stream)
            if space is None:
                continue
            device, free, total = space
            self._device[stream] = device
            self.free[device] = (free, total)
            if device in looked:
                continue
            looked.add(device)
            mark = self.min_free.of(total)
            if margin is None or free - mark < margin:
                margin = free - mark
            need = pending if mark and stream == writing else 0  # mark 0: the write tells
            if free - need < mark and device not in self._low:
                self._low.add(device)
                self._need[device] = need
                log.warning(
                    "%s bytes free, below the min-free mark (%s): its streams "
                    "store nothing more until there is room",
                    f"{free:,}",
                    self.min_free,
                )
        self._look_after = max(margin // 2, 64 << 10) if margin is not None else 1 << 62
        for stream, device in list(self._device.items()):
            if device in self._low and stream not in self.no_room:
                self._out_of_room(stream, "min_free", None)

    def _has_room(self, stream: str, state: _NoRoom) -> bool:
        space = self.backend.space(stream)
        if space is None:  # nothing to look at: try again
            return True
        device, free, total = space
        self.free[device] = (free, total)
        extra = max(min(RESUME_ROOM, total // 64), self._need.get(device, 0))
        room = free >= self.min_free.of(total) + extra
        if room:
            self._low.discard(device)
            self._need.pop(device, None)
        return room

    def _device_of(self, stream: str) -> int | None:
        device = self._device.get(stream)
        if device is None:
            space = self.backend.space(stream)
            if space is not None:
                device = space[0]
                self._device[stream] = device
        return device

    def _out_of_room(
        self, stream: str, why: str, exc: BaseException | None, ticket: int | None = None
    ) -> None:
        self.core.write_full(stream, ticket)
        if stream in self.no_room:
            return
        now = self._clock()
        # out of room again soon after it went on (a quota statvfs does not show,
        # a batch larger than the room): the wait goes on doubling, not from 0.1 s
        wait, resumed = self._last_wait.pop(stream, (0.0, -1e18))
        wait = min(wait * 2, _BACKOFF[1]) if now - resumed < 4 * _BACKOFF[1] else _BACKOFF[0]
        self.no_room[stream] = _NoRoom(why, now + wait, wait)
        self._held(stream)
        if exc is not None:
            log.warning(
                "stream %s: no room on the disk (%s); its links wait, and it "
                "goes on once there is room",
                stream,
                exc,
            )

    def take_events(self) -> None:
        """Hand the store's events to the core, in order."""
        core = self.core
        events = self.backend.events
        while events:
            kind, stream, n = events.popleft()
            if kind == STORED:
                core.synced(stream, n)
            elif kind == FENCED:
                core.fence_producer(stream, n)
            else:  # the backend said why, loudly
                self._fail(stream, final=True)
