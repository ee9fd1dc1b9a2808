"""Subscriptions over the listener's TCP port: the bytes, both ways (sans-IO).

Why it exists: `purelink.subscribe` and `purelink tail` read a stream from a
listener over TCP (docs/store.md), and the listener sends stored batches
straight from its segment files with `os.sendfile`.  So the reply *is* the
store format (docs/store.md): batches as they lie on disk, each carrying its
position and its CRC-32C.  This module knows the request, the few control
items around the batches, and how a subscriber turns the reply back into
records -- no sockets, no threads, no clock.

A connection to the TCP port that starts with `PREAMBLE` is a subscription;
anything else is a link (protocol/framing.py).  "PLTA" read as a frame length
is 1.1e9, far over any frame limit, so the listener's framing refuses it at its
first four bytes and hands the connection to the subscription server instead
of dropping it (`TcpServer.foreign`).

Request, client to listener, little-endian, sent once:

    8s   "PLTAIL01"
    u64  start        first position wanted; 0 = the first record retained
    u8   flags        0x01 follow: wait for more instead of ending;
                      0x02 list: the listener's streams, not a stream's records
                      (tail_list.py: start 0, no name, no follow);
                      0x04 since: `start` is a time, milliseconds since the Unix epoch:
                           start at the first record stored at or after it;
                      0x40 sealed (tail_seal.py); any other bit: refused (bad_flags)
    u8   n            length of the stream name
    n    name         the stream (the README's naming rule)
    u32  crc32c       of every byte before it

Reply, listener to client: items back to back until the listener closes.

    batch    a stored batch, byte for byte: u64 position (>= 1), u32 crc, "PB", ...
             (docs/store.md); the first one holds `start`, the next ones follow on
    control  u64 0, u32 kind, u32 n, n bytes of UTF-8 text, u32 crc32c of kind..text
             END (1): everything asked for was sent (follow=False); the listener closes.
                 Its text is "no_stream" when the stream does not exist (else "")
             ERROR (2): the subscription failed (text says why); the listener closes
             NOTICE (3): to a follower, whether the stream stores now: text "" (it does),
                 "disk_full" (no room on the listener's disk, or below its --min-free)
                 or "stream_failed" (a failed write or fsync; until a restart).  One
                 comes before the follower first waits, then one at each change.
             STREAM (4): one stream of a listing (tail_list.py), never in a stream's reply

A batch is sent only once it is stored (synced, with sync="batch"/"always"),
so a subscriber never sees a record a link was not, or could not yet be, told
is stored.  The subscriber checks every batch (`wire.verify_batch`, CRC-32C
included) and that positions follow on; anything else is a protocol error.

With a secret the whole exchange travels inside the encrypted layer
(tail_seal.py): the request above, without a change, is the payload of an
INIT (flags 0x40 outside it), and the reply comes in sealed frames.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final, NamedTuple

from .._crc32c import crc32c
from ..errors import ProtocolError
from .names import validate_stream_name
from .wire import BATCH_HEADER, BATCH_MAGIC, FLAG_LARGE, VERSION

__all__ = [
    "END",
    "ERROR",
    "FLAG_FOLLOW",
    "FLAG_LIST",
    "FLAG_SEALED",
    "FLAG_SINCE",
    "MAX_INIT",
    "MAX_ITEM",
    "MAX_TEXT",
    "NOTICE",
    "NO_STREAM",
    "PREAMBLE",
    "STREAM",
    "Request",
    "TailDecoder",
    "decode_request",
    "encode_control",
    "encode_list_request",
    "encode_request",
    "request_size",
    "split_control",
]

PREAMBLE: Final = b"PLTAIL01"
FLAG_FOLLOW: Final = 0x01
FLAG_LIST: Final = 0x02
"""The request asks for the listener's streams (tail_list.py)."""
FLAG_SINCE: Final = 0x04
"""`start` holds a time (ms since the Unix epoch), not a position."""
FLAG_SEALED: Final = 0x40
"""The request is an INIT (tail_seal.py): the reply comes encrypted."""
MAX_INIT: Final = 1024
"""Largest INIT a sealed request may carry."""
END: Final = 1
ERROR: Final = 2
NOTICE: Final = 3
STREAM: Final = 4
NO_STREAM: Final = "no_stream"
"""END's text when the stream asked for does not exist."""

