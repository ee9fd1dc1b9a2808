"""Stored times in a data directory: stamped by the writer, read back, sought.

A fake clock stamps the batches at known times, across many small segments;
`since`/`until` must land on the exact position by seeking (a few times
files looked at, never the records), and the times must survive torn writes
and recovery.  A store written without times still reads.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import purelink.store.times as times_module
from purelink.errors import Error
from purelink.protocol.wire import BatchHeader, encode_batch, verify_batch
from purelink.store import DataDir, Store
from purelink.store.times import TIME_ENTRY, SegmentTimes

T0 = 1_700_000_000.0
Batch = tuple[bytes, BatchHeader]


class Clock:
    """A settable wall clock."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def batch(first_seq: int, n: int = 3) -> Batch:
    raw = encode_batch(1, 1, first_seq, [b"r%06d" % (first_seq + i) for i in range(n)])
    return raw, verify_batch(raw)


def fill(path: Path, seconds: list[float], *, segment_bytes: int = 300) -> Clock:
    """One batch of 3 records per entry of `seconds`, stored at T0 + that."""
    clock = Clock()
    with DataDir(path, segment_bytes=segment_bytes, clock=clock) as data:
        log = data.stream("s")
        for i, s in enumerate(seconds):
            clock.now = T0 + s
            log.append([batch(3 * i + 1)])
        log.sync()
    return clock


def folder(path: Path) -> Path:
    return path / "streams" / "s"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    fill(tmp_path, [float(i) for i in range(200)])  # batch i (positions 3i+1..3i+3) at T0 + i
    with Store(tmp_path) as s:
        yield s


