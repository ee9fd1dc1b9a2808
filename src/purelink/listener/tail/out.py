"""How a subscription's reply leaves the listener: in plaintext or sealed.

Why a module of its own: tail_server.py and its sources (tail_source.py)
decide *what* a subscriber gets (which batches, when, the refusals); this is
only how the bytes go out.  Without keys, control items by `sendall`, stored
batches by `sendfile` straight from a segment (`file`: the kernel moves
page-cache pages, no copy in Python) or, from a store that hands them over
in memory (JetStream), by `sendall` (`batches`).  With keys, the same bytes
sealed under the subscription's session (protocol/tail_seal.py): a sealed
frame cannot be sendfile'd, so each range is read with `os.pread` (or
sliced) and sealed 64 KiB at a time.
"""

from __future__ import annotations

import os
import socket
import time
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ...protocol.channel import Channel
    from .server import TailServer

__all__ = ["SEND_CHUNK", "Gone", "Out", "SealedOut"]

SEND_CHUNK: Final = 8 << 20
"""Bytes handed to one sendfile call at most."""


class Gone(Exception):
    """The subscriber went away, or the listener is closing: stop quietly."""


class Out:
    """A subscriber's reply, in plaintext: control items by sendall, batches by
    sendfile straight from the segment."""

    __slots__ = ("server", "sock")

    def __init__(self, server: TailServer, sock: socket.socket) -> None:
        self.server = server
        self.sock = sock

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def batches(self, data: bytes | memoryview) -> None:
        """Send stored batches held in memory."""
        server = self.server
        if server._closing:
            raise Gone
        self.sock.sendall(data)
        with server._lock:
            server._bytes_sent += len(data)

    def file(self, fd: int, offset: int, count: int) -> None:
        server = self.server
        out = self.sock.fileno()
        while count > 0:
            if server._closing:
                raise Gone
            sent = os.sendfile(out, fd, offset, min(count, SEND_CHUNK))
            if sent == 0:
                raise Gone
            with server._lock:
                server._sendfile_calls += 1
                server._bytes_sent += sent
            offset += sent
            count -= sent


class SealedOut(Out):
    """A subscriber's reply under a session's keys (protocol/tail_seal.py): the same
    bytes, read from the segment (no sendfile: they must be sealed) and sent in
    frames of at most CHUNK plaintext bytes."""

    __slots__ = ("channel",)

    def __init__(self, server: TailServer, sock: socket.socket, channel: Channel) -> None:
        super().__init__(server, sock)
        self.channel = channel

    def send(self, data: bytes) -> None:
        from ...protocol.tail_seal import frame  # noqa: PLC0415

        self.sock.sendall(frame(self.channel.seal(data, time.monotonic())))

    def batches(self, data: bytes | memoryview) -> None:
        from ...protocol.tail_seal import CHUNK, frame  # noqa: PLC0415

        server = self.server
        seal = self.channel.seal
        view = memoryview(data)
        for offset in range(0, len(view), CHUNK):
            if server._closing:
                raise Gone
            sealed = frame(seal(view[offset : offset + CHUNK], time.monotonic()))
            self.sock.sendall(sealed)
            with server._lock:
                server._bytes_sent += len(sealed)

    def file(self, fd: int, offset: int, count: int) -> None:
        from ...protocol.tail_seal import CHUNK, frame  # noqa: PLC0415

        server = self.server
        seal = self.channel.seal
        while count > 0:
            if server._closing:
                raise Gone
            chunk = os.pread(fd, min(count, CHUNK), offset)
            if not chunk:
                raise Gone  # the segment is shorter than its index said: end here
            sealed = frame(seal(chunk, time.monotonic()))
            self.sock.sendall(sealed)
            with server._lock:
                server._bytes_sent += len(sealed)
            offset += len(chunk)
            count -= len(chunk)