_FIXED = struct.Struct("<8sQBB")  # preamble, start, flags, name length
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_BATCH = struct.Struct("<QI2sBBIIQQI")  # wire.py's batch header, position first
_CONTROL = struct.Struct("<QII")  # 0, kind, text length
MAX_TEXT: Final = 4096
"""Largest body of a control item."""
MAX_ITEM: Final = 1 << 30
"""Largest batch a subscriber accepts (a record is at most the listener's max_record)."""
_MAX_SEQ: Final = 0xFFFF_FFFF_FFFF_FFFF


class Request(NamedTuple):
    """A decoded subscription request."""

    stream: str
    """The stream ("" in a listing)."""
    start: int
    """The first position wanted (0: the first retained), or with `since` a time."""
    follow: bool
    listing: bool = False
    """A listing: the listener's streams (FLAG_LIST), not a stream's records."""
    since: bool = False
    """`start` is a time: milliseconds since the Unix epoch."""


def encode_request(stream: str, start: int, follow: bool, since: bool = False) -> bytes:
    """The request's bytes (with `since`, `start` is a time in ms since the Unix
    epoch). Raises ValueError for a bad name or start."""
    name = validate_stream_name(stream).encode("ascii")
    if not 0 <= start <= _MAX_SEQ:
        what = "a time, ms since the Unix epoch," if since else "a position,"
        raise ValueError(f"start must be {what} 0 to {_MAX_SEQ}, not {start}")
    flags = (FLAG_FOLLOW if follow else 0) | (FLAG_SINCE if since else 0)
    body = _FIXED.pack(PREAMBLE, start, flags, len(name)) + name
    return body + _U32.pack(crc32c(body))


def encode_list_request() -> bytes:
    """A listing request's bytes (FLAG_LIST: start 0, no name)."""
    body = _FIXED.pack(PREAMBLE, 0, FLAG_LIST, 0)
    return body + _U32.pack(crc32c(body))


def request_size(head: bytes | bytearray | memoryview) -> int | None:
    """The whole request's size, once its fixed part (18 bytes) is known; else None."""
    if len(head) < _FIXED.size:
        return None
    _, start, flags, n = _FIXED.unpack_from(head)
    if flags & FLAG_SEALED:  # `start` holds the INIT's length (tail_seal.py)
        return int(_FIXED.size + min(start, MAX_INIT) + _U32.size)
    return int(_FIXED.size + n + _U32.size)


