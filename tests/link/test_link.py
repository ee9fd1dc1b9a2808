"""Link and Listener over real loopback sockets, in one process.

These exercise the drivers: the hand-off ring, the wakeup, the parker,
GSO and GRO, group commit.  The listener-in-its-own-process tests are in
test_integration.py.  Every test that is not about UDP itself runs over
udp:// and tcp:// (the `transport` fixture).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import purelink
import purelink.link.thread as link_module
from helpers.ring import free
from purelink.link.link import Link
from purelink.primitives.wakeup import Wakeup
from purelink.protocol import wire
from purelink.store.store import Store
from purelink.testing.ports import free_port


@pytest.fixture(params=["udp", "tcp"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def serve(data: Path, transport: str, address: str = "127.0.0.1:0") -> purelink.Listener:
    """A listener (not started) on one transport only."""
    if transport == "udp":
        return purelink.Listener(data, udp=address)
    return purelink.Listener(data, udp=None, tcp=address)


@pytest.fixture
def listener(tmp_path: Path, transport: str):
    with serve(tmp_path / "data", transport) as lst:
        yield lst


def url(lst: purelink.Listener) -> str:
    if lst.udp_address is not None:
        return "udp://%s:%d" % lst.udp_address
    assert lst.tcp_address is not None
    return "tcp://%s:%d" % lst.tcp_address


def read_all(lst: purelink.Listener, stream: str) -> list[bytes]:
    return [p for _, p in Store(lst.path).read(stream)]


def test_queue_wait_read_back(listener: purelink.Listener) -> None:
    with purelink.connect(url(listener), stream="orders") as link:
        assert link.queued == link.stored == 0
        seqs = [link.queue(b"r%d" % i) for i in range(1000)]
        assert seqs == list(range(1, 1001))
        assert link.wait_stored(timeout=20)
        assert link.stored == 1000
    assert read_all(listener, "orders") == [b"r%d" % i for i in range(1000)]
    stats = listener.stats()
    assert stats.records_stored == 1000
    assert stats.syncs >= 1
    assert stats.dropped == {}


def test_no_lost_wakeup_under_racing_threads(listener: purelink.Listener) -> None:
    """Threads queue with random pauses so the link thread sleeps and wakes
    all the time; every record must go out on a wakeup, never on a timer."""
    link = purelink.connect(url(listener), stream="race")
    # No timers from here on: a record whose wakeup was lost would never be sent
    # (and wait_stored below would time out) instead of going out on a probe.
    link._sender.get_timer = lambda: None  # type: ignore[method-assign]
    per_thread = 300
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        rng = random.Random(k)
        try:
            for i in range(per_thread):
                link.queue(b"%d-%d" % (k, i))
                if rng.random() < 0.3:
                    threading.Event().wait(rng.random() * 0.002)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert link.queued == 4 * per_thread
    assert link.wait_stored(timeout=20)
    stats = link.stats()
    assert stats.retransmits == 0
    assert stats.wakeups <= stats.sleeps + 4
    link.close()
    got = read_all(listener, "race")
    assert sorted(got) == sorted(b"%d-%d" % (k, i) for k in range(4) for i in range(per_thread))
    for k in range(4):  # each thread's records in its queue order
        mine = [r for r in got if r.startswith(b"%d-" % k)]
        assert mine == [b"%d-%d" % (k, i) for i in range(per_thread)]


def test_back_to_back_queue_wakes_rarely(listener: purelink.Listener) -> None:
    # Back to back means the link thread gets no turn in between: with the
    # interpreter's switch interval the burst would be cut every 5 ms, and a burst
    # slowed down by a busy machine would be cut more often -- each cut lets the
    # thread take everything, sleep, and be woken once more (rightly).  So the
    # burst keeps the GIL (a long switch interval); it gives it up only where
    # queue() itself writes the eventfd, which the naive way does for every record.
    with purelink.connect(url(listener), stream="burst") as link:
        interval = sys.getswitchinterval()
        sys.setswitchinterval(10.0)
        try:
            for _ in range(50_000):
                link.queue(b"x" * 61)
        finally:
            sys.setswitchinterval(interval)
        assert link.wait_stored(timeout=30)
        assert link.stats().wakeups <= 50  # <= 1 per 1,000 records


def test_on_stored_is_coalesced(listener: purelink.Listener) -> None:
    calls: list[int] = []
    with purelink.connect(url(listener), stream="cb", on_stored=calls.append) as link:
        for i in range(20_000):
            link.queue(b"%d" % i)
        assert link.wait_stored(timeout=20)
    assert calls and calls[-1] == 20_000
    assert calls == sorted(calls)
    assert len(calls) < 20_000 // 10


def test_wait_stored_async(listener: purelink.Listener) -> None:
    async def main() -> bool:
        with purelink.connect(url(listener), stream="aio") as link:
            seq = 0
            for i in range(100):
                seq = link.queue(b"a%d" % i)
            return await link.wait_stored_async(seq, timeout=20)

    assert asyncio.run(main())


def test_named_producer_resumes(listener: purelink.Listener) -> None:
    with purelink.connect(url(listener), stream="s", producer="api-1") as link:
        for i in range(10):
            link.queue(b"%d" % i)
    with purelink.connect(url(listener), stream="s", producer="api-1") as link:
        assert link.queued == link.stored == 10
        assert link.queue(b"next") == 11
        assert link.wait_stored(timeout=10)
    assert read_all(listener, "s")[-1] == b"next"


def test_fenced_by_a_newer_session(listener: purelink.Listener) -> None:
    old = purelink.connect(url(listener), stream="s", producer="api-1")
    old.queue(b"one")
    assert old.wait_stored(timeout=10)
    new = purelink.connect(url(listener), stream="s", producer="api-1")
    with contextlib.suppress(purelink.Fenced):  # refused when it goes out, if the
        old.queue(b"late")  # listener's word of the takeover is not here yet
    with pytest.raises(purelink.Fenced):
        old.wait_stored(timeout=10)
    with pytest.raises(purelink.Fenced):
        old.queue(b"again")
    assert new.queue(b"two") == 2
    assert new.wait_stored(timeout=10)
    new.close()
    with pytest.raises(purelink.Fenced):
        old.close()
    assert read_all(listener, "s") == [b"one", b"two"]


def test_explicit_seq_and_argument_errors(listener: purelink.Listener) -> None:
    with purelink.connect(url(listener), stream="s") as link:
        assert link.queue(b"a", seq=1) == 1
        with pytest.raises(ValueError):
            link.queue(b"b", seq=5)
        with pytest.raises(TypeError):
            link.queue("text")  # type: ignore[arg-type]
        buf = bytearray(b"copied")
        link.queue(buf)
        buf[:] = b"CHANGED"
        assert link.wait_stored(timeout=10)
    assert read_all(listener, "s") == [b"a", b"copied"]


def test_full_then_queue_again_once_stored(tmp_path: Path, transport: str) -> None:
    data = tmp_path / "data"
    lst = serve(data, transport)
    lst.start()
    addr = url(lst)
    link = purelink.connect(addr, stream="s", capacity=100, capacity_bytes=10_000)
    lst.close()  # nothing will be stored now
    for i in range(100):
        link.queue(b"%d" % i)
    with pytest.raises(purelink.Full):
        link.queue(b"one too many")
    # the listener comes back on the same port: everything is stored, room again
    lst2 = serve(data, transport, addr.split("://")[1])
    lst2.start()
    try:
        assert link.wait_stored(timeout=30)
        link.queue(b"room again")
        assert link.close(timeout=10)
    finally:
        lst2.close()
    assert len(read_all(lst2, "s")) == 101


def race(fill: Callable[[int], None], threads: int = 4) -> None:
    """Run fill(0) .. fill(threads - 1) at once, switching threads every 10 us
    (instead of 5 ms) so that they interleave inside queue()."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        running = [threading.Thread(target=fill, args=(k,)) for k in range(threads)]
        for t in running:
            t.start()
        for t in running:
            t.join(30)
    finally:
        sys.setswitchinterval(before)


