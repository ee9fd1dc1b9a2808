"""Small concurrency primitives behind SPEC section 6, each citing its prior art.

- `Wakeup` (wakeup.py): wake a thread only when it sleeps, and only once (mechanism 1).
- `Parker` (parker.py): spin briefly, then park; wake only a waiter that waits (mechanism 2).
- `GraceDomain` (grace.py): QSBR grace periods; the waiter spins, then parks, and a
  reader signals it only when it is parked, once per grace period (SPEC section 9).
- `BufferPool` (pool.py): O(1) reuse of buffers from a free list (mechanism 4);
  `ScanningPool` is the naive "before" variant, for the benchmark only.

Each has a `statistics()` method returning a frozen snapshot of its counters.
"""

from __future__ import annotations

from .grace import GraceDomain, GraceEvent, GraceReader, GraceStatistics
from .parker import DEFAULT_SPINS, Parker, ParkerStatistics
from .pool import BufferPool, PoolStatistics, ScanningPool
from .wakeup import Wakeup, WakeupStatistics

__all__ = [
    "DEFAULT_SPINS",
    "BufferPool",
    "GraceDomain",
    "GraceEvent",
    "GraceReader",
    "GraceStatistics",
    "Parker",
    "ParkerStatistics",
    "PoolStatistics",
    "ScanningPool",
    "Wakeup",
    "WakeupStatistics",
]
