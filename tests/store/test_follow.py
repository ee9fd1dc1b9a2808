"""Store.read(follow=True): wakes on append, with bounded waits.

In the writer's process a follower parks on the stream log's Parker and an
append signals it only while it is parked; across processes it watches the
files (inotify, or a backing-off poll).  Each consumer runs on a thread with
a `stop`, so it ends by itself; every wait in the tests has a deadline.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import purelink.store.follow as follow_module
from purelink.errors import Error
from purelink.protocol.wire import encode_batch, position_bytes, verify_batch
from purelink.store import DataDir, DataDirReader, Store
from purelink.store.follow import FileWatch
from purelink.store.log import StreamLog

TIMEOUT = 10.0


def payload(position: int) -> bytes:
    return f"record {position}".encode()


def append(log: StreamLog, count: int = 1) -> None:
    first = log.last_position + 1
    raw = encode_batch(3, 1, first, [payload(p) for p in range(first, first + count)])
    log.append([(raw, verify_batch(raw))])


def append_as_another_process(folder: Path, first: int, count: int = 1) -> None:
    """Write a stamped batch at the end of the active segment, as a writer in
    another process would (nothing in this process is told)."""
    raw = encode_batch(3, 1, first, [payload(p) for p in range(first, first + count)])
    active = sorted(folder.glob("*.seg"))[-1]
    with active.open("ab") as f:
        f.write(position_bytes(first) + raw[8:])


def wait_until(condition: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    """Poll a condition about another thread's state (test scaffolding only)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.0005)


class Consumer:
    """Iterates a follow=True read on its own thread, collecting what it gets."""

    def __init__(self, records: Iterator[tuple[int, bytes]]) -> None:
        self.got: list[tuple[int, bytes]] = []
        self.error: BaseException | None = None
        self._records = records
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for item in self._records:
                self.got.append(item)
        except BaseException as exc:
            self.error = exc

    def has(self, count: int) -> Callable[[], bool]:
        return lambda: len(self.got) >= count

    def join(self) -> list[tuple[int, bytes]]:
        self.thread.join(TIMEOUT)
        assert not self.thread.is_alive(), "the follower did not reach its stop"
        if self.error is not None:
            raise self.error
        return self.got


def expected(start: int, stop: int) -> list[tuple[int, bytes]]:
    return [(p, payload(p)) for p in range(start, stop)]


# ---- in the writer's process: the Parker ---------------------------------------------


def test_follow_wakes_on_append(tmp_path: Path) -> None:
    with DataDir(tmp_path) as data:
        log = data.stream("s")
        for _ in range(100):
            append(log)  # nobody follows yet: no signal
        assert log.parker.statistics().unparks == 0
        consumer = Consumer(Store(tmp_path).read("s", 1, stop=131, follow=True))
        wait_until(consumer.has(100))
        for n in range(101, 131):
            wait_until(lambda: log.parker.statistics().parked == 1)  # it waits, parked
            append(log)
            wait_until(consumer.has(n))  # ...and the append woke it
        assert consumer.join() == expected(1, 131)
        stats = log.parker.statistics()
        assert stats.parks >= 30
        assert 30 <= stats.unparks <= stats.parks  # one signal per park at most
        assert stats.parked == 0


def test_a_burst_of_appends_signals_a_parked_follower_once(tmp_path: Path) -> None:
    with DataDir(tmp_path) as data:
        log = data.stream("s")
        consumer = Consumer(Store(tmp_path).read("s", 1, stop=1001, follow=True))
        wait_until(lambda: log.parker.statistics().parked == 1)
        for _ in range(100):
            append(log, 10)
        assert consumer.join() == expected(1, 1001)
        stats = log.parker.statistics()
        assert stats.unparks <= stats.parks < 100


def test_follow_with_records_already_there_ends_at_stop(tmp_path: Path) -> None:
    with DataDir(tmp_path) as data:
        append(data.stream("s"), 20)
        assert list(Store(tmp_path).read("s", 5, stop=15, follow=True)) == expected(5, 15)
        assert data.stream("s").parker.statistics().parks == 0


def test_follow_from_past_the_end(tmp_path: Path) -> None:
    with DataDir(tmp_path, segment_bytes=300) as data:
        log = data.stream("s")
        append(log, 3)
        consumer = Consumer(Store(tmp_path).read("s", 10, stop=40, follow=True))
        for _ in range(37):
            append(log)  # rolls many small segments on the way
        assert consumer.join() == expected(10, 40)


