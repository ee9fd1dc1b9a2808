"""Retention: whole old segments go, by bytes and by age, after a grace period.

Readers in this process never see a gap, a closed file or a torn record while
retention removes segments under them; a reader overtaken by retention gets a
clear purelink.Error.  Age uses a fake clock (segment mtimes set by the test).
The producers' state survives the segments that held it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from purelink.errors import Error
from purelink.protocol.wire import BatchHeader, encode_batch, verify_batch
from purelink.store import DataDir, Store
from purelink.store.format import ProducerState
from purelink.store.log import StreamLog
from purelink.store.retention import Retention, RetentionPolicy, timer_interval
from purelink.testing import FakeClock

PER_BATCH = 10
SEGMENT = 4096  # 6 batches of 10 x 61 B records per segment


def payload(position: int) -> bytes:
    """A 61-byte record that says which position it must be stored at."""
    return f"{position:010d}".encode() + b"." * 51


def append(log: StreamLog, batches: int, producer: int = 7) -> None:
    """Append `batches` batches of PER_BATCH records, one producer, seq = position."""
    for _ in range(batches):
        first = log.last_position + 1
        raw = encode_batch(
            producer, 1, first, [payload(p) for p in range(first, first + PER_BATCH)]
        )
        header: BatchHeader = verify_batch(raw)
        log.append([(raw, header)])


def seg_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.seg"))


def retention_for(
    data: DataDir, policy: RetentionPolicy, clock: FakeClock | None = None
) -> Retention:
    """A Retention driven by the test (run_once), sharing the DataDir's grace domain."""
    return Retention(
        lambda: [data.stream(n) for n in data.streams()],
        policy,
        grace=data.grace,
        clock=clock if clock is not None else FakeClock(),
    )


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll a condition about another thread's state (test scaffolding only)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.0005)


def check_contiguous(records: list[tuple[int, bytes]], start: int) -> None:
    assert [p for p, _ in records] == list(range(start, start + len(records)))
    assert all(r == payload(p) for p, r in records)


# ---- policies -------------------------------------------------------------------------


def test_policies_are_checked() -> None:
    with pytest.raises(ValueError):
        RetentionPolicy(max_bytes=-1)
    with pytest.raises(ValueError):
        RetentionPolicy(max_age=0)
    assert not RetentionPolicy().active
    assert RetentionPolicy(max_bytes=0).active
    assert timer_interval([RetentionPolicy(max_bytes=10)]) is None  # bytes: passes on rolls only
    assert timer_interval([RetentionPolicy(max_age=3600), RetentionPolicy(max_age=50)]) == 5.0
    assert timer_interval([RetentionPolicy(max_age=0.5)]) == 1.0
    assert timer_interval([RetentionPolicy(max_age=10**6)]) == 60.0


def test_no_policy_no_thread(tmp_path: Path) -> None:
    with DataDir(tmp_path, segment_bytes=SEGMENT) as data:
        append(data.stream("s"), 30)
        assert not data.retention.active
        assert not any(t.name == "purelink-retention" for t in threading.enumerate())
        assert len(seg_files(tmp_path / "streams" / "s")) > 3


# ---- by bytes -------------------------------------------------------------------------


def test_bytes_removes_oldest_closed_segments_never_the_active(tmp_path: Path) -> None:
    with DataDir(tmp_path, segment_bytes=SEGMENT) as data:
        log = data.stream("s")
        append(log, 60)
        folder = tmp_path / "streams" / "s"
        before = seg_files(folder)
        assert len(before) >= 9
        limit = 3 * SEGMENT
        retention = retention_for(data, RetentionPolicy(max_bytes=limit))
        removed = retention.run_once()
        after = seg_files(folder)
        assert removed == len(before) - len(after) > 0
        assert after == before[-len(after) :]  # the oldest went, in order
        assert sum(p.stat().st_size for p in after) <= limit
        assert after[-1] == before[-1]  # the active one stays
        first = int(after[0].stem)
        assert log.first_position == first
        assert log.segments[0][0] == first
        store = Store(tmp_path)
        assert store.first("s") == first
        records = list(store.read("s", first))
        check_contiguous(records, first)
        assert records[-1][0] == log.last_position
        assert list(store.read("s", 1)) == records  # 1, the beginning: the first retained
        with pytest.raises(Error, match=f"records retained start at {first}"):
            store.read("s", 2)
        stats = retention.statistics()
        assert (stats.segments_removed, stats.grace_periods) == (removed, 1)
        assert stats.bytes_removed == sum(
            SEGMENT - SEGMENT % (44 + 2 * PER_BATCH + 61 * PER_BATCH) for _ in range(removed)
        )
        assert retention.run_once() == 0  # nothing more is due


