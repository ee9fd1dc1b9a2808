"""The bounds of a listener's limits: one table for `Listener(...)` and `purelink serve`.

Why it exists: a limit past what the wire carries (a u32 max_record and window) or
past what any machine has is a typo, and a limit of 0 (or less) turns the listener
into one that refuses everything.  Both ways in -- the Python keyword argument
(checked by `ListenerConfig`, config.py) and the `serve` option -- refuse such a
value with an error that names the bound, and both read the bounds from LIMITS,
so they cannot drift apart.  The module imports nothing of the listener, so the
command line reads the bounds when it builds its parser without loading it.
"""

from __future__ import annotations

import operator
from typing import Final, NamedTuple

__all__ = [
    "INTEGER_LIMITS",
    "LIMITS",
    "MAX_SECONDS",
    "Limit",
    "check",
    "check_integer",
    "check_number",
    "check_seconds",
]

MAX_SECONDS: Final = 1e9
"""Longer than any wait means (31 years), and within what every timeout call takes."""


class Limit(NamedTuple):
    """The bounds of one limit, and the kind of value it takes."""

    kind: str
    """"integer", "number" (a real number in [low, high]) or "seconds" (more than
    0 and at most MAX_SECONDS: `low` and `high` are not used)."""
    low: int | float
    """The lowest value allowed (inclusive)."""
    high: int | float
    """The highest value allowed (inclusive)."""


LIMITS: Final[dict[str, Limit]] = {
    "max_links": Limit("integer", 1, 1 << 31),
    "max_streams": Limit("integer", 1, 1 << 31),
    "max_record": Limit("integer", 1, 16 << 20),  # docs/wire.md: the largest record a batch carries
    "max_reorder": Limit("integer", 1, 1 << 31),
    "max_memory": Limit("integer", 1, 1 << 50),
    "max_connections": Limit("integer", 1, 1 << 31),
    "max_subscriptions": Limit("integer", 1, 1 << 20),
    "replicas": Limit("integer", 1, 5),  # JetStream's own bound on a stream's replicas
    "segment_bytes": Limit("integer", 1, 1 << 40),
    "retain_bytes": Limit("integer", 0, 1 << 62),
    "handshake_rate": Limit("number", 0.0, 1e9),  # HELLOs per second per source IP; 0 = no limit
    "handshake_burst": Limit("number", 1.0, 2e9),  # a bucket smaller than one HELLO lets none by
    "read_timeout": Limit("seconds", 0.0, MAX_SECONDS),
    "retain_age": Limit("seconds", 0.0, MAX_SECONDS),
}
"""Every limit of `Listener` (its keyword argument's name) and its bounds."""

INTEGER_LIMITS: Final[dict[str, tuple[int, int]]] = {
    name: (int(limit.low), int(limit.high))
    for name, limit in LIMITS.items()
    if limit.kind == "integer"
}
"""Inclusive (lowest, highest) of each integer limit of LIMITS (`serve`'s integer options)."""


def check(name: str, value: object) -> int | float:
    """`value` if it is within LIMITS[name] (an int for an integer limit, else a
    float); else TypeError (not of the limit's kind) or ValueError naming the bounds."""
    limit = LIMITS[name]
    if limit.kind == "integer":
        return check_integer(name, value)
    if limit.kind == "number":
        return check_number(name, value, limit.low, limit.high)
    return check_seconds(name, value)


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
