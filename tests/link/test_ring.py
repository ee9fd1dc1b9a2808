"""The link's growing ring (ring.py) under every kind of interleaving, with no thread.

A seeded scheduler runs simulated writers, the grant and the link thread one
step at a time on a real (unconnected) Link.  A writer's steps are exactly
queue()'s: take a seq from the grant (the slow path's lock and _grant when it
runs dry), load the (slots, mask) pair, store the record.  A writer may stall
for many steps between the three (a thread switched out), so records are
written into old lists long after the ring was replaced.  The link thread
takes what is there (`Link._take`), and the listener's "stored" follows it
now and then so that grants go on.  Every record must reach the sender once,
in seq order, and the ring must grow with the backlog and shrink after it.
"""

from __future__ import annotations

import random
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

import purelink
from helpers.ring import Collector, free, make
from purelink.link import ring
from purelink.link.link import Link
from purelink.store.store import Store


def writer(link: Link, count: int, out: list[int]) -> Iterator[None]:
    """queue()'s steps for `count` records, yielding between them."""
    for _ in range(count):
        with link._grant_lock:  # the fast path takes no lock; holding it here is
            try:  # the same as the slow path (no step runs inside)
                s = link._next_seq()
            except StopIteration:
                s = link._grant()
        out.append(s)
        yield
        ring, mask = link._slots
        yield
        ring[s & mask] = b"%d" % s
        yield


@pytest.mark.parametrize("seed", range(12))
def test_every_record_is_taken_once_in_order_while_the_ring_grows_and_shrinks(seed: int) -> None:
    rng = random.Random(seed)
    link = make()
    sink = link._sender
    assert isinstance(sink, Collector)
    try:
        seqs: list[int] = []
        writers = [writer(link, rng.randrange(2_000, 12_000), seqs) for _ in range(4)]
        sizes = {len(link._slots[0])}
        most_gens = 1
        reader_rate = rng.choice([0.0002, 0.001, 0.004])  # how often the link thread runs
        while writers:
            if rng.random() < reader_rate:
                link._take()
                if rng.random() < 0.5:
                    link._stored = link._taken  # the listener stored what was sent
            else:
                w = rng.choice(writers)
                for _ in range(rng.choice([1, 1, 1, 3, 50])):  # sometimes a long slice
                    if next(w, StopIteration) is StopIteration:
                        writers.remove(w)
                        break
            sizes.add(len(link._slots[0]))
            most_gens = max(most_gens, len(link._gens))
            # the invariant that keeps records apart: the grant never reaches past
            # the newest list's size from the next seq the link thread takes
            stop = link._grant_range[0]
            assert stop - 1 - link._taken <= len(link._slots[0])
        while link._taken < link.queued:
            before = link._taken
            link._take()
            assert link._taken > before
        assert sorted(seqs) == list(range(1, len(seqs) + 1))
        assert sink.records == [b"%d" % s for s in range(1, len(seqs) + 1)]
        assert len(link._gens) == 1  # the old lists were dropped
        assert max(sizes) > ring.RING_MIN  # it grew ...
        assert most_gens > 1  # ... while writers still held seqs of older lists
        link._stored = link._taken
        for _ in range(3):  # ... and a quiet link's next grants shrink it
            n = link._grant_range[0] - 1 - link.queued
            for _ in range(n + 1):
                s = link.queue(b"q")
                link._take()
                link._stored = s
        assert len(link._slots[0]) == ring.RING_MIN
    finally:
        free(link)


