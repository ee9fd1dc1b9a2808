"""The compiled core's queue(), grant, ring and take do what the pure-Python path does.

Why: with the compiled core, `Link.queue` is a C method (src/speedups/ring.c)
and the link thread takes records with `ring_take`; the pure path (link.py's
queue, ring.py) is the reference.  Two links, one of each kind, run the same
operations -- queue() of every kind of record, explicit seqs, writers
switched out between taking a seq, loading the ring and storing the record
(so records land in old lists after the ring grew), takes, the listener
storing, Full by count and by bytes, a failed link, an armed wakeup -- with a
ring that starts at 4 slots so that it grows and shrinks often; every result,
error, counter and the ring's contents must be the same after each step.
Then real threads hammer queue() while a link thread takes: every record
arrives exactly once, each thread's in its order, and the ring stays bounded.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import random
import sys
import threading
from array import array
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, ClassVar

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from helpers.ring import Collector, free, make
from purelink import native
from purelink.errors import LinkError
from purelink.link import ring
from purelink.link.link import Link
from purelink.protocol import sender_records

core = native.part("ring")
needs_core = pytest.mark.skipif(core is None, reason=native.reason or "no ring in the core")

_REIMPORTED = ("purelink.primitives.wakeup", "purelink.link.thread", "purelink.link.link")


def _pure_link_module() -> ModuleType:
    """link.py as the pure path loads it (native.part("ring") None), beside the
    compiled one: its own copies of wakeup.py, thread.py and link.py."""
    saved = {name: sys.modules.pop(name) for name in _REIMPORTED}
    parents = {
        name: getattr(sys.modules[name.rpartition(".")[0]], name.rpartition(".")[2])
        for name in saved
    }
    real_part = native.part
    native.part = lambda name: None
    try:
        return importlib.import_module("purelink.link.link")
    finally:
        native.part = real_part
        for name, module in saved.items():
            sys.modules[name] = module
            parent, _, attr = name.rpartition(".")
            setattr(sys.modules[parent], attr, parents[name])


PURE = _pure_link_module() if core is not None else sys.modules["purelink.link.link"]


@contextlib.contextmanager
def small_rings(size: int = 4) -> Iterator[None]:
    """Rings that start at `size` slots, so a few records make them grow and shrink."""
    before = ring.RING_MIN
    ring.RING_MIN = size  # type: ignore[misc]
    try:
        yield
    finally:
        ring.RING_MIN = before  # type: ignore[misc]


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """What a call gave: its value, or its error's type and message."""
    try:
        return "ok", call()
    except (StopIteration, TypeError, ValueError, OverflowError, purelink_errors()) as exc:
        return type(exc).__name__, str(exc)


def purelink_errors() -> type[Exception]:
    from purelink.errors import Error  # noqa: PLC0415

    return Error


