"""BufferPool, the free list: the pool contract (helpers/pool.py) and its threads.
The benchmark's naive "before", ScanningPool, keeps the same contract
(bench/tests/test_pool_variants.py)."""

from __future__ import annotations

import threading

from helpers.pool import PoolContract, any_sequence_test
from purelink.primitives import BufferPool


class TestBufferPool(PoolContract):
    kind = BufferPool


test_any_sequence_keeps_the_contract = any_sequence_test(BufferPool)


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
