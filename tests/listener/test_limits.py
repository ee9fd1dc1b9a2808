"""The edges of guarantees 4 and 6 (docs/reliability.md) on real sockets and processes.

Why it exists: the bounds (capacity, capacity_bytes, the reorder buffer, the
listener's memory with many links) and the loud failures (close(timeout)
returning False, LinkError when the listener lost what it had told) are
promises to the application; each test here pushes one of them to its limit
and checks what the application sees.  test_link.py covers `Full` by records
and the first `Full` by bytes; these go on from there.
"""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path

import pytest

import purelink
from helpers.netproxy import Faults, NetProxy
from helpers.serve_process import ServeProcess
from helpers.shipping import check_stream, payload, report
from purelink.protocol import wire
from purelink.protocol.framing import FrameDecoder, encode_frames
from purelink.protocol.sender import Sender
from purelink.store.format import decode_summary


def url_of(lst: purelink.Listener) -> str:
    assert lst.udp_address is not None
    return "udp://%s:%d" % lst.udp_address


def test_full_by_bytes_then_queue_again_once_stored(tmp_path: Path) -> None:
    data = tmp_path / "d"
    lst = purelink.Listener(data, udp="127.0.0.1:0")
    lst.start()
    url = url_of(lst)
    link = purelink.connect(url, stream="s", capacity=1000, capacity_bytes=10_000)
    lst.close()  # nothing is stored from here on
    queued = 0
    with pytest.raises(purelink.Full, match="bytes"):
        for _ in range(11):  # 10 fit
            link.queue(b"b" * 1000)
            queued += 1
    assert queued == 10 and link.queued == 10 and link.stored == 0
    with pytest.raises(purelink.Full):  # and again: it does not block, it refuses
        link.queue(b"b")
    again = purelink.Listener(data, udp=url.removeprefix("udp://"))
    again.start()
    try:
        assert link.wait_stored(timeout=30)
        for _ in range(10):  # room again for the same bytes
            link.queue(b"c" * 1000)
        assert link.close(timeout=30)
    finally:
        again.close()
    assert [p for _, p in purelink.Store(data).read("s")] == [b"b" * 1000] * 10 + [b"c" * 1000] * 10


def test_close_with_timeout_returns_false_and_keeps_nothing_it_did_not_store(
    tmp_path: Path,
) -> None:
    data = tmp_path / "d"
    lst = purelink.Listener(data, udp="127.0.0.1:0")
    lst.start()
    url = url_of(lst)
    link = purelink.connect(url, stream="s")
    for i in range(100):
        link.queue(payload("c", i))
    assert link.wait_stored(timeout=20)
    lst.close()
    for i in range(100, 150):
        link.queue(payload("c", i))
    started = time.monotonic()
    assert link.close(timeout=0.5) is False
    assert time.monotonic() - started < 10  # it gave up; it did not wait for a listener
    assert link.stored == 100 < link.queued == 150
    assert link.close(timeout=5) is False  # idempotent, still the truth
    with pytest.raises(purelink.Closed):
        link.queue(b"late")
    # a listener that comes back finds only what was told stored (on a port of
    # its own: the link is closed, and the old port may have gone to another
    # process meanwhile)
    with purelink.Listener(data, udp="127.0.0.1:0"):
        pass
    check_stream(data, "s", {"c": 100}, exact=True)


@pytest.mark.parametrize("producer", ["api-1", None], ids=["named", "anonymous"])
def test_listener_that_lost_told_records_fails_the_link(
    tmp_path: Path, producer: str | None
) -> None:
    """The data directory is swapped for an older copy between restarts: the
    link was told seqs the listener no longer has, and says so loudly."""
    data, older = tmp_path / "d", tmp_path / "older"
    srv = ServeProcess(data).start()
    link = purelink.connect(srv.url, stream="s", producer=producer, timeout=20)
    try:
        for i in range(500):
            link.queue(payload("p", i))
        assert link.wait_stored(timeout=30)
        assert srv.stop() == 0
        shutil.copytree(data, older)  # the backup: 500 records
        srv.restart()
        for i in range(500, 1000):
            link.queue(payload("p", i))
        assert link.wait_stored(timeout=60)
        assert link.stored == 1000
        assert srv.stop() == 0
        shutil.rmtree(data)
        older.rename(data)  # restored from the backup
        srv.restart()
        link.queue(payload("p", 1000))  # the link finds out when it next talks
        with pytest.raises(purelink.LinkError, match=r"seq 500 stored but told 1000"):
            link.wait_stored(timeout=60)
        with pytest.raises(purelink.LinkError):
            link.queue(payload("p", 1001))
        assert link.stored == 1000  # what it was told never goes backwards
    finally:
        link.close(timeout=0)
        if srv.proc is not None:
            srv.stop()
    check_stream(data, "s", {"p": 500}, exact=True)


