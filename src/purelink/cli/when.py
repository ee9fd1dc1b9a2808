"""`--since T` / `--until T`: times on the command line, and how `streams` prints one.

Why a module of its own: `read` and `tail` take the same times and must read
them the same way (purelink/_when.py: a duration ago -- `90s`, `10m`, `2h`,
`7d` -- or an ISO-8601 time, UTC when it names no zone); this is the
argparse side of it, with a message that says what is wanted.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from .._when import parse_time
from .logs import utc_time

__all__ = ["add_since", "format_time", "time_arg"]


def time_arg(text: str) -> float:
    """argparse type: a time (Unix seconds) from a duration ago or an ISO-8601 time."""
    try:
        when = max(parse_time(text), 0.0)  # nothing was stored before 1970
        datetime.fromtimestamp(when, UTC)  # a time the calendar has (not 10**14 days ago)
    except (ValueError, OverflowError, OSError) as exc:
        raise argparse.ArgumentTypeError(f"not a time: {text!r} ({exc})") from None
    return when


def add_since(p: argparse.ArgumentParser, *, until: bool) -> None:
    """The --since (and with `until`, --until) options of a verb."""
    p.add_argument(
        "--since",
        type=time_arg,
        metavar="T",
        help="from the first record stored at or after T: a duration ago (90s, 10m, 2h, 7d) "
        "or an ISO-8601 time (UTC when it names no zone)",
    )
    if until:
        p.add_argument(
            "--until",
            type=time_arg,
            metavar="T",
            help="up to the last record stored before T (as --since)",
        )


def format_time(when: float | None) -> str:
    """A stored time as `streams` prints it: ISO-8601 UTC to the ms, or '-'."""
    return "-" if when is None else utc_time(when)