def test_a_grant_taken_whole_by_other_threads_is_followed_by_the_next(tmp_path: Path) -> None:
    """Other threads take from a grant without the lock as soon as it is
    published: where they used all of it before the thread that made it took
    its first seq (seen once on 3.13 as a StopIteration out of queue()), that
    thread makes the next grant, or is refused with Full at the capacity."""
    taken: list[int] = []
    seqs: list[int] = []
    with serve(tmp_path / "d", "udp") as lst:
        with purelink.connect(url(lst), stream="s", capacity=100) as link:
            made = link._new_grant

            def publish_then_lose_it(first: int, stop: int) -> None:
                made(first, stop)
                if len(taken) < 300:  # "other threads" take the whole grant at once
                    taken.extend(link.queue(b"o") for _ in range(stop - first))

            link._new_grant = publish_then_lose_it  # type: ignore[method-assign]
            while len(seqs) < 200:
                try:
                    seqs.append(link.queue(b"r"))
                except purelink.Full:
                    assert link.wait_stored(timeout=30)
            assert link.wait_stored(timeout=30)
        assert len(taken) >= 300
        assert sorted(seqs + taken) == list(range(1, len(seqs) + len(taken) + 1))
        assert len(read_all(lst, "s")) == len(seqs) + len(taken)


