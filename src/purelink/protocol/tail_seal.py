"""Encrypted subscriptions: the request as an INIT, the reply in sealed frames.

Why it exists: with a secret every frame is encrypted (docs/security.md),
and a subscription's reply is the stream's records.  The plaintext
subscription protocol (tail.py) is kept whole and carried inside the
encrypted layer of handshake.py and channel.py, as a link's datagrams are:

    request   "PLTAIL01", u64 n, u8 flags = FLAG_SEALED, u8 0,
              an INIT of n bytes (<= MAX_INIT) whose HELLO is the plaintext
              request (tail.encode_request), u32 crc32c
    reply     frames: u32 length, then a RESP (the first frame) or a SEALED
              datagram whose plaintext is the next bytes of the plaintext
              reply (batches and control items, tail.py), at most 64 KiB each

The listener opens the INIT with the key it names, checks that the key may
read the stream, and answers the RESP; a refusal before that (unknown key
id, wrong secret, expired key, a stream the key may not read, a rate
limit) is a plaintext ERROR item, as without a secret: it carries no
record.  The channel's conn id is 0 (one session per connection).  The
listener cannot `sendfile` sealed bytes: it reads each range of the segment
(`os.pread`) and seals it, 64 KiB at a time (docs/performance.md).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final

from .._crc32c import crc32c
from ..errors import ProtocolError
from .channel import OVERHEAD, Channel, RekeyPolicy
from .handshake import Initiator, ResponderHello, init_key_id, open_init
from .keys import Key, KeyTable
from .tail import (
    ERROR,
    FLAG_SEALED,
    MAX_INIT,
    PREAMBLE,
    Request,
    decode_request,
    encode_request,
)

__all__ = [
    "CHUNK",
    "SealedReader",
    "encode_sealed_request",
    "frame",
    "open_sealed_request",
    "respond",
    "seal_request",
]

_FIXED = struct.Struct("<8sQBB")
_U32 = struct.Struct("<I")
_CONTROL = struct.Struct("<QII")  # tail.py's control item: 0, kind, text length
_MAX_TEXT: Final = 4096  # tail.py's bound on a control item's text
CHUNK: Final = 64 << 10
"""Plaintext bytes sealed per reply frame at most."""
_MAX_FRAME: Final = CHUNK + OVERHEAD + 1024


def encode_sealed_request(
    stream: str, start: int, follow: bool, key_id: str, secret: bytes, since: bool = False
) -> tuple[bytes, Initiator]:
    """The request's bytes and the exchange they open. ValueError for bad arguments."""
    return seal_request(encode_request(stream, start, follow, since), key_id, secret)


def seal_request(plain: bytes, key_id: str, secret: bytes) -> tuple[bytes, Initiator]:
    """A plaintext request (a subscription's, or a listing's: tail_list.py) as a
    sealed one, and the exchange it opens."""
    init = Initiator(key_id, secret, plain)
    body = _FIXED.pack(PREAMBLE, len(init.message), FLAG_SEALED, 0) + init.message
    return body + _U32.pack(crc32c(body)), init


def open_sealed_request(
    data: bytes, keys: KeyTable, wall: float
) -> tuple[Request, ResponderHello, bytes, Key]:
    """(the request, the exchange, the subscriber's ephemeral, the key) of a sealed
    request.  ProtocolError with a reason: truncated, bad_checksum, bad_flags,
    unauthenticated (not sealed), unknown_key, expired_key, bad_secret,
    forbidden (the key may not read the stream), and decode_request's.  A listing
    (FLAG_LIST inside) is not refused for its streams: the server lists only
    those the key may read."""
    if len(data) < _FIXED.size + _U32.size:
        raise ProtocolError("truncated", "not a whole request")
    preamble, n, flags, _ = _FIXED.unpack_from(data)
    if preamble != PREAMBLE:
        raise ProtocolError("bad_preamble", "not a subscription")
    if not flags & FLAG_SEALED:
        raise ProtocolError("unauthenticated", "this listener needs a key")
    if flags != FLAG_SEALED:
        raise ProtocolError("bad_flags", f"flags {flags:#04x}")
    end = _FIXED.size + n
    if n > MAX_INIT or len(data) != end + _U32.size:
        raise ProtocolError("truncated", "not a whole request")
    if crc32c(data[:end]) != _U32.unpack_from(data, end)[0]:
        raise ProtocolError("bad_checksum", "request")
    message = data[_FIXED.size : end]
    key_id = init_key_id(message)
    key = keys.get(key_id)
    if key is None:
        raise ProtocolError("unknown_key", f"no key {key_id!r} here")
    if key.expired(wall):
        raise ProtocolError("expired_key", f"key {key_id!r} has expired")
    try:
        hs, e_i = open_init(message, key.secret)
    except ProtocolError as exc:
        if exc.reason == "unauthenticated":
            raise ProtocolError("bad_secret", f"wrong secret for key {key_id!r}") from None
        raise
    # the refusals from here on go back in plaintext (no session yet): their texts
    # must not repeat what the INIT kept from the path, the stream's name above all
    try:
        request = decode_request(hs.hello)
    except ProtocolError as exc:
        raise ProtocolError(exc.reason, "the request inside the INIT") from None
    if not request.listing and not key.may_read(request.stream):  # a listing: filtered
        raise ProtocolError("forbidden", f"key {key_id!r} may not read this stream")
    return request, hs, e_i, key


