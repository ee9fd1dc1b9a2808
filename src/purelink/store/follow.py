"""`Store.read(..., follow=True)` on a data directory: wait for records that are not stored yet.

Why it exists: consumers, replays and audits read a stream while it is being
written and want the next record as soon as it is there, without burning a
core to find out (docs/store.md; Kafka consumers and NATS JetStream push
consumers do the same).

How a follower waits depends on where the writer is:

* **In this process** (a Listener or DataDir open on the same directory): on the
  stream log's `Parker` -- mechanism 2 of docs/design.md.  The follower checks
  `log.last_position`, parks, and `StreamLog.append` calls `parker.unpark()`
  after each append, which costs one attribute load while nobody is parked and
  signals a parked follower once.  Closing the log unparks too, and the
  follower moves on to watching the files.
* **In another process** (`purelink serve` writing, `purelink read --follow`
  reading): there is no shared memory to park on, so the follower watches the
  stream's folder with inotify (through ctypes: `inotify_init1`,
  `inotify_add_watch`).  The kernel reports every write to a segment
  (IN_MODIFY) and every new segment (IN_CREATE) the moment it happens: no poll
  interval to tune, no CPU while idle, and identical unread events coalesce, so
  a busy writer costs a follower one read per wake, not one per append.  The
  watch is armed *before* the read that finds nothing new, so no write is
  missed.  Until the stream's folder exists the parent folder is watched for
  its creation.  Even so the follower looks at least every `BACKSTOP` second,
  because inotify does not see writes made by another host on a network file
  system.
* **Without inotify** (not Linux, or the per-user limit of inotify instances
  reached): a poll that starts at `POLL_MIN` and doubles to `POLL_MAX` while
  nothing comes, and starts over after each record.

Every wake re-reads from the next position through the reader's `read`, so a follower
sees exactly what a plain read would: whole, checksummed batches, positions
without gaps, and `purelink.Error` if retention overtakes it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol, TypeVar, cast

from .format import STREAMS_DIR

if TYPE_CHECKING:
    from .log import StreamLog

__all__ = ["BACKSTOP", "POLL_MAX", "POLL_MIN", "FileWatch", "Followed", "follow_records"]

BACKSTOP: Final = 1.0
"""Seconds a follower waits on inotify before it looks anyway."""
POLL_MIN: Final = 0.001
POLL_MAX: Final = 0.1
"""The poll interval without inotify: from POLL_MIN, doubling to POLL_MAX."""

# <sys/inotify.h>
IN_MODIFY: Final = 0x002
IN_CLOSE_WRITE: Final = 0x008
IN_MOVED_TO: Final = 0x080
IN_CREATE: Final = 0x100
IN_DELETE_SELF: Final = 0x400
IN_MOVE_SELF: Final = 0x800
_FOLDER_MASK: Final = IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE | IN_MOVED_TO
_PARENT_MASK: Final = IN_CREATE | IN_MOVED_TO
_SELF_MASK: Final = IN_DELETE_SELF | IN_MOVE_SELF


Item = TypeVar("Item", tuple[int, bytes], tuple[int, float | None, bytes])
_Read = Callable[[str, int, int | None], Iterator[Item]]


class Followed(Protocol):
    """What a follower needs of the data directory's reader (datadir_reader.py)."""

    @property
    def path(self) -> Path:
        """The data directory."""
        ...

    def read(self, stream: str, start: int, stop: int | None) -> Iterator[tuple[int, bytes]]:
        """The records stored now, from `start` to `stop` (a plain read)."""
        ...

    def writer(self, stream: str) -> tuple[object, StreamLog] | None:
        """The writer and its log of `stream`, when it runs in this process."""
        ...