def test_full_by_records_is_exact_with_racing_threads(tmp_path: Path) -> None:
    """Seqs come from a grant sized to `capacity`: four threads racing for the
    last places get exactly `capacity` records in, with distinct seqs, and
    every one after that is refused."""
    with serve(tmp_path / "d", "udp") as lst:
        link = purelink.connect(url(lst), stream="s", capacity=2000)
    # the listener is gone: nothing gets stored
    got: list[list[int]] = [[] for _ in range(4)]
    refused = [0] * 4

    def fill(k: int) -> None:
        for i in range(1000):
            try:
                got[k].append(link.queue(b"%d-%d" % (k, i)))
            except purelink.Full:
                refused[k] += 1

    race(fill)
    seqs = sorted(s for g in got for s in g)
    assert seqs == list(range(1, 2001))
    assert sum(refused) == 2000
    assert link.queued == 2000
    assert link.close(timeout=0.3) is False


def test_full_by_bytes_holds_with_racing_threads(tmp_path: Path) -> None:
    """capacity_bytes with four threads racing: the byte total is kept exactly
    (no thread's bytes lost to another's update), so what gets in past the
    bound is at most one record per racing thread."""
    with serve(tmp_path / "d", "udp") as lst:
        link = purelink.connect(url(lst), stream="s", capacity_bytes=200_000)
    # the listener is gone: nothing gets stored
    accepted = [0] * 4

    def fill(k: int) -> None:
        for _ in range(5_000):
            try:
                link.queue(b"x" * 100)
                accepted[k] += 1
            except purelink.Full:
                return

    race(fill)
    assert 2_000 - 4 <= sum(accepted) <= 2_000 + 4  # 200,000 B of 100 B records
    assert link._bytes_in == 100 * sum(accepted)  # the running total lost nothing
    assert link.close(timeout=0.3) is False


def test_close_is_never_slept_through(tmp_path: Path) -> None:
    """close() sets _stop and marks the wakeup just after the idle link thread
    looked at _stop and just before it cleared the mark: the thread must still
    see the stop (it checks _stop after arming) and not sleep for ever."""
    with serve(tmp_path / "d", "udp") as lst:
        link = purelink.connect(url(lst), stream="s")
        link.queue(b"x")
        assert link.wait_stored(timeout=10)
        w = link._wakeup
        done: dict[str, float] = {}

        def closer() -> None:
            started = time.monotonic()
            link.close()
            done["seconds"] = time.monotonic() - started

        class Interleaved(Wakeup):
            __slots__ = ()
            fired = False

            def begin_look(self) -> None:
                if not Interleaved.fired and threading.current_thread() is link._thread:
                    Interleaved.fired = True
                    threading.Thread(target=closer).start()
                    deadline = time.monotonic() + 10
                    while not (link._stop and self.pending) and time.monotonic() < deadline:
                        time.sleep(0.001)  # until close() has set _stop and the mark
                super().begin_look()

        w.__class__ = Interleaved
        w.mark_and_signal()  # wakes the idle thread: it goes round its loop once
        deadline = time.monotonic() + 10
        while "seconds" not in done and time.monotonic() < deadline:
            time.sleep(0.01)
        assert done.get("seconds", 99.0) < 2.0  # not the 5 s join timeout
        assert not link._thread.is_alive()


