"""The compiled packer (src/speedups/pack.c) makes the pure packer's datagrams, byte for byte.

Why: the listener cannot tell which packer a link runs, and must not: a
batch boundary, a piece's offset or a CRC that differed would be a protocol
change.  Both packers are driven through the same steps (records arriving,
fills bounded by count and room, the path's size changing between fills,
resends of datagrams, new sessions), and every output is compared: the
datagrams, the returned packet numbers and bytes, every flight's attributes
and the counters.
"""

from __future__ import annotations

import gc
import sys
from array import array
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from purelink import native
from purelink.link import transport
from purelink.protocol import packing, wire

core = native.part("pack")
pytestmark = pytest.mark.skipif(core is None, reason=native.reason or "no compiled packer")

FIELDS = (
    "pn", "first", "last", "size", "sent", "data", "offset", "end", "retx", "delivered",
    "delivered_time", "first_sent", "app_limited",
)  # fmt: skip

sizes = st.one_of(
    st.integers(0, 120),
    st.integers(0, 3_000),
    st.sampled_from([0, 1, 1_399, 65_533, 65_534, 65_535, 65_536, 65_537]),
    st.integers(60_000, 70_000),
    st.integers(100_000, 200_000),
)
datagram_sizes = st.one_of(st.integers(1_200, 1_472), st.sampled_from([128, 129, 9_000]))
steps = st.one_of(
    st.tuples(st.just("push"), st.lists(sizes, min_size=1, max_size=40)),
    st.tuples(
        st.just("fill"),
        st.integers(0, 70),
        st.integers(-1, 200_000),
        st.one_of(  # the delivery-rate stamps the ledger asks for (InFlight.stamps)
            st.none(),
            st.tuples(st.integers(0, 2**40), st.floats(0, 1e6), st.floats(0, 1e6), st.booleans()),
        ),
    ),
    st.tuples(st.just("size"), datagram_sizes),
    st.tuples(st.just("resend"), st.integers(0, 10_000)),
    st.tuples(st.just("start"), st.integers(0, 10_000)),
)


class Side:
    """One packer and the sender's state it works on."""

    def __init__(self, packer_type: Any, size: int) -> None:
        self.packer = packer_type(size)
        self.packer.start(7, 5, 3, 1)
        self.pn = 0
        self.made: list[Any] = []  # every flight made, in order

    def fill(
        self, recs: list[bytes], lens: array[int], count: int, room: int, stamps: Any = None
    ) -> Any:
        """A fill; with stamps, into the ledger's container: the compiled core's
        ring (Flights) for the compiled packer, a dict for the pure one."""
        out: list[bytes] = []
        flights: Any = {}
        args = (recs, lens, 1, len(recs), self.pn, 2.5, count, room, out)
        if stamps is None:
            result = self.packer.fill(*args, flights)
        else:
            if isinstance(self.packer, core.Packer):  # type: ignore[union-attr]
                flights = core.Flights()  # type: ignore[union-attr]
            result = self.packer.fill(*args, flights, stamps)
        self.pn = result[0]
        self.made.extend(flights.values())
        return result, out, [(pn, _attrs(f)) for pn, f in flights.items()]

    def resend(self, k: int) -> Any:
        f = self.made[k % len(self.made)]
        self.pn, again = self.packer.resend(f, self.pn, 3.5)
        self.made.extend(g for g in again if g is not f)
        return self.pn, [_attrs(g) for g in again], f is again[0]

    def counters(self) -> tuple[int, ...]:
        p = self.packer
        return (p.next_seq, p.batches, p.pieces, p.payload, p.size, p.open, p.conn_id)


def _attrs(f: Any) -> tuple[Any, ...]:
    return tuple(getattr(f, name) for name in FIELDS)


def _record(n: int, i: int) -> bytes:
    return bytes([i % 251]) * n


