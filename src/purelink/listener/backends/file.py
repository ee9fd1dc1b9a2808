"""The file backend: a listener's streams in a data directory, with group commit.

Why a module of its own: `FileBackend` is the data directory's `Backend`
(listener/storage.py), as jetstream.py is JetStream's; the listener's loop
drives either through the same `StorageDriver`.  `DataDirProducers` is the
data directory's producer table (the core's `ProducerTable`).

`append` writes a drain's batches of a stream to its log (one writev) and
returns the log's last position as the ticket.  Durability, by `sync`:

* ``"none"``: "stored" means written to the OS (a power cut can lose it):
  the position is told durable at once;
* ``"always"``: the log is fdatasynced in `append`, before the loop answers;
* ``"batch"`` (group commit, docs/reliability.md, guarantee 2): the loop never
  calls fdatasync.  `append` puts the stream on a deque of dirty streams
  (append and popleft are atomic, no lock) and `flush` wakes the sync thread
  (an eventfd write) only when it sleeps, once, as a link's queue() wakes
  its thread: the thread says it sleeps, then looks at the deque once more
  before it blocks, so no wakeup is lost.  The thread syncs every dirty
  stream (everything written while one sync ran is covered by the next) and
  puts the durable positions on `events`, then calls `wake()` (the loop's
  eventfd).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from ...errors import Error
from ...protocol.batch import BatchHeader
from ...store.datadir import DataDir
from ...store.log import StreamLog
from ..stats import SyncTimes
from ..storage import FAILED, STORED, NoRoom, StorageEvent, no_room

__all__ = ["DataDirProducers", "FileBackend"]

log = logging.getLogger("purelink.listener")


class DataDirProducers:
    """The producer table (protocol/core_parts.py `ProducerTable`) of a data
    directory: a producer's epoch and last seq, from its stream's log."""

    def __init__(self, data: DataDir, failed: set[str]) -> None:
        self.data = data
        self.failed = failed  # streams a write failed on: no new session may start there

    def producer_state(self, stream: str, pid: int) -> tuple[int, int]:
        log_ = self.data.stream(stream)
        state = log_.producers.get(pid)
        return (state.epoch, state.last_seq) if state is not None else (0, 0)

    def epoch_owner(self, stream: str, pid: int) -> int:
        state = self.data.stream(stream).producers.get(pid)
        return state.owner if state is not None else 0

    def new_epoch(self, stream: str, pid: int, durable: bool, owner: int = 0) -> int:
        if stream in self.failed:
            raise Error(f"stream {stream!r} cannot be written (a store error; see the log)")
        return self.data.stream(stream).new_epoch(pid, durable=durable, owner=owner)

    def forget(self, stream: str, pid: int) -> None:
        self.data.stream(stream).forget(pid)


class FileBackend:
    """A listener's streams in `data`, made durable as `sync` says."""

    def __init__(self, data: DataDir, sync: str) -> None:
        self.data = data
        self.sync = sync
        self.events: deque[StorageEvent] = deque()
        self.failed: set[str] = set()
        self.producers = DataDirProducers(data, self.failed)
        """The core's producer table over the same directory."""
        self.syncs = 0
        self.sync_times = SyncTimes()  # for serve --metrics (purelink/metrics.py)
        self._dirty: deque[str] = deque()  # streams written, not yet handed to a sync
        self._pending = False  # this drain made a stream dirty
        self._asleep = False  # the sync thread is about to sleep or sleeps
        self._stop = False
        self._sync_fd = -1  # blocking eventfd: the sync thread sleeps in a read of it
        self._thread: threading.Thread | None = None
        self._wake: Callable[[], None] = _nothing
        self._sync_failed: set[str] = set()  # said once, by the sync thread

    def start(self, wake: Callable[[], None], on_crash: Callable[[BaseException], None]) -> None:
        """Start the sync thread (sync="batch"); `wake()` after events are put."""
        self._wake = wake
        if self.sync != "batch":
            return
        self._sync_fd = os.eventfd(0, os.EFD_CLOEXEC)

        def run() -> None:
            try:
                self._sync_loop()
            except BaseException as exc:  # a bug: the listener says so loudly
                on_crash(exc)

        self._thread = threading.Thread(target=run, name="purelink-sync", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ the loop's
    def append(self, stream: str, writes: Sequence[tuple[bytes | memoryview, BatchHeader]]) -> int:
        log_: StreamLog = self.data.stream(stream)
        before = log_.last_position
        try:
            last = log_.append(writes)
        except Error as exc:
            if not no_room(exc) or log_.failed:  # a failed fsync, or a write not cut back
                raise
            # the log cut the write back to its last whole batch; what it did write
            # before that is made durable as any other, and the driver is told
            written = log_.last_position
            if written > before:
                self._made(stream, log_, written)
            raise NoRoom(str(exc), written if written > before else None) from exc
        try:
            self._made(stream, log_, last)
        except Error as exc:
            raise Error(str(exc)) from None  # an fsync's ENOSPC is no "no room": see storage.py
        return last

    def _made(self, stream: str, log_: StreamLog, last: int) -> None:
        """Written up to `last`: durable as `sync` says."""
        if self.sync == "none":
            self.events.append((STORED, stream, last))
        elif self.sync == "always":
            self.events.append((STORED, stream, self._timed_sync(log_)))
        else:
            self._dirty.append(stream)
            self._pending = True

    def space(self, stream: str) -> tuple[int, int, int] | None:
        """(device, free bytes, size) of the file system of the stream's folder."""
        log_ = self.data.open_log(stream)
        folder = log_.folder if log_ is not None else self.data.path
        try:
            device = os.stat(folder).st_dev
            fs = os.statvfs(folder)
        except OSError:
            return None
        free = fs.f_bavail * fs.f_frsize
        if fs.f_files and not fs.f_favail:  # no inode left: no new segment either
            free = 0
        return device, free, fs.f_blocks * fs.f_frsize

    def flush(self) -> None:
        if self._pending:
            self._pending = False
            if self._asleep:  # wake the sync thread only if it sleeps, once
                self._asleep = False
                os.eventfd_write(self._sync_fd, 1)

    def streams(self) -> list[str]:
        return self.data.streams()

    # ------------------------------------------------------------ shutdown
    def close(self) -> None:
        """Stop the sync thread and sync every stream (the loop has stopped)."""
        self._stop = True
        if self._sync_fd >= 0:
            os.eventfd_write(self._sync_fd, 1)
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._sync_fd >= 0:
            os.close(self._sync_fd)
            self._sync_fd = -1
        if self.sync == "none":
            return
        for name in self.data.streams():
            try:
                self._timed_sync(self.data.stream(name, create=False))
            except (OSError, Error) as exc:  # a failed log refuses: sync the others
                if name not in self.failed and name not in self._sync_failed:  # said already
                    log.error("stream %s was not synced at close: %s", name, exc)

    # ------------------------------------------------------------ group commit
    def _timed_sync(self, log_: StreamLog) -> int:
        """log_.sync(), counted and timed (the histogram of serve --metrics)."""
        started = time.perf_counter()
        position = log_.sync()
        self.sync_times.observe(time.perf_counter() - started)
        self.syncs += 1
        return position

    def _sync_loop(self) -> None:
        data = self.data
        pending = self._dirty
        wake_fd = self._sync_fd
        while True:
            if not pending:
                if self._stop:
                    return
                self._asleep = True
                if not pending and not self._stop:  # looked again after saying so
                    # blocks; a stale count only wakes it once more.  A signal that
                    # lands on this thread ends it with EINTR, which os.eventfd_read
                    # does not retry (PEP 475 passed it by): look again, as after a wake
                    with contextlib.suppress(InterruptedError):
                        os.eventfd_read(wake_fd)
                self._asleep = False
                continue
            dirty: set[str] = set()
            while pending:
                dirty.add(pending.popleft())
            for stream in dirty:
                log_ = data.stream(stream, create=False)
                try:
                    position = self._timed_sync(log_)
                except (Error, OSError) as exc:  # fail-stop: see listener/storage.py
                    if stream not in self._sync_failed:
                        self._sync_failed.add(stream)
                        log.error(
                            "stream %s is stopped: %s; nothing written after "
                            "position %d is told stored, its links wait, and a restart "
                            "of the listener recovers it from its files",
                            stream,
                            exc,
                            log_.synced_position,
                        )
                        self.events.append((FAILED, stream, 0))
                    continue
                self.events.append((STORED, stream, position))
            with contextlib.suppress(OSError):  # closed at shutdown
                self._wake()


def _nothing() -> None:
    pass