def follow_records(
    store: Followed,
    stream: str,
    start: int,
    stop: int | None,
    *,
    on_wait: Callable[[], object] | None = None,
    read: Callable[[str, int, int | None], Iterator[Item]] | None = None,
) -> Iterator[Item]:
    """Yield (position, payload) from `start`, waiting for more, until `stop`.

    `on_wait` is called before each wait (`purelink read --follow` flushes its
    output there: once per burst of records, not once per record).  `read`
    replaces `store.read` for each plain read (`read_timed`: items of
    (position, stored time, payload)).
    """
    plain = read if read is not None else cast("_Read[Item]", store.read)
    position = start
    watch: FileWatch | None = None
    stale = 0  # wakes in a row on which the writer said "more" but the files showed none
    try:
        while stop is None or position < stop:
            before = position
            for item in plain(stream, position, stop):
                yield item
                position = item[0] + 1
            if stop is not None and position >= stop:
                return
            if on_wait is not None and position > before:
                on_wait()
            writer = store.writer(stream)
            if writer is not None:
                if watch is not None:
                    watch.close()
                    watch = None
                log = writer[1]
                target = position
                if position == before and log.last_position >= target:
                    stale += 1  # never expected; do not spin on it
                    time.sleep(min(POLL_MIN * (1 << min(stale, 7)), POLL_MAX))
                    continue
                stale = 0
                log.parker.wait(_more(log, target))
                continue
            if watch is None:
                watch = FileWatch(store.path, stream)  # armed: now look once more
                continue
            watch.wait(progress=position > before)
    finally:
        if watch is not None:
            watch.close()


def _more(log: StreamLog, position: int) -> Callable[[], bool]:
    """The follower's predicate: `position` is written, or the log closed."""
    return lambda: log.last_position >= position or log.closed


class _Inotify:
    """The three libc calls, through ctypes; None where they are missing."""

    def __init__(self, libc: ctypes.CDLL) -> None:
        self.init1 = libc.inotify_init1
        self.init1.argtypes = [ctypes.c_int]
        self.init1.restype = ctypes.c_int
        self.add_watch = libc.inotify_add_watch
        self.add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self.add_watch.restype = ctypes.c_int
        self.rm_watch = libc.inotify_rm_watch
        self.rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        self.rm_watch.restype = ctypes.c_int

    @staticmethod
    def load() -> _Inotify | None:
        try:
            return _Inotify(ctypes.CDLL(None, use_errno=True))
        except (OSError, AttributeError):
            return None


_INOTIFY: _Inotify | None = _Inotify.load()


class FileWatch:
    """Wakes a follower when the files of a stream change (another process writes).

    Watches the deepest of DIR/streams/<stream>, DIR/streams, DIR that exists;
    falls back to a backing-off poll without inotify.
    """

    def __init__(self, data_dir: Path, stream: str, *, use_inotify: bool = True) -> None:
        streams = data_dir / STREAMS_DIR
        self._chain = [streams / stream, streams, data_dir]  # deepest first
        self._watched: tuple[Path, int] | None = None  # (path, watch descriptor)
        self._delay = POLL_MIN
        self._fd = -1
        if use_inotify and _INOTIFY is not None:
            self._fd = _INOTIFY.init1(os.O_NONBLOCK | os.O_CLOEXEC)
        self._arm()

    @property
    def inotify(self) -> bool:
        """Whether the kernel tells us of changes (else we poll)."""
        return self._fd >= 0

    def _arm(self) -> None:
        """Watch the deepest path of the chain that exists (if not already)."""
        if self._fd < 0 or _INOTIFY is None:
            return
        for depth, path in enumerate(self._chain):
            if self._watched is not None and self._watched[0] == path:
                return
            mask = (_FOLDER_MASK if depth == 0 else _PARENT_MASK) | _SELF_MASK
            wd = _INOTIFY.add_watch(self._fd, os.fsencode(path), mask)
            if wd >= 0:
                if self._watched is not None:
                    _INOTIFY.rm_watch(self._fd, self._watched[1])
                self._watched = (path, wd)
                return

    def wait(self, *, progress: bool) -> None:
        """Block until something may have changed (or the backstop passes)."""
        if self._fd < 0:
            self._delay = POLL_MIN if progress else min(self._delay * 2, POLL_MAX)
            time.sleep(self._delay)
            return
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        if poller.poll(BACKSTOP * 1000):
            with contextlib.suppress(BlockingIOError):
                while os.read(self._fd, 65536):
                    pass
        self._arm()  # the stream's folder may exist now, or have been replaced

    def close(self) -> None:
        """Release the inotify instance. Idempotent."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._watched = None

    def __repr__(self) -> str:
        watched = self._watched[0] if self._watched is not None else None
        return f"<FileWatch inotify={self.inotify} watching={watched}>"