def test_every_record_reads_with_the_time_its_batch_was_stored(store: Store) -> None:
    assert len(list(folder(store.path or Path()).glob("*.seg"))) >= 50  # many segments
    got = list(store.read_timed("s"))
    assert [(p, t) for p, t, _ in got] == [(p, T0 + (p - 1) // 3) for p in range(1, 601)]
    assert [(p, r) for p, _, r in got] == list(store.read("s"))  # the plain read is unchanged
    assert store.stream_info("s").last_time == T0 + 199


@pytest.mark.parametrize(
    ("since", "position"),
    [
        (T0 + 57, 3 * 57 + 1),  # exactly a batch's time
        (T0 + 56.5, 3 * 57 + 1),  # between two: the later one
        (T0 + 0, 1),
        (T0 - 3600, 1),  # before everything: the first record
        (T0 + 199, 598),
        (T0 + 199.5, 601),  # after everything: the position after the last
    ],
)
def test_position_at_finds_the_first_record_stored_at_or_after(
    store: Store, since: float, position: int
) -> None:
    assert store.position_at("s", datetime.fromtimestamp(since, UTC)) == position


def test_since_and_until_read_by_time(store: Store) -> None:
    since = datetime.fromtimestamp(T0 + 10, UTC)
    until = datetime.fromtimestamp(T0 + 12, UTC).replace(tzinfo=None)  # no zone: UTC
    assert [p for p, _ in store.read("s", since=since, until=until)] == list(range(31, 37))
    assert list(store.read("s", since=datetime.fromtimestamp(T0 + 500, UTC))) == []
    recent = list(store.read_timed("s", since=3600 * 24 * 365 * 100))  # a century ago
    assert len(recent) == 600
    with pytest.raises(ValueError, match="start or since"):
        store.read("s", 5, since=since)
    with pytest.raises(ValueError, match="stop or until"):
        store.read("s", stop=5, until=until)


def test_seeking_looks_at_a_few_times_files_not_the_records(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked: list[Path] = []
    first_time = times_module.first_time
    load = times_module.SegmentTimes.load

    def counting_first(segment: Path) -> tuple[int, int] | None:
        looked.append(segment)
        return first_time(segment)

    def counting_load(segment: Path) -> SegmentTimes:
        looked.append(segment)
        return load(segment)

    monkeypatch.setattr(times_module, "first_time", counting_first)
    monkeypatch.setattr(times_module.SegmentTimes, "load", counting_load)
    segments = len(list(folder(store.path or Path()).glob("*.seg")))
    assert store.position_at("s", datetime.fromtimestamp(T0 + 123, UTC)) == 370
    assert 0 < len(looked) <= segments.bit_length() + 2


def test_times_never_go_back_when_the_clock_does(tmp_path: Path) -> None:
    fill(tmp_path, [10, 20, 5, 30])  # the clock stepped back for the third batch
    with Store(tmp_path) as store:
        assert [t for _, t, _ in store.read_timed("s")][::3] == [T0 + 10, T0 + 20, T0 + 20, T0 + 30]
        assert store.position_at("s", datetime.fromtimestamp(T0 + 15, UTC)) == 4


def test_batches_of_one_millisecond_share_one_entry(tmp_path: Path) -> None:
    fill(tmp_path, [1, 1, 1, 2], segment_bytes=1 << 20)
    entries = (folder(tmp_path) / "00000000000000000001.times").read_bytes()
    assert len(entries) == 2 * TIME_ENTRY
    with Store(tmp_path) as store:
        assert [t for _, t, _ in store.read_timed("s")] == [T0 + 1] * 9 + [T0 + 2] * 3


def test_a_store_written_without_times_reads_and_refuses_since_clearly(tmp_path: Path) -> None:
    fill(tmp_path, [float(i) for i in range(20)])
    for path in folder(tmp_path).glob("*.times"):
        path.unlink()
    with Store(tmp_path) as store:
        assert [p for p, _ in store.read("s")] == list(range(1, 61))
        assert {t for _, t, _ in store.read_timed("s")} == {None}
        assert store.stream_info("s").last_time is None
        with pytest.raises(Error, match="stored without a time"):
            store.position_at("s", datetime.fromtimestamp(T0 + 5, UTC))


def test_a_store_upgraded_midway_seeks_among_the_timed_records(tmp_path: Path) -> None:
    clock = fill(tmp_path, [float(i) for i in range(20)])
    for path in folder(tmp_path).glob("*.times"):
        path.unlink()  # written by a purelink that kept no times
    with DataDir(tmp_path, segment_bytes=300, clock=clock) as data:
        log = data.stream("s")
        for i in range(20, 30):
            clock.now = T0 + i
            log.append([batch(3 * i + 1)])
        log.sync()
    with Store(tmp_path) as store:
        timed = [(p, t) for p, t, _ in store.read_timed("s")]
        assert timed[:60] == [(p, None) for p in range(1, 61)]
        assert timed[60:] == [(p, T0 + (p - 1) // 3) for p in range(61, 91)]
        assert store.position_at("s", datetime.fromtimestamp(T0 + 25, UTC)) == 76
        with pytest.raises(Error, match="records before position 61 were stored without a time"):
            store.position_at("s", datetime.fromtimestamp(T0 + 20, UTC))


def test_a_torn_times_file_is_cut_on_open_and_times_go_on(tmp_path: Path) -> None:
    clock = fill(tmp_path, [1, 2, 3], segment_bytes=1 << 20)
    times = folder(tmp_path) / "00000000000000000001.times"
    with times.open("ab") as f:
        f.write(b"\x07" * (TIME_ENTRY - 5))  # a torn entry
    with DataDir(tmp_path, clock=clock) as data:
        assert times.stat().st_size == 3 * TIME_ENTRY
        clock.now = T0 + 4
        data.stream("s").append([batch(10)])
        data.stream("s").sync()
    with Store(tmp_path) as store:
        assert [t for _, t, _ in store.read_timed("s")][::3] == [T0 + 1, T0 + 2, T0 + 3, T0 + 4]


def test_a_segment_whose_times_never_reached_the_disk_gets_a_late_time(tmp_path: Path) -> None:
    """A power cut can keep a new segment's batches and lose its times file's
    pages: recovery gives them the segment's last change (no earlier than any
    was stored), so `since` may start early there, never miss a record."""
    fill(tmp_path, [float(i) for i in range(20)])  # many segments of 300 bytes
    segments = sorted(folder(tmp_path).glob("*.seg"))
    active = segments[-1]
    active.with_suffix(".times").write_bytes(b"")  # its entries never reached the disk
    stored = datetime(2026, 1, 2, tzinfo=UTC).timestamp()
    os.utime(active, (stored, stored))
    with DataDir(tmp_path) as data:
        assert data.stream("s").last_position == 60
    with Store(tmp_path) as store:
        timed = list(store.read_timed("s"))
        base = int(active.stem)
        assert {t for p, t, _ in timed if p >= base} == {stored}
        assert all(t == T0 + (p - 1) // 3 for p, t, _ in timed if p < base)
        assert store.position_at("s", T0 + 19) <= base  # seeks, early rather than late
        since = datetime.fromtimestamp(stored, UTC)
        assert [p for p, _ in store.read("s", since=since)] == list(range(base, 61))


def test_times_of_batches_cut_as_a_torn_tail_are_cut_too(tmp_path: Path) -> None:
    clock = fill(tmp_path, [1, 2, 3], segment_bytes=1 << 20)
    segment = folder(tmp_path) / "00000000000000000001.seg"
    size = segment.stat().st_size
    os.truncate(segment, size - 5)  # the last batch is torn
    with DataDir(tmp_path, clock=clock) as data:
        log = data.stream("s")
        assert log.last_position == 6
        assert (folder(tmp_path) / "00000000000000000001.times").stat().st_size == 2 * TIME_ENTRY
        clock.now = T0 + 2.5  # a time of its own for the positions handed out again
        log.append([batch(7)])
        log.sync()
    with Store(tmp_path) as store:
        assert [t for _, t, _ in store.read_timed("s")][::3] == [T0 + 1, T0 + 2, T0 + 2.5]


def test_retention_removes_a_segments_times_with_it(tmp_path: Path) -> None:
    fill(tmp_path, [float(i) for i in range(40)])
    before = sorted(p.stem for p in folder(tmp_path).glob("*.seg"))
    assert sorted(p.stem for p in folder(tmp_path).glob("*.times")) == before
    first = folder(tmp_path) / f"{before[0]}.seg"
    first.unlink()  # a crash between a segment's unlink and its times': an orphan
    assert first.with_suffix(".times").exists()
    with DataDir(tmp_path, segment_bytes=300, retain_bytes=1000) as data:
        assert data.retention.run_once() > 0
        assert sorted(p.stem for p in folder(tmp_path).glob("*.times")) == sorted(
            p.stem for p in folder(tmp_path).glob("*.seg")
        )
