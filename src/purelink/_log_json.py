"""The JSON shape of a log record: `purelink.logging`'s default format, and `decode`.

Why a module of its own: the handler (logging.py) encodes in two places, the
caller's thread (JSONFormatter.encode, for a record whose fields could change
later) and its own thread (`encode_captured`, from the fields that `emit`
captured), and both must give the same bytes; the reader (`decode`) needs
none of the handler.
"""

from __future__ import annotations

import json
import logging
from typing import Any

__all__ = ["BARE_SIZE", "IMMUTABLE", "JSONFormatter", "decode", "encode_captured"]

# LogRecord attributes that are not `extra=` fields
_BARE = logging.LogRecord("", 0, "", 0, "", (), None).__dict__
BARE_SIZE = len(_BARE)  # a record with no more attributes than this has no extra= field
_STANDARD = frozenset(_BARE) | {"message", "asctime", "taskName"}
# values that cannot change after the call: an extra= field of these is safe to encode later
IMMUTABLE = frozenset({str, int, float, bool, type(None)})
# one encoder for every record: json.dumps() with options builds a new one per call
_json = json.JSONEncoder(default=str, ensure_ascii=False, separators=(",", ":")).encode
_FIXED = ("time", "level", "logger", "message", "thread", "exception", "stack")
_PLAIN = (str, int, float, bool, type(None))


def decode(payload: bytes | bytearray | memoryview | str) -> dict[str, Any]:
    """One record written by LinkHandler's default format, as a dict.

    Keys: `time` (Unix time, seconds), `level`, `logger`, `message`, `thread`,
    `exception` and `stack` when the call had them, and every `extra=` field
    (one named like a key above is stored as ``extra.<name>``).  Raises
    ValueError for a payload that is not such a record.
    """
    text = payload if isinstance(payload, str) else bytes(payload).decode("utf-8")
    value = json.loads(text)
    if not isinstance(value, dict) or "message" not in value:
        raise ValueError("not a purelink.logging record (a JSON object with a message)")
    return value


def _plain(value: Any, depth: int = 0) -> Any:
    """`value` with everything JSON cannot encode made a string (a cycle too, at depth 16)."""
    if isinstance(value, _PLAIN):
        return value
    if depth < 16:
        if isinstance(value, dict):
            return {
                k if isinstance(k, str) else str(k): _plain(v, depth + 1) for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [_plain(v, depth + 1) for v in value]
    return str(value)


def _encode(doc: dict[str, Any], extra: dict[str, Any] | None) -> bytes:
    if extra:
        for key in sorted(extra.keys() - _STANDARD):
            doc[f"extra.{key}" if key in _FIXED else key] = extra[key]
    try:
        text = _json(doc)
    except (TypeError, ValueError):  # keys JSON cannot take, a cycle
        text = _json(_plain(doc))
    return text.encode("utf-8", "backslashreplace")


def encode_captured(fields: tuple[Any, ...]) -> bytes:
    """The UTF-8 JSON of a record from what `LinkHandler.emit` captured of it:
    (created, levelname, name, message, threadName, stack_info, the attributes
    past a bare LogRecord's or None)."""
    created, level, logger, message, thread, stack, extra = fields
    doc: dict[str, Any] = {
        "time": created,
        "level": level,
        "logger": logger,
        "message": message,
        "thread": thread,
    }
    if stack:
        doc["stack"] = stack
    return _encode(doc, extra)


class JSONFormatter(logging.Formatter):
    """LinkHandler's default format: one JSON object per record (see `decode`).

    Usable with any handler (`logging.FileHandler` for JSON lines, say).
    """

    def format(self, record: logging.LogRecord) -> str:
        return self.encode(record).decode("utf-8")

    def stamp(self, record: logging.LogRecord) -> Any:
        """The record's `time`: its Unix time, seconds (`serve` writes ISO-8601 instead)."""
        return record.created

    def encode(self, record: logging.LogRecord) -> bytes:
        """The record as UTF-8 JSON."""
        # cached on the record, as logging.Formatter does; loguru hands over "\n"
        if record.exc_info and not (record.exc_text and record.exc_text.strip()):
            record.exc_text = self.formatException(record.exc_info)
        doc: dict[str, Any] = {
            "time": self.stamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "thread": record.threadName,
        }
        if record.exc_text:
            doc["exception"] = record.exc_text
        if record.stack_info:
            doc["stack"] = record.stack_info
        fields = record.__dict__
        return _encode(doc, fields if len(fields) > BARE_SIZE else None)
