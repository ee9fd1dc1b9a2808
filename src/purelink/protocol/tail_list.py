"""Listing a listener's streams over its TCP port: the bytes, both ways (sans-IO).

Why it exists: `purelink streams tcp://HOST:PORT` lists the streams a
listener holds without access to its disk, as `kcat -L` lists a broker's
topics.  It rides on the subscription protocol (tail.py) -- the same port,
preamble, checks, limits and, with keys, the same encrypted layer
(tail_seal.py) -- so a listener needs nothing new to accept it.

Request: tail.py's request with flags = FLAG_LIST (0x02), start 0, no name
(`tail.encode_list_request`).  With keys it is sealed like a subscription: the
plaintext request is the INIT's HELLO.  A key may list whatever key it is,
but sees only the streams it may read (its read globs, docs/security.md).

Reply: one STREAM control item (kind 4) per stream, sorted by name, then END;
or one ERROR (a refusal: wrong secret, unknown key, rate limit).  A STREAM
item's body, little-endian:

    u64  first     first position retained (0: none)
    u64  last      last position stored (0: none)
    u64  records   records retained
    u64  bytes     bytes the store holds for the stream
    u8   n         length of the name
    n    name      the stream
    u64  last_ms   when its newest record was stored, ms since the Unix epoch (0: not known)
    ...            fields a later listener adds: a reader skips what it does not know

Positions are *stored* ones (synced, with sync="batch"/"always"): a listing
never shows a record a subscription could not yet read.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

from ..errors import ProtocolError
from .names import validate_stream_name
from .tail import END, ERROR, STREAM, encode_control, split_control

__all__ = ["ListDecoder", "ListedStream", "encode_stream"]

_STREAM = struct.Struct("<QQQQB")
_U64 = struct.Struct("<Q")
_MAX_BUFFER: Final = 8192
"""Bytes held of an item not complete yet: a control item is at most ~4 KiB."""


class ListedStream(NamedTuple):
    """One stream of a listing."""

    name: str
    first: int
    last: int
    records: int
    bytes: int
    last_ms: int = 0
    """When the newest record was stored, ms since the Unix epoch (0: not known)."""


def encode_stream(stream: ListedStream) -> bytes:
    """One STREAM item."""
    name = stream.name.encode("ascii")
    fields = _STREAM.pack(stream.first, stream.last, stream.records, stream.bytes, len(name))
    return encode_control(STREAM, fields + name + _U64.pack(stream.last_ms))


def _decode_stream(body: bytes) -> ListedStream:
    if len(body) < _STREAM.size:
        raise ProtocolError("bad_control", "a STREAM item too short")
    first, last, records, size, n = _STREAM.unpack_from(body)
    end = _STREAM.size + n
    if len(body) < end:
        raise ProtocolError("bad_control", "a STREAM item's name runs past it")
    try:
        name = validate_stream_name(body[_STREAM.size : end].decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError("bad_name", str(exc)) from None
    last_ms = _U64.unpack_from(body, end)[0] if len(body) >= end + _U64.size else 0
    return ListedStream(name, first, last, records, size, last_ms)


class ListDecoder:
    """The client's side: reply bytes in, `ListedStream`s out.

    `feed(data)` returns the streams of every item now complete; `ended` is
    set by END.  An ERROR item raises `ProtocolError("refused", text)`; a
    batch, a NOTICE, an unknown kind or anything after END raises
    ProtocolError too.
    """

    __slots__ = ("_buf", "ended")

    def __init__(self) -> None:
        self._buf = bytearray()
        self.ended = False
        """An END item came: the listing is complete."""

    def feed(self, data: bytes) -> list[ListedStream]:
        """Take the next bytes of the reply; return the streams now complete."""
        if self.ended and data:
            raise ProtocolError("bad_control", "bytes after the END of a listing")
        buf = self._buf
        buf += data
        out: list[ListedStream] = []
        pos = 0
        raw = bytes(buf)
        while len(raw) - pos >= _U64.size + 8:
            if _U64.unpack_from(raw, pos)[0]:
                raise ProtocolError("bad_batch", "a batch in a listing")
            item = split_control(raw, pos, len(raw))
            if item is None:
                break
            kind, body, size = item
            pos += size
            if kind == STREAM:
                out.append(_decode_stream(body))
            elif kind == END:
                self.ended = True
                if pos != len(raw):
                    raise ProtocolError("bad_control", "bytes after the END of a listing")
            elif kind == ERROR:
                raise ProtocolError("refused", body.decode("utf-8", "replace"))
            else:
                raise ProtocolError("bad_control", f"kind {kind} in a listing")
        del buf[:pos]
        if len(buf) > _MAX_BUFFER:  # pragma: no cover - split_control refuses first
            raise ProtocolError("bad_control", "an item too long")
        return out
