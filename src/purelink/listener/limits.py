"""The bounds of a listener's limits: one table for `Listener(...)` and `purelink serve`.

Why it exists: a limit past what the wire carries (a u32 max_record and window) or
past what any machine has is a typo, and a limit of 0 (or less) turns the listener
into one that refuses everything.  Both ways in -- the Python keyword argument and
the `serve` option -- refuse such a value with an error that names the bound, and
both read the bounds from here, so they cannot drift apart.
"""

from __future__ import annotations

import operator
from typing import Final

__all__ = ["INTEGER_LIMITS", "MAX_SECONDS", "check_integer", "check_number", "check_seconds"]

MAX_SECONDS: Final = 1e9
"""Longer than any wait means (31 years), and within what every timeout call takes."""

INTEGER_LIMITS: Final[dict[str, tuple[int, int]]] = {
    "max_links": (1, 1 << 31),
    "max_streams": (1, 1 << 31),
    "max_record": (1, 16 << 20),  # docs/wire.md: the largest record a batch carries
    "max_reorder": (1, 1 << 31),
    "max_memory": (1, 1 << 50),
    "max_connections": (1, 1 << 31),
    "max_subscriptions": (1, 1 << 20),
    "replicas": (1, 5),  # JetStream's own bound on a stream's replicas
    "segment_bytes": (1, 1 << 40),
    "retain_bytes": (0, 1 << 62),
}
"""Inclusive (lowest, highest) of each integer keyword argument of `Listener`."""

HANDSHAKE_RATE: Final = (0.0, 1e9)
"""handshake_rate: HELLOs per second per source IP; 0 = no limit."""
HANDSHAKE_BURST: Final = (1.0, 2e9)
"""handshake_burst: a bucket smaller than one HELLO would let none through."""


def check_integer(name: str, value: object) -> int:
    """`value` as an int if it is one within INTEGER_LIMITS[name]; else
    TypeError (not an integer) or ValueError naming the bounds."""
    low, high = INTEGER_LIMITS[name]
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {value!r}") from None
    if not low <= number <= high:
        raise ValueError(f"{name} must be from {low:,} to {high:,}, not {number:,}")
    return number


def check_number(name: str, value: object, low: float, high: float) -> float:
    """`value` as a float if it is a real number in [low, high]; else TypeError
    or ValueError naming the bounds (NaN is never within them)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, not {value!r}")
    number = float(value)
    if not low <= number <= high:
        raise ValueError(f"{name} must be from {low:g} to {high:g}, not {value!r}")
    return number


def check_seconds(name: str, value: object) -> float:
    """`value` as a float if it is more than 0 and at most MAX_SECONDS seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {value!r}")
    number = float(value)
    if not 0 < number <= MAX_SECONDS:  # NaN too
        raise ValueError(
            f"{name} must be more than 0 and at most {MAX_SECONDS:g} seconds, not {value!r}"
        )
    return number
