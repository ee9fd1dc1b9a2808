"""Small concurrency primitives behind docs/design.md's four mechanisms, with their prior art.

- `Wakeup` (wakeup.py): wake a thread only when it sleeps, and only once (mechanism 1).
- `Parker` (parker.py): spin briefly, then park; wake only a waiter that waits (mechanism 2).
- `GraceDomain` (grace.py): QSBR grace periods; the waiter spins, then parks, and a
  reader signals it only when it is parked, once per grace period (docs/store.md).
- `BufferPool` (pool.py): O(1) reuse of buffers from a free list (mechanism 4).

The benchmarks' "before" variants of these (a scanning pool, unpatched grace
periods) live in bench/, not here: the product carries only what it uses.

Each has a `statistics()` method returning a frozen snapshot of its counters.

The names are loaded on first use (PEP 562): a link needs the wakeup and the
parker, and should not pay for importing the grace periods and the pool.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .grace import GraceDomain, GraceEvent, GraceReader, GraceStatistics
    from .parker import DEFAULT_SPINS, Parker, ParkerStatistics
    from .pool import BufferPool, PoolStatistics
    from .wakeup import Wakeup, WakeupStatistics

_WHERE = {
    "GraceDomain": "grace",
    "GraceEvent": "grace",
    "GraceReader": "grace",
    "GraceStatistics": "grace",
    "DEFAULT_SPINS": "parker",
    "Parker": "parker",
    "ParkerStatistics": "parker",
    "BufferPool": "pool",
    "PoolStatistics": "pool",
    "Wakeup": "wakeup",
    "WakeupStatistics": "wakeup",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


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
    "Wakeup",
    "WakeupStatistics",
]