def frame(datagram: bytes) -> bytes:
    """One reply frame."""
    return _U32.pack(len(datagram)) + datagram


class SealedReader:
    """The subscriber's side of a sealed reply: `feed(data)` returns the plaintext
    reply bytes now complete (for a TailDecoder).  Reply bytes that begin with a
    plaintext control item (four zero bytes: a frame is never empty) are a
    refusal from before the session: one ERROR item, passed on as it is, and
    nothing else (an END or a batch in plaintext is refused)."""

    __slots__ = ("_buf", "_init", "_plain", "channel", "clock", "policy")

    def __init__(
        self, init: Initiator, clock: Callable[[], float], policy: RekeyPolicy | None = None
    ) -> None:
        self._init: Initiator | None = init
        self._buf = bytearray()
        self._plain = False
        self.clock = clock
        self.policy = policy
        self.channel: Channel | None = None
        """The session's keys, once the RESP came."""

    def feed(self, data: bytes) -> bytes:
        """Take the next reply bytes; return the plaintext they complete."""
        if self._plain:
            raise ProtocolError("unauthenticated", "plaintext after a refusal")
        buf = self._buf
        buf += data
        if self.channel is None and len(buf) >= 4 and buf[:4] == b"\0\0\0\0":
            return self._refusal()
        out: list[bytes] = []
        at = 0
        while len(buf) - at >= 4:
            (n,) = _U32.unpack_from(buf, at)
            if not 0 < n <= _MAX_FRAME:
                raise ProtocolError("bad_frame", f"a reply frame of {n} bytes")
            if len(buf) - at < 4 + n:
                break
            body = bytes(buf[at + 4 : at + 4 + n])
            at += 4 + n
            if self.channel is None:
                init = self._init
                assert init is not None  # (set to None only once the channel is made)
                _, _, session = init.open_resp(body)
                self.channel = Channel(0, session.send, session.receive, self.clock(), self.policy)
                self._init = None  # its ephemeral is done with: forward secrecy
            else:
                out.append(self.channel.open(body, self.clock()))
        del buf[:at]
        return b"".join(out)

    def _refusal(self) -> bytes:
        """A plaintext reply before the RESP: one whole ERROR item and nothing else
        (it is not authenticated: anything more, an END or a batch, could come
        from anyone who answers the connection).  b"" until it is whole."""
        buf = self._buf
        if len(buf) < _CONTROL.size:
            return b""
        zero, kind, n = _CONTROL.unpack_from(buf)
        if zero or kind != ERROR or n > _MAX_TEXT:
            raise ProtocolError("unauthenticated", "a plaintext reply that is not a refusal")
        size = _CONTROL.size + n + _U32.size
        if len(buf) < size:
            return b""
        if len(buf) > size:
            raise ProtocolError("unauthenticated", "plaintext after a refusal")
        self._plain = True
        refusal = bytes(buf)
        buf.clear()
        return refusal  # the TailDecoder checks it and raises the refusal


def respond(
    hs: ResponderHello, e_i: bytes, now: float, policy: RekeyPolicy | None = None
) -> tuple[bytes, Channel]:
    """The listener's answer to a sealed request that opened: (the RESP frame, the
    channel that seals the reply)."""
    session = hs.accept(e_i)
    return frame(hs.seal_resp(0, 1, b"")), Channel(0, session.send, session.receive, now, policy)
