"""The writer's directory: names, the lock, limits, and sync from another thread."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from purelink.errors import Closed, Error
from purelink.protocol.wire import encode_batch, verify_batch
from purelink.store import DataDir, Store, validate_stream_name

BAD_NAMES = ["", ".", "..", ".hidden", "a/b", "../x", "a\\b", "x" * 201, "é", "a b", "a\n", "\0"]
GOOD_NAMES = ["a", "x" * 200, "A.b-c_9", "-x", "_", "a..b", "orders.v2"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_stream_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="bad stream name"):
        validate_stream_name(name)
    with DataDir(tmp_path) as data, pytest.raises(ValueError):
        data.stream(name)
    with pytest.raises(ValueError):
        Store(tmp_path).last(name)
    assert [p.name for p in (tmp_path / "streams").iterdir()] == []


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_good_stream_names_are_accepted(tmp_path: Path, name: str) -> None:
    assert validate_stream_name(name) == name
    with DataDir(tmp_path) as data:
        data.stream(name)
        assert data.streams() == [name]
    assert Store(tmp_path).streams() == [name]


def test_a_second_writer_is_refused_by_the_lock(tmp_path: Path) -> None:
    first = DataDir(tmp_path)
    with pytest.raises(Error, match="in use by another listener"):
        DataDir(tmp_path)
    assert Store(tmp_path).streams() == []  # readers never take the lock
    first.close()
    DataDir(tmp_path).close()


def test_streams_are_opened_eagerly_and_limited(tmp_path: Path) -> None:
    with DataDir(tmp_path, max_streams=2) as data:
        data.stream("b")
        data.stream("a")
        with pytest.raises(Error, match="stream limit"):
            data.stream("c")
        assert data.stream("a") is data.stream("a")
    (tmp_path / "streams" / ".junk").mkdir()  # not a stream name: ignored
    with DataDir(tmp_path, max_streams=2) as data:
        assert data.streams() == ["a", "b"]
        with pytest.raises(KeyError):
            data.stream("zz", create=False)
        assert data.stream("a", create=False).name == "a"
    with pytest.raises(Closed):
        data.stream("new")
    assert data.stream("a").sync() == 0  # an existing log stays reachable (the sync thread)


def test_sync_from_another_thread_while_appending(tmp_path: Path) -> None:
    stop = threading.Event()
    errors: list[BaseException] = []
    reports: list[int] = []
    with DataDir(tmp_path, segment_bytes=4000) as data:
        log = data.stream("s")

        def syncer() -> None:
            try:
                while not stop.is_set():
                    synced = log.sync()
                    assert synced <= log.last_position  # read after: an upper bound
                    assert log.synced_position >= synced
                    reports.append(synced)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        thread = threading.Thread(target=syncer)
        thread.start()
        seq = 1
        try:
            for i in range(2000):
                records = [b"r%d" % i] * (1 + i % 4)
                raw = encode_batch(1, 1, seq, records)
                seq += len(records)
                log.append([(raw, verify_batch(raw))])
        finally:
            stop.set()
            thread.join()
        assert errors == []
        assert reports == sorted(reports)  # durable never goes back
        assert len(set(reports)) > 3  # the two threads did interleave
        assert reports[-1] <= log.last_position
        assert log.sync() == log.last_position == seq - 1
        assert log.synced_position == seq - 1
    assert len(list((tmp_path / "streams" / "s").glob("*.seg"))) > 10  # rolls happened
    assert Store(tmp_path).last("s") == seq - 1
