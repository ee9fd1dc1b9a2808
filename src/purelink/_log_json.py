"""The JSON shape of a log record: `purelink.logging`'s default format, and `decode`.

Why a module of its own: the handler (logging.py) encodes in two places, the
caller's thread (JSONFormatter.encode, for a record whose fields could change
later) and its own thread (`encode_fields`, from the copy of the fields that
`emit` took), and both must give the same bytes; the reader (`decode`) needs
none of the handler.
"""

from __future__ import annotations

import json
import logging
from typing import Any

__all__ = ["BARE_SIZE", "IMMUTABLE", "JSONFormatter", "decode", "encode_fields"]

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


def encode_fields(fields: dict[str, Any]) -> bytes:
    """The UTF-8 JSON of a record from its attributes (a LogRecord's `__dict__`,
    or a copy of it) with `message` formatted and `exc_text` filled in."""
    doc: dict[str, Any] = {
        "time": fields["created"],
        "level": fields["levelname"],
        "logger": fields["name"],
        "message": fields["message"],
        "thread": fields["threadName"],
    }
    exc_text = fields.get("exc_text")
    if exc_text:
        doc["exception"] = exc_text
    stack = fields.get("stack_info")
    if stack:
        doc["stack"] = stack
    if len(fields) > BARE_SIZE:
        for key in sorted(fields.keys() - _STANDARD):
            doc[f"extra.{key}" if key in _FIXED else key] = fields[key]
    try:
        text = _json(doc)
    except (TypeError, ValueError):  # keys JSON cannot take, a cycle
        text = _json(_plain(doc))
    return text.encode("utf-8", "backslashreplace")


class JSONFormatter(logging.Formatter):
    """LinkHandler's default format: one JSON object per record (see `decode`).

    Usable with any handler (`logging.FileHandler` for JSON lines, say).
    """

    def format(self, record: logging.LogRecord) -> str:
        return self.encode(record).decode("utf-8")

    def encode(self, record: logging.LogRecord) -> bytes:
        """The record as UTF-8 JSON."""
        # cached on the record, as logging.Formatter does; loguru hands over "\n"
        if record.exc_info and not (record.exc_text and record.exc_text.strip()):
            record.exc_text = self.formatException(record.exc_info)
        record.message = record.getMessage()  # as logging.Formatter.format does
        return encode_fields(record.__dict__)
