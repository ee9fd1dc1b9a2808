"""Retention: remove whole old segments, by bytes and by age, after a grace period.

Why it exists: storing records is half of the job; keeping disks bounded is the
other half (docs/store.md).  Kafka's `retention.bytes` / `retention.ms` and NATS
JetStream's `max_bytes` / `max_age` are the model: whole segments go, oldest
first, never the active one.

Policy (per stream; a stream without its own policy takes the default):

* `max_bytes`: while the stream's segment files hold more than this, the oldest
  closed segment goes.  After a pass a stream holds at most `max_bytes`, or just
  its active segment; between passes it grows by at most one segment, since a
  pass runs after every roll;
* `max_age` (seconds): a closed segment goes once its newest record is older than
  this -- the segment file's mtime, the time of its last write, against the clock
  given (`time.time` by default; a fake one in tests).

When it runs: on its own thread ("purelink-retention"), woken after a segment
rolls (`wake`, called by `StreamLog` through its `on_roll` hook), and on a slow
timer only while some stream has an age policy (bytes change only when a segment
rolls; age changes with time).  With no policy at all there is no thread, so an
idle listener stays asleep.

How a segment goes (QSBR, `purelink.primitives.grace`):

1. unpublish: `StreamLog.retire` drops it from the log's published segment table
   and moves `first_position` past it.  A reader in this process that looks at the
   table from now on cannot find it;
2. `synchronize()` on the DataDir's grace domain: every DataDirReader of this
   process that was online (between looking a segment up in the table and
   opening its own fd on it) has passed a quiescent state.  No reader can still
   be about to open the file;
3. unlink the file (and the `.sum` snapshots that are no longer needed), then
   fsync the folder.

A reader that already holds an fd keeps reading the unlinked file to its end:
POSIX keeps an unlinked file's data while an fd is open.  That is also the only
protection of readers in other processes (a `purelink read` of the directory):
they share no memory with the writer, so they cannot take part in a grace
period.  One that lists the folder, loses the race to the unlink and then fails
to open the file raises `purelink.Error` ("records retained start at N"); it
never sees a gap or a partial record.

The producers' deduplication state must outlive the segments that held it (guarantee
1 of docs/reliability.md: a named producer resumes at its last stored seq).  The `.sum`
snapshot of the newest removed segment -- written when it was closed, and holding
every producer's state as of its end -- is kept, and recovery falls back to it
when no remaining closed segment has a snapshot (`segment.recover`).  A segment
whose snapshot is missing or torn is not removed (logged), as recovery could not
rebuild what it held.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from purelink.primitives.grace import GraceDomain

from .format import SEGMENT_SUFFIX, SUMMARY_SUFFIX, decode_summary, parse_segment_name
from .log import StreamLog
from .segment import fsync_dir
from .times import TIMES_SUFFIX, times_path

__all__ = [
    "Retention",
    "RetentionPolicy",
    "RetentionStatistics",
    "timer_interval",
]

log = logging.getLogger("purelink.store")

MIN_INTERVAL: Final = 1.0
MAX_INTERVAL: Final = 60.0
GRACE_TIMEOUT: Final = 1.0
"""synchronize() gives up after this and retries, so close() is never held up long."""


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How much of a stream to keep; None = no limit."""

    max_bytes: int | None = None
    """Bytes of segment files kept at most (after a pass; the active segment always stays)."""
    max_age: float | None = None
    """Seconds a closed segment is kept after its last write."""

    def __post_init__(self) -> None:
        if self.max_bytes is not None and self.max_bytes < 0:
            raise ValueError(f"retain_bytes must be >= 0, not {self.max_bytes}")
        if self.max_age is not None and not self.max_age > 0:
            raise ValueError(f"retain_age must be > 0 seconds, not {self.max_age}")

    @property
    def active(self) -> bool:
        """Whether this policy ever removes anything."""
        return self.max_bytes is not None or self.max_age is not None


NO_RETENTION: Final = RetentionPolicy()