class Writer:
    """queue()'s steps one at a time, as a writer switched out between them does:
    take a seq (the slow path's lock and grant), load the pair, store."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.seq = 0
        self.pair: tuple[list[bytes | None], int] | None = None

    def step(self) -> Any:
        link = self.link
        if not self.seq:
            with link._grant_lock:
                try:
                    self.seq = link._next_seq()
                except StopIteration:
                    self.seq = link._grant()
            return self.seq
        if self.pair is None:
            self.pair = link._slots
            return len(self.pair[0])
        slots, mask = self.pair
        slots[self.seq & mask] = b"w%d" % self.seq
        self.seq, self.pair = 0, None
        return "stored"


RECORDS: list[Any] = [
    b"",
    b"a",
    b"x" * 61,
    b"y" * 90,
    b"z" * 300,  # over max_record once the test lowers it
    bytearray(b"ba"),
    memoryview(b"mv"),
    "str",
    7,
]

OPS = st.one_of(
    st.tuples(st.just("queue"), st.integers(0, len(RECORDS) - 1)),
    st.tuples(st.just("bulk"), st.integers(1, 40)),
    st.tuples(st.just("bulk"), st.integers(1, 10)),
    st.tuples(st.just("seq"), st.integers(-1, 2)),
    st.tuples(st.just("seq None"), st.integers(0, len(RECORDS) - 1)),
    st.tuples(st.just("step"), st.integers(0, 2)),
    st.tuples(st.just("take"), st.just(0)),
    st.tuples(st.just("stored"), st.just(0)),
    st.tuples(st.just("bytes_out"), st.just(0)),
    st.tuples(st.just("arm"), st.just(0)),
    st.tuples(st.just("max_record"), st.sampled_from([100, 16 << 20])),
    st.tuples(st.just("fail"), st.just(0)),
)


def apply(link: Link, writers: list[Writer], op: str, arg: int) -> Any:
    """One operation on one link; returns what it gave."""
    if op == "queue":
        return outcome(lambda: link.queue(RECORDS[arg]))
    if op == "bulk":
        return [outcome(functools.partial(link.queue, b"b%d" % i)) for i in range(arg)]
    if op == "seq None":  # as bench/_links.py's variant calls it: Link.queue(self, r, None)
        return outcome(lambda: type(link).queue(link, RECORDS[arg], None))
    if op == "seq":
        return outcome(lambda: link.queue(b"s", seq=link.queued + 1 + arg))
    if op == "step":
        return outcome(writers[arg].step)
    if op == "take":
        link._take()
        return link._taken, link._hole_since > 0
    if op == "stored":
        link._stored = link._taken  # the listener stored what was sent
        return link._stored
    if op == "bytes_out":
        link._bytes_out = link._bytes_in  # ... and its bytes
        link._set_limits()
        return link._limit_bytes
    if op == "arm":
        link._wakeup.armed = True
        return None
    if op == "max_record":
        link._max_record = arg
        link._small = min(1 << 16, arg + 1)
        return None
    link._error = LinkError("failed")
    link._set_limits()
    return None


def seen(op: str, got: Any, link: Link) -> None:
    """Tell Hypothesis which of the cases that matter a step reached."""
    if len(link._gens) > 1:
        event("several generations")
    if len(link._slots[0]) > 4:
        event("the ring grew")
    if op in ("queue", "bulk", "seq", "step") and "Full" in repr(got):
        event("Full")
    if op == "take" and got[1]:
        event("a hole")


def state(link: Link) -> tuple[Any, ...]:
    """Everything the two paths must agree on after each step."""
    w = link._wakeup
    return (
        link.queued,
        link._grant_range[0],
        link._bytes_in,
        link._limit_bytes,
        link._taken,
        [(since, list(slots), mask) for since, slots, mask in link._gens],
        link._slots[1],
        link._sender.records,  # type: ignore[attr-defined]
        w.armed,
        w.writes,
    )


@needs_core
@settings(max_examples=500, deadline=None)
@given(
    st.lists(OPS, max_size=120),
    st.sampled_from([3, 40, 5000]),
    st.sampled_from([1000, 1 << 20]),
)
def test_any_interleaving_gives_the_same_records_and_seqs(
    ops: list[tuple[str, int]], capacity: int, capacity_bytes: int
) -> None:
    with small_rings():
        pure = make(PURE.Link, capacity, capacity_bytes)
        compiled = make(Link, capacity, capacity_bytes)
    try:
        assert type(compiled).queue is not type(pure).queue  # one of each
        writers = {id(k): [Writer(k) for _ in range(3)] for k in (pure, compiled)}
        with small_rings():
            for op, arg in ops:
                got_pure = apply(pure, writers[id(pure)], op, arg)
                got_compiled = apply(compiled, writers[id(compiled)], op, arg)
                assert got_compiled == got_pure, (op, arg)
                assert state(compiled) == state(pure), (op, arg)
                seen(op, got_pure, pure)
            for k in (pure, compiled):  # the switched-out writers finish, the thread takes all
                for w in writers[id(k)]:
                    while w.seq:
                        w.step()
                k._take()
            assert state(compiled) == state(pure)
    finally:
        free(pure)
        free(compiled)


def gens_strategy() -> st.SearchStrategy[tuple[tuple[Any, ...], int, int]]:
    """Generations as the ring makes them (sizes powers of two, `since` rising), any
    slot written or not, and a range start .. end that fits the smallest list."""

    @st.composite
    def build(draw: st.DrawFn) -> tuple[tuple[Any, ...], int, int]:
        count = draw(st.integers(1, 3))
        since = draw(st.integers(1, 50))
        gens = []
        for _ in range(count):
            size = 1 << draw(st.integers(0, 4))
            filled = draw(st.lists(st.booleans(), min_size=size, max_size=size))
            slots = [b"r%d-%d" % (since, i) if f else None for i, f in enumerate(filled)]
            gens.append((since, slots, size - 1))
            since += draw(st.integers(0, 8))
        smallest = min(len(g[1]) for g in gens)
        start = draw(st.integers(max(1, gens[0][0] - 4), since + 4))
        end = start - 1 + draw(st.integers(1, smallest))  # the link thread never asks for none
        return tuple(gens), start, end

    return build()


def copy_gens(gens: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((since, list(slots), mask) for since, slots, mask in gens)


@needs_core
@settings(max_examples=1000, deadline=None)
@given(gens_strategy())
def test_take_and_has_are_ring_pys(case: tuple[tuple[Any, ...], int, int]) -> None:
    assert core is not None
    gens, start, end = case
    for seq in range(start - 2, end + 3):
        assert core.ring_has(gens, seq) == ring.has(gens, seq), seq
    mine, theirs = copy_gens(gens), copy_gens(gens)
    assert core.ring_take(mine, start, end) == ring.take(theirs, start, end)
    assert mine == theirs  # the same slots cleared


@needs_core
@given(st.lists(st.binary(max_size=70) | st.integers(65530, 70000).map(bytes)))
def test_lengths_are_the_length_table(records: list[bytes]) -> None:
    assert core is not None
    assert array("H", core.ring_lengths(records)).tolist() == [min(len(r), 0xFFFF) for r in records]


@needs_core
@pytest.mark.parametrize(
    "gens",
    [
        [],
        ((1, [None], 0, 4),),
        ((1, (None,), 0),),
        ((1, [None, None, None], 2),),
        ((1, [None, None], 3),),
        (("1", [None], 0),),
        ((1 << 70, [None], 0),),
        ((-5, [None], 0),),
        "not a tuple",
    ],
)
def test_take_declines_what_is_not_a_ring(gens: Any) -> None:
    assert core is not None
    with pytest.raises((TypeError, ValueError, OverflowError)):
        core.ring_take(gens, 1, 1)
    with pytest.raises((TypeError, ValueError, OverflowError)):
        core.ring_has(gens, 1)


@needs_core
def test_take_declines_a_range_wider_than_the_ring() -> None:
    assert core is not None
    gens = ((1, [None, b"a"], 1),)  # seq 1 is in slot 1
    with pytest.raises(ValueError):
        core.ring_take(gens, 1, 3)
    assert core.ring_take(gens, 1, 2) == [b"a"]
    assert core.ring_take(gens, 5, 1) == []


@needs_core
def test_the_attributes_check_what_they_are_given() -> None:
    link = make(Link, 100, 1 << 20)
    try:
        for bad in ([None] * 3, ([None] * 3, 2), ([None] * 4, 4), ("x", 0)):
            with pytest.raises((TypeError, ValueError)):
                link._slots = bad  # type: ignore[assignment]
        with pytest.raises(AttributeError):
            del link._bytes_in
        with pytest.raises(OverflowError):
            link._new_grant(1, 1 << 64)
        with pytest.raises(TypeError):
            link.queue()  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            link.queue(b"a", None, 3)  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            link.queue(b"a", sequence=3)  # type: ignore[call-arg]
        assert link.queue(record=b"a") == 1
        assert link.queue(b"b", seq=2) == 2
        assert Link.queue(link, b"c") == 3  # as bench/_links.py's variant calls it
        link._slots = link._slots  # a pair it gave is a pair it takes
    finally:
        free(link)


class PlainWakeup:
    """A wakeup that is not the compiled core's WakeFlag: queue() asks it in Python."""

    def __init__(self) -> None:
        self.armed = False
        self.writes = 0

    def signal(self) -> None:
        self.armed = False
        self.writes += 1

    def close(self) -> None:
        pass


