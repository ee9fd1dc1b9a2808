"""Times as users give them: `since=` / `until=` and `--since` / `--until`.

Why a module of its own: `Store.read`, `purelink.subscribe` and the
`read`/`tail` commands all take a time to seek to, and must read it the
same way.  In Python a time is a `datetime` (one without a zone is UTC) or a
number of seconds *ago*; on the command line it is a duration (`90s`, `10m`,
`2h`, `7d`: that long ago) or an ISO-8601 time (`2024-05-01T12:00:00Z`,
`2024-05-01 12:00`, `2024-05-01`; without a zone, UTC).  Both become Unix
seconds here, against a clock the tests can set.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final

__all__ = ["When", "parse_time", "unix_seconds"]

When = datetime | float
"""A `datetime` (no zone: UTC), or seconds ago."""

_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd])", re.ASCII)


def unix_seconds(when: When, now: Callable[[], float] = time.time) -> float:
    """Unix seconds of a `datetime` (no zone: UTC) or of `when` seconds ago.
    Raises ValueError for a negative number and TypeError for anything else."""
    if isinstance(when, datetime):
        return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()
    if isinstance(when, bool) or not isinstance(when, int | float):
        raise TypeError(f"a time is a datetime or seconds ago, not {type(when).__name__}")
    if not when >= 0:
        raise ValueError(f"seconds ago must be 0 or more, not {when}")
    return now() - when


def parse_time(text: str, now: Callable[[], float] = time.time) -> float:
    """Unix seconds of a command line's time: a duration ago (`90s`, `10m`, `2h`,
    `7d`) or an ISO-8601 time (no zone: UTC).  ValueError saying what is wanted."""
    match = _DURATION.fullmatch(text.strip())
    if match is not None:
        return now() - float(match[1]) * _UNITS[match[2]]
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"bad time {text!r}: give a duration ago (90s, 10m, 2h, 7d) "
            "or an ISO-8601 time (2024-05-01T12:00:00Z; without a zone, UTC)"
        ) from None
    return unix_seconds(moment, now)