@dataclass(frozen=True, slots=True)
class RetentionStatistics:
    """A snapshot of a Retention's counters."""

    passes: int
    """Passes over the streams."""
    segments_removed: int
    """Segment files unlinked."""
    bytes_removed: int
    """Bytes of segment files unlinked."""
    grace_periods: int
    """Grace periods waited for (one per stream per pass that removed something)."""
    kept_for_summary: int
    """Segments kept although due, because their producers' snapshot was not whole."""


def timer_interval(policies: Iterable[RetentionPolicy]) -> float | None:
    """Seconds between timed passes: a tenth of the shortest max_age, within
    [1 s, 60 s]; None (no timer) when no policy has an age."""
    ages = [p.max_age for p in policies if p.max_age is not None]
    if not ages:
        return None
    return min(MAX_INTERVAL, max(MIN_INTERVAL, min(ages) / 10))


class Retention:
    """Removes the old segments of a DataDir's streams (see the module docstring).

    `run_once()` does one pass on the calling thread (tests call it with a fake
    clock); `start()` runs passes on a thread of its own, after each roll and on
    the slow timer.
    """

    def __init__(
        self,
        logs: Callable[[], list[StreamLog]],
        default: RetentionPolicy = NO_RETENTION,
        per_stream: Mapping[str, RetentionPolicy] | None = None,
        *,
        clock: Callable[[], float] = time.time,
        grace: GraceDomain | None = None,
    ) -> None:
        """`logs()` lists the streams; `grace` is the domain DataDirReaders of this
        process register with (a new one by default)."""
        self._logs = logs
        self.grace = grace if grace is not None else GraceDomain()
        """The readers' grace domain: a segment is unlinked only after a grace period."""
        self._clock = clock
        self._default = default
        self._per_stream: dict[str, RetentionPolicy] = dict(per_stream or {})
        self._cond = threading.Condition(threading.Lock())
        self._due = False
        self._stop = False
        self._thread: threading.Thread | None = None
        self._run_lock = threading.Lock()  # one pass at a time (thread or caller)
        self._passes = 0
        self._segments_removed = 0
        self._bytes_removed = 0
        self._grace_periods = 0
        self._kept_for_summary = 0

    # ---- policies -------------------------------------------------------------------

    def policy(self, stream: str) -> RetentionPolicy:
        """The policy that applies to `stream`."""
        return self._per_stream.get(stream, self._default)

    def set_policy(self, stream: str, policy: RetentionPolicy | None) -> None:
        """Give `stream` its own policy (None: back to the default); a pass follows."""
        with self._cond:
            if policy is None:
                self._per_stream.pop(stream, None)
            else:
                self._per_stream[stream] = policy
            self._due = True
            self._cond.notify()

    @property
    def active(self) -> bool:
        """Whether any policy may remove anything."""
        return self._default.active or any(p.active for p in self._per_stream.values())

    # ---- the thread -----------------------------------------------------------------

    def start(self) -> None:
        """Run passes on a thread of its own until close()."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name="purelink-retention", daemon=True
            )
            self._thread.start()

    def wake(self, log_: StreamLog | None = None) -> None:
        """Ask for a pass soon (a segment rolled). Cheap: called on the listener thread."""
        with self._cond:
            self._due = True
            self._cond.notify()

    def close(self) -> None:
        """Stop the thread (a pass in progress finishes first). Idempotent."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _loop(self) -> None:
        while True:
            with self._cond:
                interval = timer_interval([self._default, *self._per_stream.values()])
                if not self._due and not self._stop:
                    self._cond.wait(interval)  # None: sleep until a roll or close
                if self._stop:
                    return
                self._due = False
            try:
                self.run_once()
            except Exception:  # a disk error: log it, keep the listener serving
                log.exception("retention pass failed")

    # ---- one pass -------------------------------------------------------------------

    def run_once(self) -> int:
        """One pass over every stream; return the segments removed."""
        with self._run_lock:
            self._passes += 1
            removed = 0
            for stream_log in self._logs():
                policy = self.policy(stream_log.name)
                if policy.active and not stream_log.closed:
                    removed += self._trim(stream_log, policy)
            return removed

    def _trim(self, stream_log: StreamLog, policy: RetentionPolicy) -> int:
        count, sizes = self._due_count(stream_log, policy, self._clock())
        if count == 0:
            return 0
        victims = stream_log.retire(count)
        if not victims:
            return 0
        while not self.grace.synchronize(timeout=GRACE_TIMEOUT):
            if self._stop:  # unpublished but still on disk: the next open finds them again
                return 0
        self._grace_periods += 1
        folder = stream_log.folder
        for (_, path), size in zip(victims, sizes, strict=False):
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
            with contextlib.suppress(FileNotFoundError):  # its stored times go with it
                os.unlink(times_path(path))
            self._segments_removed += 1
            self._bytes_removed += size
        last = victims[-1][0]
        _remove_before(folder, SUMMARY_SUFFIX, last)  # the last one's: the next open needs it
        # and the times of every removed segment, one a crash left behind included
        _remove_before(folder, TIMES_SUFFIX, last + 1)
        fsync_dir(folder)
        log.info(
            "stream %r: retention removed %d segment(s); records retained start at %d",
            stream_log.name,
            len(victims),
            stream_log.first_position or stream_log.segments[0][0],
        )
        return len(victims)

    def _due_count(
        self, stream_log: StreamLog, policy: RetentionPolicy, now: float
    ) -> tuple[int, list[int]]:
        """How many of the oldest segments are due, and their sizes."""
        segments = stream_log.segments
        if len(segments) < 2:
            return 0, []
        stats: list[tuple[int, float]] = []
        for _, path in segments:
            try:
                st = path.stat()
            except FileNotFoundError:  # removed behind our back: leave the stream alone
                return 0, []
            stats.append((st.st_size, st.st_mtime))
        total = sum(size for size, _ in stats)
        count = 0
        for size, mtime in stats[:-1]:  # never the active segment
            over = policy.max_bytes is not None and total > policy.max_bytes
            old = policy.max_age is not None and now - mtime > policy.max_age
            if not (over or old):
                break
            total -= size
            count += 1
        # the newest segment removed must leave a whole producers' snapshot behind
        while count and not _snapshot_ok(
            segments[count - 1][1], segments[count - 1][0], segments[count][0], stats[count - 1][0]
        ):
            self._kept_for_summary += 1
            log.warning(
                "stream %r: retention keeps %s: its producers' snapshot (.sum) is missing or torn",
                stream_log.name,
                segments[count - 1][1],
            )
            count -= 1
        return count, [size for size, _ in stats[:count]]

    # ---- observation ----------------------------------------------------------------

    def statistics(self) -> RetentionStatistics:
        return RetentionStatistics(
            passes=self._passes,
            segments_removed=self._segments_removed,
            bytes_removed=self._bytes_removed,
            grace_periods=self._grace_periods,
            kept_for_summary=self._kept_for_summary,
        )


def _snapshot_ok(path: Path, base: int, next_base: int, size: int) -> bool:
    """Whether the segment's `.sum` is whole and describes it as it is."""
    try:
        summary = decode_summary(path.with_suffix(SUMMARY_SUFFIX).read_bytes())
    except OSError:
        return False
    return (
        summary is not None
        and summary.base == base
        and summary.size == size
        and summary.next_position == next_base
    )


def _remove_before(folder: Path, suffix: str, keep_base: int) -> None:
    """Unlink the `suffix` files (`.sum`, `.times`) of segments below `keep_base`."""
    with os.scandir(folder) as entries:
        names = [e.name for e in entries if e.name.endswith(suffix)]
    for name in names:
        base = parse_segment_name(name[: -len(suffix)] + SEGMENT_SUFFIX)
        if base is not None and base < keep_base:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(folder / name)