def test_a_wakeup_of_another_kind_is_asked_in_python() -> None:
    for cls in {Link, PURE.Link}:
        link = make(cls, 100, 1 << 20)
        real = link._wakeup
        try:
            plain = PlainWakeup()
            link._wakeup = plain  # type: ignore[assignment]
            link.queue(b"a")
            plain.armed = True
            link.queue(b"b")
            link.queue(b"c")
            assert (plain.armed, plain.writes) == (False, 1)
        finally:
            link._wakeup = real
            free(link)


def test_a_byte_bound_past_64_bits_bounds_nothing() -> None:
    for cls in {Link, PURE.Link}:
        link = make(cls, 100, 10**20)
        try:
            assert link.queue(b"a") == 1
        finally:
            free(link)


def test_both_kinds_of_link_queue_the_same() -> None:
    """A plain run through the API, for whichever path this process uses (and the
    pure one beside it when the core is compiled)."""
    for cls in {Link, PURE.Link}:
        link = make(cls, 10, 1 << 20)
        try:
            assert [link.queue(b"%d" % i) for i in range(10)] == list(range(1, 11))
            with pytest.raises(purelink_errors()):
                link.queue(b"full")
            link._take()
            assert link._sender.records == [b"%d" % i for i in range(10)]  # type: ignore[attr-defined]
        finally:
            free(link)