@pytest.mark.parametrize("then", ["queue more", "close at once"])
def test_an_interrupted_queue_fails_the_link_instead_of_hanging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, then: str
) -> None:
    """A queue() call interrupted between taking its seq and storing its record
    (as a KeyboardInterrupt can) leaves a hole nothing can fill: after
    HOLE_LIMIT the link fails with a LinkError naming the seq, and wait_stored
    and close() return instead of waiting for ever -- also when nothing else is
    queued, so that the link thread sleeps with no timer (close() wakes it)."""
    monkeypatch.setattr(link_module, "HOLE_LIMIT", 0.3)
    with serve(tmp_path / "d", "udp") as lst:
        link = purelink.connect(url(lst), stream="s")
        link.queue(b"a")
        assert link.wait_stored(timeout=10)
        lost = link._next_seq()  # what the interrupted call had taken
        if then == "queue more":
            link.queue(b"b")
            with pytest.raises(purelink.LinkError, match=f"seq {lost} was taken"):
                link.wait_stored(timeout=20)
            with pytest.raises(purelink.LinkError):
                link.queue(b"c")
        started = time.monotonic()
        assert link.close() is False
        assert time.monotonic() - started < 5
        assert isinstance(link._error, purelink.LinkError)
    assert read_all(lst, "s") == [b"a"]


def test_full_by_bytes(tmp_path: Path, transport: str) -> None:
    with serve(tmp_path / "d", transport) as lst:
        link = purelink.connect(url(lst), stream="s", capacity_bytes=1000)
    # the listener is gone: nothing gets stored
    link.queue(b"x" * 600)
    with pytest.raises(purelink.Full):
        link.queue(b"x" * 600)
    assert link.close(timeout=0.3) is False


def test_connect_to_nothing_fails_with_connect_error(transport: str) -> None:
    with pytest.raises(purelink.ConnectError):
        purelink.connect(f"{transport}://127.0.0.1:9", stream="s", timeout=0.5)


def test_connect_to_a_closed_port_says_refused_at_once(transport: str) -> None:
    # over UDP the kernel's ICMP "port unreachable" comes back as ECONNREFUSED on
    # the link's connected socket, as a TCP reset does: no handshake timeout
    kind = socket.SOCK_DGRAM if transport == "udp" else socket.SOCK_STREAM
    port = free_port(kind)  # nobody listens there, nor takes it meanwhile
    started = time.monotonic()
    with pytest.raises(purelink.ConnectError, match=r"(?i)connection refused") as refused:
        purelink.connect(f"{transport}://127.0.0.1:{port}", stream="s", timeout=30)
    assert not refused.value.permanent  # a listener may start there
    assert time.monotonic() - started < 10  # not the 30 s handshake timeout


