"""The listener's side of subscriptions: requests, slots, limits, hang-ups.

Why it exists: `purelink.subscribe` / `purelink tail` read a stream from a
listener's TCP port (docs/store.md, protocol/tail.py for the bytes).  This
server does what every store needs alike; where the batches come from is
its `TailSource` (source.py): a data directory's segments by sendfile
(file.py) or a JetStream stream's messages (jetstream.py).  A listing
request (`purelink streams tcp://...`) is served the same way, its reply
built by listing.py.

How a connection gets here: the listener's TCP server reads the first bytes
of every connection as a link's frame; `PREAMBLE` read as a frame length is
far over the limit, and instead of dropping the connection the server calls
`TailServer.take` (its `foreign` hook).  `take` answers `NEED_MORE` while the
bytes so far are only a beginning of `PREAMBLE` (a request split across TCP
segments), `NOT_MINE` for anything else, and `TAKEN` once it has the
connection: it keeps a duplicate of the socket and starts a thread for it,
or refuses it at once (rate limit, too many incomplete requests) with one
non-blocking send.  `take` runs on the listener's loop and never blocks.

One thread per subscriber (at most `max_subscribers`), because each one
blocks in turn on the socket (a subscriber that reads slowly) and on the
stream (a follower waiting for more).  Neither ever touches the listener's
threads:

* **a slow subscriber never slows the writers**: the send blocks in this
  thread, with the GIL released, until the subscriber's socket takes more;
  the only buffering is the kernel's socket buffer (bounded) and what the
  source holds for one send, and TCP flow control pushes back to the
  subscriber's side;
* **never a record before it is stored**: the source sends a batch only once
  it is stored (source.py), so a subscriber never sees what a link was
  not told;
* **waiting** is mechanism 2: the thread parks on its reader's parker, which
  the store unparks only while someone is parked.  A parked follower learns
  at once that its subscriber hung up (or sent a byte, a protocol error: a
  subscriber sends nothing after its request): one thread watches every
  follower's socket (hangups.py) and unparks it, and its slot is free
  again at once.  The byte is read and refused -- never peeked, which would
  leave the socket readable for ever.  Only where that watch cannot run does
  a parked follower look at its socket every `HEARTBEAT` seconds instead.

Abuse is bounded and counted by reason (`TailStatistics.dropped`): a request
must be whole within `request_timeout` seconds, overall; a connection still
sending its request holds no subscriber slot (at most `max_pending` of them
at once, counted only when their first bytes did not already hold the whole
request, as a real subscriber's do); new subscriptions are rate-limited per
source address (token buckets, protocol/ratelimit.py).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from ...errors import Error, ProtocolError
from ...primitives.parker import Parker
from ...protocol.keys import KeyTable
from ...protocol.ratelimit import TokenBuckets
from ...protocol.tail import (
    END,
    ERROR,
    FLAG_SEALED,
    NO_STREAM,
    NOTICE,
    PREAMBLE,
    Request,
    decode_request,
    encode_control,
    request_size,
)
from .hangups import HangUps
from .listing import send_listing
from .out import Gone as _Gone
from .out import Out as _Out
from .out import OutCounters
from .out import SealedOut as _SealedOut
from .source import Refused as _Refused
from .source import TailReader, TailSource

__all__ = [
    "HEARTBEAT",
    "NEED_MORE",
    "NOT_MINE",
    "TAKEN",
    "TailServer",
    "TailStatistics",
    "Take",
]

log = logging.getLogger("purelink.listener")

HEARTBEAT: Final = 5.0
"""Seconds between a parked follower's looks at its socket, where the hang-up watch
(hangups.py) cannot run (no thread or descriptor to be had)."""
REQUEST_TIMEOUT: Final = 5.0
"""Seconds a connection has, from `take`, to send its whole request (overall)."""
OPEN_GIVE_UP: Final = 30.0
"""Seconds a follower waits for a store that fails to answer before it is refused."""
REFUSE_TIMEOUT: Final = 1.0
"""Seconds an ERROR item may take to leave (a subscriber that does not read)."""
SUBSCRIBE_RATE: Final = 100.0
"""New subscriptions per second per source address (a token bucket's rate)..."""
SUBSCRIBE_BURST: Final = 200.0
"""... and its burst: more than `max_subscribers`, so a whole host's
subscribers may resume at once after a listener restart."""
SUBSCRIBE_SOURCES: Final = 4096
"""Source addresses whose buckets are remembered (protocol/ratelimit.py)."""
_HANG_UP: Final = select.POLLHUP | select.POLLRDHUP | select.POLLERR | select.POLLNVAL


class Take(enum.Enum):
    """What `TailServer.take` did with a connection (truthy only when TAKEN)."""

    NOT_MINE = "not_mine"
    """Not a subscription: the caller keeps (or drops) the connection."""
    TAKEN = "taken"
    """A subscription, served or refused: the caller closes its own socket."""
    NEED_MORE = "need_more"
    """The bytes so far are a proper prefix of PREAMBLE: ask again with more."""

    def __bool__(self) -> bool:
        return self is Take.TAKEN


TAKEN: Final = Take.TAKEN
NOT_MINE: Final = Take.NOT_MINE
NEED_MORE: Final = Take.NEED_MORE


@dataclass(frozen=True, slots=True)
class TailStatistics:
    """A snapshot of the subscription server's counters.

    `dropped` counts every refused or abandoned subscription by reason:

    * ``tail_bad_request``: a request that does not decode (preamble,
      checksum, unknown flags, stream name);
    * ``tail_unauthenticated``: a request that is not sealed, on a listener with keys
      (one sealed with the wrong secret for its key counts as ``tail_bad_secret``);
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
    """Subscriptions accepted (requests that decoded and got a slot; listings too)."""
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


class _Alarm:
    """A follower's flag that the hang-up watch raised, and how it wakes the follower."""

    __slots__ = ("news", "parker", "rung", "watching")

    def __init__(self, parker: Parker) -> None:
        self.parker = parker
        self.rung = False
        self.watching = False
        self.news = False  # the stream was held or went on: tell the follower

    def tell(self) -> None:
        """On the listener's loop thread: the stream's hold changed."""
        self.news = True
        self.parker.unpark()

    def ring(self) -> None:
        """On the watch thread: flag, then unpark (the parker's order: state first)."""
        self.rung = True
        self.parker.unpark()


class TailServer:
    """Serves subscriptions for one listener (see the module docstring)."""

    def __init__(
        self,
        source: TailSource,
        *,
        keys: KeyTable | None = None,
        max_subscribers: int = 64,
        max_pending: int = 64,
        request_timeout: float = REQUEST_TIMEOUT,
        subscribe_rate: float = SUBSCRIBE_RATE,
        subscribe_burst: float = SUBSCRIBE_BURST,
        hold: Callable[[str], str | None] | None = None,
    ) -> None:
        """`subscribe_rate` 0: no rate limit.  `hold(stream)`: why the stream
        stores nothing now, or None (StorageDriver.hold); followers are told
        (a NOTICE) before they first wait and whenever `held_changed` says so."""
        self._source = source
        self._hold = hold
        self._followers: dict[str, set[_Alarm]] = {}
        self.keys = keys
        """With keys, every subscription is encrypted (protocol/tail_seal.py) and
        a key reads only the streams it may; swapped whole by a reload."""
        self.max_subscribers = max_subscribers
        """Subscribers served at once; more are refused (tail_too_many_subscribers)."""
        self.max_pending = max_pending
        """Connections reading an incomplete request at once (tail_too_many_pending)."""
        self.request_timeout = request_timeout
        """Seconds a connection has to send its whole request (tail_request_timeout)."""
        self._buckets = (
            TokenBuckets(subscribe_rate, subscribe_burst, SUBSCRIBE_SOURCES)
            if subscribe_rate > 0
            else None
        )
        self._lock = threading.Lock()
        self._threads: dict[socket.socket, threading.Thread] = {}
        self._keyed: dict[socket.socket, tuple[str, str]] = {}  # sealed: (key id, stream)
        self._sent = OutCounters()  # every Out's counts, and the closing flag
        self._pending = 0
        self._subscribers = 0
        self._subscriptions = 0
        self._dropped: dict[str, int] = {}
        self._hangups = HangUps()

    # ---- the hook (the listener's loop thread) --------------------------------------

    def take(self, sock: socket.socket, head: bytes | memoryview) -> Take:
        """TcpServer's `foreign` hook for a connection whose first bytes are `head`:
        NEED_MORE while they are a proper prefix of PREAMBLE, NOT_MINE if they do
        not begin with it, else TAKEN (served on a thread of its own, or refused
        at once).  Never blocks."""
        first = bytes(head[: len(PREAMBLE)])
        if first != PREAMBLE:
            short = len(first) < len(PREAMBLE) and PREAMBLE.startswith(first)
            return NEED_MORE if short else NOT_MINE
        size = request_size(head)
        whole = size is not None and len(head) >= size  # as a real subscriber's request comes
        refusal = None
        source = _source(sock)
        with self._lock:
            if self._sent.closing:
                return TAKEN  # the caller closes the connection
            if self._buckets is not None and not self._buckets.allow(source, time.monotonic()):
                refusal = _Refused("tail_rate_limited", "too many new subscriptions, try later")
            elif not whole and self._pending >= self.max_pending:
                refusal = _Refused(
                    "tail_too_many_pending",
                    f"too many incomplete requests (at most {self.max_pending})",
                )
            elif not whole:
                self._pending += 1
            elif self._subscribers >= self.max_subscribers:  # refused here: no Thread.start
                try:  # (it waits for the GIL) on the loop; as _serve would, bad ones first
                    self._decode(bytes(head[:size]))
                    refusal = self._full()
                except ProtocolError as exc:
                    refusal = _bad_request(exc)
            if refusal is not None:
                self._count(refusal.reason)
        if refusal is not None:  # one non-blocking send; the caller closes the socket
            with contextlib.suppress(OSError):
                sock.send(encode_control(ERROR, refusal.text), socket.MSG_DONTWAIT)
            return TAKEN
        try:
            mine = sock.dup()
            mine.setblocking(True)
        except OSError:
            self._unpend(not whole)
            return NOT_MINE  # no descriptor for it: the caller drops the connection
        thread = threading.Thread(
            target=self._serve,
            args=(mine, bytes(head), not whole),
            name="purelink-tail",
            daemon=True,
        )
        with self._lock:
            self._threads[mine] = thread
        try:
            thread.start()
        except RuntimeError:  # no thread to be had
            with self._lock:
                self._threads.pop(mine, None)
                self._count("tail_failed")
            self._unpend(not whole)
            mine.close()
        return TAKEN

    def held_changed(self, stream: str) -> None:
        """The stream was held or goes on (the listener's loop thread): wake its
        followers to tell them."""
        with self._lock:
            alarms = list(self._followers.get(stream, ()))
        for alarm in alarms:
            alarm.tell()

    def set_keys(self, keys: KeyTable) -> int:
        """Use `keys` for new subscriptions; end those whose key is gone, expired or
        may no longer read their stream (their connection is shut down, counted
        `tail_key_revoked`).  Any thread.  Returns how many were ended."""
        wall = time.time()
        with self._lock:
            self.keys = keys
            ended = []
            for sock, (key_id, stream) in self._keyed.items():
                if _revoked(keys, key_id, stream, wall):
                    ended.append(sock)
                    self._count("tail_key_revoked")
        for sock in ended:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # unblocks its sendall, or its wait
        return len(ended)

    def _full(self) -> _Refused:
        return _Refused(
            "tail_too_many_subscribers", f"too many subscribers (at most {self.max_subscribers})"
        )

    def close(self) -> None:
        """Disconnect every subscriber and wait for their threads (briefly)."""
        with self._lock:
            self._sent.closing = True
            threads = dict(self._threads)
        for sock in threads:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # unblocks a sendfile or a recv
        self._source.wake()
        for thread in threads.values():
            thread.join(5.0)
        self._hangups.close()
        self._source.close()

    def statistics(self) -> TailStatistics:
        """A snapshot of the counters (any thread; `dropped` is a copy)."""
        sent = self._sent
        with sent.lock:
            bytes_sent, sendfile_calls = sent.bytes_sent, sent.sendfile_calls
        with self._lock:
            return TailStatistics(
                subscriptions=self._subscriptions,
                subscribers=self._subscribers,
                refused=sum(self._dropped.values()),
                bytes_sent=bytes_sent,
                sendfile_calls=sendfile_calls,
                pending=self._pending,
                dropped=dict(self._dropped),
            )

    def _count(self, reason: str) -> None:
        """Count a refusal (under _lock)."""
        self._dropped[reason] = self._dropped.get(reason, 0) + 1

    def _unpend(self, pending: bool) -> None:
        if pending:
            with self._lock:
                self._pending -= 1

    # ---- one subscriber (its own thread) --------------------------------------------

    def _decode(self, raw: bytes) -> tuple[Request, Any]:
        """The request, and with keys the exchange it opened (ProtocolError if bad)."""
        keys = self.keys
        if keys is None:
            flags = len(PREAMBLE) + 8  # after the preamble and the start (protocol/tail.py)
            if len(raw) > flags and raw[flags] & FLAG_SEALED:  # else: "bad_checksum"
                raise ProtocolError(
                    "unexpected_secret", "this listener has no secret: subscribe without one"
                )
            return decode_request(raw), None
        from ...protocol.tail_seal import open_sealed_request  # noqa: PLC0415 - with keys only

        request, hs, e_i, key = open_sealed_request(raw, keys, time.time())
        return request, (hs, e_i, key.key_id)

    def _serve(self, sock: socket.socket, head: bytes, pending: bool) -> None:
        subscribed = False
        out: _Out = _Out(self._sent, sock)
        try:
            try:
                raw = self._read_request(sock, head)
            finally:
                self._unpend(pending)
            request, exchange = self._decode(raw)
            with self._lock:
                if self._subscribers >= self.max_subscribers:
                    raise self._full()
                self._subscribers += 1
                self._subscriptions += 1
                subscribed = True
            if exchange is not None:
                out = self._seal(sock, request, exchange)
            if request.listing:  # the streams the key may read (all, without keys)
                send_listing(out, self._source, self.keys, exchange and exchange[2])
            else:
                start = request.start
                if request.since:  # a time: the subscriber's thread seeks to it
                    start = self._source.position_at(request.stream, start / 1000)
                self._stream(out, request.stream, start, request.follow)
        except ProtocolError as exc:
            self._refuse(out, _bad_request(exc))
        except _Refused as exc:
            self._refuse(out, exc)
        except Error as exc:  # e.g. the data directory closed under it
            self._refuse(out, _Refused("tail_failed", str(exc)))
        except (_Gone, OSError):
            pass
        except Exception:  # pragma: no cover - a bug: log it, never crash the listener
            log.exception("subscription failed")
        finally:
            with self._lock:
                self._threads.pop(sock, None)
                self._keyed.pop(sock, None)
                self._subscribers -= subscribed
            sock.close()

    def _seal(self, sock: socket.socket, request: Request, exchange: Any) -> _SealedOut:
        """Answer a sealed request's exchange: the Out that seals the reply.  A
        subscription is remembered by key and stream (`set_keys` may end it)."""
        from ...protocol.tail_seal import respond  # noqa: PLC0415

        hs, e_i, key_id = exchange
        stream = None if request.listing else request.stream
        with self._lock:  # a reload since _decode has not seen this one: check
            if stream is not None:
                self._keyed[sock] = (key_id, stream)
            keys = self.keys
            if keys is None or _revoked(keys, key_id, stream, time.time()):
                raise _Refused("tail_key_revoked", "key revoked")
        resp, channel = respond(hs, e_i, time.monotonic())
        sock.sendall(resp)
        return _SealedOut(self._sent, sock, channel)

    def _refuse(self, out: _Out, refusal: _Refused) -> None:
        """Count the refusal (unless closing) and tell the subscriber, briefly."""
        with self._lock:
            if self._sent.closing:
                return
            self._count(refusal.reason)
        with contextlib.suppress(OSError):
            out.sock.settimeout(REFUSE_TIMEOUT)  # a full socket buffer: give up, do not hang
            out.send(encode_control(ERROR, refusal.text))

    def _read_request(self, sock: socket.socket, head: bytes) -> bytes:
        """The whole request, within `request_timeout` seconds overall; nothing after it."""
        data = bytearray(head)
        deadline = time.monotonic() + self.request_timeout
        while (size := request_size(data)) is None or len(data) < size:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Refused(
                    "tail_request_timeout",
                    f"no whole request within {self.request_timeout:g} s",
                )
            sock.settimeout(left)
            try:
                chunk = sock.recv(4096)
            except TimeoutError:
                continue  # the deadline, checked above
            except OSError:
                chunk = b""  # reset: gone as surely as a hang-up
            if not chunk:
                if self._sent.closing:
                    raise _Gone
                raise _Refused("tail_truncated_request", "the request ended early")
            data += chunk
        if len(data) > size:
            raise _Refused("tail_trailing_bytes", f"{len(data) - size} bytes after the request")
        sock.settimeout(None)  # blocking again: sendfile waits for a slow subscriber
        return bytes(data)

    def _stream(self, out: _Out, stream: str, start: int, follow: bool) -> None:
        sock = out.sock
        reader = self._open(sock, stream, start, follow)
        if reader is None:  # an unknown stream is empty, and said so
            out.send(encode_control(END, NO_STREAM))
            return
        alarm = _Alarm(reader.parker)
        with self._lock:
            self._followers.setdefault(stream, set()).add(alarm)
        told: str | None = "?"  # nothing told yet
        try:
            while not reader.send(out):
                told = self._tell(out, stream, alarm, told)
                self._wait(sock, reader, alarm)
            out.send(encode_control(END))
        finally:
            with self._lock:
                followers = self._followers[stream]
                followers.discard(alarm)
                if not followers:
                    del self._followers[stream]
            if alarm.watching:
                self._hangups.unwatch(sock)
            reader.close()

    def _tell(self, out: _Out, stream: str, alarm: _Alarm, told: str | None) -> str | None:
        """Send a NOTICE if the stream's hold is not what the follower was told."""
        if self._hold is None:
            return told
        alarm.news = False  # first: a change after the look below wakes it again
        held = self._hold(stream)
        if held != told:
            out.send(encode_control(NOTICE, held or ""))
        return held

    def _open(
        self, sock: socket.socket, stream: str, start: int, follow: bool
    ) -> TailReader | None:
        """The stream's reader; a follower of a stream not created yet waits for it
        (polling its socket 10 ms doubling to 1 s: a rare case with nothing to park on),
        and rides over a store that fails to answer for up to OPEN_GIVE_UP seconds
        (a JetStream stream being created has no leader for a moment)."""
        delay = 0.01
        failing = 0.0
        while True:
            try:
                reader = self._source.open(stream, start, follow)
            except Error:
                now = time.monotonic()
                failing = failing or now
                if not follow or now - failing > OPEN_GIVE_UP:
                    raise
                reader = None
            else:
                failing = 0.0
            if reader is not None or not follow:
                return reader
            if self._sent.closing or _hung_up(sock, delay):
                raise _Gone
            delay = min(delay * 2, 1.0)

    def _wait(self, sock: socket.socket, reader: TailReader, alarm: _Alarm) -> None:
        """Park until the reader has more to send (or closing), or until the
        hang-up watch rings: then look at the socket (a subscriber gone frees
        its slot now).  Looks first too: one that left at once never parks."""

        def ready() -> bool:
            return alarm.rung or alarm.news or reader.ready() or self._sent.closing

        if _hung_up(sock, 0):
            raise _Gone
        if not alarm.watching:
            alarm.watching = self._hangups.watch(sock, alarm.ring)
        timeout = None if alarm.watching else HEARTBEAT
        while True:
            woke = alarm.parker.wait(ready, timeout=timeout)
            if alarm.rung or not woke:
                alarm.rung = False
                if _hung_up(sock, 0):
                    raise _Gone
                if alarm.watching:
                    self._hangups.rearm(sock)  # a stale event, or a byte-less wake: again
            if alarm.news or reader.ready() or self._sent.closing:
                break
        if self._sent.closing or reader.ended():
            raise _Gone


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


def _revoked(keys: KeyTable, key_id: str, stream: str | None, wall: float) -> bool:
    """Whether `keys` no longer let key `key_id` read `stream` (gone, expired, narrowed);
    stream None (a listing): whether the key is gone or expired."""
    key = keys.get(key_id)
    if key is None or key.expired(wall):
        return True
    return stream is not None and not key.may_read(stream)


_KEY_REASONS: Final = frozenset(
    {"unauthenticated", "unknown_key", "expired_key", "bad_secret", "forbidden"}
)


def _bad_request(exc: ProtocolError) -> _Refused:
    bad = f"tail_{exc.reason}" if exc.reason in _KEY_REASONS else "tail_bad_request"
    return _Refused(bad, str(exc))