@pytest.mark.parametrize("kind", ["compiled", "pure"])
def test_threads_hammering_queue_while_the_link_thread_takes(kind: str) -> None:
    """4 threads queue 20,000 records each, switched every 10 us, while a link
    thread takes and the listener stores: every record exactly once, each
    thread's in its order, and the ring never grows past what the backlog needs."""
    if kind == "compiled" and core is None:
        pytest.skip(native.reason or "no ring in the core")
    cls = Link if kind == "compiled" else PURE.Link
    link = make(cls, 50_000, 1 << 30)
    sink: Collector = link._sender  # type: ignore[assignment]
    per_thread = 20_000
    done = threading.Event()
    most = [0, 0]

    def taker() -> None:
        rng = random.Random(1)
        while not (done.is_set() and link._taken == link.queued):
            link._take()
            if rng.random() < 0.5:
                link._stored = link._taken
            most[0] = max(most[0], len(link._slots[0]))
            most[1] = max(most[1], link._grant_range[0] - 1 - link._taken)

    def fill(k: int) -> None:
        for i in range(per_thread):
            while True:
                try:
                    link.queue(b"%d-%d" % (k, i))
                    break
                except purelink_errors():
                    pass  # Full: the taker makes room

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        t = threading.Thread(target=taker)
        t.start()
        threads = [threading.Thread(target=fill, args=(k,)) for k in range(4)]
        for w in threads:
            w.start()
        for w in threads:
            w.join(120)
        done.set()
        t.join(120)
    finally:
        sys.setswitchinterval(before)
        free(link)
    assert len(sink.records) == 4 * per_thread == link.queued
    assert len(set(sink.records)) == len(sink.records)
    for k in range(4):
        mine = [r for r in sink.records if r.startswith(b"%d-" % k)]
        assert mine == [b"%d-%d" % (k, i) for i in range(per_thread)]
    assert most[0] <= ring.largest(50_000)
    assert most[1] <= most[0]  # the grant never reached past the ring


@needs_core
@settings(max_examples=1000, deadline=None)
@given(gens_strategy(), st.lists(st.binary(max_size=3), max_size=3))
def test_take_into_is_the_take_appended_with_its_lengths(
    case: tuple[tuple[Any, ...], int, int], held: list[bytes]
) -> None:
    assert core is not None
    gens, start, end = case
    mine, theirs = copy_gens(gens), copy_gens(gens)
    records = list(held)
    table = core.ring_take_into(mine, start, end, records)
    taken = ring.take(theirs, start, end)
    assert records == held + taken
    assert array("H", table).tolist() == [min(len(r), 0xFFFF) for r in taken]
    assert mine == theirs  # the same slots cleared
    assert core.ring_take_lengths(copy_gens(gens), start, end) == (taken, table)


@needs_core
def test_take_into_gives_the_real_lengths_capped() -> None:
    assert core is not None
    big = bytes(70000)
    gens = ((1, [None, big, b"ab", None], 3),)
    records: list[bytes] = []
    assert array("H", core.ring_take_into(gens, 1, 3, records)).tolist() == [0xFFFF, 2]
    assert records == [big, b"ab"]
    with pytest.raises(TypeError):
        core.ring_take_into(gens, 1, 3, ())
    with pytest.raises(ValueError):
        core.ring_take_into(gens, 1, 9, records)


@needs_core
@given(st.lists(st.binary(max_size=70) | st.integers(65530, 70000).map(bytes)), st.data())
def test_records_bytes_is_the_sum_of_their_lengths(
    records: list[bytes], data: st.DataObject
) -> None:
    assert core is not None
    lens = array("H", [min(len(r), 0xFFFF) for r in records])
    lo = data.draw(st.integers(0, len(records)))
    hi = data.draw(st.integers(lo, len(records)))
    assert core.records_bytes(records, lens, lo, hi) == sum(map(len, records[lo:hi]))
    for bad in ((-1, hi), (lo, len(records) + 1), (hi + 1, hi)):
        with pytest.raises(IndexError):
            core.records_bytes(records, lens, *bad)
    with pytest.raises(TypeError):
        core.records_bytes(records, array("I", lens), lo, hi)
    with pytest.raises(TypeError):
        core.records_bytes(records, "not a buffer", lo, hi)
    if records:
        with pytest.raises(IndexError):  # a table shorter than the list
            core.records_bytes(records, lens[:-1], 0, len(records))