@settings(max_examples=150, deadline=None)
@given(st.lists(steps, max_size=30), datagram_sizes)
def test_the_same_datagrams_for_any_records_and_steps(script: list[Any], size: int) -> None:
    pure, fast = Side(packing.PurePacker, size), Side(core.Packer, size)  # type: ignore[union-attr]
    recs: list[bytes] = []
    lens = array("H")
    for step in script:
        if step[0] == "push":
            new = [_record(n, len(recs) + i) for i, n in enumerate(step[1])]
            recs.extend(new)
            lens.extend(min(len(r), 0xFFFF) for r in new)
        elif step[0] == "fill":
            room = step[2] if step[2] >= 0 else 1 << 40
            assert pure.fill(recs, lens, step[1], room, step[3]) == fast.fill(
                recs, lens, step[1], room, step[3]
            )
        elif step[0] == "size":
            pure.packer.size = fast.packer.size = step[1]
        elif step[0] == "resend" and pure.made:
            assert pure.resend(step[1]) == fast.resend(step[1])
        elif step[0] == "start" and recs:
            seq = 1 + step[1] % len(recs)  # a new session resumes at a received seq
            pure.packer.start(8, 5, 4, seq)
            fast.packer.start(8, 5, 4, seq)
        assert pure.counters() == fast.counters()
    # and everything left goes out the same
    while pure.packer.open or pure.packer.next_seq <= len(recs):
        assert pure.fill(recs, lens, 64, 1 << 40) == fast.fill(recs, lens, 64, 1 << 40)
        assert pure.counters() == fast.counters()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(sizes, min_size=1, max_size=60),
    st.sampled_from([1_472, 1_400, 9_000]),
    st.integers(1_200, 1_471),
    st.integers(1, 64),
)
def test_resends_after_the_path_shrank_are_the_same(
    lengths: list[int], size: int, smaller: int, count: int
) -> None:
    pure, fast = Side(packing.PurePacker, size), Side(core.Packer, size)  # type: ignore[union-attr]
    recs = [_record(n, i) for i, n in enumerate(lengths)]
    lens = array("H", [min(n, 0xFFFF) for n in lengths])
    while pure.packer.open or pure.packer.next_seq <= len(recs):
        assert pure.fill(recs, lens, count, 1 << 40) == fast.fill(recs, lens, count, 1 << 40)
    pure.packer.size = fast.packer.size = smaller
    for k in range(len(pure.made)):  # each first transmission, cut smaller; then again
        assert pure.resend(k) == fast.resend(k)
    pure.packer.size = fast.packer.size = 1_200
    for k in range(0, len(pure.made), 3):
        assert pure.resend(k) == fast.resend(k)
    assert pure.counters() == fast.counters()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 2_000), min_size=1, max_size=400), st.integers(1_200, 1_472))
def test_every_datagram_decodes_to_the_records(lengths: list[int], size: int) -> None:
    recs = [_record(n, i) for i, n in enumerate(lengths)]
    side = Side(core.Packer, size)  # type: ignore[union-attr]
    lens = array("H", lengths)
    out: list[bytes] = []
    while side.packer.open or side.packer.next_seq <= len(recs):
        out.extend(side.fill(recs, lens, 64, 1 << 40)[1])
    got: list[bytes] = []
    pieces = b""
    for data in out:
        assert len(data) <= size
        msg = wire.decode_datagram(data)
        if isinstance(msg, wire.Data):
            got.extend(wire.batch_records(msg.batch, wire.verify_batch(msg.batch)))
        else:
            assert isinstance(msg, wire.Fragment)
            pieces += bytes(msg.chunk)
            if len(pieces) == msg.total:
                got.extend(wire.batch_records(pieces, wire.verify_batch(pieces)))
                pieces = b""
    assert got == recs


@given(
    st.lists(st.sampled_from([40, 99, 100, 1400, 1472]), min_size=1, max_size=80),
    st.integers(0, 79),
    st.integers(1, 70),
)
def test_the_same_gso_runs(sizes: list[int], i: int, limit: int) -> None:
    datagrams = [bytes(n) for n in sizes]
    i %= len(datagrams)
    assert core.gso_run(datagrams, i, limit) == transport.run_end(datagrams, i, limit)  # type: ignore[union-attr]


def test_flight_has_the_pure_flights_attributes() -> None:
    f = core.Flight(1, 2, 3, 4, 5.0, b"x", offset=6, end=7)  # type: ignore[union-attr]
    p = packing.PureFlight(1, 2, 3, 4, 5.0, b"x", offset=6, end=7)
    assert _attrs(f) == _attrs(p)
    for name in ("delivered", "delivered_time", "first_sent", "app_limited"):
        assert getattr(f, name) == getattr(p, name)
    f.retx = f.app_limited = True
    f.delivered, f.delivered_time, f.first_sent, f.data = 9, 1.5, 0.5, b"yz"
    assert (f.retx, f.app_limited, f.delivered, f.delivered_time, f.data) == (
        True, True, 9, 1.5, b"yz",
    )  # fmt: skip
    with pytest.raises(TypeError):
        f.data = "not bytes"  # type: ignore[assignment]
    with pytest.raises(TypeError):
        core.Flight(1, 2, 3, 4, 5.0, "not bytes")  # type: ignore[union-attr, arg-type]
    with pytest.raises(AttributeError):
        f.other = 1  # type: ignore[attr-defined]
    assert "pn=1" in repr(f)