def vm_rss(pid: int) -> int:
    """Resident memory of a process, bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_listener_memory_with_1000_links_at_once(tmp_path: Path) -> None:
    n = 1000
    srv = ServeProcess(tmp_path / "d").start()
    assert srv.proc is not None
    links: list[purelink.Link] = []
    try:
        warm = purelink.connect(srv.url, stream="s0", capacity=16)
        warm.queue(payload("warm", 0))
        assert warm.wait_stored(timeout=20)
        links.append(warm)
        before = vm_rss(srv.proc.pid)
        for k in range(1, n):  # idle links: each thread sleeps in epoll once its record is stored
            link = purelink.connect(srv.url, stream=f"s{k % 10}", capacity=16, timeout=30)
            link.queue(payload(f"l{k}", 0))
            links.append(link)
        for link in links:
            assert link.wait_stored(timeout=60)
        after = vm_rss(srv.proc.pid)
        growth = after - before
        assert srv.stop() == 0  # SIGTERM while all 1,000 are connected
    finally:
        for link in links:
            link.close(timeout=0)
        if srv.proc is not None:
            srv.stop()
    served = srv.last_stats
    assert served is not None
    assert served["links"] == n
    assert served["memory"] == 0
    assert served["records_stored"] >= n - 1  # this run's; the warm one may be counted
    # per link the listener keeps a session, a producer and a reorder buffer that
    # is empty here: a few KiB.  32 KiB per link is the bound asserted.
    assert growth < n * 32 * 1024, f"listener RSS grew {growth / 1e6:.1f} MB for {n} links"
    report(
        "test_listener_memory_with_1000_links_at_once",
        {"links": n, "rss_before": before, "rss_after": after, "per_link": growth // n},
    )


class GreedySender(Sender):
    """A sender that ignores the listener's advertised window (an old or buggy
    peer): only the listener's own bound stands between it and the memory."""

    @property
    def window(self) -> int:
        return self.cc.cwnd


@pytest.mark.parametrize("greedy", [False, True], ids=["honest", "greedy"])
def test_far_out_of_order_is_bounded_dropped_and_resent(tmp_path: Path, greedy: bool) -> None:
    """Datagrams of one link arrive up to 100 ms out of order (hundreds of
    datagrams' worth).  The listener's reorder buffer never holds more than its
    bound.  An honest link stays inside the window the listener advertises; a
    greedy one overshoots, the excess is dropped (reorder_full) and resent.
    Either way nothing is stored out of order or twice."""
    bound = 4096 if greedy else 8192
    records = 6000 if greedy else 2000  # greedy: several batches of 64 KiB, most beyond the bound
    with purelink.Listener(tmp_path / "d", udp="127.0.0.1:0", max_reorder=bound) as lst:
        assert lst.udp_address is not None
        messy = Faults(duplicate=0.05, jitter=0.1)
        proxy = NetProxy(lst.udp_address, seed=3, up=messy, down=Faults(jitter=0.02)).start()
        try:
            link = purelink.connect("udp://%s:%d" % proxy.address, stream="s", timeout=20)
            if greedy:
                link._sender.__class__ = GreedySender
            for i in range(records):
                link.queue(payload("o", i))
            peak = 0
            deadline = time.monotonic() + 120
            while not link.wait_stored(timeout=0.002):  # sample the listener's memory meanwhile
                peak = max(peak, lst.stats().memory)
                assert time.monotonic() < deadline, link.stats()
            retransmits = link.stats().retransmits
            assert link.close(timeout=10)
        finally:
            proxy.close()
        stats = lst.stats()
    assert 0 < peak <= bound + 0xFFFF + 2 + 44, peak  # and the next batch, always (wire.md 9)
    assert stats.held > 0
    drops = stats.dropped.get("reorder_full", 0)
    if greedy:
        assert drops > 0, stats.dropped
        assert retransmits > 0
    check_stream(tmp_path / "d", "s", {"o": records}, exact=True)
    report(
        f"test_far_out_of_order_is_bounded_dropped_and_resent[{'greedy' if greedy else 'honest'}]",
        {
            "records": records,
            "bound": bound,
            "peak_memory": peak,
            "held": stats.held,
            "reorder_full": drops,
            "retransmits": retransmits,
            "reordered": proxy.stats().up.reordered,
        },
    )


