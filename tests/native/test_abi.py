"""The compiled core keeps the reference counts of None, True, False and
NotImplemented right on every CPython its one binary loads on.

Why: the extension is built for the limited API of 3.11, so one binary (an
abi3 wheel) serves 3.11 and every later CPython.  On 3.11 those four objects
are counted like any other; from 3.12 on they are immortal.  The Py_RETURN_*
macros of the 3.12 and 3.13 headers return them without taking a reference,
even in the limited API of 3.11 (CPython gh-134989, gh-140487), so a binary
built by such a CPython took one reference from None at each such return
when it ran on a 3.11, until the interpreter aborted ("deallocating None")
after some thousands of short links.  speedups.h makes every such return
take its reference; the tests below call each C function that returns None
or NotImplemented so, many times, and check the counts.  (intake.c's
make_address returns None only for an address family that a UDP socket of
IPv4 or IPv6 never gives.)  On 3.12 and later the counts never move, so
these tests can only fail on 3.11: .ci/run runs them there against the
binary that each newer interpreter builds, as well as in every suite.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from helpers.ring import free, make
from purelink import native
from purelink.link.link import Link
from purelink.protocol import packing

core = native.compiled
pytestmark = pytest.mark.skipif(core is None, reason=f"pure Python: {native.reason}")

CALLS = 2_000
SINGLETONS = {"None": None, "True": True, "False": False, "NotImplemented": NotImplemented}


def _counts() -> dict[str, int]:
    gc.collect()
    return {name: sys.getrefcount(obj) for name, obj in SINGLETONS.items()}


def _assert_kept(call: Callable[[], Any]) -> None:
    """`call` CALLS times leaves each singleton's count where it was.  (A return
    that takes no reference costs one per call; the margin is for other threads.)"""
    call()  # a first call may cache something that holds one
    before = _counts()
    for _ in range(CALLS):
        call()
    after = _counts()
    moved = {name: after[name] - before[name] for name in SINGLETONS}
    assert all(abs(n) < CALLS // 2 for n in moved.values()), f"over {CALLS} calls: {moved}"


@pytest.fixture
def link() -> Iterator[Link]:
    made = make()
    try:
        yield made
    finally:
        free(made)


def test_a_new_grant_returns_none_with_its_reference(link: Link) -> None:
    assert link._new_grant(5, 5) is None
    _assert_kept(lambda: link._new_grant(5, 5))


def test_clearing_the_flights_returns_none_with_its_reference() -> None:
    assert core is not None
    flights = core.Flights()
    assert flights.clear() is None
    _assert_kept(flights.clear)


def test_starting_a_packer_returns_none_with_its_reference() -> None:
    assert core is not None
    packer = core.Packer(1400)
    assert packer.start(1, 2, 3, 1) is None
    _assert_kept(lambda: packer.start(1, 2, 3, 1))


def test_the_ledger_declines_with_notimplemented_and_its_reference() -> None:
    assert core is not None
    plain = {1: packing.PureFlight(1, 1, 1, 100, 0.0, b"")}  # not the compiled core's Flight
    assert core.ledger_lost(plain, 5, 0.1, 1.0) is NotImplemented
    _assert_kept(lambda: core.ledger_lost(plain, 5, 0.1, 1.0))
    other = core.Flight(2, 2, 2, 9, 0.0, b"")
    other.retx = True  # a retransmission: InFlight.resent's, which the C loop declines
    assert core.ledger_sent({2: other}, {}, 100, 0, 0.0, 0.0, False) is NotImplemented
    _assert_kept(lambda: core.ledger_sent({2: other}, {}, 100, 0, 0.0, 0.0, False))