def test_a_straggler_is_found_in_the_list_it_loaded() -> None:
    """The smallest case, step by step: a writer takes the last seq of a grant and
    is switched out; the next grant doubles the ring; the straggler then stores
    into the OLD list (it had loaded the pair before the switch), and the new
    writers into the new one.  The link thread takes all, in order."""
    link = make(capacity=10_000)
    sink = link._sender
    assert isinstance(sink, Collector)
    try:
        size = len(link._slots[0])
        for _ in range(size - 1):
            link.queue(b"a")
        last = link._next_seq()  # the straggler's seq: the grant is now used up
        old, old_mask = link._slots
        link.queue(b"b")  # a new grant: the ring is full of untaken records, so it grows
        assert len(link._slots[0]) > size and len(link._gens) == 2
        link._take()
        assert len(sink.records) == size - 1  # stops at the straggler's hole
        old[last & old_mask] = b"late"
        assert ring.has(link._gens, last)
        link._take()
        assert sink.records[-2:] == [b"late", b"b"]
        assert len(link._gens) == 1 and link._slots[0] is not old
    finally:
        free(link)


def test_size_for() -> None:
    most = 1 << 20
    assert ring.size_for(0, 1024, most) == 1024
    assert ring.size_for(512, 1024, most) == 1024
    assert ring.size_for(513, 1024, most) == 4096
    assert ring.size_for(600_000, 1 << 19, most) == most  # never past `most`
    assert ring.size_for(100, 1 << 16, most) == 1024  # nearly empty: shrink
    assert ring.size_for(0, 1024, most) == 1024
    assert ring.largest(1_000_000) == most
    assert ring.largest(16) == ring.RING_MIN


def test_a_new_link_costs_kilobytes_not_megabytes() -> None:
    """A link with the default capacity (1,000,000) once reserved 2^20 slots (8 MB)
    up front; its memory now follows what is queued."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        link = Link("udp://127.0.0.1:9", "s")  # made, not connected: no thread runs
        made = tracemalloc.get_traced_memory()[0] - before
        try:
            for _ in range(100_000):  # not taken: the ring must hold them all
                link.queue(b"x")
            assert len(link._slots[0]) >= 100_000
        finally:
            free(link)
    finally:
        tracemalloc.stop()
    assert made < 256 << 10, made


def test_racing_threads_through_many_generations_store_every_record_once_in_order(
    tmp_path: Path,
) -> None:
    """Real threads, switched every 10 us, queue 4 x 20,000 records while the link
    thread is held (its wakeup disarmed, as if a write were on its way, and its
    take a no-op should an answer wake it), so the ring grows through several
    generations with writers preempted between taking a seq and storing; then
    it drains.  Every record is stored once, each thread's in its queue order."""
    with purelink.Listener(tmp_path / "d", udp="127.0.0.1:0") as lst:
        link = purelink.connect("udp://%s:%d" % lst.udp_address, stream="s")
        link._sender.get_timer = lambda: None  # type: ignore[method-assign]  # no timer wakes it
        w = link._wakeup
        w.mark_and_signal()  # it goes round once more, then sleeps with no timer
        deadline = time.monotonic() + 10
        while not (w.armed and not w.pending) and time.monotonic() < deadline:
            time.sleep(0.001)  # until the link thread sleeps in epoll
        assert w.armed
        w.armed = False  # queue() writes no wakeup: the thread stays asleep
        link._take = lambda: None  # type: ignore[method-assign]  # and takes nothing
        per_thread = 20_000
        sizes: set[int] = set()

        def fill(k: int) -> None:
            for i in range(per_thread):
                link.queue(b"%d-%d" % (k, i))
                if i % 1000 == 0:
                    sizes.add(len(link._gens))

        before = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)
        try:
            threads = [threading.Thread(target=fill, args=(k,)) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
        finally:
            sys.setswitchinterval(before)
        assert link._taken == 0  # held: nothing was taken meanwhile
        assert max(sizes) > 2  # old lists were still live
        del link._take  # the class's again
        w.signal()
        assert link.wait_stored(timeout=60)
        link.close(timeout=10)
        got = [p for _, p in Store(lst.path).read("s")]
    assert len(got) == 4 * per_thread
    for k in range(4):
        mine = [r for r in got if r.startswith(b"%d-" % k)]
        assert mine == [b"%d-%d" % (k, i) for i in range(per_thread)]
