"""BufferPool (the free list) and ScanningPool (the naive "before"): same contract."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from purelink.primitives import BufferPool, PoolStatistics, ScanningPool

Pool = BufferPool | ScanningPool
POOLS = [BufferPool, ScanningPool]


@pytest.fixture(params=POOLS)
def kind(request: pytest.FixtureRequest) -> type[Pool]:
    cls: type[Pool] = request.param
    return cls


def test_fresh(kind: type[Pool]) -> None:
    pool = kind(64, 4)
    assert pool.statistics() == PoolStatistics(
        size=64, limit=4, hits=0, misses=0, dropped=0, rejected=0, free=0
    )


@pytest.mark.parametrize(("size", "limit"), [(0, 1), (-1, 1), (8, -1)])
def test_bad_arguments(kind: type[Pool], size: int, limit: int) -> None:
    with pytest.raises(ValueError, match="must"):
        kind(size, limit)


def test_miss_then_hit(kind: type[Pool]) -> None:
    pool = kind(64, 4)
    first = pool.get()
    assert isinstance(first, bytearray)
    assert len(first) == 64
    pool.put(first)
    assert pool.get() is first
    stats = pool.statistics()
    assert (stats.hits, stats.misses, stats.free) == (1, 1, 0)


def test_bounded_by_limit(kind: type[Pool]) -> None:
    pool = kind(16, 3)
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


def test_limit_zero_keeps_nothing(kind: type[Pool]) -> None:
    pool = kind(16, 0)
    pool.put(pool.get())
    assert (pool.statistics().free, pool.statistics().dropped) == (0, 1)


def test_wrong_size_is_rejected(kind: type[Pool]) -> None:
    pool = kind(16, 8)
    pool.put(bytearray(15))
    pool.put(bytearray(17))
    resized = pool.get()
    del resized[8:]  # a user shrank it
    pool.put(resized)
    stats = pool.statistics()
    assert (stats.rejected, stats.free) == (3, 0)
    assert len(pool.get()) == 16


def test_a_right_sized_stranger_is_adopted(kind: type[Pool]) -> None:
    pool = kind(16, 8)
    stranger = bytearray(16)
    pool.put(stranger)
    assert pool.get() is stranger
    assert pool.statistics().hits == 1


def test_many_held_buffers_are_all_distinct(kind: type[Pool]) -> None:
    pool = kind(32, 1_000)
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


def test_scanning_pool_rejects_a_double_put() -> None:
    pool = ScanningPool(8, 4)
    buffer = pool.get()
    pool.put(buffer)
    pool.put(buffer)
    assert (pool.statistics().free, pool.statistics().rejected) == (1, 1)


def test_buffer_pool_from_several_threads() -> None:
    """get/put need no lock: list.pop/append are atomic, an empty pop is a miss."""
    pool = BufferPool(8, 64)
    errors: list[BaseException] = []

    def churn() -> None:
        try:
            for _ in range(20_000):
                buffer = pool.get()
                buffer[0] = 1
                pool.put(buffer)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=churn) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    stats = pool.statistics()
    assert stats.hits + stats.misses == 80_000
    assert stats.free <= 64 + 4  # the documented slack: one per concurrent putter


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(POOLS),
    limit=st.integers(0, 6),
    ops=st.lists(st.one_of(st.just("get"), st.integers(0, 20), st.just("stranger")), max_size=80),
)
def test_any_sequence_keeps_the_contract(
    kind: type[Pool], limit: int, ops: list[str | int]
) -> None:
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