@needs_core
def test_release_counts_the_same_bytes_both_ways() -> None:
    """SenderRecords._release's stored_bytes, with records of 64 KiB and more."""
    records = [bytes(n) for n in (1, 70000, 0xFFFF, 3, 200000, 5)]
    counts = []
    for impl in (core, None):
        sender_records._core = impl
        try:
            s = sender_records.SenderRecords()
            s.push(records)
            s._release(2)
            s._release(6)
            counts.append(s.stored_bytes)
        finally:
            sender_records._core = core
    assert counts == [sum(map(len, records))] * 2


class _Meddler(bytes):
    """A record whose length empties the ring's other slots (Python code that a
    take meets only for a record that is not exactly bytes)."""

    slots: ClassVar[list[bytes | None]] = []

    def __len__(self) -> int:
        self.slots[:] = [None] * len(self.slots)  # lets go of the records there
        return super().__len__()


@needs_core
def test_a_take_looks_again_after_a_records_own_code() -> None:
    """The take reads the slots ahead once, except after a record's own code
    ran: the records that code let go of are not taken (nor read: the
    sanitizer lane would see it)."""
    assert core is not None
    slots: list[bytes | None] = [None] * 8
    _Meddler.slots = slots
    first = _Meddler(b"m")
    for seq in range(2, 6):
        slots[seq] = bytes([seq]) * 200  # only the ring holds them
    slots[1] = first
    records: list[bytes] = []
    table = core.ring_take_into(((1, slots, 7),), 1, 5, records)
    assert records == [first] and array("H", table).tolist() == [1]


@pytest.mark.parametrize("take", ["c", "python"])
def test_a_take_leaves_no_record_in_an_older_list(take: str) -> None:
    """Records taken from an older generation are let go there as they are
    taken, not when that list is dropped (the take has them in the cache)."""
    if take == "c" and core is None:
        pytest.skip(native.reason or "no ring in the core")
    old: list[bytes | None] = [None, b"a", b"b", None]  # seqs 1, 2 (slot = seq & 3)
    new: list[bytes | None] = [None] * 8
    new[3] = b"c"  # the straggler of seq 3 wrote the newer list
    new[4] = b"d"
    gens = ((1, old, 3), (4, new, 7))
    if take == "c":
        assert core is not None
        records: list[bytes] = []
        core.ring_take_into(gens, 1, 4, records)
    else:
        records = ring.take(gens, 1, 4)
    assert records == [b"a", b"b", b"c", b"d"]
    assert old == [None] * 4 and new == [None] * 8


@needs_core
def test_untracked_lets_the_list_go_from_the_collector() -> None:
    """untracked() gives the same list, out of the collector's sight, and stays
    so while it grows and is cut; anything but a list is a TypeError."""
    assert core is not None
    records: list[bytes] = [b"a"]
    assert gc.is_tracked(records)
    assert core.untracked(records) is records
    assert not gc.is_tracked(records)
    records.extend([b"b", b"c"] * 1000)
    del records[:1500]
    records.append(b"d")
    assert not gc.is_tracked(records) and records[-1] == b"d"
    for other in ((b"a",), {b"a": 1}, bytearray(b"a"), type("L", (list,), {})()):
        with pytest.raises(TypeError):
            core.untracked(other)  # type: ignore[arg-type]


def test_the_links_lists_of_records_are_out_of_the_collector() -> None:
    """With the compiled core the ring's lists and the sender's records are not
    tracked (they hold exact bytes only); on the pure path they are lists like
    any other.  Both paths copy a subclass of bytes, so only exact bytes reach
    the ring, with the same value."""

    class Tagged(bytes):
        pass

    with small_rings():
        for cls, compiled in {(Link, core is not None), (PURE.Link, False)}:
            link = make(cls, 100, 1 << 20)
            try:
                tagged = Tagged(b"tag")
                link.queue(tagged)
                for i in range(20):  # the ring grows: new generations
                    link.queue(b"%d" % i)
                slots = [gen[1] for gen in link._gens]
                assert len(slots) > 1
                assert all(gc.is_tracked(s) is not compiled for s in slots)
                stored = slots[0][1]  # seq 1, in the first list
                assert stored == b"tag" and stored.__class__ is bytes
            finally:
                free(link)
    records = sender_records.SenderRecords()
    assert gc.is_tracked(records._recs) is (sender_records._core is None)
