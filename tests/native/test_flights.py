"""The compiled core's ring of flights (Flights, src/speedups/flights.c) behaves as a dict.

Why: where the compiled core is in use, the ledger's `flights` (recovery.py)
is a ring indexed by packet number instead of a dict, and everything that
reads it -- the ledger's C loops, its Python fallbacks, the sender's probes,
the tests -- relies on a dict's answers: the same items in the same order,
the same KeyError, the same lengths.  Hypothesis drives a Flights and a dict
through the same operations (packet numbers put in ascending, with gaps, as
a sender's are; replaced, deleted anywhere, looked up, cleared) and compares
every answer.  The one rule a dict does not have (a packet number goes in
above every one held) is a ValueError, not a silent reorder; and nothing
held leaks or outlives a cycle.
"""

from __future__ import annotations

import gc
import sys
import weakref
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from purelink import native

core = native.part("flights")
pytestmark = pytest.mark.skipif(core is None, reason=native.reason or "no compiled Flights")

ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from([1, 1, 1, 2, 3, 70, 200])),  # a gap above the top
        st.tuples(st.just("replace"), st.integers(0, 1000)),
        st.tuples(st.just("del"), st.integers(0, 1000)),
        st.tuples(st.just("del_missing"), st.integers(-3, 5000)),
        st.tuples(st.just("look"), st.integers(-3, 5000)),
        st.tuples(st.just("clear"), st.just(0)),
    ),
    max_size=300,
)


def _answers(m: Any, pn: int) -> tuple[Any, ...]:
    """Everything a reader can ask of the map about pn, and of the whole."""
    try:
        item: Any = m[pn]
    except KeyError as e:
        item = ("KeyError", e.args)
    return (
        item, m.get(pn), m.get(pn, "none"), pn in m, len(m), bool(m), list(m),
        list(m.keys()), list(m.values()), list(m.items()), list(reversed(list(m.values()))),
    )  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(ops, st.integers(0, 2**63 - 100_000))  # a ring holds packet numbers below 2**63
def test_the_same_answers_as_a_dict(script: list[tuple[str, int]], start: int) -> None:
    ring, plain = core.Flights(), {}  # type: ignore[union-attr]
    top = start
    for kind, arg in script:
        if kind == "put":
            top += arg
            value = object()
            ring[top] = plain[top] = value
        elif kind == "replace" and plain:
            key = list(plain)[arg % len(plain)]
            ring[key] = plain[key] = object()  # keeps its place, as in a dict
        elif kind == "del" and plain:
            key = list(plain)[arg % len(plain)]
            del ring[key], plain[key]
        elif kind == "del_missing" and start + arg not in plain:
            for m in (ring, plain):
                with pytest.raises(KeyError):
                    del m[start + arg]
        elif kind == "look":
            assert _answers(ring, start + arg) == _answers(plain, start + arg)
        elif kind == "clear":
            ring.clear()
            plain.clear()
        assert list(ring.items()) == list(plain.items())
        assert len(ring) == len(plain)


def test_a_packet_number_goes_in_above_the_ones_held() -> None:
    ring = core.Flights()  # type: ignore[union-attr]
    ring[10] = "a"
    ring[12] = "b"
    for pn in (11, 9, 0):  # a hole, or below: a dict would put it last
        with pytest.raises(ValueError):
            ring[pn] = "x"
    assert list(ring.items()) == [(10, "a"), (12, "b")]
    del ring[10], ring[12]
    ring[3] = "c"  # empty again: anything goes in
    assert ring.items() == [(3, "c")]
    for bad in ("x", -1, 1.5, 2**64):
        assert bad not in ring
        assert ring.get(bad) is None
        with pytest.raises(KeyError):
            ring[bad]
        with pytest.raises(KeyError):
            del ring[bad]
    for bad in ("x", 1.5):
        with pytest.raises(TypeError):
            ring[bad] = "y"
    with pytest.raises((ValueError, OverflowError, TypeError)):
        ring[-1] = "y"
    with pytest.raises(TypeError):
        core.Flights(1)  # type: ignore[union-attr, call-arg]


def test_a_wide_window_grows_the_ring() -> None:
    ring = core.Flights()  # type: ignore[union-attr]
    pns = [5, 6, 100, 1_000, 5_000, 70_000]
    for pn in pns:
        ring[pn] = pn
    assert ring.keys() == pns and ring.values() == pns
    del ring[5], ring[70_000]
    ring[70_001] = 1
    assert ring.keys() == [6, 100, 1_000, 5_000, 70_001]


def test_nothing_held_leaks_or_outlives_a_cycle() -> None:
    class Held:
        ring: Any = None

    held = Held()
    before = sys.getrefcount(held)
    ring = core.Flights()  # type: ignore[union-attr]
    for pn in range(1, 500):
        ring[pn] = held
    for pn in range(1, 500, 3):
        del ring[pn]
    ring[600] = held
    ring[600] = held
    ring.clear()
    for pn in range(700, 800):
        ring[pn] = held
    del ring
    assert sys.getrefcount(held) == before
    # a cycle through a ring: the collector finds it
    cycle = Held()
    cycle.ring = core.Flights()  # type: ignore[union-attr]
    cycle.ring[1] = cycle
    gone = weakref.ref(cycle)
    del cycle
    gc.collect()
    assert gone() is None
