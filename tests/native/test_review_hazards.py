"""The compiled core against callers that misbehave: re-entry, extreme packet numbers, odd input.

Why: Python code can run in the middle of a compiled call (a flight replaced in
the ring lets the old one go, and its __del__ runs), packet numbers come from
the caller, and datagram lists may hold bytes subclasses.  None of these may
crash the process or corrupt the ring; each is refused with an exception or
handled as the pure-Python path handles it.  A crash is tested in a child
process, which must exit cleanly.
"""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap

import pytest

from purelink import native
from purelink.protocol import packing, recovery

from .test_ledger import Side, _make, script

pack = native.part("pack")
flights = native.part("flights")
pytestmark = pytest.mark.skipif(
    pack is None or flights is None, reason=native.reason or "no compiled core"
)


def _run(code: str) -> str:
    """Run code in a child process; it must exit 0. Its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    return done.stdout


def test_start_from_a_del_in_a_fill_is_refused_and_does_not_crash() -> None:
    out = _run(
        """
        from array import array
        from purelink import native
        p = native.part("pack").Packer(1400)
        ring = native.part("flights").Flights()
        recs, lens, out = [b"x" * (2 << 20)], array("H", [0xFFFF]), []
        pn, _ = p.fill(recs, lens, 1, 1, 0, 0.0, 1, 1 << 40, out, ring)  # a 2 MiB batch opens
        seen = []

        class Evil:
            def __del__(self) -> None:
                for act in (lambda: p.start(1, 2, 3, 1), lambda: setattr(p, "size", 1200)):
                    try:
                        act()
                        seen.append("done")
                    except RuntimeError as e:
                        seen.append(str(e))

        ring[pn + 1] = Evil()  # replaced by the next fill's first piece: __del__ runs in it
        pn2, used = p.fill(recs, lens, 1, 1, pn, 0.0, 8, 1 << 40, out, ring)
        assert pn2 == pn + 8 and p.size == 1400 and p.open, (pn2, p.size, p.open)
        print(seen)
        """
    )
    assert out.strip() == "['start(): the packer is filling', 'size: the packer is filling']"


def test_a_packet_number_of_2_63_or_more_is_refused_and_the_ring_stays_whole() -> None:
    ring = flights.Flights()  # type: ignore[union-attr]
    for pn in (2**64 - 1, 2**63):
        with pytest.raises(ValueError):
            ring[pn] = "x"
    assert len(ring) == 0 and ring.items() == []
    ring[2**63 - 2] = "a"
    ring[2**63 - 1] = "b"  # the highest a ring holds
    for pn in (2**64 - 1, 2**63):
        with pytest.raises(ValueError):
            ring[pn] = "x"
    assert ring.items() == [(2**63 - 2, "a"), (2**63 - 1, "b")]
    assert 2**64 - 1 not in ring and ring.get(0) is None
    del ring[2**63 - 1], ring[2**63 - 2]
    ring[5] = "c"  # empty again: anything below 2**63 goes in
    assert ring.items() == [(5, "c")]


def test_clear_with_no_memory_lets_each_flight_go_with_the_ring_consistent() -> None:
    out = _run(
        """
        import _testcapi
        from purelink import native
        ring = native.part("flights").Flights()
        seen = []

        class Watch:
            def __init__(self, pn: int) -> None:
                self.pn = pn

            def __del__(self) -> None:  # what a __del__ sees of the ring as it is cleared
                seen.append((self.pn in ring, len(ring), len(ring.keys())))

        for pn in (3, 4, 9):
            ring[pn] = Watch(pn)
        _testcapi.set_nomemory(0, 1)  # the clear's list of the flights: no memory
        ring.clear()
        _testcapi.remove_mem_hooks()
        print(seen, len(ring))
        """
    )
    assert out.strip() == "[(False, 2, 2), (False, 1, 1), (False, 0, 0)] 0"


def test_the_ring_s_memory_follows_the_span_it_holds() -> None:
    ring = flights.Flights()  # type: ignore[union-attr]
    empty = sys.getsizeof(ring)
    for pn in range(100_000):
        ring[pn] = pn
    peak = sys.getsizeof(ring)
    assert peak >= empty + 100_000 * 8
    for pn in range(100_000 - 10):  # acked in order: ten left at the top
        del ring[pn]
    assert sys.getsizeof(ring) <= empty + 64 * 8
    assert ring.items() == [(pn, pn) for pn in range(100_000 - 10, 100_000)]
    for pn in range(100_000 - 10, 100_000):
        del ring[pn]
    assert sys.getsizeof(ring) <= empty + 64 * 8  # (a small ring is kept for the next)
    for pn in range(0, 10_000_000, 1000):  # a wide span, then cleared
        ring[pn] = pn
    assert sys.getsizeof(ring) > empty + 10_000_000 * 8
    ring.clear()
    assert sys.getsizeof(ring) == empty and len(ring) == 0
    ring[5] = "a"  # and it works again
    assert ring.items() == [(5, "a")]


def test_the_highest_taken_out_leaves_room_above_the_others() -> None:
    ring = flights.Flights()  # type: ignore[union-attr]
    for pn in (1, 500, 1000):
        ring[pn] = pn
    del ring[1000]
    with pytest.raises(ValueError):
        ring[499] = "below one held"
    del ring[500]
    ring[2] = "above every one held"  # a dict would put it last, as the ring does
    assert ring.items() == [(1, 1), (2, "above every one held")]
    ring[3] = 3
    assert ring.items()[-1] == (3, 3) and 1000 not in ring and ring.get(500) is None


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_compiled_ledger_without_a_ring_keeps_a_dict_and_decides_the_same(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """recovery.py takes the ring only from a core that has it (has_flights):
    without one, its flights are a dict, which the compiled ledger walks too."""
    if recovery._core is None:
        pytest.skip("no compiled ledger")
    ring = Side("newreno", True)
    monkeypatch.setattr(recovery, "_ring", None)
    plain = Side("newreno", True)
    pure = Side("newreno", False)
    assert type(plain.ledger.flights) is dict and type(ring.ledger.flights) is not dict
    rngs = [random.Random(seed) for _ in range(3)]
    for step in script(seed, 150):
        ring.run(_make(step, recovery._core.Flight), rngs[0])
        plain.run(_make(step, recovery._core.Flight), rngs[1])
        pure.run(_make(step, packing.PureFlight), rngs[2])
        assert ring.state() == plain.state() == pure.state(), step
