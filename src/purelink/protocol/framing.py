"""Length-prefixed frames: the protocol's datagrams over a TCP byte stream (sans-IO).

A tcp:// link speaks exactly the datagrams of wire.py; TCP only adds a
boundary around each one, since a stream has none:

    u32 length (little-endian)   the datagram's size in bytes
    length bytes                 the datagram, as wire.encode_* made it

Nothing else: no magic or checksum of its own (the datagram inside carries
magic, version and CRC-32C, or is sealed by channel.py), no padding, no version.  A frame of
length 0 is legal framing (its empty datagram is then dropped by the
datagram decoder, like any truncated datagram).

The one defence the framing itself owes is the length: a peer that announces
4 GiB must not make anyone wait for, or allocate, 4 GiB.  A length above
`max_frame` is a `FrameError` the moment its 4 header bytes are in, before any
of its body; the driver drops that connection and counts it.  The default,
65,536, is one more than the largest UDP datagram: a Sender never makes a
datagram above 65,507 bytes (its `datagram_size` limit), and a large record
travels as FRAGMENT datagrams, so no frame needs more even with a 64 KiB
`datagram_size` (TCP has no MTU).

Two ways in, for the two sides (after h11's _receivebuffer.py: bytes in,
complete events out, the partial rest kept):

* `split_frames(buf, start, end, max_frame)` finds the complete frames in a
  region of a buffer the caller owns and returns memoryviews into it: the
  listener reads into pooled buffers and hands the views to its core without
  a copy (it keeps only the incomplete tail);
* `FrameDecoder` keeps its own buffer: `feed(data)` returns the datagrams that
  are complete, as bytes.  The link's transport uses it (answers are few and
  small, so copying them costs nothing that matters).

Both either return frames or raise `FrameError`; nothing else escapes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Final

from ..errors import ProtocolError

__all__ = [
    "DEFAULT_MAX_FRAME",
    "HEADER",
    "FrameDecoder",
    "FrameError",
    "encode_frame",
    "encode_frames",
    "split_frames",
]

HEADER: Final = 4
"""Bytes of a frame's length prefix."""
DEFAULT_MAX_FRAME: Final = 65_536
"""Largest datagram a frame may carry unless configured otherwise."""
_LEN = struct.Struct("<I")
_MAX_LENGTH: Final = 0xFFFF_FFFF


class FrameError(ProtocolError):
    """A frame that must not be read further: its connection is dropped.
    `reason` is "frame_too_large" (the listener's drop counter's name).
    From split_frames, `frames` are the whole frames before the bad length
    (still good: feed them before dropping the connection) and `at` the offset
    of that length."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason, detail)
        self.frames: list[memoryview] = []
        self.at = 0


def encode_frame(datagram: bytes | bytearray | memoryview) -> bytes:
    """One datagram as one frame."""
    n = len(datagram)
    if n > _MAX_LENGTH:
        raise ValueError(f"a frame holds at most {_MAX_LENGTH} bytes, not {n}")
    return _LEN.pack(n) + bytes(datagram)


def encode_frames(datagrams: Iterable[bytes]) -> bytes:
    """Many datagrams as back-to-back frames, in one buffer (one send call)."""
    pack = _LEN.pack
    parts: list[bytes] = []
    append = parts.append
    for d in datagrams:
        append(pack(len(d)))
        append(d)
    return b"".join(parts)


def _too_large(length: int, max_frame: int) -> FrameError:
    return FrameError("frame_too_large", f"frame of {length} bytes, more than {max_frame}")


def split_frames(
    buf: bytearray | bytes | memoryview, start: int, end: int, max_frame: int = DEFAULT_MAX_FRAME
) -> tuple[list[memoryview], int]:
    """The complete frames in `buf[start:end]`: (their datagrams as views into
    `buf`, the offset where the incomplete rest begins; `end` if none is left).

    Raises FrameError as soon as a length over `max_frame` is readable, even if
    the frame's body is not; the error carries the whole frames before it
    (`frames`) and the bad length's offset (`at`).  The views are only valid
    while `buf` is not overwritten; the caller decides how long that is.
    """
    view = memoryview(buf)
    unpack = _LEN.unpack_from
    frames: list[memoryview] = []
    pos = start
    while end - pos >= HEADER:
        (length,) = unpack(view, pos)
        if length > max_frame:
            error = _too_large(length, max_frame)
            error.frames, error.at = frames, pos
            raise error
        stop = pos + HEADER + length
        if stop > end:
            break
        frames.append(view[pos + HEADER : stop])
        pos = stop
    return frames, pos


class FrameDecoder:
    """An incremental frame decoder with a buffer of its own.

    `feed(data)` returns every datagram completed by `data` (bytes, in order).
    After a FrameError the decoder is broken for good (the stream has lost its
    boundaries): every later `feed` raises the same error until `clear()`.
    Memory: at most one incomplete frame plus one `feed`'s worth of bytes.
    """

    __slots__ = ("_buf", "_error", "max_frame")

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        if not 0 <= max_frame <= _MAX_LENGTH:
            raise ValueError(f"max_frame must be between 0 and {_MAX_LENGTH}, not {max_frame}")
        self.max_frame = max_frame
        self._buf = bytearray()
        self._error: FrameError | None = None

    @property
    def pending(self) -> int:
        """Bytes held of a frame not yet complete."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Take the next bytes of the stream; return the datagrams now complete."""
        if self._error is not None:
            raise self._error
        buf = self._buf
        buf += data
        try:
            frames, pos = split_frames(buf, 0, len(buf), self.max_frame)
        except FrameError as exc:
            self._error = exc
            self._buf = bytearray()  # (the traceback still holds a view of the old one)
            raise
        out = [bytes(f) for f in frames]
        for f in frames:
            f.release()  # no view may outlive this call: the buffer is resized next
        if pos:
            del buf[:pos]
        return out

    def clear(self) -> None:
        """Forget everything (a new connection starts a new stream)."""
        self._buf = bytearray()
        self._error = None
