"""How `read`, `tail` and `streams` print: records as lines or JSON, streams as a table or JSON.

Why it exists: the three verbs print the same shapes, and scripts parse them
(`purelink read ... --format json | jq`), so each shape is built in one place.

A record in `--format json` is one object per line (JSON Lines):

    {"position": 7, "payload": "{\\"level\\": \\"info\\"}"}     the payload is UTF-8: as text
    {"position": 8, "payload_base64": "AAEC/w=="}             it is not: base64, under its own key

Exactly one of `payload` / `payload_base64` is there, so `jq -r .payload`
gives the text and a record that is not text is never mistaken for one.
`record_object` builds it; a record's stored time, where a store keeps one,
goes in there too (its `time` argument) -- the one place for it.

`read` gives each record its stored time, `"time": "2026-01-02T03:04:05.678Z"`
(ISO-8601 UTC to the ms), left out for a record stored without one (a store
written before times were kept) and by `tail` (a subscription carries no times).

A stream in `--format json` is one object per line too: `{"stream", "first",
"last", "records", "bytes", "last_time"}`, the table's columns (`stream_object`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from .when import format_time

if TYPE_CHECKING:  # the store is imported by the verbs that read one (command.py)
    from ..store.reader import StreamInfo

__all__ = [
    "RECORD_FORMATS",
    "STREAM_FORMATS",
    "print_records",
    "print_streams",
    "print_timed_records",
    "record_object",
    "stream_object",
]

RECORD_FORMATS = ("lines", "json")
STREAM_FORMATS = ("table", "json")


def record_object(position: int, payload: bytes, time: str | None = None) -> dict[str, object]:
    """One record as `--format json` prints it (the module docstring): its position,
    its stored `time` when one is given (an ISO-8601 string), and its payload as
    text when it is UTF-8, else as base64 under `payload_base64`."""
    obj: dict[str, object] = {"position": position}
    if time is not None:
        obj["time"] = time
    try:
        obj["payload"] = payload.decode("utf-8")
    except UnicodeDecodeError:
        obj["payload_base64"] = base64.b64encode(payload).decode("ascii")
    return obj


def print_records(
    write: Callable[[bytes], object], records: Iterable[tuple[int, bytes]], fmt: str
) -> None:
    """`lines`: the payload and a newline; `json`: `record_object`, one per line."""
    if fmt == "lines":
        for _, payload in records:
            write(payload)
            write(b"\n")
        return
    dumps = json.dumps
    for position, payload in records:
        line = dumps(record_object(position, payload), ensure_ascii=False)
        write(line.encode("utf-8") + b"\n")


def print_timed_records(
    write: Callable[[bytes], object], records: Iterable[tuple[int, float | None, bytes]]
) -> None:
    """`json` with each record's stored time (`read`: Store.read_timed)."""
    dumps = json.dumps
    for position, when, payload in records:
        stamp = None if when is None else format_time(when)
        line = dumps(record_object(position, payload, stamp), ensure_ascii=False)
        write(line.encode("utf-8") + b"\n")


def stream_object(info: StreamInfo) -> dict[str, object]:
    """One stream as `streams --format json` prints it."""
    return {
        "stream": info.name,
        "first": info.first,
        "last": info.last,
        "records": info.records,
        "bytes": info.bytes,
        "last_time": None if info.last_time is None else format_time(info.last_time),
    }


def print_streams(write: Callable[[str], object], infos: Sequence[StreamInfo], fmt: str) -> None:
    """`table`: a header and one aligned row per stream; `json`: `stream_object` per line."""
    if fmt == "json":
        for info in infos:
            write(json.dumps(stream_object(info)) + "\n")
        return
    header = ("stream", "first", "last", "records", "bytes", "last stored")
    rows = [
        (i.name, str(i.first), str(i.last), str(i.records), str(i.bytes), format_time(i.last_time))
        for i in infos
    ]
    cells = [header, *rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        left = row[0].ljust(widths[0])
        right = "  ".join(cell.rjust(w) for cell, w in zip(row[1:], widths[1:], strict=True))
        write(f"{left}  {right}\n")
