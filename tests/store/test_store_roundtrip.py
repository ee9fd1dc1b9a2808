"""Append then read: records come back byte-exact at contiguous positions.

Covers the writer (`DataDir`, `StreamLog.append`) and the reader (`Store`)
together: many batches, large and empty records, reads that start inside a
batch, exclusive stops, segment rolls, producer state and epochs across a
reopen, and a reader that reads while the writer appends.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import purelink.store.datadir_reader as store_module
from purelink.errors import Closed, Error
from purelink.protocol.wire import BatchHeader, encode_batch, encode_large_batch, verify_batch
from purelink.store import DataDir, Store, StreamInfo
from purelink.store.format import ProducerState

Batch = tuple[bytes, BatchHeader]


def make_batch(producer: int, epoch: int, first_seq: int, records: list[bytes]) -> Batch:
    """A verified batch as the listener would hand it to the store."""
    if len(records) == 1 and len(records[0]) > 0xFFFF:
        raw = encode_large_batch(producer, epoch, first_seq, records[0])
    else:
        raw = encode_batch(producer, epoch, first_seq, records)
    return raw, verify_batch(raw)


def record(i: int, size: int = 61) -> bytes:
    return (f"{i}:".encode() * (size // 3 + 1))[:size]


def write(path: Path, groups: list[list[bytes]], *, producer: int = 1, **kwargs: int) -> int:
    """Append each group as one batch of `producer`; return the last position."""
    with DataDir(path, **kwargs) as data:
        log = data.stream("s")
        seq = log.producers[producer].last_seq + 1 if producer in log.producers else 1
        for group in groups:
            log.append([make_batch(producer, 1, seq, group)])
            seq += len(group)
        log.sync()
        return log.last_position


def test_many_batches_round_trip(tmp_path: Path) -> None:
    groups = [[record(i * 10 + j) for j in range(1 + i % 7)] for i in range(300)]
    expected = [r for g in groups for r in g]
    last = write(tmp_path, groups)
    assert last == len(expected)
    store = Store(tmp_path)
    got = list(store.read("s"))
    assert [p for p, _ in got] == list(range(1, len(expected) + 1))
    assert [r for _, r in got] == expected
    assert (store.first("s"), store.last("s")) == (1, len(expected))
    assert store.streams() == ["s"]


def test_append_many_batches_in_one_call_crosses_iov_max(tmp_path: Path) -> None:
    batches = [make_batch(3, 1, i + 1, [record(i)]) for i in range(1500)]
    with DataDir(tmp_path) as data:
        log = data.stream("s")
        assert log.append(batches) == 1500
        assert log.append([]) == 1500
    assert [r for _, r in Store(tmp_path).read("s")] == [record(i) for i in range(1500)]


def test_large_and_empty_records(tmp_path: Path) -> None:
    big = os.urandom(3 << 20)
    groups = [[b""], [b"", b"", b"a"], [big], [b"tail"], [b""]]
    last = write(tmp_path, groups)
    assert last == 7
    assert list(Store(tmp_path).read("s")) == [
        (1, b""),
        (2, b""),
        (3, b""),
        (4, b"a"),
        (5, big),
        (6, b"tail"),
        (7, b""),
    ]


def test_read_from_inside_a_batch_and_stop_is_exclusive(tmp_path: Path) -> None:
    write(tmp_path, [[record(i) for i in range(10)], [record(i) for i in range(10, 20)]])
    store = Store(tmp_path)
    assert [p for p, _ in store.read("s", start=4, stop=7)] == [4, 5, 6]
    assert [p for p, _ in store.read("s", start=8, stop=14)] == [8, 9, 10, 11, 12, 13]
    assert [r for _, r in store.read("s", 15)] == [record(i) for i in range(14, 20)]
    assert list(store.read("s", start=5, stop=5)) == []
    assert list(store.read("s", start=21)) == []
    assert [p for p, _ in store.read("s", start=19, stop=1000)] == [19, 20]
    assert [p for p, _ in store.read("s", start=0, stop=3)] == [1, 2]  # 0 and 1: the beginning
    with pytest.raises(ValueError):
        store.read("s", start=-1)


def test_segments_roll_and_never_split_a_batch(tmp_path: Path) -> None:
    groups = [[record(i, 40 + i % 50)] * (1 + i % 3) for i in range(60)]
    write(tmp_path, groups, segment_bytes=300)
    folder = tmp_path / "streams" / "s"
    segments = sorted(folder.glob("*.seg"))
    assert len(segments) > 10
    position = 1
    for seg in segments:
        assert int(seg.stem) == position  # a segment is named by its first position
        data = seg.read_bytes()
        offset = 0
        while offset < len(data):  # whole batches only, positions contiguous
            header = verify_batch(
                data[offset : offset + int.from_bytes(data[offset + 16 : offset + 20], "little")]
            )
            assert header.position == position
            position += header.count
            offset += header.length
        assert offset == len(data)
    store = Store(tmp_path)
    assert [r for _, r in store.read("s")] == [r for g in groups for r in g]
    total = position - 1
    for start in range(1, total + 1, 7):  # seeks into every segment
        assert [p for p, _ in store.read("s", start, start + 3)] == list(
            range(start, min(start + 3, total + 1))
        )


def test_batch_larger_than_a_segment_gets_its_own(tmp_path: Path) -> None:
    write(tmp_path, [[b"a"], [b"x" * 5000], [b"b"]], segment_bytes=1000)
    names = sorted(p.name for p in (tmp_path / "streams" / "s").glob("*.seg"))
    assert [int(n[:-4]) for n in names] == [1, 2, 3]
    assert [r for _, r in Store(tmp_path).read("s")] == [b"a", b"x" * 5000, b"b"]


def test_every_start_with_a_dense_sparse_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "INDEX_EVERY", 150)
    groups = [[record(i * 5 + j, 20) for j in range(i % 5 + 1)] for i in range(80)]
    expected = [r for g in groups for r in g]
    write(tmp_path, groups, segment_bytes=2000)
    store = Store(tmp_path)
    for start in [*range(len(expected), 0, -1), *range(1, len(expected) + 1)]:
        assert list(store.read("s", start, start + 2)) == [
            (p, expected[p - 1]) for p in range(start, min(start + 2, len(expected) + 1))
        ]


def test_producers_rebuilt_after_reopen(tmp_path: Path) -> None:
    with DataDir(tmp_path, segment_bytes=400) as data:
        log = data.stream("s")
        seqs = {10: 1, 20: 1, 30: 1}
        for i in range(90):
            producer = (10, 20, 30)[i % 3]
            log.append([make_batch(producer, 1 + i // 30, seqs[producer], [record(i)] * 2)])
            seqs[producer] += 2
        before = {p: ProducerState(s.epoch, s.last_seq) for p, s in log.producers.items()}
    assert before == {
        10: ProducerState(3, 60),
        20: ProducerState(3, 60),
        30: ProducerState(3, 60),
    }
    with DataDir(tmp_path, segment_bytes=400) as data:
        assert data.stream("s").producers == before
    for summary in (tmp_path / "streams" / "s").glob("*.sum"):  # the slow way gives the same
        summary.write_bytes(summary.read_bytes()[:-1] + b"?")
    with DataDir(tmp_path, segment_bytes=400) as data:
        assert data.stream("s").producers == before
        assert data.stream("s").last_position == 180


def test_new_epoch_is_durable_only_when_asked(tmp_path: Path) -> None:
    with DataDir(tmp_path) as data:
        log = data.stream("s")
        assert log.new_epoch(5, durable=True) == 1
        assert log.new_epoch(5, durable=True) == 2
        assert log.new_epoch(6, durable=False) == 1
        log.append([make_batch(7, 9, 1, [b"x"])])
        assert log.new_epoch(7, durable=False) == 10
    with DataDir(tmp_path) as data:
        log = data.stream("s")
        assert log.producers[5] == ProducerState(2, 0)
        assert 6 not in log.producers
        assert log.new_epoch(5, durable=True) == 3
        assert log.new_epoch(6, durable=True) == 1
        assert log.new_epoch(7, durable=True) == 10  # from the batch: 10 was never recorded
    with DataDir(tmp_path) as data:
        log = data.stream("s")
        assert (log.producers[5].epoch, log.producers[6].epoch, log.producers[7].epoch) == (
            3,
            1,
            10,
        )


def test_reader_reads_while_the_writer_appends(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    store = Store(tmp_path / "data")  # opened before the writer exists
    assert (store.streams(), store.last("s"), list(store.read("s"))) == ([], 0, [])
    with DataDir(tmp_path / "data", segment_bytes=2000) as data:
        log = data.stream("s")
        assert (store.streams(), store.first("s"), store.last("s")) == (["s"], 0, 0)
        seen: list[tuple[int, bytes]] = []
        seq = 1
        for i in range(40):
            records = [record(i * 3 + j) for j in range(3)]
            log.append([make_batch(1, 1, seq, records)])
            seq += 3
            seen.extend(store.read("s", start=len(seen) + 1))
            assert store.last("s") == log.last_position == len(seen)
        assert seen == list(enumerate((record(i) for i in range(120)), start=1))
        # a batch the writer is still writing: the reader stops before it
        torn = make_batch(1, 1, seq, [b"half-written"])[0]
        active = sorted((tmp_path / "data" / "streams" / "s").glob("*.seg"))[-1]
        with active.open("ab") as f:
            f.write((121).to_bytes(8, "little") + torn[8:30])
        assert store.last("s") == 120
        assert list(store.read("s", 118)) == [(p, record(p - 1)) for p in (118, 119, 120)]
        log.append([make_batch(1, 1, seq, [b"whole"])])  # overwrites the torn bytes
        assert list(store.read("s", 120)) == [(120, record(119)), (121, b"whole")]
        info = store.stream_info("s")
        assert info == StreamInfo(
            "s",
            1,
            121,
            121,
            sum(p.stat().st_size for p in active.parent.glob("*.seg")),
            info.last_time,
        )
        assert info.last_time is not None
        assert info.last_time == next(store.read_timed("s", 121))[1]


def test_unknown_stream_is_empty_and_bad_names_are_refused(tmp_path: Path) -> None:
    write(tmp_path, [[b"a"]])
    store = Store(tmp_path)
    assert (store.first("nope"), store.last("nope"), list(store.read("nope"))) == (0, 0, [])
    assert store.stream_info("nope") == StreamInfo("nope", 0, 0, 0, 0)
    with pytest.raises(ValueError):
        store.read("../s")
    with pytest.raises(Error):
        Store(tmp_path / "missing")


def test_start_below_first_retained_raises(tmp_path: Path) -> None:
    write(tmp_path, [[record(i)] for i in range(20)], segment_bytes=250)
    folder = tmp_path / "streams" / "s"
    first_segment = sorted(folder.glob("*.seg"))[0]
    first_segment.unlink()  # what retention does
    store = Store(tmp_path)
    first = store.first("s")
    assert first > 1
    with pytest.raises(Error, match=f"start at {first}"):
        store.read("s", first - 1)
    assert [p for p, _ in store.read("s", first)] == list(range(first, 21))
    assert [p for p, _ in store.read("s", 1)] == list(range(first, 21))  # the beginning


def test_append_checks_lengths_and_refuses_after_close(tmp_path: Path) -> None:
    data = DataDir(tmp_path)
    log = data.stream("s")
    raw, header = make_batch(1, 1, 1, [b"abc"])
    with pytest.raises(ValueError):
        log.append([(raw + b"x", header)])
    assert log.last_position == 0
    log.append([(memoryview(raw), header)])
    data.close()
    with pytest.raises(Closed):
        log.append([(raw, header)])
    assert log.sync() == 0  # close does not sync, so nothing is claimed durable
    assert list(Store(tmp_path).read("s")) == [(1, b"abc")]


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(
        st.one_of(
            st.lists(st.binary(max_size=300), min_size=1, max_size=12),
            st.integers(0x10000, 0x14000).map(lambda n: [bytes([n % 251]) * n]),
        ),
        min_size=1,
        max_size=40,
    ),
    segment_bytes=st.integers(100, 20_000),
    per_call=st.integers(1, 9),
    window=st.tuples(st.integers(1, 400), st.integers(0, 400)),
)
def test_random_batches_round_trip(
    batches: list[list[bytes]], segment_bytes: int, per_call: int, window: tuple[int, int]
) -> None:
    expected = [r for b in batches for r in b]
    with tempfile.TemporaryDirectory() as tmp:
        with DataDir(tmp, segment_bytes=segment_bytes) as data:
            log = data.stream("s")
            made, seq = [], 1
            for records in batches:
                made.append(make_batch(2, 1, seq, records))
                seq += len(records)
            for i in range(0, len(made), per_call):
                log.append(made[i : i + per_call])
            assert log.last_position == len(expected)
            assert log.sync() == len(expected)
        store = Store(tmp)
        assert [r for _, r in store.read("s")] == expected
        start, span = window
        got = list(store.read("s", start, start + span))
        want = list(enumerate(expected, start=1))[start - 1 : start - 1 + span]
        assert got == want
        with DataDir(tmp, segment_bytes=segment_bytes) as data:  # reopen finds it all whole
            assert data.stream("s").last_position == len(expected)
            assert data.stream("s").producers == {2: ProducerState(1, len(expected))}


def test_reader_thread_follows_a_writer_thread(tmp_path: Path) -> None:
    total_batches = 1500
    data = DataDir(tmp_path, segment_bytes=8000)
    log = data.stream("s")
    store = Store(tmp_path)
    expected = [record(i, i % 90) for i in range(total_batches * 2)]

    def writer() -> None:
        for i in range(total_batches):
            log.append([make_batch(1, 1, 2 * i + 1, expected[2 * i : 2 * i + 2])])

    thread = threading.Thread(target=writer)
    thread.start()
    seen: list[tuple[int, bytes]] = []
    try:
        while len(seen) < len(expected):
            seen.extend(store.read("s", len(seen) + 1))
            assert store.last("s") >= len(seen)
    finally:
        thread.join()
        data.close()
    assert seen == list(enumerate(expected, start=1))