def test_follow_below_the_retained_range_raises_at_once(tmp_path: Path) -> None:
    with DataDir(tmp_path, segment_bytes=300) as data:
        log = data.stream("s")
        for _ in range(20):
            append(log)
        assert log.retire(2)
        with pytest.raises(Error, match=f"records retained start at {log.first_position}"):
            Store(tmp_path).read("s", 2, follow=True)


def test_follow_a_stream_that_does_not_exist_yet(tmp_path: Path) -> None:
    with DataDir(tmp_path) as data:
        consumer = Consumer(Store(tmp_path).read("later", 1, stop=6, follow=True))
        log = data.stream("later")  # the follower is told by the folder's creation...
        append(log, 2)
        wait_until(consumer.has(2))
        for _ in range(3):
            append(log)  # ...then parks on the log like any other
        assert consumer.join() == expected(1, 6)


def test_follower_moves_on_when_the_writer_closes(tmp_path: Path) -> None:
    data = DataDir(tmp_path)
    log = data.stream("s")
    append(log, 5)
    consumer = Consumer(Store(tmp_path).read("s", 1, stop=11, follow=True))
    wait_until(lambda: log.parker.statistics().parked == 1)
    data.close()  # unparks it; now nobody in this process writes
    wait_until(lambda: log.parker.statistics().parked == 0)
    with DataDir(tmp_path) as again:  # a new writer: the follower finds its records
        append(again.stream("s"), 5)
        assert consumer.join() == expected(1, 11)


# ---- across processes: watching the files ---------------------------------------------


def make_stream(tmp_path: Path, count: int) -> Path:
    with DataDir(tmp_path) as data:
        append(data.stream("s"), count)
    return tmp_path / "streams" / "s"


def test_follow_across_processes_with_inotify(tmp_path: Path) -> None:
    folder = make_stream(tmp_path, 5)
    watch = FileWatch(tmp_path, "s")
    assert watch.inotify, "inotify is expected on Linux"
    watch.close()
    consumer = Consumer(Store(tmp_path).read("s", 1, stop=26, follow=True))
    wait_until(consumer.has(5))
    for first in range(6, 26, 5):
        append_as_another_process(folder, first, 5)
        wait_until(consumer.has(first + 4))
    assert consumer.join() == expected(1, 26)


def test_follow_across_processes_by_polling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(follow_module, "_INOTIFY", None)
    folder = make_stream(tmp_path, 2)
    assert not FileWatch(tmp_path, "s").inotify
    consumer = Consumer(Store(tmp_path).read("s", 1, stop=8, follow=True))
    wait_until(consumer.has(2))
    append_as_another_process(folder, 3, 5)
    assert consumer.join() == expected(1, 8)


def test_file_watch_wakes_on_a_write_and_on_the_folder_appearing(tmp_path: Path) -> None:
    (tmp_path / "streams").mkdir()
    watch = FileWatch(tmp_path, "s")
    try:
        assert repr(watch).endswith(f"watching={tmp_path / 'streams'}>")
        os.mkdir(tmp_path / "streams" / "s")
        started = time.monotonic()
        watch.wait(progress=False)  # woken by the creation, not by the backstop
        assert time.monotonic() - started < follow_module.BACKSTOP
        assert repr(watch).endswith(f"watching={tmp_path / 'streams' / 's'}>")
        (tmp_path / "streams" / "s" / "x").write_bytes(b"1")
        started = time.monotonic()
        watch.wait(progress=False)
        assert time.monotonic() - started < follow_module.BACKSTOP
    finally:
        watch.close()
        watch.close()  # idempotent


def test_read_follow_flushes_before_each_wait(tmp_path: Path) -> None:
    folder = make_stream(tmp_path, 3)
    waits: list[int] = []
    got: list[int] = []
    records = follow_module.follow_records(
        DataDirReader(tmp_path), "s", 1, 7, on_wait=lambda: waits.append(len(got))
    )
    consumer = threading.Thread(target=lambda: got.extend(p for p, _ in records), daemon=True)
    consumer.start()
    wait_until(lambda: waits == [3])
    append_as_another_process(folder, 4, 3)
    consumer.join(TIMEOUT)
    assert got == list(range(1, 7))
    assert waits == [3]  # the stop came before another wait
