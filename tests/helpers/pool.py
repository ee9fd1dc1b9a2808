"""The contract every pool keeps (tests/primitives/test_pool.py runs it on the product's
BufferPool, bench/tests/test_pool_variants.py on the benchmark's ScanningPool)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from purelink.primitives import PoolStatistics

__all__ = ["PoolContract", "any_sequence_test"]


class PoolContract:
    """Subclass as `Test...` with `kind` set to a pool class with BufferPool's interface."""

    kind: ClassVar[Any]

    def test_fresh(self) -> None:
        pool = self.kind(64, 4)
        assert pool.statistics() == PoolStatistics(
            size=64, limit=4, hits=0, misses=0, dropped=0, rejected=0, free=0
        )

    @pytest.mark.parametrize(("size", "limit"), [(0, 1), (-1, 1), (8, -1)])
    def test_bad_arguments(self, size: int, limit: int) -> None:
        with pytest.raises(ValueError, match="must"):
            self.kind(size, limit)

    def test_miss_then_hit(self) -> None:
        pool = self.kind(64, 4)
        first = pool.get()
        assert isinstance(first, bytearray)
        assert len(first) == 64
        pool.put(first)
        assert pool.get() is first
        stats = pool.statistics()
        assert (stats.hits, stats.misses, stats.free) == (1, 1, 0)

    def test_bounded_by_limit(self) -> None:
        pool = self.kind(16, 3)
        held = [pool.get() for _ in range(10)]
        for buffer in held:
            pool.put(buffer)
        stats = pool.statistics()
        assert (stats.free, stats.dropped, stats.misses) == (3, 7, 10)
        kept = [pool.get() for _ in range(3)]
        assert all(any(buffer is h for h in held) for buffer in kept)
        assert pool.statistics().hits == 3
        pool.get()
        assert pool.statistics().misses == 11

    def test_limit_zero_keeps_nothing(self) -> None:
        pool = self.kind(16, 0)
        pool.put(pool.get())
        assert (pool.statistics().free, pool.statistics().dropped) == (0, 1)

    def test_wrong_size_is_rejected(self) -> None:
        pool = self.kind(16, 8)
        pool.put(bytearray(15))
        pool.put(bytearray(17))
        resized = pool.get()
        del resized[8:]  # a user shrank it
        pool.put(resized)
        stats = pool.statistics()
        assert (stats.rejected, stats.free) == (3, 0)
        assert len(pool.get()) == 16

    def test_a_right_sized_stranger_is_adopted(self) -> None:
        pool = self.kind(16, 8)
        stranger = bytearray(16)
        pool.put(stranger)
        assert pool.get() is stranger
        assert pool.statistics().hits == 1

    def test_many_held_buffers_are_all_distinct(self) -> None:
        pool = self.kind(32, 1_000)
        held = [pool.get() for _ in range(2_000)]
        assert len({id(buffer) for buffer in held}) == 2_000
        for index, buffer in enumerate(held):
            buffer[:4] = index.to_bytes(4, "little")  # each one is its holder's own memory
        for index, buffer in enumerate(held):
            assert int.from_bytes(buffer[:4], "little") == index
        for buffer in held[::2]:
            pool.put(buffer)
        again = [pool.get() for _ in range(1_000)]
        assert {id(b) for b in again} == {id(b) for b in held[::2]}
        stats = pool.statistics()
        assert (stats.hits, stats.misses, stats.free) == (1_000, 2_000, 0)


def any_sequence_test(kind: Any) -> Callable[..., None]:
    """The contract under any sequence of gets, puts and strangers' puts, for one
    pool class (a test function of its own per class: hypothesis wants each of
    its tests run by one executor)."""

    @settings(max_examples=200, deadline=None)
    @given(
        limit=st.integers(0, 6),
        ops=st.lists(
            st.one_of(st.just("get"), st.integers(0, 20), st.just("stranger")), max_size=80
        ),
    )
    def test_any_sequence_keeps_the_contract(limit: int, ops: list[str | int]) -> None:
        """Held buffers never alias; counters add up; free never passes the limit."""
        pool = kind(8, limit)
        held: list[bytearray] = []
        gets = puts = strangers = 0
        for op in ops:
            if op == "get":
                buffer = pool.get()
                assert len(buffer) == 8
                assert all(buffer is not h for h in held)
                held.append(buffer)
                gets += 1
            elif op == "stranger":
                pool.put(bytearray(8))
                strangers += 1
            elif held:
                pool.put(held.pop(int(op) % len(held)))
                puts += 1
            stats = pool.statistics()
            assert stats.free <= limit
            assert stats.hits + stats.misses == gets
            assert stats.free == puts + strangers - stats.dropped - stats.hits - stats.rejected

    return test_any_sequence_keeps_the_contract
