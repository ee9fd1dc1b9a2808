"""`purelink.subscribe`: read a stream from a listener over TCP (docs/store.md).

Why it exists: a consumer on another machine (or without access to the
listener's disk) reads a stream from any position and follows its tail, as a
Kafka consumer or a NATS JetStream consumer does.  The bytes are in
protocol/tail.py; the listener's side is listener/tail/server.py.

    with purelink.subscribe("tcp://127.0.0.1:7401", "orders", start=1) as records:
        for position, payload in records:
            ...

`subscribe` connects and sends the request before it returns (so an
unreachable listener raises `ConnectError` there); iterating receives.  A
peer that answers what no listener sends, or (with `follow=False`, which a
listener answers at once) nothing within `timeout`, raises `ConnectError`
there: another service's port, not a hang or a cryptic protocol error.  With
`follow=True` (the default) the iteration waits for new records for ever;
with `follow=False` it ends after the records stored when the listener got
the request.  Errors while iterating are `purelink.Error`: the listener
refused (a start below what it retains, "records retained start at N"; a
missing or wrong secret, an unknown key id, a stream the key may not read),
the connection broke, or a batch failed its checks.  Every record yielded
was in a batch that passed its CRC-32C, at a position that follows the one
before: never a gap, never a record that was not stored.

With `reconnect=SECONDS`, a subscription whose connection breaks (the
listener restarted, the network failed) connects again and resumes at
`next_position`, as a Kafka consumer rides through a broker restart: with
backoff (0.05 s doubling to 2 s) for up to that many seconds after the
break, then it raises.  One outage may take several connections (a
listener at its connection limit accepts and closes); it is over once a
resumed connection delivers a record or lives `OUTAGE_OVER` seconds (at
most `reconnect`), and the next break gets the whole `reconnect` again.
No record is lost or repeated across a resume: the new request starts
exactly after the last record yielded (a partial batch received before the
break is dropped and comes again whole).  A refusal (a
start below what is retained, a wrong secret) or a batch that fails its
checks is never retried.  With `follow=False` a resumed request ends at the
records stored when the listener got *it*, which may be more than at first.

`interrupt_fd`: a signal that lands just before a receive blocks (after the
interpreter last looked for one, before the system call) does not interrupt
it: its Python handler runs only once the receive returns, which for an idle
stream is never -- a Ctrl-C lost.  So a subscription given the read end of
`signal.set_wakeup_fd`'s pipe waits on it too (poll), which the interpreter's
C-level handler writes whenever the signal comes: the wait ends, the handler
runs (a KeyboardInterrupt is raised), and a handler that returns only has
its bytes drained.  `purelink tail` does so (cli/common.py, `wakeup_pipe`).

The subscriber receives at most 64 KiB at a time (`RECEIVE_SIZE`: under
glibc's mmap threshold, so that a receive's buffer comes from the heap, not
from a fresh mapping unmapped again when it is shrunk) and slices
the records out of it (`TailDecoder`), so memory stays bounded; with a
`secret` (and `key_id`) the request is an INIT and the reply comes encrypted
(protocol/tail_seal.py); when the
application reads slowly, the kernel's socket buffers fill and TCP pushes
back to the listener's subscription thread, never to the listener's writers.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from itertools import chain
from types import TracebackType
from typing import Any, Final

from . import _address
from ._when import When, unix_seconds
from .errors import ConnectError, Error, ProtocolError, os_reason
from .protocol.tail import TailDecoder, encode_request

__all__ = ["RECEIVE_SIZE", "Subscription", "subscribe"]

RECEIVE_SIZE: Final = 64 << 10
"""Bytes asked for per receive: the only buffer a subscriber holds (plus one partial batch)."""
BACKOFF_FIRST: Final = 0.05
BACKOFF_MAX: Final = 2.0
FOREIGN: Final = " (is it a purelink listener's TCP port?)"
"""What an error says when the peer is silent to a request that does not
follow (a listener answers it at once), or answers what no listener sends:
most likely another service's port, or a listener's UDP port number."""
OUTAGE_OVER: Final = 5.0
"""Seconds a resumed connection must live (if it delivers nothing) for its
next break to count as a new outage, with the whole `reconnect` again (or
`reconnect` seconds, if that is less)."""


def subscribe(
    url: str,
    stream: str,
    start: int = 1,
    follow: bool = True,
    *,
    secret: bytes | None = None,
    key_id: str | None = None,
    timeout: float = 10.0,
    reconnect: float = 0.0,
    on_held: Callable[[str | None], None] | None = None,
    since: When | None = None,
) -> Subscription:
    """Subscribe to `stream` at a listener's TCP address ("tcp://HOST:PORT"),
    from position `start`; iterate the result for (position, payload).
    `start` 1 (the default) or 0 is the beginning of the stream: the first
    record retained, as for `Store.read`.  A later `start` below the first
    record retained is refused, naming it (iterating raises `purelink.Error`):
    never a silent gap.

    `reconnect`: seconds to keep trying to resume after the connection breaks
    (0: raise at once), and to reach the listener in the first place.  See the
    module header.

    `on_held(why)`: called (on the iterating thread) when the listener says the
    stream stores nothing now -- `why` is "disk_full" (no room on its disk, or
    below its --min-free) or "stream_failed" (a failed write or fsync, until the
    listener restarts) -- and with None once it stores again; `held` is the
    same, as a property.  Only a follower is told.

    `since`: instead of `start`, begin at the first record stored at or after
    a time -- a `datetime` (no zone: UTC) or seconds ago -- which the listener
    finds by seeking (docs/store.md).  A listener that keeps no times refuses
    it (iterating raises `purelink.Error`).

    Raises ValueError for a bad URL, stream name, start or reconnect, and
    ConnectError if the listener cannot be reached within `timeout` seconds
    (within `reconnect` seconds, if that is given); iterating raises it if the
    peer is not a listener (the module header).
    """
    scheme, _, _ = _address.parse_url(url)
    if scheme != "tcp":
        raise ValueError(f"subscribe needs the listener's tcp:// address, not {url!r}")
    if not reconnect >= 0:
        raise ValueError(f"reconnect must be a number of seconds >= 0, not {reconnect!r}")
    if secret is not None and len(secret) < 16:
        raise ValueError("secret must be at least 16 bytes")
    if key_id is not None and secret is None:
        raise ValueError("key_id needs the key's secret (secret=)")
    encode_request(stream, start, follow)  # checks name and start
    # 1 is the beginning, which the request says as 0: "the first retained"
    begin = 0 if start == 1 else start
    since_ms = None
    if since is not None:
        if start not in (0, 1):
            raise ValueError("give start or since, not both")
        since_ms = max(0, math.ceil(unix_seconds(since) * 1000 - 1e-6))
    sub = Subscription(url, stream, begin, follow, secret, timeout, reconnect, key_id or "")
    sub._since_ms = since_ms
    sub.on_held = on_held
    sub._first_connect()
    return sub


class Subscription:
    """An open subscription: iterate it for (position, payload); close() when done."""

    def __init__(
        self,
        url: str,
        stream: str,
        start: int,
        follow: bool,
        secret: bytes | None,
        timeout: float,
        reconnect: float,
        key_id: str = "",
    ) -> None:
        self.url = url
        self.stream = stream
        """The stream subscribed to."""
        self.resumes = 0
        """Times the subscription connected again after a break."""
        self.on_held: Callable[[str | None], None] | None = None
        """Called when `held` changes (see `subscribe`)."""
        self.interrupt_fd: int | None = None
        """A non-blocking fd that ends a wait to receive once readable (its bytes
        are read): the read end of signal.set_wakeup_fd's pipe (module header)."""
        self._held: str | None = None
        self._follow = follow
        self._secret = secret
        self._key_id = key_id
        self._sealed: Any = None  # with a secret: this connection's SealedReader
        self._timeout = timeout
        self._reconnect = reconnect
        self._sock: socket.socket | None = None
        self._fresh = False  # the connection has received nothing yet
        self._closed = threading.Event()
        # one outage, however many connections it takes: its deadline and backoff
        # last until a resumed connection delivers a record or lives OUTAGE_OVER
        # seconds (a listener that accepts and then closes, at its connection
        # limit, is still an outage; an idle stream delivers nothing for hours)
        self._outage_deadline = 0.0
        self._backoff = BACKOFF_FIRST
        self._resumed_at = 0.0
        self._decoder = TailDecoder(start)
        self._since_ms: int | None = None  # ask by time until a first record came
        self._records = chain.from_iterable(self._receive())  # C-level, per record

    def _connect(self) -> None:
        """Connect and send the request for the records from next_position."""
        _, host, port = _address.parse_url(self.url)
        start, since = self._decoder.next_position, False
        if start == 0 and self._since_ms is not None:
            start, since = self._since_ms, True
        if self._secret is None:
            request = encode_request(self.stream, start, self._follow, since)
        else:  # the request is an INIT; the reply comes sealed (protocol/tail_seal.py)
            from .protocol.tail_seal import SealedReader, encode_sealed_request  # noqa: PLC0415

            request, init = encode_sealed_request(
                self.stream, start, self._follow, self._key_id, self._secret, since
            )
            self._sealed = SealedReader(init, time.monotonic)
        try:  # localhost, or a name with several addresses: the first that accepts
            sock = _address.connect_tcp(host, port, self._timeout)
        except OSError as exc:
            raise ConnectError(f"cannot subscribe at {self.url}: {os_reason(exc)}") from None
        try:
            sock.sendall(request)
            # a listener answers a request that does not follow at once (records
            # or END): only a follower's reply may be silent for long (FOREIGN)
            sock.settimeout(None if self._follow else self._timeout)
        except OSError as exc:
            sock.close()
            raise ConnectError(f"cannot subscribe at {self.url}: {os_reason(exc)}") from None
        self._sock = sock
        self._fresh = True
        if self._closed.is_set():  # closed meanwhile, from another thread: its
            self.close()  # close() may have run before the store above; run it again

    def _first_connect(self) -> None:
        """Connect; with `reconnect`, keep trying (with the same backoff as a
        resume) for that long, so a follower started while its listener is
        down waits for it, as one whose listener goes down later does."""
        deadline = time.monotonic() + self._reconnect
        backoff = BACKOFF_FIRST
        while True:
            try:
                self._connect()
            except ConnectError as exc:
                left = deadline - time.monotonic()
                if left <= 0:
                    if not self._reconnect:
                        raise
                    raise ConnectError(f"{exc} (tried for {self._reconnect:g} s)") from None
                if self._closed.wait(min(backoff, left)):
                    raise
                backoff = min(backoff * 2, BACKOFF_MAX)
                continue
            return

    def _resume(self, why: str) -> bool:
        """The connection broke (`why`): connect again from next_position, with
        backoff, for up to `reconnect` seconds.  False: closed meanwhile."""
        old, self._sock = self._sock, None
        if old is not None:
            old.close()
        now = time.monotonic()
        lived = now - self._resumed_at
        if not self._outage_deadline or lived > min(OUTAGE_OVER, self._reconnect):
            self._outage_deadline = now + self._reconnect  # a new outage
            self._backoff = BACKOFF_FIRST
        deadline = self._outage_deadline
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Error(
                    f"subscription to {self.stream!r} broke ({why}) and could not "
                    f"resume within {self._reconnect:g} s"
                )
            if self._closed.wait(min(self._backoff, left)):
                return False
            self._backoff = min(self._backoff * 2, BACKOFF_MAX)
            try:
                self._connect()
            except ConnectError as exc:
                why = str(exc)
                continue
            if self._sock is None or self._closed.is_set():
                return False
            # held as it was until the new connection's first NOTICE says otherwise
            self._decoder = TailDecoder(self._decoder.next_position, self._decoder.held)
            self.resumes += 1
            self._resumed_at = time.monotonic()
            return True

    @property
    def held(self) -> str | None:
        """Why the stream stores nothing now, as the listener last said
        ("disk_full", "stream_failed"), or None."""
        return self._held

    @property
    def unknown_stream(self) -> bool:
        """Whether the listener said the stream does not exist (with follow=False:
        the reply then ends at once; a follower waits for the stream instead)."""
        return self._decoder.unknown_stream

    @property
    def next_position(self) -> int:
        """The position of the next record to come (where to resume after a failure)."""
        return self._decoder.next_position

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        return self._records

    def __next__(self) -> tuple[int, bytes]:
        return next(self._records)

    def chunks(self) -> Iterator[list[tuple[int, bytes]]]:
        """The records as they arrive, one list per receive (never empty): for a
        consumer that does something per burst (`purelink tail` flushes its
        output).  Use either this or the iteration by record, not both."""
        return self._receive()

    def _receive(self) -> Iterator[list[tuple[int, bytes]]]:
        """One list of records per receive, until the reply ends (or the
        subscription is closed); resumes and errors as the module header says.
        The helpers run once per receive (up to RECEIVE_SIZE bytes), never per record."""
        try:
            while (sock := self._sock) is not None:
                decoder = self._decoder
                first = self._fresh  # nothing received on this connection yet
                try:
                    data = self._recv(sock)
                except OSError as exc:
                    if self._receive_failed(exc):
                        continue
                    return
                if first:
                    self._fresh = False
                    if not self._follow:
                        sock.settimeout(None)
                if not data:
                    if self._listener_closed(decoder):
                        continue
                    return
                records = self._decode(decoder, data, first=first)
                if decoder.held != self._held:
                    self._held = decoder.held
                    if self.on_held is not None:
                        self.on_held(self._held)
                if records:
                    self._outage_deadline = 0.0  # delivering again: any outage is over
                    yield records
                if decoder.ended:
                    return
        finally:  # ended, failed, or abandoned by the caller: the socket goes
            self.close()

    def _recv(self, sock: socket.socket) -> bytes:
        """One receive; with `interrupt_fd`, waiting on it too (module header).
        TimeoutError after the socket's timeout, as `sock.recv` raises it."""
        wake = self.interrupt_fd
        if wake is None:
            return sock.recv(RECEIVE_SIZE)
        timeout = sock.gettimeout()
        deadline = None if timeout is None else time.monotonic() + timeout
        fd = sock.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.register(wake, select.POLLIN)
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic()) * 1000
            ready = {fd for fd, _ in poller.poll(left)}  # a pending signal's handler runs here
            if wake in ready:  # the handler returned: drain, and wait on
                with contextlib.suppress(BlockingIOError):
                    os.read(wake, 512)
            if fd in ready or sock.fileno() < 0:  # data, the end, an error, or closed
                return sock.recv(RECEIVE_SIZE)
            if not ready and deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("timed out")

    def _receive_failed(self, exc: OSError) -> bool:
        """A receive failed with `exc`: True once resumed (receive again), False
        when the subscription was closed (end quietly); else raise."""
        if self._closed.is_set():
            return False  # closed by close()
        if self._reconnect and self._resume(str(exc)):
            return True
        if self._closed.is_set():
            return False
        if isinstance(exc, TimeoutError):
            raise ConnectError(
                f"cannot subscribe at {self.url}: no answer within {self._timeout:g} s{FOREIGN}"
            ) from None
        raise Error(f"subscription to {self.stream!r} broke: {exc}") from None

    def _listener_closed(self, decoder: TailDecoder) -> bool:
        """The listener closed the connection: True once resumed (receive again),
        False when the reply was over or the subscription closed; else raise."""
        if decoder.ended or self._closed.is_set():
            return False
        if self._reconnect and self._resume("the listener closed it"):
            return True
        if self._closed.is_set():
            return False
        raise Error(
            f"the listener closed the subscription to {self.stream!r} "
            f"(next position {decoder.next_position})"
        )

    def _decode(self, decoder: TailDecoder, data: bytes, *, first: bool) -> list[tuple[int, bytes]]:
        """The records whole in what came so far (opened first, when sealed); a
        refusal, a bad batch or a foreign peer (`first`: its first bytes) raises."""
        try:
            if self._sealed is not None:
                data = self._sealed.feed(data)
            return decoder.feed(data)
        except ProtocolError as exc:
            if exc.reason == "refused":
                raise Error(str(exc).removeprefix("refused: ")) from None
            # first bytes that are neither a listener's frame nor its plaintext refusal
            sealed_foreign = ("bad_frame", "unauthenticated")
            foreign = exc.reason in sealed_foreign if self._sealed else exc.reason != "bad_checksum"
            if first and foreign:
                raise ConnectError(  # its first bytes: neither a batch nor a word
                    f"cannot subscribe at {self.url}: it answered what no "
                    f"purelink listener sends{FOREIGN}",
                    permanent=True,
                ) from None
            raise Error(f"subscription to {self.stream!r}: {exc}") from None

    def close(self) -> None:
        """Disconnect (and stop resuming). Idempotent."""
        self._closed.set()
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes a recv blocked in another thread
            sock.close()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "open" if self._sock is not None else "closed"
        return f"<Subscription {self.stream!r} next={self.next_position} {state}>"
