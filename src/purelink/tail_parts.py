"""The subscription server's small parts: its counters, a cursor, the socket checks.

Why it exists: tail_server.py holds the server's logic (take, serve, stream,
wait, send); these are the pieces it is made of, kept apart so that file
stays readable.  Nothing here holds state beyond one object.
"""

from __future__ import annotations

import select
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from .primitives.parker import Parker
from .store.log import StreamLog

__all__ = ["TailStatistics"]

_HANG_UP: Final = select.POLLHUP | select.POLLRDHUP | select.POLLERR | select.POLLNVAL


@dataclass(frozen=True, slots=True)
class TailStatistics:
    """A snapshot of the subscription server's counters.

    `dropped` counts every refused or abandoned subscription by reason:

    * ``tail_bad_request``: a request that does not decode (preamble,
      checksum, unknown flags, stream name);
    * ``tail_unauthenticated``: no MAC, or a wrong one, on a listener with a secret;
    * ``tail_request_timeout``: no whole request within `request_timeout` seconds;
    * ``tail_truncated_request``: the peer hung up (or reset) before its request was whole;
    * ``tail_trailing_bytes``: bytes after the request (a subscriber sends
      nothing more), at once or while it follows;
    * ``tail_too_many_pending``: `max_pending` incomplete requests were being read already;
    * ``tail_too_many_subscribers``: `max_subscribers` subscribers were served already;
    * ``tail_rate_limited``: the source address used up its token bucket;
    * ``tail_below_retained``: a start below the first record retained, or
      retention overtook the subscriber;
    * ``tail_damaged``: a segment whose batch headers do not follow on;
    * ``tail_failed``: anything else the listener could not serve (closed meanwhile).
    """

    subscriptions: int
    """Subscriptions accepted (requests that decoded and got a slot)."""
    subscribers: int
    """Subscribers served now (each holds a slot of `max_subscribers`)."""
    refused: int
    """Subscriptions refused or abandoned: the sum of `dropped`."""
    bytes_sent: int
    """Bytes of batches sent (by sendfile)."""
    sendfile_calls: int
    """sendfile calls."""
    pending: int = 0
    """Connections still sending an incomplete request now (at most `max_pending`)."""
    dropped: dict[str, int] = field(default_factory=dict)
    """Refusals by reason (see the class docstring); a copy, safe to keep."""


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


class _Refused(Exception):
    """Refuse the subscription: count `reason`, send an ERROR item saying `text`."""

    def __init__(self, reason: str, text: str) -> None:
        super().__init__(text)
        self.reason = reason
        self.text = text


def _hung_up(sock: socket.socket, timeout: float) -> bool:
    """Wait up to `timeout` seconds for the subscriber to hang up: True if it did.

    A subscriber sends nothing after its request, so a readable socket is
    either its hang-up (POLLHUP/POLLRDHUP, or a recv of b"") or bytes it had
    no business sending: those are read, not peeked (a byte left unread
    keeps poll readable, and every later wait would return at once), and
    refused (tail_trailing_bytes)."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN | select.POLLRDHUP)
    events = poller.poll(timeout * 1000)
    if not events:
        return False
    hung_up = bool(events[0][1] & _HANG_UP)
    if events[0][1] & select.POLLIN:  # bytes first (sent before a hang-up are still bytes)
        try:
            data = sock.recv(4096, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return hung_up
        except OSError:
            return True
        if data:
            raise _Refused("tail_trailing_bytes", f"{len(data)} bytes after the request")
        return True  # b"": the hang-up
    return hung_up


def _source(sock: socket.socket) -> object:
    """The rate limit's key: the peer's address without its port."""
    try:
        peer = sock.getpeername()
    except OSError:
        return None
    return peer[0] if isinstance(peer, tuple) else peer


def _last(stream_log: StreamLog) -> int:
    return stream_log.last_position


def _synced(stream_log: StreamLog) -> int:
    return stream_log.synced_position


def _append_parker(stream_log: StreamLog) -> Parker:
    return stream_log.parker


def _sync_parker(stream_log: StreamLog) -> Parker:
    return stream_log.synced_parker