def test_a_list_of_listeners_that_all_refuse_fails_as_fast_as_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each refusal moves the link on to the next listener at once, not after the
    failover wait (made longer than the handshake timeout here, so a link that
    waited for it would time out instead); the last one fails it, naming what
    each said."""
    monkeypatch.setattr(link_module, "FAILOVER_AFTER", 60.0)
    ports = [free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_STREAM)]
    urls = f"udp://127.0.0.1:{ports[0]},tcp://127.0.0.1:{ports[1]}"
    started = time.monotonic()
    with pytest.raises(purelink.ConnectError, match="every listener refused") as refused:
        purelink.connect(urls, stream="s", timeout=30)
    took = time.monotonic() - started
    for port in ports:
        assert f"127.0.0.1:{port}: connection refused" in str(refused.value)
    assert took < 10, took  # not the 30 s handshake timeout


def test_a_refusing_listener_in_the_list_is_passed_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(link_module, "FAILOVER_AFTER", 60.0)  # as above
    closed = free_port(socket.SOCK_DGRAM)
    with (
        serve(tmp_path / "d", "udp") as lst,
        purelink.connect(f"udp://127.0.0.1:{closed},{url(lst)}", stream="s", timeout=30) as link,
    ):
        link.queue(b"one")
        assert link.wait_stored(timeout=30)
        assert link._failovers == 1
    assert read_all(lst, "s") == [b"one"]


def test_a_connected_link_rides_out_every_listener_of_its_list_refusing(tmp_path: Path) -> None:
    """Refusals fail a link only before it first connected: afterwards every
    listener of its list may be down at once (a restart), and it waits."""
    port, closed = free_port(socket.SOCK_STREAM), free_port(socket.SOCK_STREAM)
    urls = f"tcp://127.0.0.1:{port},tcp://127.0.0.1:{closed}"
    first = purelink.Listener(tmp_path / "d", udp=None, tcp=f"127.0.0.1:{port}")
    first.start()
    try:
        link = purelink.connect(urls, stream="s", timeout=10)
        link.queue(b"one")
        assert link.wait_stored(timeout=30)
    finally:
        first.close()
    link.queue(b"two")  # both refuse now: the link fails over, round and round
    assert not link.wait_stored(timeout=1.0)
    with purelink.Listener(tmp_path / "d", udp=None, tcp=f"127.0.0.1:{port}"):
        assert link.wait_stored(timeout=30), "the link gave up while its listener restarted"
        link.close()
    assert [p for _, p in Store(tmp_path / "d").read("s")] == [b"one", b"two"]


# Listener(...) refuses a limit out of its bounds, naming them, as `serve` does
BAD_LIMITS = [
    ("max_record", 2**32, ValueError, "max_record must be from 1 to 16,777,216"),
    ("max_record", 0, ValueError, "max_record must be from 1 to 16,777,216, not 0"),
    ("max_links", 2**40, ValueError, "max_links must be from 1 to 2,147,483,648"),
    ("max_streams", -1, ValueError, "max_streams must be from 1 to"),
    ("max_reorder", 1 << 32, ValueError, "max_reorder must be from 1 to 2,147,483,648"),
    ("max_memory", 1 << 51, ValueError, "max_memory must be from 1 to"),
    ("max_connections", 0, ValueError, "max_connections must be from 1 to"),
    ("max_subscriptions", 1 << 21, ValueError, "max_subscriptions must be from 1 to 1,048,576"),
    ("replicas", 6, ValueError, "replicas must be from 1 to 5, not 6"),
    ("segment_bytes", 1 << 41, ValueError, "segment_bytes must be from 1 to"),
    ("retain_bytes", -1, ValueError, "retain_bytes must be from 0 to"),
    ("retain_age", 0.0, ValueError, "retain_age must be more than 0"),
    ("read_timeout", float("inf"), ValueError, "read_timeout must be more than 0 and at most"),
    ("read_timeout", float("nan"), ValueError, "read_timeout must be more than 0"),
    ("handshake_rate", -1.0, ValueError, "handshake_rate must be from 0 to 1e"),
    ("handshake_burst", 0.5, ValueError, "handshake_burst must be from 1 to"),
    ("max_record", 1.5, TypeError, "max_record must be an integer"),
    ("max_links", True, TypeError, "max_links must be an integer"),
    ("read_timeout", "10", TypeError, "read_timeout must be a number of seconds"),
]


@pytest.mark.parametrize(("name", "value", "error", "message"), BAD_LIMITS)
def test_listener_refuses_absurd_limits(
    tmp_path: Path, name: str, value: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        purelink.Listener(tmp_path / "d", udp="127.0.0.1:0", **{name: value})  # type: ignore[arg-type]
    assert not (tmp_path / "d").exists()  # refused before anything was made


def test_listener_and_serve_share_the_bounds(tmp_path: Path) -> None:
    from purelink.cli.command import build_parser  # noqa: PLC0415
    from purelink.listener.limits import INTEGER_LIMITS  # noqa: PLC0415

    parser = build_parser()
    for name, (low, high) in INTEGER_LIMITS.items():
        flag = "--" + name.replace("_", "-")
        for good in (low, high):
            args = parser.parse_args(["serve", "--data", str(tmp_path), flag, str(good)])
            assert getattr(args, name) == good
        for bad in (low - 1, high + 1):
            with pytest.raises(SystemExit):
                parser.parse_args(["serve", "--data", str(tmp_path), flag, str(bad)])
        purelink.Listener(tmp_path / "d", udp="127.0.0.1:0", **{name: high})  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=f"{name} must be from {low:,} to {high:,}"):
            purelink.Listener(tmp_path / "d", udp="127.0.0.1:0", **{name: high + 1})  # type: ignore[arg-type]


def test_bad_stream_name_is_refused(listener: purelink.Listener) -> None:
    with pytest.raises(ValueError, match="bad stream name"):
        purelink.connect(url(listener), stream="../etc", timeout=5)
    assert not (Path(listener.path) / "streams" / "..").resolve().joinpath("etc").exists()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        purelink.connect("http://x:1", stream="s")
    with pytest.raises(ValueError):
        purelink.Listener("d", sync="sometimes")


def test_large_records(listener: purelink.Listener) -> None:
    rng = random.Random(1)
    recs = [rng.randbytes(n) for n in (0, 1, 1400, 5000, 300_000, 2 << 20)]
    with purelink.connect(url(listener), stream="big") as link:
        for r in recs:
            link.queue(r)
        assert link.wait_stored(timeout=60)
    assert read_all(listener, "big") == recs


def test_after_close_queue_raises_closed(listener: purelink.Listener) -> None:
    link = purelink.connect(url(listener), stream="s")
    assert link.close(timeout=5)
    with pytest.raises(purelink.Closed):
        link.queue(b"x")


@pytest.mark.parametrize("transport", ["udp"])  # TCP garbage: test_tcp.py
def test_garbage_from_other_sockets_is_dropped_and_counted(listener: purelink.Listener) -> None:
    rng = random.Random(5)
    assert listener.udp_address is not None
    link = purelink.connect(url(listener), stream="valid")
    junk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    hello = wire.encode_hello(wire.Hello(1, "valid", "", (1 << 63) | 1, 1400, b""))
    batch = wire.encode_batch((1 << 63) | 1, 1, 1, [b"forged"])
    samples = (
        [rng.randbytes(rng.randrange(0, 1500)) for _ in range(200)]
        + [hello[: rng.randrange(len(hello))] for _ in range(50)]
        + [wire.encode_data(rng.randrange(1, 1 << 32), 1, batch) for _ in range(50)]
    )
    for i, data in enumerate(samples):
        junk.sendto(data, listener.udp_address)
        link.queue(b"v%d" % i)
    assert link.wait_stored(timeout=20)
    link.close()
    junk.close()
    stats = listener.stats()
    assert sum(stats.dropped.values()) >= 250
    assert stats.dropped.get("unknown_conn", 0) == 50
    assert Store(listener.path).streams() == ["valid"]
    assert read_all(listener, "valid") == [b"v%d" % i for i in range(len(samples))]


def test_short_secret_is_refused() -> None:
    with pytest.raises(ValueError):
        purelink.connect("udp://127.0.0.1:9", stream="s", secret=b"")


def test_a_record_over_the_listeners_max_record_is_refused_at_queue(tmp_path: Path) -> None:
    with (
        purelink.Listener(tmp_path / "d", udp="127.0.0.1:0", max_record=1000) as lst,
        purelink.connect(url(lst), stream="s") as link,
    ):
        link.queue(b"x" * 1000)
        with pytest.raises(ValueError):
            link.queue(b"x" * 1001)
        assert link.wait_stored(timeout=10)


def test_a_hole_needs_time_and_looks_before_it_fails_the_link() -> None:
    """Wall-clock time alone does not fail a link: a stopped process (SIGSTOP)
    or a thread that held the GIL for long lets HOLE_LIMIT pass with the link
    thread unable to look.  It must also have looked HOLE_LIMIT / HOLE_RECHECK
    / 2 times."""
    link = Link("udp://127.0.0.1:9", "s")  # made, not connected: no thread runs
    try:
        now = time.monotonic()
        link._hole_since = now - 10 * link_module.HOLE_LIMIT
        link._hole_looks = 1
        assert not link._hole_failed(now)
        assert link._error is None
        link._hole_looks = int(link_module.HOLE_LIMIT / link_module.HOLE_RECHECK / 2)
        assert link._hole_failed(now)
        assert isinstance(link._error, purelink.LinkError)
    finally:
        free(link)


def test_congestion_is_chosen_by_name_and_checked(listener: purelink.Listener) -> None:
    """`connect(..., congestion=...)`: BBR by default on UDP, CUBIC or NewReno on
    request; a TCP link leaves congestion control to the kernel (NewReno only
    bounds it)."""
    with pytest.raises(ValueError, match="must be one of bbr, bbr-cooperative, cubic, newreno"):
        purelink.connect(url(listener), stream="s", congestion="vegas")
    tcp = listener.udp_address is None
    for name in ("bbr", "bbr-cooperative", "cubic", "newreno"):
        with purelink.connect(url(listener), stream="s", congestion=name) as link:
            for i in range(2000):
                link.queue(b"%d" % i)
            assert link.wait_stored(timeout=30)
            assert link._sender.cc.name == ("newreno" if tcp else name)
    assert len(read_all(listener, "s")) == 8000
