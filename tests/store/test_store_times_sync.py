"""The times file is fdatasynced once a SYNC_EVERY by the log's syncs, and what
a power cut may take of it comes back later, never earlier.

Why it exists: a sync of the log fdatasyncs the segment, and its times file
only when its last fdatasync is SYNC_EVERY or more ago (at a roll and at close
always): one fdatasync per group commit instead of two.  A power cut may then
lose the newest entries of the active segment's times file, so recovery gives
the batches after the last entry's first batch the segment's last change time
(its mtime before recovery touched it, plus MTIME_SLACK) where that is later: a `since` may
start early there, never late.  The fdatasyncs are counted by the file they
hit; the power cut is the times file cut back to what a sync made durable.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import purelink.store.log as log_module
from purelink.protocol.wire import BatchHeader, encode_batch, verify_batch
from purelink.store import DataDir, Store
from purelink.store.times import MTIME_SLACK, SYNC_EVERY, TIME_ENTRY

T0 = 1_700_000_000.0


class Clock:
    """A settable clock: the wall clock that stamps, and the monotonic one of syncs."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


def batch(first_seq: int) -> tuple[bytes, BatchHeader]:
    raw = encode_batch(1, 1, first_seq, [b"r%06d" % (first_seq + i) for i in range(3)])
    return raw, verify_batch(raw)


def stream(path: Path) -> Path:
    return path / "streams" / "s"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """One fake clock for both: the log's syncs read it as their monotonic time."""
    fake = Clock(T0)
    monkeypatch.setattr(log_module, "time", fake)
    return fake


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The name of every file fdatasynced, in order."""
    names: list[str] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        names.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    yield names


def times_syncs(names: list[str]) -> int:
    return sum(name.endswith(".times") for name in names)


def test_syncs_within_sync_every_fdatasync_the_segment_only(
    tmp_path: Path, clock: Clock, synced: list[str]
) -> None:
    with DataDir(tmp_path, segment_bytes=1 << 20, clock=clock) as data:
        log = data.stream("s")
        synced.clear()
        for i in range(10):  # ten group commits, a new millisecond (entry) each
            clock.now = T0 + i * SYNC_EVERY / 20
            log.append([batch(3 * i + 1)])
            log.sync()
        assert times_syncs(synced) == 1  # the first: the last was long before
        assert len(synced) == 11
        clock.now = T0 + SYNC_EVERY
        log.append([batch(31)])
        log.sync()
        assert times_syncs(synced) == 2  # SYNC_EVERY after the last
        clock.now += 0.001
        log.append([batch(34)])
        log.sync()
        assert times_syncs(synced) == 2
        synced.clear()
    assert synced == ["00000000000000000001.times"]  # the close makes them all durable
    with Store(tmp_path) as store:
        assert len([t for _, t, _ in store.read_timed("s")]) == 36


def test_a_roll_fdatasyncs_the_times_file_before_the_segment(
    tmp_path: Path, clock: Clock, synced: list[str]
) -> None:
    with DataDir(tmp_path, segment_bytes=300, clock=clock) as data:
        log = data.stream("s")
        log.append([batch(1)])
        log.sync()
        synced.clear()
        clock.now += 0.001  # within SYNC_EVERY: no sync of the log would sync the times
        seq = 4
        while len(log.segments) == 1:  # until a batch takes it past 300 bytes: a roll
            log.append([batch(seq)])
            seq += 3
        assert synced[:2] == ["00000000000000000001.times", "00000000000000000001.seg"]


def power_cut(path: Path, keep_entries: int, changed: float) -> None:
    """What a power cut may leave: the active segment's times file without its
    newest entries (not yet fdatasynced), the segment last changed at `changed`."""
    times = stream(path) / "00000000000000000001.times"
    os.truncate(times, keep_entries * TIME_ENTRY)
    os.utime(stream(path) / "00000000000000000001.seg", (changed, changed))


def test_batches_whose_entries_a_power_cut_took_read_with_a_later_time(
    tmp_path: Path, clock: Clock
) -> None:
    with DataDir(tmp_path, segment_bytes=1 << 20, clock=clock) as data:
        log = data.stream("s")
        for i in range(6):  # batch i (positions 3i+1..3i+3) stored at T0 + i/10
            clock.now = T0 + i / 10
            log.append([batch(3 * i + 1)])
            log.sync()
    power_cut(tmp_path, 2, T0 + 0.5)  # the segment's mtime: its last write
    changed = T0 + 0.5 + MTIME_SLACK
    with DataDir(tmp_path, clock=clock) as data:
        assert data.stream("s").last_position == 18
    with Store(tmp_path) as store:
        timed = [(p, t) for p, t, _ in store.read_timed("s")]
        assert timed[:6] == [(p, T0 + (p - 1) // 3 / 10) for p in range(1, 7)]  # kept
        assert timed[6:] == [(p, changed) for p in range(7, 19)]  # later, never earlier
        for i in range(6):  # a `since` at any batch's time misses none of it
            since = datetime.fromtimestamp(T0 + i / 10, UTC)
            assert next(iter(store.read("s", since=since)))[0] <= 3 * i + 1


def test_after_a_kill_only_the_last_entrys_later_batches_may_move(
    tmp_path: Path, clock: Clock
) -> None:
    """After a kill (the page cache keeps every entry) or a close, recovery
    cannot tell that no entry was lost: the batches after the last entry's
    first batch -- stored in its millisecond, or it would have a successor --
    take the segment's last change plus MTIME_SLACK; nothing else moves."""
    with DataDir(tmp_path, segment_bytes=1 << 20, clock=clock) as data:
        log = data.stream("s")
        for i in range(3):
            clock.now = T0 + i
            log.append([batch(3 * i + 1)])
            log.append([batch(3 * i + 10)])  # the same millisecond: no entry of its own
    os.utime(stream(tmp_path) / "00000000000000000001.seg", (T0 + 2, T0 + 2))
    with DataDir(tmp_path, clock=clock):
        pass
    with Store(tmp_path) as store:
        times = [t for _, t, _ in store.read_timed("s")]
        assert times == [T0 + (i // 6) for i in range(15)] + [T0 + 2 + MTIME_SLACK] * 3
    entries = (stream(tmp_path) / "00000000000000000001.times").stat().st_size
    assert entries == 4 * TIME_ENTRY