def test_zero_bytes_keeps_only_the_active_segment(tmp_path: Path) -> None:
    with DataDir(tmp_path, segment_bytes=SEGMENT) as data:
        log = data.stream("s")
        append(log, 20)
        retention_for(data, RetentionPolicy(max_bytes=0)).run_once()
        assert len(seg_files(tmp_path / "streams" / "s")) == 1
        assert len(log.segments) == 1
        append(log, 1)
        assert log.last_position == 210


def test_producers_survive_the_segments_that_held_them(tmp_path: Path) -> None:
    with DataDir(tmp_path, segment_bytes=SEGMENT) as data:
        log = data.stream("s")
        append(log, 12, producer=1)  # producer 1 only in segments that will go
        append(log, 12, producer=2)
        seen = {p: ProducerState(s.epoch, s.last_seq) for p, s in log.producers.items()}
        retention_for(data, RetentionPolicy(max_bytes=0)).run_once()
        folder = tmp_path / "streams" / "s"
        assert len(seg_files(folder)) == 1
        sums = sorted(folder.glob("*.sum"))
        assert len(sums) == 1  # only the newest removed segment's snapshot is kept
        assert not sums[0].with_suffix(".seg").exists()
    with DataDir(tmp_path, segment_bytes=SEGMENT) as data:  # recovery starts from that snapshot
        log = data.stream("s")
        assert log.producers == seen
        assert log.producers[1].last_seq == 120


def test_a_segment_without_a_whole_snapshot_is_kept(tmp_path: Path) -> None:
    with DataDir(tmp_path, segment_bytes=SEGMENT) as data:
        append(data.stream("s"), 30)
        folder = tmp_path / "streams" / "s"
        segments = seg_files(folder)
        assert len(segments) == 5
        newest_closed = segments[-2].with_suffix(".sum")
        newest_closed.write_bytes(newest_closed.read_bytes()[:-1])  # torn
        retention = retention_for(data, RetentionPolicy(max_bytes=0))
        retention.run_once()
        # all closed segments were due, but the newest one to go must leave a whole
        # snapshot behind: the one before it does, so it goes no further
        assert seg_files(folder) == segments[-2:]
        assert retention.statistics().kept_for_summary == 1


# ---- by age ---------------------------------------------------------------------------


def test_age_with_a_fake_clock(tmp_path: Path) -> None:
    clock = FakeClock(1_000_000.0)
    with DataDir(tmp_path, segment_bytes=SEGMENT) as data:
        log = data.stream("s")
        append(log, 36)
        folder = tmp_path / "streams" / "s"
        segments = seg_files(folder)
        assert len(segments) == 6
        for i, path in enumerate(segments):  # segment i was last written at t0 + 100 i
            os.utime(path, (clock.now + 100 * i, clock.now + 100 * i))
        retention = retention_for(data, RetentionPolicy(max_age=250), clock)
        clock.advance(300)  # ages now 300, 200, 100, ...: only segment 0 is older than 250
        assert retention.run_once() == 1
        assert seg_files(folder) == segments[1:]
        clock.advance(220)  # ages 420, 320, 220 ...: segments 1 and 2
        assert retention.run_once() == 2
        assert seg_files(folder) == segments[3:]
        clock.advance(10_000)  # everything is old, but the active segment stays
        assert retention.run_once() == 2
        assert seg_files(folder) == segments[5:]
        check_contiguous(list(Store(tmp_path).read("s", log.first_position)), log.first_position)


def test_per_stream_policy_overrides_the_default(tmp_path: Path) -> None:
    with DataDir(tmp_path, segment_bytes=SEGMENT) as data:
        for name in ("keep", "trim"):
            append(data.stream(name), 20)
        retention = Retention(
            lambda: [data.stream(n) for n in data.streams()],
            RetentionPolicy(),  # default: keep everything
            {"trim": RetentionPolicy(max_bytes=0)},
            grace=data.grace,
        )
        retention.run_once()
        assert len(seg_files(tmp_path / "streams" / "trim")) == 1
        assert len(seg_files(tmp_path / "streams" / "keep")) > 1
        retention.set_policy("keep", RetentionPolicy(max_bytes=0))
        retention.set_policy("trim", None)  # back to the default
        retention.run_once()
        assert len(seg_files(tmp_path / "streams" / "keep")) == 1