def decode_request(data: bytes) -> Request:
    """A whole plaintext request (`request_size` bytes). Raises ProtocolError with
    a reason: bad_preamble, bad_checksum, bad_flags, bad_name, bad_start."""
    size = request_size(data)
    if size is None or len(data) != size:
        raise ProtocolError("truncated", "not a whole request")
    preamble, start, flags, n = _FIXED.unpack_from(data)
    if preamble != PREAMBLE:
        raise ProtocolError("bad_preamble", "not a subscription")
    end = _FIXED.size + n
    if crc32c(data[:end]) != _U32.unpack_from(data, end)[0]:
        raise ProtocolError("bad_checksum", "request")
    if flags & ~(FLAG_FOLLOW | FLAG_LIST | FLAG_SINCE):  # a bit this listener does not know
        raise ProtocolError("bad_flags", f"flags {flags:#04x}")
    if flags & FLAG_LIST:
        if flags != FLAG_LIST or start or n:
            raise ProtocolError("bad_flags", "a listing has no name, start or follow")
        return Request("", 0, False, True)
    try:
        stream = validate_stream_name(data[_FIXED.size : end].decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError("bad_name", str(exc)) from None
    if start < 0:  # pragma: no cover - a u64 cannot be negative
        raise ProtocolError("bad_start", f"start {start}")
    return Request(stream, start, bool(flags & FLAG_FOLLOW), since=bool(flags & FLAG_SINCE))


def encode_control(kind: int, text: str | bytes = "") -> bytes:
    """A control item: END, ERROR or NOTICE with a text, STREAM with its bytes."""
    raw = (text.encode("utf-8") if isinstance(text, str) else text)[:MAX_TEXT]
    body = _CONTROL.pack(0, kind, len(raw)) + raw
    return body + _U32.pack(crc32c(body[8:]))


def split_control(buf: bytes, pos: int, end: int) -> tuple[int, bytes, int] | None:
    """The control item at `pos` (its u64 0 already seen): (kind, body, size), or None
    while it is not whole in buf[:end].  ProtocolError if its length or CRC is bad."""
    _, kind, n = _CONTROL.unpack_from(buf, pos)
    if n > MAX_TEXT:
        raise ProtocolError("bad_control", f"text of {n} bytes")
    size = int(_CONTROL.size + n + _U32.size)
    if end - pos < size:
        return None
    body_end = pos + _CONTROL.size + n
    if crc32c(buf[pos + 8 : body_end]) != _U32.unpack_from(buf, body_end)[0]:
        raise ProtocolError("bad_checksum", "control item")
    return int(kind), bytes(buf[pos + _CONTROL.size : body_end]), size


class TailDecoder:
    """The subscriber's side: reply bytes in, (position, payload) out.

    `feed(data)` takes the next bytes received (as `bytes`: records are sliced
    straight out of them, one copy each, no intermediate buffer) and returns
    the records of every batch now complete, from `start` on.  `ended` is set
    by an END item, `held` by a NOTICE; an ERROR item raises `ProtocolError("refused", text)`; a
    batch that fails its checks, or a position that does not follow on, raises
    ProtocolError too.  Memory: the bytes of one incomplete item at most
    (`MAX_ITEM`).

    A batch is checked as `wire.verify_batch` checks it (magic, version, flags,
    count, length, CRC-32C, the length table adding up), in one header unpack
    per batch: the per-batch cost is what bounds a subscriber's records/s.
    """

    __slots__ = ("_rest", "ended", "held", "next_position", "unknown_stream")

    def __init__(self, start: int, held: str | None = None) -> None:
        self.next_position = start
        """The position of the next record wanted (0: the first one retained)."""
        self.ended = False
        """An END item came: the reply is complete."""
        self.unknown_stream = False
        """The END said the stream does not exist (NO_STREAM)."""
        self.held = held
        """Why the stream stores nothing now, as the last NOTICE said ("disk_full",
        "stream_failed"), or None."""
        self._rest = b""  # the start of an item not complete yet

    @property
    def pending(self) -> int:
        """Bytes held of an item not complete yet."""
        return len(self._rest)

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Take the next bytes of the reply; return the records now complete."""
        out: list[tuple[int, bytes]] = []
        rest = self._rest
        if not rest:
            self._rest = data[self._decode(data, 0, out) :]
            return out
        # An item began in an earlier receive: complete it on its own, rather
        # than copy all of `data` behind it.
        size = _item_size(rest if len(rest) >= BATCH_HEADER else rest + data[:BATCH_HEADER])
        if size is None or len(rest) + len(data) < size:
            self._rest = rest + data
            return out
        head = rest + data[: size - len(rest)]
        self._rest = b""
        if self._decode(head, 0, out) != size:  # pragma: no cover - _item_size agrees
            raise ProtocolError("bad_batch", "an item does not end where it said")
        start = size - len(rest)
        self._rest = data[self._decode(data, start, out) :]
        return out

    def _decode(self, buf: bytes, pos: int, out: list[tuple[int, bytes]]) -> int:
        """Append the records of the whole items in buf[pos:] to `out`; return
        the offset of the first item not complete."""
        view = memoryview(buf)
        extend = out.extend
        layouts = _LAYOUTS
        unpack = _BATCH.unpack_from
        end = len(buf)
        wanted = self.next_position
        try:
            while end - pos >= _CONTROL.size:
                if not _U64.unpack_from(buf, pos)[0]:
                    taken = self._control(buf, pos, end)
                    if taken == 0:
                        break
                    pos += taken
                    continue
                if end - pos < BATCH_HEADER:
                    break
                position, crc, magic, version, flags, length, count, _, seq, _ = unpack(buf, pos)
                if magic != BATCH_MAGIC or version != VERSION or flags & ~FLAG_LARGE:
                    raise ProtocolError("bad_batch", f"not a batch header at {position}")
                table = pos + BATCH_HEADER
                body = table + (0 if flags else 2 * count)
                if (
                    count == 0
                    or (flags and count != 1)
                    or length < body - pos
                    or not 0 < seq <= _MAX_SEQ - count + 1
                ):
                    raise ProtocolError("bad_batch", f"batch at {position}: count or length")
                stop = pos + length
                if stop > end:
                    if length > MAX_ITEM:
                        raise ProtocolError("bad_batch", f"batch of {length} bytes at {position}")
                    break
                if crc32c(view[pos + 12 : stop]) != crc:
                    raise ProtocolError("bad_checksum", f"batch at {position}")
                if flags:  # FLAG_LARGE: one record, no length table
                    records: Sequence[bytes] = [buf[body:stop]]
                else:  # every payload in one C call, by the struct of this table's layout
                    layout = layouts.get(buf[table:body]) or _layout(buf, table, count)
                    if layout.size != stop - body:
                        raise ProtocolError("bad_batch", f"batch at {position}: lengths")
                    records = layout.unpack_from(buf, body)
                wanted = wanted or position  # 0, "from the first retained": what comes
                if not position <= wanted < position + count:
                    raise ProtocolError(
                        "bad_position", f"batch at {position} ({count}), expected {wanted}"
                    )
                if wanted > position:
                    records = records[wanted - position :]
                extend(zip(range(wanted, position + count), records, strict=True))
                wanted = position + count
                pos = stop
        finally:
            view.release()
            self.next_position = wanted
        return pos

    def _control(self, buf: bytes, pos: int, end: int) -> int:
        """Decode a control item at `pos`: its size, or 0 if it is not whole yet."""
        item = split_control(buf, pos, end)
        if item is None:
            return 0
        kind, body, size = item
        text = body.decode("utf-8", "replace")
        if kind == END:
            self.ended = True
            self.unknown_stream = text == NO_STREAM
            return size
        if kind == ERROR:
            raise ProtocolError("refused", text)
        if kind == NOTICE:
            self.held = text or None
            return size
        raise ProtocolError("bad_control", f"kind {kind}")


def _item_size(head: bytes) -> int | None:
    """The size of the item (batch or control) that starts `head`, once known."""
    if len(head) < _CONTROL.size:
        return None
    position, _, n = _CONTROL.unpack_from(head)
    if position == 0:
        return int(_CONTROL.size + n + _U32.size)
    if len(head) < BATCH_HEADER:
        return None
    size = int(_U32.unpack_from(head, 16)[0])
    if not BATCH_HEADER <= size <= MAX_ITEM:
        raise ProtocolError("bad_batch", f"batch of {size} bytes at {position}")
    return size


_LAYOUTS: dict[bytes, struct.Struct] = {}
"""Length table bytes -> a struct of "{n}s" fields that unpacks the payloads."""
_MAX_LAYOUTS: Final = 4096
_MAX_CACHED_COUNT: Final = 256


def _layout(buf: bytes, table: int, count: int) -> struct.Struct:
    """The struct that slices the payloads of a batch with this length table.

    Batches of one application mostly share a few layouts (same record sizes,
    full datagrams), so the struct is built once and found again by the
    table's bytes; building one (~2 us) is still cheaper than slicing record
    by record.  The cache is bounded: when full it starts over.
    """
    raw = buf[table : table + 2 * count]
    lengths = struct.unpack_from(f"<{count}H", raw)
    layout = struct.Struct("<" + "".join([f"{n}s" for n in lengths]))
    if count <= _MAX_CACHED_COUNT:  # a struct costs ~40 B per field: cache small ones
        if len(_LAYOUTS) >= _MAX_LAYOUTS:
            _LAYOUTS.clear()
        _LAYOUTS[raw] = layout
    return layout