def test_bad_arguments_are_errors_not_crashes() -> None:
    packer = core.Packer(1400)  # type: ignore[union-attr]
    packer.start(1, 2, 3, 1)
    recs = [b"a" * 10] * 5
    lens = array("H", [10] * 5)
    out: list[bytes] = []
    flights: dict[int, Any] = {}
    with pytest.raises(ValueError):
        core.Packer(127)  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        packer.size = 100
    with pytest.raises(IndexError):  # records claimed that are not there
        packer.fill(recs, lens, 1, 9, 0, 0.0, 8, 1 << 20, out, flights)
    with pytest.raises(IndexError):  # the first record is before the list
        packer.fill(recs, lens, 2, 5, 0, 0.0, 8, 1 << 20, out, flights)
    with pytest.raises(TypeError):
        packer.fill(recs, array("I", [10] * 5), 1, 5, 0, 0.0, 8, 1 << 20, out, flights)
    with pytest.raises(TypeError):
        packer.fill(["str"] * 5, lens, 1, 5, 0, 0.0, 8, 1 << 20, out, flights)
    # a length table that is not theirs, all of it or one entry among the first
    # records fitted (fitting reads the table, not the records: the copy counts)
    for wrong in ([b"a" * 11] * 30, [b"a" * 9] * 30, [b"a" * 11] + [b"a" * 10] * 29):
        with pytest.raises(ValueError):
            packer.fill(wrong, array("H", [10] * 30), 1, 30, 0, 0.0, 8, 1 << 20, out, flights)
    with pytest.raises(TypeError):
        packer.fill(recs, lens, 1, 5, 0, 0.0, 8, 1 << 20, out)
    for stamps in ((1, 2.0), ("x", 0.0, 0.0, False), (1, "x", 0.0, False), [1, 0.0, 0.0, True]):
        with pytest.raises(
            TypeError
        ):  # stamps: (delivered, delivered_time, first_sent, app_limited)
            packer.fill(recs, lens, 1, 5, 0, 0.0, 8, 1 << 20, out, flights, stamps)
    with pytest.raises(TypeError):  # the flights go into a dict or a Flights
        packer.fill(recs, lens, 1, 5, 0, 0.0, 8, 1 << 20, out, [], (1, 0.0, 0.0, True))
    with pytest.raises(TypeError):
        packer.resend(packing.PureFlight(1, 1, 1, 40, 0.0, b""), 0, 0.0)
    with pytest.raises(IndexError):
        core.gso_run([b"x"], 1, 64)  # type: ignore[union-attr]
    short = core.Flight(1, 1, 1, 1 << 20, 0.0, b"PL")  # type: ignore[union-attr]
    with pytest.raises(ValueError):  # larger than the path, and holds no piece
        packer.resend(short, 0, 0.0)
    with pytest.raises(ValueError):
        packer.resend(core.Flight(1, 1, 1, 10, 0.0, b"PL"), 0, 0.0)  # type: ignore[union-attr]
    assert (out, flights, packer.next_seq, packer.open) == ([], {}, 1, False)
    assert packer.fill(recs, lens, 1, 5, 0, 0.0, 8, 1 << 20, out, flights) == (1, len(out[0]))


def test_no_reference_is_leaked() -> None:
    recs = [b"r" * n for n in (10, 70_000, 3_000, 61) * 50]
    lens = array("H", [min(len(r), 0xFFFF) for r in recs])

    def once() -> None:
        side = Side(core.Packer, 1400)  # type: ignore[union-attr]
        stamps = None
        while side.packer.open or side.packer.next_seq <= len(recs):
            side.fill(recs, lens, 16, 1 << 30, stamps)
            stamps = None if stamps else (5, 1.0, 0.5, True)  # every other one into a Flights
        side.packer.size = 1200
        for k in range(0, len(side.made), 7):
            side.resend(k)

    once()
    gc.collect()
    before = [_refs(r) for r in recs[:4]]
    blocks = _blocks()
    for _ in range(20):
        once()
    gc.collect()
    assert [_refs(r) for r in recs[:4]] == before
    assert _blocks() - blocks < 200


def _refs(o: object) -> int:
    return sys.getrefcount(o)


def _blocks() -> int:
    return sys.getallocatedblocks()


def test_a_new_session_counts_only_the_records_not_counted_before() -> None:
    """A new session packs again from a received seq; a batch that runs past
    the records counted already adds only the new ones' bytes to `payload`."""
    pure, fast = Side(packing.PurePacker, 1_472), Side(core.Packer, 1_472)  # type: ignore[union-attr]
    recs = [_record(10 + i, i) for i in range(10)]
    lens = array("H", map(len, recs))
    for side in (pure, fast):
        side.fill(recs, lens, 64, 1 << 40)
    assert pure.counters() == fast.counters()
    counted = pure.packer.payload
    assert counted == sum(map(len, recs))
    for side in (pure, fast):
        side.packer.start(8, 5, 4, 5)  # the listener had received up to seq 4
    more = [_record(30 + i, i) for i in range(10)]
    recs += more
    lens.extend(map(len, more))
    assert pure.fill(recs, lens, 64, 1 << 40) == fast.fill(recs, lens, 64, 1 << 40)
    assert pure.counters() == fast.counters()
    assert pure.packer.next_seq == 21  # one batch: seqs 5-20, straddling what was counted
    assert fast.packer.payload == counted + sum(map(len, more))
