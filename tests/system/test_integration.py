"""End to end with `purelink serve` in its own process, real signals, real files.

Each test reads the store back with `purelink.Store` after the server is
gone and checks every record byte for byte.  Each runs over udp:// and
tcp:// (the `transport` fixture; a tcp server is `serve --no-udp --tcp`).
"""

from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest

import purelink
from helpers.serve_process import ServeProcess


@pytest.fixture(params=["udp", "tcp"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def read(data: Path, stream: str) -> list[bytes]:
    return [payload for _, payload in purelink.Store(data).read(stream)]


def test_random_sizes_zero_to_two_mib(tmp_path: Path, transport: str) -> None:
    rng = random.Random(42)
    sizes = [0, 1, 2 << 20] + [
        rng.choice((rng.randrange(0, 2000), rng.randrange(0, 2 << 20))) for _ in range(60)
    ]
    recs = [rng.randbytes(n) for n in sizes]
    with (
        ServeProcess(tmp_path / "d", transport=transport) as srv,
        purelink.connect(srv.url, stream="sizes") as link,
    ):
        for r in recs:
            link.queue(r)
        assert link.wait_stored(timeout=120)
    assert srv.last_stats is not None
    assert srv.last_stats["records_stored"] == len(recs)
    assert read(tmp_path / "d", "sizes") == recs


def test_named_producer_resumes_after_listener_restart(tmp_path: Path, transport: str) -> None:
    srv = ServeProcess(tmp_path / "d", transport=transport).start()
    try:
        link = purelink.connect(srv.url, stream="s", producer="api-1")
        for i in range(1000):
            link.queue(b"a%d" % i)
        assert link.wait_stored(timeout=30)
        assert srv.stop(signal.SIGTERM) == 0
        # queued while the listener is down: kept, and sent after the restart
        for i in range(1000, 2000):
            link.queue(b"a%d" % i)
        srv.restart()
        assert link.wait_stored(timeout=60)
        assert link.stats().reconnects >= 1
        link.close()
        # the application restarts: a new link resumes at the producer's last stored seq
        again = purelink.connect(srv.url, stream="s", producer="api-1")
        assert again.queued == again.stored == 2000
        again.queue(b"after")
        assert again.close(timeout=30)
    finally:
        srv.stop()
    assert read(tmp_path / "d", "s") == [b"a%d" % i for i in range(2000)] + [b"after"]


def test_fencing_across_processes(tmp_path: Path, transport: str) -> None:
    with ServeProcess(tmp_path / "d", transport=transport) as srv:
        old = purelink.connect(srv.url, stream="s", producer="job")
        old.queue(b"old-1")
        assert old.wait_stored(timeout=30)
        new = purelink.connect(srv.url, stream="s", producer="job")
        with pytest.raises(purelink.Fenced):
            old.queue(b"old-2")
            old.wait_stored(timeout=30)
        new.queue(b"new-2")
        assert new.close(timeout=30)
        with pytest.raises(purelink.Fenced):  # never a quiet False
            old.close(timeout=1)
    assert read(tmp_path / "d", "s") == [b"old-1", b"new-2"]


def test_two_anonymous_links_on_one_stream(tmp_path: Path, transport: str) -> None:
    with ServeProcess(tmp_path / "d", transport=transport) as srv:
        a = purelink.connect(srv.url, stream="s")
        b = purelink.connect(srv.url, stream="s")
        for i in range(5000):
            a.queue(b"a%d" % i)
            b.queue(b"b%d" % i)
        assert a.close(timeout=30) and b.close(timeout=30)
    got = read(tmp_path / "d", "s")
    assert [r for r in got if r.startswith(b"a")] == [b"a%d" % i for i in range(5000)]
    assert [r for r in got if r.startswith(b"b")] == [b"b%d" % i for i in range(5000)]


@pytest.mark.parametrize("sync", ["batch", "always"])
def test_sigkill_loses_nothing_told_stored(tmp_path: Path, sync: str, transport: str) -> None:
    srv = ServeProcess(tmp_path / "d", sync=sync, transport=transport).start()
    try:
        link = purelink.connect(srv.url, stream="s")
        for i in range(20_000):
            link.queue(b"k%d" % i)
        assert link.wait_stored(seq=10_000, timeout=30)
        told = link.stored
        srv.kill()  # SIGKILL, maybe in the middle of appends and syncs
        srv.restart()
        assert link.wait_stored(timeout=60)  # the link resumes by itself
        assert link.close(timeout=30)
    finally:
        srv.stop()
    got = read(tmp_path / "d", "s")
    assert got[:told] == [b"k%d" % i for i in range(told)]
    assert got == [b"k%d" % i for i in range(20_000)]  # and nothing twice
    positions = [p for p, _ in purelink.Store(tmp_path / "d").read("s")]
    assert positions == list(range(1, 20_001))


def test_sigkill_then_read_back_without_restart(tmp_path: Path, transport: str) -> None:
    srv = ServeProcess(tmp_path / "d", transport=transport).start()
    link = purelink.connect(srv.url, stream="s")
    for i in range(3000):
        link.queue(b"x%d" % i)
    assert link.wait_stored(timeout=30)
    srv.kill()
    link.close(timeout=0.1)
    assert read(tmp_path / "d", "s") == [b"x%d" % i for i in range(3000)]
