"""The listener's side of subscriptions: stored batches to subscribers, by sendfile.

Why it exists: `purelink.subscribe` / `purelink tail` read a stream from a
listener's TCP port (SPEC section 9, protocol/tail.py for the bytes).  The
reply is the store format itself, so the listener sends byte ranges of its
segment files with `os.sendfile`: no record is decoded, copied or re-encoded
on the way out, and the kernel moves page-cache pages to the socket.

How a connection gets here: the listener's TCP server reads the first bytes
of every connection as a link's frame; `PREAMBLE` read as a frame length is
far over the limit, and instead of dropping the connection the server calls
`TailServer.take` (its `foreign` hook), which keeps a duplicate of the socket
and starts a thread for it.  `take` runs on the listener's loop and does no
I/O: the thread reads the rest of the request.

One thread per subscriber (at most `max_subscribers`), because each one
blocks in turn on the socket (a subscriber that reads slowly) and on the
stream (a follower waiting for more).  Neither ever touches the listener's
threads:

* **a slow subscriber never slows the writers**: sendfile blocks in this
  thread, with the GIL released, until the subscriber's socket takes more;
  the only buffering is the kernel's socket buffer (bounded), and TCP flow
  control pushes back to the subscriber's side;
* **never a record before it is stored**: a batch is sent only when its last
  record is at or below the stream's *stored* position -- `synced_position`
  with sync="batch"/"always", what was written with sync="none" (where that
  is what "stored" means) -- so a subscriber never sees what a link was not
  told;
* **waiting** is mechanism 2: the thread parks on the log's `synced_parker`
  (or `parker` with sync="none"), which `sync` (`append`) unparks only while
  someone is parked.  Every `HEARTBEAT` seconds a parked follower looks at
  its socket, so one that disconnected while the stream was idle is let go.

Segments are found in the log's published table and opened while registered
(online) with the DataDir's grace domain, exactly as Store readers are, so
retention never unlinks a segment a subscriber is about to open; one that
retention overtakes gets an ERROR ("records retained start at N").

Where a batch starts: closed segments are sent from the offset to their end
without looking inside (they are whole and synced); the active one is walked
header by header (u64 position, u32 length, u32 count, from 1 MiB preads)
only up to the stored position.  The subscriber checks every CRC.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import struct
import threading
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .errors import Error, ProtocolError
from .primitives.grace import GraceReader
from .primitives.parker import Parker
from .protocol.tail import END, ERROR, PREAMBLE, decode_request, encode_control, request_size
from .protocol.wire import BATCH_HEADER
from .store.log import StreamLog
from .store.store import DataDir

__all__ = ["HEARTBEAT", "TailServer", "TailStatistics"]

log = logging.getLogger("purelink.listener")

HEARTBEAT: Final = 5.0
"""Seconds a parked follower waits before it checks that its subscriber is still there."""
REQUEST_TIMEOUT: Final = 10.0
SEND_CHUNK: Final = 8 << 20
WALK_CHUNK: Final = 1 << 20
_HEAD = struct.Struct("<Q8xII")  # position, (crc, magic, version, flags), length, count


@dataclass(frozen=True, slots=True)
class TailStatistics:
    """A snapshot of the subscription server's counters."""

    subscriptions: int
    """Subscriptions accepted (requests that decoded)."""
    subscribers: int
    """Subscribers connected now."""
    refused: int
    """Requests refused: bad, unauthenticated, too many subscribers, overtaken."""
    bytes_sent: int
    """Bytes of batches sent (by sendfile)."""
    sendfile_calls: int
    """sendfile calls."""


class _Cursor:
    """Where a subscriber is in one segment: its own fd, the next batch's offset."""

    __slots__ = ("base", "fd", "offset", "path", "position")

    def __init__(self, fd: int, base: int, path: Path, offset: int, position: int) -> None:
        self.fd = fd
        self.base = base
        self.path = path
        self.offset = offset
        self.position = position  # of the batch at `offset`


class _Gone(Exception):
    """The subscriber went away, or the listener is closing: stop quietly."""


