"""How a subscription's reply leaves the listener: in plaintext or sealed.

Why a module of its own: server.py and its sources (source.py)
decide *what* a subscriber gets (which batches, when, the refusals); this is
only how the bytes go out.  Without keys, control items by `sendall`, stored
batches by `sendfile` straight from a segment (`file`: the kernel moves
page-cache pages, no copy in Python) or, from a store that hands them over
in memory (JetStream), by `sendall` (`batches`).  With keys, the same bytes
sealed under the subscription's session (protocol/tail_seal.py): a sealed
frame cannot be sendfile'd, so each range is read with `os.pread` (or
sliced) and sealed 64 KiB at a time.

What the sending counts, and whether the listener is closing, live in an
`OutCounters` that the tail server owns and hands to every `Out`: out.py
knows nothing of the server.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ...protocol.channel import Channel

__all__ = ["SEND_CHUNK", "Gone", "Out", "OutCounters", "SealedOut"]

SEND_CHUNK: Final = 8 << 20
"""Bytes handed to one sendfile call at most."""


class Gone(Exception):
    """The subscriber went away, or the listener is closing: stop quietly."""


class OutCounters:
    """What every subscriber's `Out` counts, and the one flag that stops them all.

    One per tail server, shared by its subscriber threads: the counts change
    under `lock` (once per send call, a chunk of up to SEND_CHUNK bytes, never
    per record); `closing` is set once, by the server, and read without it.
    """

    __slots__ = ("bytes_sent", "closing", "lock", "sendfile_calls")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.closing = False
        """The listener is closing: every sender stops at its next chunk (`Gone`)."""
        self.bytes_sent = 0
        """Bytes of stored batches sent to subscribers (sealed: the frames' bytes)."""
        self.sendfile_calls = 0
        """sendfile calls made for them."""


class Out:
    """A subscriber's reply, in plaintext: control items by sendall, batches by
    sendfile straight from the segment."""

    __slots__ = ("counters", "sock")

    def __init__(self, counters: OutCounters, sock: socket.socket) -> None:
        self.counters = counters
        self.sock = sock

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def batches(self, data: bytes | memoryview) -> None:
        """Send stored batches held in memory."""
        counters = self.counters
        if counters.closing:
            raise Gone
        self.sock.sendall(data)
        with counters.lock:
            counters.bytes_sent += len(data)

    def file(self, fd: int, offset: int, count: int) -> None:
        counters = self.counters
        out = self.sock.fileno()
        while count > 0:
            if counters.closing:
                raise Gone
            sent = os.sendfile(out, fd, offset, min(count, SEND_CHUNK))
            if sent == 0:
                raise Gone
            with counters.lock:
                counters.sendfile_calls += 1
                counters.bytes_sent += sent
            offset += sent
            count -= sent


class SealedOut(Out):
    """A subscriber's reply under a session's keys (protocol/tail_seal.py): the same
    bytes, read from the segment (no sendfile: they must be sealed) and sent in
    frames of at most CHUNK plaintext bytes."""

    __slots__ = ("channel",)

    def __init__(self, counters: OutCounters, sock: socket.socket, channel: Channel) -> None:
        super().__init__(counters, sock)
        self.channel = channel

    def send(self, data: bytes) -> None:
        from ...protocol.tail_seal import frame  # noqa: PLC0415

        self.sock.sendall(frame(self.channel.seal(data, time.monotonic())))

    def batches(self, data: bytes | memoryview) -> None:
        from ...protocol.tail_seal import CHUNK, frame  # noqa: PLC0415

        counters = self.counters
        seal = self.channel.seal
        view = memoryview(data)
        for offset in range(0, len(view), CHUNK):
            if counters.closing:
                raise Gone
            sealed = frame(seal(view[offset : offset + CHUNK], time.monotonic()))
            self.sock.sendall(sealed)
            with counters.lock:
                counters.bytes_sent += len(sealed)

    def file(self, fd: int, offset: int, count: int) -> None:
        from ...protocol.tail_seal import CHUNK, frame  # noqa: PLC0415

        counters = self.counters
        seal = self.channel.seal
        while count > 0:
            if counters.closing:
                raise Gone
            chunk = os.pread(fd, min(count, CHUNK), offset)
            if not chunk:
                raise Gone  # the segment is shorter than its index said: end here
            sealed = frame(seal(chunk, time.monotonic()))
            self.sock.sendall(sealed)
            with counters.lock:
                counters.bytes_sent += len(sealed)
            offset += len(chunk)
            count -= len(chunk)