# ---- the thread ------------------------------------------------------------------------


def test_the_thread_runs_after_a_roll(tmp_path: Path) -> None:
    with DataDir(tmp_path, segment_bytes=SEGMENT, retain_bytes=2 * SEGMENT) as data:
        assert data.retention.active
        folder = tmp_path / "streams" / "s"
        log = data.stream("s")
        append(log, 60)

        def sizes() -> list[int] | None:  # each published segment's bytes, oldest first
            try:
                return [p.stat().st_size for _, p in log.segments]
            except FileNotFoundError:
                return None  # the thread unlinked one meanwhile: not settled

        def settled() -> bool:
            # the thread's work is done: every retired segment unlinked and
            # counted, and the closed segments within the policy's 2 segments'
            # bytes (the active one grows on after the last roll's pass, which
            # counted it smaller, until the next roll)
            kept = sizes()
            return (
                data.retention.statistics().segments_removed >= 7
                and [p for _, p in log.segments] == seg_files(folder)
                and kept is not None
                and sum(kept[:-1]) <= 2 * SEGMENT
            )

        wait_until(settled, timeout=30)  # fails ("condition not reached") if it keeps more
        assert len(log.segments) <= 3
    assert not any(t.name == "purelink-retention" for t in threading.enumerate())


def test_set_retention_on_an_open_datadir_starts_the_thread(tmp_path: Path) -> None:
    with DataDir(tmp_path, segment_bytes=SEGMENT) as data:
        append(data.stream("s"), 30)
        data.set_retention("s", retain_bytes=0)
        wait_until(lambda: len(seg_files(tmp_path / "streams" / "s")) == 1, timeout=30)


# ---- readers under retention ----------------------------------------------------------


def test_a_segment_is_unlinked_only_after_the_grace_period(tmp_path: Path) -> None:
    with DataDir(tmp_path, segment_bytes=SEGMENT) as data:
        log = data.stream("s")
        append(log, 20)
        folder = tmp_path / "streams" / "s"
        first_segment = seg_files(folder)[0]
        reader = data.grace.register("looking-up")  # online: may be about to open a segment
        retention = retention_for(data, RetentionPolicy(max_bytes=0))
        worker = threading.Thread(target=retention.run_once)
        worker.start()
        try:
            wait_until(lambda: data.grace.statistics().parks >= 1)
            assert first_segment.exists()  # unpublished, not unlinked
            assert log.segments[0][0] > 1
            with pytest.raises(Error, match="records retained start at"):
                Store(tmp_path).read("s", 2)  # new readers cannot find it any more
            reader.quiescent()
            worker.join(5)
            assert not worker.is_alive()
        finally:
            reader.unregister()
            worker.join(5)
        assert not first_segment.exists()
        assert reader.signals == 1


def test_a_reader_holding_a_segment_reads_it_to_the_end_after_the_unlink(tmp_path: Path) -> None:
    with DataDir(tmp_path, segment_bytes=SEGMENT) as data:
        log = data.stream("s")
        append(log, 30)
        records = Store(tmp_path).read("s", 1)
        got = [next(records)]  # the reader has its own fd on segment 1 now
        base2 = log.segments[1][0]
        retention = retention_for(data, RetentionPolicy(max_bytes=0))
        assert log.retire(1)  # only segment 1 goes (as retention would, grace included)
        assert data.grace.synchronize(timeout=5)  # the paused reader is offline: no wait
        os.unlink(tmp_path / "streams" / "s" / f"{1:020d}.seg")
        assert not (tmp_path / "streams" / "s" / f"{1:020d}.seg").exists()
        got.extend(records)  # the rest of segment 1 through the fd, then segment 2...
        check_contiguous(got, 1)
        assert got[-1][0] == log.last_position
        assert base2 in dict(got)
        assert retention.statistics().segments_removed == 0


def test_an_overtaken_reader_gets_an_error_never_a_gap(tmp_path: Path) -> None:
    with DataDir(tmp_path, segment_bytes=SEGMENT) as data:
        log = data.stream("s")
        append(log, 30)
        records = Store(tmp_path).read("s", 1)
        got = [next(records)]
        retention_for(data, RetentionPolicy(max_bytes=2 * SEGMENT)).run_once()
        first = log.first_position
        assert first > log.segments[0][0] - 1 > 60  # segments 1 and 2 (at least) are gone
        with pytest.raises(Error, match=f"records retained start at {first}"):
            got.extend(records)
        check_contiguous(got, 1)  # what it did yield has no gap: segment 1, read through its fd
        assert len(got) == 60