@pytest.mark.parametrize("scheme", ["udp", "tcp"])
def test_short_anonymous_links_leave_no_producer_state_behind(tmp_path: Path, scheme: str) -> None:
    """Many short-lived anonymous links (a job, a CLI run, a function call each)
    must not grow the store's producer table without bound: each link's CLOSE,
    with everything stored, lets its entry go, and the segments' producer
    snapshots (.sum) do not carry it either.  Every record is still there."""
    data = tmp_path / "d"
    with purelink.Listener(data, udp="127.0.0.1:0", tcp="127.0.0.1:0", segment_bytes=4096) as lst:
        assert lst.udp_address is not None and lst.tcp_address is not None
        port = (lst.udp_address if scheme == "udp" else lst.tcp_address)[1]
        for i in range(150):
            with purelink.connect(f"{scheme}://127.0.0.1:{port}", stream="s", timeout=20) as link:
                link.queue(payload("job%d" % i, 0))
                assert link.wait_stored(timeout=20)
        log = lst._data.stream("s")  # type: ignore[union-attr]
        deadline = time.monotonic() + 10
        while log.producers and time.monotonic() < deadline:
            time.sleep(0.01)  # the last CLOSE may still be on its way
        assert not log.producers
        assert lst._core.stats.forgotten == 150  # type: ignore[union-attr]
    sums = list(data.rglob("*.sum"))
    assert sums  # 150 records in 4 KiB segments: several rolls
    for path in sums:  # a snapshot holds at most the link open at the roll
        summary = decode_summary(path.read_bytes())
        assert summary is not None and len(summary.producers) <= 1
    check_stream(data, "s", {"job%d" % i: 1 for i in range(150)}, exact=True)


def test_a_flood_of_hellos_that_never_send_leaves_no_producer_state(tmp_path: Path) -> None:
    """300 TCP connections, each a HELLO under a fresh anonymous id that gets its
    ACCEPT and then drops without a record or a CLOSE (a crashed job, or a peer
    flooding the listener): the stream's producer table must not keep them."""
    with purelink.Listener(tmp_path / "d", udp=None, tcp="127.0.0.1:0") as lst:
        assert lst.tcp_address is not None
        with purelink.connect(f"tcp://127.0.0.1:{lst.tcp_address[1]}", stream="s") as link:
            link.queue(b"real")  # one real producer, which must stay known
            assert link.wait_stored(timeout=20)
            for i in range(300):
                hello = wire.Hello(i + 1, "s", "", (1 << 63) | (5000 + i), 1400, b"")
                with socket.create_connection(lst.tcp_address, timeout=20) as sock:
                    sock.sendall(encode_frames([wire.encode_hello(hello)]))
                    decoder = FrameDecoder()
                    frames: list[bytes] = []
                    while not frames:
                        data = sock.recv(4096)
                        assert data, "closed before the ACCEPT"
                        frames = list(decoder.feed(data))
                    assert isinstance(wire.decode_datagram(frames[0]), wire.Accept)
            log = lst._data.stream("s")  # type: ignore[union-attr]
            deadline = time.monotonic() + 10
            while len(log.producers) > 1 and time.monotonic() < deadline:
                time.sleep(0.01)  # the last disconnects may still be on their way
            assert list(log.producers) == [link._sender.producer_id]
            assert lst._core.stats.forgotten == 300  # type: ignore[union-attr]
