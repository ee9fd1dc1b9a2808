"""`purelink serve`'s own log lines: an ISO-8601 UTC time first, as text or JSON.

Why it exists: a listener runs for months under a supervisor that ships its
stderr somewhere (journald, a file, a log collector), and what an operator
does with a line there needs its time and its level: `--log-format text`
(the default) writes

    2025-01-02T03:04:05.678Z INFO purelink.serve: stopped after 12m3s: ...

and `--log-format json` one object per line, in `purelink.logging`'s shape
(`_log_json.JSONFormatter`: level, logger, message, thread, exception, and
every `extra=` field of the record) with `time` as the same ISO-8601 string.
`--log-level` sets the root logger's level, so it covers the library's
loggers too (store, listener, JetStream client).

A traceback (text format) follows its record on lines of its own: the only
lines that do not start with a time, which is how log shippers join a
multi-line record to the line before it.  This module also words serve's stop
summary, the one human line its counters (`Listener.stats()`) come down to.
"""

from __future__ import annotations

import datetime
import logging
import sys
from typing import TYPE_CHECKING, Any

from .._log_json import JSONFormatter

if TYPE_CHECKING:
    from ..listener.stats import ListenerStats

__all__ = ["FORMATS", "LEVELS", "configure", "duration", "stop_summary", "utc_time"]

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error")


def utc_time(created: float) -> str:
    """A Unix time as ISO-8601 UTC to the millisecond: `2025-01-02T03:04:05.678Z`."""
    moment = datetime.datetime.fromtimestamp(created, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").removesuffix("+00:00") + "Z"


class TextFormatter(logging.Formatter):
    """`TIME LEVEL LOGGER: MESSAGE`, then a traceback or stack on lines of its own."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{utc_time(record.created)} {record.levelname} {record.name}: "
        line += record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line += "\n" + record.exc_text
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


class JSONLineFormatter(JSONFormatter):
    """`purelink.logging`'s JSON record, one per line, its `time` ISO-8601 UTC."""

    def stamp(self, record: logging.LogRecord) -> Any:
        return utc_time(record.created)


def configure(log_format: str, level: str) -> None:
    """Send every log record of the process to stderr in `log_format` ("text" or
    "json"), from `level` ("debug", "info", "warning" or "error") up.  As
    `logging.basicConfig`, which it calls: a process whose root logger has
    handlers already (`main()` called from a program, or a test) keeps them."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONLineFormatter() if log_format == "json" else TextFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler])


def duration(seconds: float) -> str:
    """`0.4s`, `59s`, `12m3s`, `5h0m7s`, `2d3h4m5s`."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    days, whole = divmod(whole, 86400)
    hours, whole = divmod(whole, 3600)
    minutes, secs = divmod(whole, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m")]
    while parts and parts[0][0] == 0:
        parts.pop(0)
    return "".join(f"{n}{unit}" for n, unit in parts) + f"{secs}s"


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def stop_summary(stats: ListenerStats, seconds: float) -> str:
    """serve's last line, for people: `stopped after 12m3s: 1,234,567 records
    stored in 3 streams; 0 dropped` (the reasons of the drops, most first, when
    there are some).  Every counter stays in `Listener.stats()` and --metrics."""
    streams = sum(1 for n in stats.stream_records.values() if n)
    dropped = sum(stats.dropped.values())
    text = (
        f"stopped after {duration(seconds)}: {_count(stats.records_stored, 'record')} "
        f"stored in {_count(streams, 'stream')}; {dropped:,} dropped"
    )
    if dropped:
        reasons = sorted(((n, why) for why, n in stats.dropped.items() if n), reverse=True)
        text += " (" + ", ".join(f"{n:,} {why}" for n, why in reasons) + ")"
    return text