def test_a_reader_in_another_process_loses_the_race_with_an_error(tmp_path: Path) -> None:
    """No shared memory, no grace period: an fd keeps an opened file, and a
    segment unlinked before it was opened is reported, never skipped."""
    with DataDir(tmp_path, segment_bytes=SEGMENT) as data:
        append(data.stream("s"), 30)
    records = Store(tmp_path).read("s", 1)  # no writer in this process: lists the folder
    got = [next(records)]
    folder = tmp_path / "streams" / "s"
    seg_files(folder)[0].unlink()  # what the writer's retention does meanwhile
    seg_files(folder)[0].unlink()
    with pytest.raises(Error, match="records retained start at"):
        got.extend(records)
    check_contiguous(got, 1)
    assert len(got) == 60


def test_four_readers_while_retention_deletes_under_them(tmp_path: Path) -> None:
    """A writer appends and rolls, retention trims to a few segments after every
    roll, and four readers read from the first retained record again and again.
    Every record a reader gets is whole and in place; the only error allowed is
    the clear one of a reader that retention overtook (it starts over)."""
    data = DataDir(tmp_path, segment_bytes=SEGMENT, retain_bytes=4 * SEGMENT)
    log = data.stream("s")
    store = Store(tmp_path)
    stop = threading.Event()
    problems: list[str] = []
    stats = {"records": [0] * 4, "reads": [0] * 4, "overtaken": [0] * 4, "mid_read": [0] * 4}

    def reader(k: int) -> None:
        while not stop.is_set():
            start = store.first("s") or 1
            try:
                # 1 is the beginning: whatever is retained first when the read starts
                expect = 0 if start == 1 else start
                count = 0
                for position, record in store.read("s", start):
                    expect = expect or position
                    if position != expect or record != payload(position):
                        problems.append(f"reader {k}: {position} (expected {expect})")
                        return
                    expect += 1
                    count += 1
                    if log.first_position > position:
                        stats["mid_read"][k] += 1  # its segment was retired under it
                stats["records"][k] += count
                stats["reads"][k] += 1
            except Error as exc:
                if "records retained start at" not in str(exc):
                    problems.append(f"reader {k}: {exc}")
                    return
                stats["overtaken"][k] += 1
            except Exception as exc:  # a closed file, a torn record: the test fails
                problems.append(f"reader {k}: {type(exc).__name__}: {exc}")
                return

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    # until 20,000 records and a deletion under a reader: on a loaded machine the
    # readers may take a while to be caught mid-read (bounded: then it fails below)
    deadline = time.monotonic() + 60.0
    try:
        while (
            (log.last_position < 20_000 or not sum(stats["mid_read"]))
            and time.monotonic() < deadline
            and not problems
        ):
            append(log, 6)
            time.sleep(0)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        data.close()
    assert not problems, problems[:5]
    assert all(not t.is_alive() for t in threads)
    removed = data.retention.statistics().segments_removed
    assert removed >= 10
    assert all(n > 0 for n in stats["reads"]), stats
    assert sum(stats["records"]) > 1000
    assert sum(stats["mid_read"]) > 0, stats  # deletions did happen under readers
    # what is left on disk is contiguous and whole
    left = Store(tmp_path)
    first = left.first("s")
    check_contiguous(list(left.read("s", first)), first)


# ---- the listener and the command line -------------------------------------------------


def test_listener_takes_retention_kwargs(tmp_path: Path) -> None:
    from purelink import Listener  # noqa: PLC0415 -- only this test binds a socket

    with pytest.raises(ValueError):
        Listener(tmp_path, udp="127.0.0.1:0", retain_bytes=-1)
    with pytest.raises(ValueError):
        Listener(tmp_path, udp="127.0.0.1:0", retention={"../x": (1, None)})
    listener = Listener(
        tmp_path,
        udp="127.0.0.1:0",
        segment_bytes=SEGMENT,
        retain_age=3600,
        retention={"small": (0, None)},
    )
    with listener:
        data = listener._data
        assert data is not None
        assert data.retention.policy("small") == RetentionPolicy(0, None)
        assert data.retention.policy("other") == RetentionPolicy(None, 3600)
        listener.set_retention("other", retain_bytes=10)
        assert data.retention.policy("other") == RetentionPolicy(10, None)
