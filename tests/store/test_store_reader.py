"""`Store` is a thin public view over a `StoreReader`: the one for a directory here.

(The same contract over a JetStream cluster is tests/store/test_store_suite.py.)
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from purelink.errors import Error
from purelink.protocol.wire import encode_batch, verify_batch
from purelink.store import DataDir, DataDirReader, Store, StoreReader, open_reader
from purelink.store.jetstream.reader import JetStreamReader


def _write(tmp_path: Path, records: list[bytes]) -> None:
    data = encode_batch(1, 1, 1, records)
    with DataDir(tmp_path) as directory:
        log = directory.stream("s")
        log.append([(data, verify_batch(data))])
        log.sync()


def test_a_directory_opens_a_data_dir_reader(tmp_path: Path) -> None:
    reader = open_reader(tmp_path)
    assert isinstance(reader, DataDirReader)
    assert reader.streams() == []


@pytest.mark.parametrize("reader", [DataDirReader, JetStreamReader, Store])
def test_every_reader_has_the_interface_as_written(reader: type) -> None:
    """Each method of StoreReader, with its signature, on both readers and on
    the Store that delegates to them (annotations compared as written)."""
    methods = [name for name in vars(StoreReader) if not name.startswith("_")]
    assert methods == [
        "streams",
        "first",
        "last",
        "stream_info",
        "read",
        "read_timed",
        "position_at",
        "close",
    ]
    timed = {"read", "read_timed", "position_at"}  # Store's take times as users give them
    for name in methods:
        if reader is Store and name in timed:
            continue
        assert inspect.signature(getattr(reader, name)) == inspect.signature(
            getattr(StoreReader, name)
        ), name


def test_the_store_reads_by_position_as_its_readers_and_by_time_too() -> None:
    """Store.read/read_timed: the reader's parameters, then keyword-only since/until."""
    for name in ("read", "read_timed"):
        ours = inspect.signature(getattr(Store, name)).parameters
        theirs = inspect.signature(getattr(StoreReader, name)).parameters
        assert list(ours) == [*theirs, "since", "until"], name
        assert ours["since"].kind is inspect.Parameter.KEYWORD_ONLY
        assert ours["until"].kind is inspect.Parameter.KEYWORD_ONLY
    assert list(inspect.signature(Store.position_at).parameters) == ["self", "stream", "when"]


def test_store_delegates_to_its_reader(tmp_path: Path) -> None:
    _write(tmp_path, [b"a", b"b", b"c"])
    store, reader = Store(tmp_path), DataDirReader(tmp_path)
    assert store.streams() == reader.streams() == ["s"]
    assert (store.first("s"), store.last("s")) == (reader.first("s"), reader.last("s")) == (1, 3)
    assert store.stream_info("s") == reader.stream_info("s")
    assert list(store.read("s", 2)) == list(reader.read("s", 2)) == [(2, b"b"), (3, b"c")]
    assert repr(store) == f"<Store {str(tmp_path)!r}>"


def test_store_closes_and_is_a_context_manager(tmp_path: Path) -> None:
    _write(tmp_path, [b"a"])
    with Store(tmp_path) as store:
        assert store.last("s") == 1
    store.close()  # idempotent; nothing to free for a directory
    assert store.last("s") == 1


def test_no_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(Error, match="no purelink data directory"):
        Store(tmp_path / "missing")
