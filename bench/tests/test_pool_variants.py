"""ScanningPool, the pool benchmark's naive "before" (bench/pool.py): the same
contract as the product's BufferPool (helpers/pool.py), and a double put is refused."""

from __future__ import annotations

from bench.pool import ScanningPool
from helpers.pool import PoolContract, any_sequence_test


class TestScanningPool(PoolContract):
    kind = ScanningPool


test_any_sequence_keeps_the_contract = any_sequence_test(ScanningPool)


def test_scanning_pool_rejects_a_double_put() -> None:
    pool = ScanningPool(8, 4)
    buffer = pool.get()
    pool.put(buffer)
    pool.put(buffer)
    assert (pool.statistics().free, pool.statistics().rejected) == (1, 1)