class TailServer:
    """Serves subscriptions for one listener (see the module docstring)."""

    def __init__(
        self,
        data: DataDir,
        *,
        sync: str,
        secret: bytes | None = None,
        max_subscribers: int = 64,
    ) -> None:
        self._data = data
        self._secret = secret
        self._stored: Callable[[StreamLog], int]
        self._parker: Callable[[StreamLog], Parker]
        if sync == "none":  # "stored" means written to the OS
            self._stored, self._parker = _last, _append_parker
        else:
            self._stored, self._parker = _synced, _sync_parker
        self.max_subscribers = max_subscribers
        self._lock = threading.Lock()
        self._threads: dict[socket.socket, threading.Thread] = {}
        self._closing = False
        self._subscriptions = 0
        self._refused = 0
        self._bytes_sent = 0
        self._sendfile_calls = 0

    # ---- the hook (the listener's loop thread) --------------------------------------

    def take(self, sock: socket.socket, head: bytes | memoryview) -> bool:
        """TcpServer's `foreign` hook: take a connection that began with PREAMBLE."""
        if bytes(head[: len(PREAMBLE)]) != PREAMBLE:
            return False
        try:
            mine = sock.dup()
            mine.setblocking(True)
        except OSError:
            return False
        thread = threading.Thread(
            target=self._serve, args=(mine, bytes(head)), name="purelink-tail", daemon=True
        )
        with self._lock:
            if self._closing:
                mine.close()
                return True
            self._threads[mine] = thread
        thread.start()
        return True

    def close(self) -> None:
        """Disconnect every subscriber and wait for their threads (briefly)."""
        with self._lock:
            self._closing = True
            threads = dict(self._threads)
        for sock in threads:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # unblocks a sendfile or a recv
        for name in self._data.streams():
            with contextlib.suppress(KeyError):
                stream_log = self._data.stream(name, create=False)
                stream_log.parker.unpark()
                stream_log.synced_parker.unpark()
        for thread in threads.values():
            thread.join(5.0)

    def statistics(self) -> TailStatistics:
        with self._lock:
            subscribers = len(self._threads)
        return TailStatistics(
            subscriptions=self._subscriptions,
            subscribers=subscribers,
            refused=self._refused,
            bytes_sent=self._bytes_sent,
            sendfile_calls=self._sendfile_calls,
        )

    # ---- one subscriber (its own thread) --------------------------------------------

    def _serve(self, sock: socket.socket, head: bytes) -> None:
        try:
            with self._lock:
                crowded = len(self._threads) > self.max_subscribers
            if crowded:
                raise Error(f"too many subscribers (at most {self.max_subscribers})")
            request = decode_request(self._read_request(sock, head), self._secret)
            with self._lock:
                self._subscriptions += 1
            self._stream(sock, request.stream, request.start, request.follow)
        except (Error, ProtocolError) as exc:
            with self._lock:
                self._refused += 1
            with contextlib.suppress(OSError):
                sock.sendall(encode_control(ERROR, str(exc)))
        except (_Gone, OSError):
            pass
        except Exception:  # pragma: no cover - a bug: log it, never crash the listener
            log.exception("purelink: subscription failed")
        finally:
            with self._lock:
                self._threads.pop(sock, None)
            sock.close()

    @staticmethod
    def _read_request(sock: socket.socket, head: bytes) -> bytes:
        data = bytearray(head)
        sock.settimeout(REQUEST_TIMEOUT)
        while True:
            size = request_size(data)
            if size is not None and len(data) >= size:
                break
            chunk = sock.recv(4096)
            if not chunk:
                raise _Gone
            data += chunk
        sock.settimeout(None)
        return bytes(data[:size])

    def _stream(self, sock: socket.socket, stream: str, start: int, follow: bool) -> None:
        stream_log = self._wait_for_stream(sock, stream, follow)
        if stream_log is None:  # an unknown stream is empty
            sock.sendall(encode_control(END))
            return
        stored = self._stored
        limit = None if follow else stored(stream_log)
        parker = self._parker(stream_log)
        position = start or stream_log.segments[0][0]  # 0: from the first retained
        cursor: _Cursor | None = None
        reader = self._data.grace.register("subscriber", online=False)
        try:
            while True:
                upto = stored(stream_log) if limit is None else limit
                while position <= upto:
                    if cursor is None:
                        cursor = self._open_at(stream_log, reader, position, stream)
                    position = self._send(sock, stream_log, cursor, upto)
                    if cursor.fd < 0:
                        cursor = None  # a closed segment sent to its end: on to the next
                if limit is not None:
                    sock.sendall(encode_control(END))
                    return
                self._wait(sock, stream_log, parker, position)
        finally:
            if cursor is not None and cursor.fd >= 0:
                os.close(cursor.fd)
            reader.unregister()

    def _wait_for_stream(self, sock: socket.socket, stream: str, follow: bool) -> StreamLog | None:
        """The stream's log; a follower of a stream not created yet waits for it
        (polling, at most once a second: a rare case with nothing to park on)."""
        delay = 0.01
        while True:
            with contextlib.suppress(KeyError):
                return self._data.stream(stream, create=False)
            if not follow:
                return None
            if self._closing or _peer_left(sock, delay):
                raise _Gone
            delay = min(delay * 2, 1.0)

    def _wait(
        self, sock: socket.socket, stream_log: StreamLog, parker: Parker, position: int
    ) -> None:
        """Park until `position` is stored (or closing); check the peer now and then."""
        stored = self._stored

        def ready() -> bool:
            return stored(stream_log) >= position or self._closing or stream_log.closed

        while not parker.wait(ready, timeout=HEARTBEAT):
            if _peer_left(sock, 0):
                raise _Gone
        if self._closing or (stream_log.closed and stored(stream_log) < position):
            raise _Gone

    def _open_at(
        self, stream_log: StreamLog, reader: GraceReader, position: int, stream: str
    ) -> _Cursor:
        """An fd on the segment holding `position`, found and opened under the grace
        domain, and the offset of the batch that holds it."""
        reader.online()
        try:
            table = stream_log.segments
            if position < table[0][0]:
                raise Error(
                    f"stream {stream!r}: records retained start at {table[0][0]}, "
                    f"cannot read from {position}"
                )
            i = bisect_right([base for base, _ in table], position) - 1
            base, path = table[i]
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        finally:
            reader.offline()
        cursor = _Cursor(fd, base, path, 0, base)
        if position > base:
            try:
                self._walk(cursor, position - 1, os.fstat(fd).st_size)
            except BaseException:
                os.close(fd)
                raise
        return cursor

    def _send(self, sock: socket.socket, stream_log: StreamLog, cursor: _Cursor, upto: int) -> int:
        """Send the batches of the cursor's segment up to position `upto`; return the
        position that follows them.  Closes the cursor's fd once its (closed)
        segment was sent to its end."""
        table = stream_log.segments
        closed = cursor.base != table[-1][0]  # only the last one is ever written to
        i = bisect_right([base for base, _ in table], cursor.base) - 1
        size = os.fstat(cursor.fd).st_size
        start = cursor.offset
        if closed and i >= 0 and table[i][0] == cursor.base and table[i + 1][0] - 1 <= upto:
            cursor.offset, cursor.position = size, table[i + 1][0]  # whole and synced
        else:  # the active segment, or a closed one retention has retired meanwhile
            self._walk(cursor, upto, size)
        if cursor.offset == start and not (closed and start >= size):
            raise Error(f"segment {cursor.path}: no whole batch at offset {start}")
        self._sendfile(sock, cursor.fd, start, cursor.offset - start)
        if closed and cursor.offset >= size:
            os.close(cursor.fd)
            cursor.fd = -1
        return cursor.position

    @staticmethod
    def _walk(cursor: _Cursor, upto: int, size: int) -> None:
        """Move the cursor past every whole batch whose records are all <= `upto`."""
        fd, offset, position = cursor.fd, cursor.offset, cursor.position
        unpack = _HEAD.unpack_from
        while offset < size:
            buf = os.pread(fd, min(WALK_CHUNK, size - offset), offset)
            at = 0
            while len(buf) - at >= BATCH_HEADER:
                pos, length, count = unpack(buf, at)
                if pos != position or length < BATCH_HEADER:
                    raise Error(f"segment {cursor.path} is damaged at offset {offset + at}")
                if pos + count - 1 > upto or offset + at + length > size:
                    cursor.offset, cursor.position = offset + at, position
                    return
                at += length
                position += count
            if at == 0:  # a header cut by the end of the file: not written yet
                break
            offset += at
        cursor.offset, cursor.position = min(offset, size), position

    def _sendfile(self, sock: socket.socket, fd: int, offset: int, count: int) -> None:
        out = sock.fileno()
        while count > 0:
            if self._closing:
                raise _Gone
            sent = os.sendfile(out, fd, offset, min(count, SEND_CHUNK))
            if sent == 0:
                raise _Gone
            with self._lock:
                self._sendfile_calls += 1
                self._bytes_sent += sent
            offset += sent
            count -= sent


def _peer_left(sock: socket.socket, timeout: float) -> bool:
    """Whether the subscriber closed its side (it sends nothing after its request)."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN | select.POLLRDHUP)
    if not poller.poll(timeout * 1000):
        return False
    try:
        return not sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    except OSError:
        return True


def _last(stream_log: StreamLog) -> int:
    return stream_log.last_position


def _synced(stream_log: StreamLog) -> int:
    return stream_log.synced_position


def _append_parker(stream_log: StreamLog) -> Parker:
    return stream_log.parker


def _sync_parker(stream_log: StreamLog) -> Parker:
    return stream_log.synced_parker
