"""Link: the application-facing object and its own thread (the sending side's only I/O).

`queue()` is the hot path.  It takes no lock and makes no system call unless
the link thread sleeps (mechanism 1): a seq comes from an `itertools.islice`
over an `itertools.count` (one C call, so two threads never get the same
seq), the record goes into slot `seq & mask` of a ring (each seq owns its
slot, so threads never overwrite each other and the order of seqs is the
order in the stream), and one flag of the wakeup decides whether the eventfd
is written.  That is all it stores: the link thread reads the lengths off the
records (`map(len, ...)`, in C) and finds new records by looking at the next
ring slot, so queue() writes no mark and no length per record.

The link thread, in a loop: take every record from the ring (stopping at a
slot not yet written, which its writer will mark), hand them to the sans-IO
`Sender`, put its datagrams on the wire (up to 64 per system call with UDP
GSO: packing makes the pieces of a batch equal, nothing is padded; one `send`
each where the kernel refuses GSO),
read answers until EAGAIN, run timers, tell the owner (`on_stored`,
`wait_stored` via the Parker, mechanism 2), and sleep in epoll on the socket
and the eventfd only when there is nothing left to do and no mark was set.

The count limit is a grant: the islice yields exactly the seqs that keep at
most `capacity` records unstored as of the moment it was made, and when it
runs dry (StopIteration, which costs nothing until it happens) queue() takes
a lock, looks at `stored` again and makes the next grant, or raises Full.
So the count bound is exact with any number of threads, and the ring (room
for `capacity` records plus slack) never reuses a slot whose record may be
unread.  The byte bound is checked inline before the seq is taken; it is
exact for one application thread, and with several the bound holds up to one
record per racing thread.
"""

from __future__ import annotations

import itertools
import logging
import select
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final

from . import _address
from .errors import Closed, ConnectError, Error, Fenced, Full, LinkError
from .primitives.parker import Parker
from .primitives.wakeup import Wakeup
from .protocol import events
from .protocol.sender import Sender, SenderConfig, SenderState
from .transport import TcpTransport, Transport, UdpTransport

__all__ = ["Link", "LinkStats", "connect"]

log = logging.getLogger("purelink.link")

RING_SLACK: Final = 4096
HOLE_LIMIT = 5.0
"""Seconds a taken seq may stay without its record before the link fails: a
queue() call interrupted between taking its seq and storing the record (a
KeyboardInterrupt, or any signal handler that raises, lands exactly there,
after the C call returns) leaves a hole the link could never send past;
failing loudly beats hanging.  The link thread must also have looked at the
hole HOLE_LIMIT / HOLE_RECHECK / 2 times, each after a wait that let every
other thread run, so a process that was stopped (SIGSTOP) or a thread that
held the GIL for long is not taken for an interrupted writer.  A signal
handler that calls close() in the thread it interrupted inside queue() waits
this long, then gets the LinkError."""
HOLE_RECHECK: Final = 0.1
SMALL: Final = 1 << 16  # records below this take queue()'s inline path
_MAX_RECORD: Final = 16 << 20


@dataclass(frozen=True)
class LinkStats:
    """A snapshot of a link's counters."""

    queued: int
    """Last seq queued."""
    stored: int
    """Last seq the listener said is stored."""
    told: int
    """Last seq the owner was told about (on_stored / waiters)."""
    wakeups: int
    """eventfd writes by queue() (mechanism 1)."""
    sleeps: int
    """Times the link thread went to sleep in epoll."""
    datagrams: int
    """Datagrams sent."""
    bytes_sent: int
    """Bytes of datagrams sent (UDP payloads, or TCP frames less their 4-byte
    prefix), retransmissions and probes included; with a secret, before each is
    sealed."""
    payload_bytes: int
    """Bytes of records sent (each record once, however often it was resent)."""
    wire_ratio: float
    """Wire bytes / payload_bytes (0.0 before any record was sent): what the wire
    costs per byte of payload, headers, CRCs, resends and probes included (with
    a secret, the 32 bytes that sealing adds to each datagram too)."""
    datagram_size: int
    """The largest datagram sent now: the path MTU found (UDP), at most the
    `datagram_size` asked for."""
    send_calls: int
    """System calls that sent datagrams (one per GSO group, or per datagram)."""
    gso: bool
    """Whether UDP GSO is in use."""
    batches: int
    """Batches packed (first transmissions)."""
    retransmits: int
    """Datagrams sent again after a loss."""
    probes: int
    """Probes sent because answers stopped."""
    acks: int
    """Answers received."""
    reconnects: int
    """New handshakes after a lost session."""
    parks: int
    """Times a waiter (wait_stored) parked (mechanism 2)."""
    unparks: int
    """Times the link thread signalled a parked waiter."""
    rtt: float
    """Smoothed round-trip time, seconds."""
    cwnd: int
    """Congestion window, bytes."""
    send_errors: int
    """Datagrams the kernel refused to send (counted, then resent as lost)."""
    late_pickups: int
    """Times the thread found queued records after a sleep that only its timer
    ended.  A diagnostic: a lost wakeup would show here, but so does a record
    queued in the instant the timer fired (the lost-wakeup test runs with no
    timers at all, where a lost wakeup would hang instead)."""


class Link:
    """One producer session writing to one stream.  Create it with `connect()`."""

    def __init__(
        self,
        url: str,
        stream: str,
        producer: str | None = None,
        capacity: int = 1_000_000,
        capacity_bytes: int = 256 << 20,
        datagram_size: int = 1400,
        timeout: float = 10.0,
        secret: bytes | None = None,
        key_id: str | None = None,
        on_stored: Callable[[int], Any] | None = None,
    ) -> None:
        scheme, host, port = _address.parse_url(url)
        if capacity < 1 or capacity_bytes < 1:
            raise ValueError("capacity and capacity_bytes must be positive")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if secret is not None and len(secret) < 16:  # the listener's rule too
            raise ValueError("secret must be at least 16 bytes")
        if key_id is not None and secret is None:
            raise ValueError("key_id needs the key's secret (secret=)")
        self.url = url
        self.stream = stream
        self._timeout = timeout
        self._on_stored = on_stored
        config = SenderConfig(
            stream=stream,
            producer=producer or "",
            datagram_size=datagram_size,
            pmtu=scheme == "udp",  # DF is set on UDP: find the path's MTU
            # TCP never loses a HELLO (a broken connection starts a new one at
            # once): retrying it early only makes a busy listener busier
            handshake_rto=0.1 if scheme == "udp" else 1.0,
        )
        if secret is None:
            self._sender = Sender(config)
        else:  # every datagram sealed (protocol/secure_sender.py); cryptography loads here
            from .protocol.secure_sender import SecureSender  # noqa: PLC0415

            self._sender = SecureSender(config, secret, key_id or "")
        # bytes sealing adds to each datagram (0 without a secret): the sender
        # inside sees, counts and sizes datagrams that much smaller
        self._sealing = datagram_size - self._sender.config.datagram_size
        try:
            self._transport: Transport = (
                UdpTransport(host, port) if scheme == "udp" else TcpTransport(host, port)
            )
        except OSError as exc:
            raise ConnectError(f"cannot reach {url}: {exc}") from None
        self._wakeup = Wakeup()
        self._parker = Parker()
        # the hand-off ring (see the module header)
        size = 1 << (capacity + RING_SLACK - 1).bit_length()
        self._ring: list[bytes | None] = [None] * size
        self._mask = size - 1
        self._capacity = capacity
        self._capacity_bytes = capacity_bytes
        self._max_record = _MAX_RECORD  # until the listener says what it accepts
        self._small = SMALL  # records below this take queue()'s inline path
        self._counter = itertools.count(1)  # its next value is queued + 1
        self._next_seq = itertools.islice(self._counter, capacity).__next__  # the grant
        self._grant_lock = threading.Lock()  # queue()'s slow path, one thread at a time
        self._stored = 0
        self._told = 0
        self._taken = 0
        self._bytes_in = 0
        self._bytes_out = 0
        self._limit_bytes = capacity_bytes
        self._error: Error | None = None
        self._closing = False
        self._connected = threading.Event()
        self._stop = False
        self._sleeps = 0
        self._late_pickups = 0
        self._timed_out = False
        self._hole_since = 0.0  # since when the next seq was taken but not stored (0: no hole)
        self._hole_looks = 0  # how often the thread has looked at that hole since
        self._thread = threading.Thread(
            target=self._run, name=f"purelink-link-{stream}", daemon=True
        )

    # ------------------------------------------------------------ the API
    def queue(self, record: bytes, seq: int | None = None) -> int:
        """Queue one record; returns its seq.  Never blocks.  Raises Full.
        `seq=`: the seq this record must get (queued + 1, else ValueError); it is
        checked and taken under a lock, so it means something only when no other
        thread queues at the same time."""
        if seq is None and record.__class__ is bytes:
            n = len(record)
            if n < self._small and self._bytes_in + n <= self._limit_bytes:
                try:
                    s = self._next_seq()
                except StopIteration:  # the grant is used up: see the module header
                    return self._queue_slow(record, None)
                self._ring[s & self._mask] = record
                # one statement with no call in it, so no other thread runs between
                # the load and the store (a total kept in a local across the call
                # above lost other threads' bytes)
                self._bytes_in += n
                if self._wakeup.armed:
                    self._wakeup.signal()
                return s
        return self._queue_slow(record, seq)

    def _queue_slow(self, record: Any, seq: int | None) -> int:
        """Everything queue() does not do inline: errors, large records, copies."""
        if self._error is not None:
            raise self._error
        if not isinstance(record, bytes):
            if isinstance(record, str):
                raise TypeError("queue() takes bytes, not str (encode it first)")
            try:
                record = bytes(memoryview(record))
            except TypeError:
                raise TypeError(
                    f"queue() takes a bytes-like object, not {type(record).__name__}"
                ) from None
        n = len(record)
        if n > self._max_record:
            raise ValueError(f"record of {n} bytes is larger than max_record ({self._max_record})")
        with self._grant_lock:
            if self._error is not None:
                raise self._error
            if seq is not None and seq != self.queued + 1:
                raise ValueError(f"seq must be queued + 1 = {self.queued + 1}, not {seq}")
            if self._bytes_in + n > self._limit_bytes:
                raise Full(f"{self._capacity_bytes} bytes are queued and not yet stored")
            try:
                s = self._next_seq()
            except StopIteration:
                s = self._grant()
            self._ring[s & self._mask] = record
            self._bytes_in += n
        if self._wakeup.armed:
            self._wakeup.signal()
        return s

    def _grant(self) -> int:
        """The last grant is used up: make the next one (the seqs that keep at most
        `capacity` records unstored now) and take its first seq, or raise Full.
        Called with the grant lock held; the old islice is exhausted for good, so
        no thread can take a seq from it any more."""
        allowed = self._stored + self._capacity - self.queued
        if allowed <= 0:
            raise Full(f"{self._capacity} records are queued and not yet stored")
        self._next_seq = itertools.islice(self._counter, allowed).__next__
        return self._next_seq()

    def _set_limits(self) -> None:
        """What queue() checks inline, precomputed by the link thread: the byte total
        allowed before Full; -1 once the link failed or closed, which sends every
        call to _queue_slow to raise the error."""
        if self._error is None:
            self._limit_bytes = self._bytes_out + self._capacity_bytes
            if self._error is not None:  # close() ran meanwhile: its -1 must stand
                self._limit_bytes = -1
        else:
            self._limit_bytes = -1

    @property
    def queued(self) -> int:
        """The last seq queued."""
        return int(self._counter.__reduce__()[1][0]) - 1

    @property
    def stored(self) -> int:
        """The last seq the listener said is stored."""
        return self._stored

    def wait_stored(self, seq: int | None = None, timeout: float | None = None) -> bool:
        """Wait until `seq` (default: the last queued) is stored; False on timeout.
        Raises the link's error (Fenced, LinkError) if it fails meanwhile."""
        target = self.queued if seq is None else seq
        self._wakeup.mark_and_signal()  # an idle thread looks once more (a hole?)
        ok = self._parker.wait(lambda: self._stored >= target or self._error is not None, timeout)
        if self._stored >= target:
            return True
        if self._error is not None and not isinstance(self._error, Closed):
            raise self._error
        return ok and self._stored >= target

    async def wait_stored_async(self, seq: int | None = None, timeout: float | None = None) -> bool:
        """`wait_stored` for asyncio: the event loop keeps running meanwhile."""
        target = self.queued if seq is None else seq
        self._wakeup.mark_and_signal()  # an idle thread looks once more (a hole?)
        await self._parker.wait_async(
            lambda: self._stored >= target or self._error is not None, timeout
        )
        if self._stored >= target:
            return True
        if self._error is not None and not isinstance(self._error, Closed):
            raise self._error
        return False

    def stats(self) -> LinkStats:
        """A snapshot of the counters."""
        s = self._sender
        p = self._parker.statistics()
        return LinkStats(
            queued=self.queued,
            stored=self._stored,
            told=self._told,
            wakeups=self._wakeup.writes,
            sleeps=self._sleeps,
            datagrams=s.stats.datagrams,
            bytes_sent=s.stats.bytes,
            payload_bytes=s.payload_bytes,
            wire_ratio=(
                (s.stats.bytes + self._sealing * s.stats.datagrams) / s.payload_bytes
                if s.payload_bytes
                else 0.0
            ),
            datagram_size=s.datagram_size + self._sealing,
            send_calls=self._transport.send_calls,
            gso=self._transport.gso,
            batches=s.stats.batches,
            retransmits=s.stats.retransmits,
            probes=s.stats.probes,
            acks=s.stats.acks,
            reconnects=s.stats.reconnects,
            parks=p.parks,
            unparks=p.unparks,
            rtt=s.rtt.srtt,
            cwnd=s.cc.cwnd,
            send_errors=self._transport.send_errors,
            late_pickups=self._late_pickups,
        )

    def close(self, timeout: float | None = None) -> bool:
        """Wait until every queued record is stored (or `timeout`), then close.
        Returns whether everything queued was stored.  Idempotent."""
        if self._closing:
            return self._stored >= self.queued
        target = self.queued
        if self._error is None:
            self._wakeup.mark_and_signal()  # an idle thread looks once more (a hole?)
            self._parker.wait(lambda: self._stored >= target or self._error is not None, timeout)
        ok = self._stored >= target
        self._closing = True
        if self._error is None:
            self._error = Closed("the link is closed")
            self._set_limits()
        self._stop = True
        self._wakeup.mark_and_signal()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5.0)
        self._transport.close()
        self._wakeup.close()
        self._parker.unpark()
        return ok

    def __enter__(self) -> Link:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<Link {self.url} stream={self.stream!r} queued={self.queued} stored={self._stored}"
            f" state={self._sender.state}>"
        )

    # ------------------------------------------------------- the handshake
    def _start(self) -> None:
        self._thread.start()
        if not self._connected.wait(self._timeout) or self._sender.state != SenderState.OPEN:
            error = self._error
            self._stop = True
            self._wakeup.mark_and_signal()
            self._thread.join(5.0)
            self._transport.close()
            self._wakeup.close()
            if isinstance(error, Fenced):
                raise ConnectError(f"{self.url}: {error}")
            if error is not None:
                raise ConnectError(f"{self.url}: {error}") from None
            # a listener with keys answers a wrong key id or secret (KEYREFUSE); one
            # without drops an INIT unanswered, and a keyed one drops plaintext, so
            # silence is all a link can observe then
            raise ConnectError(
                f"no answer from {self.url} within {self._timeout:g} s "
                "(no listener there, or a missing or unexpected secret?)"
            )

    # ------------------------------------------------------ the link thread
    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # pragma: no cover - a bug; fail loudly, not silently
            log.exception("purelink link thread crashed")
            self._error = LinkError(f"the link thread crashed: {exc!r}")
            self._set_limits()
            self._connected.set()
            self._parker.unpark()

    def _loop(self) -> None:
        sender = self._sender
        wakeup = self._wakeup
        ep = select.epoll()
        sock_fd = self._transport.fileno()
        ep.register(sock_fd, select.EPOLLIN)
        ep.register(wakeup.fileno(), select.EPOLLIN)
        monotonic = time.monotonic
        ring = self._ring
        mask = self._mask
        open_ = SenderState.OPEN

        def has_next() -> bool:
            """Whether the thread has work: the next record it reads is in the ring
            (the "mark" of mechanism 1 is the record itself: see
            primitives/wakeup.py), or close() asked it to stop.  close() stores
            `_stop` and then loads `armed`; this runs after the thread stored
            `armed`: one of the two sees the other, so a stop is never slept through."""
            return self._stop or (
                ring[self._taken + 1 & mask] is not None and sender.state == open_
            )

        sender.connect(monotonic())
        try:
            while not self._stop:
                wakeup.begin_look()
                now = monotonic()
                if sender.state == SenderState.OPEN:
                    taken = self._taken
                    self._take()
                    if self._timed_out and self._taken != taken:
                        self._late_pickups += 1
                    self._timed_out = False
                    if self._hole_since and self._hole_failed(now):
                        break
                self._transmit(now)
                self._handle_events()
                if sender.state in (SenderState.FENCED, SenderState.FAILED):
                    break
                if not wakeup.prepare_sleep(has_next):
                    # more was queued meanwhile: no sleep, but answers and timers
                    # must not wait until the application pauses
                    now = monotonic()
                    self._receive(now)
                    sender.handle_timer(now)
                    continue
                timer = sender.get_timer()
                timeout = -1.0 if timer is None else max(timer - monotonic(), 0.0)
                if self._hole_since and sender.state == open_:  # look again soon: its
                    # writer may store it yet (not while reconnecting: no take then)
                    timeout = HOLE_RECHECK if timeout < 0 else min(timeout, HOLE_RECHECK)
                self._sleeps += 1
                ready = ep.poll(timeout)
                self._timed_out = not ready
                wakeup.after_wake(has_next)
                now = monotonic()
                for fd, _ in ready:
                    if fd == sock_fd:
                        self._receive(now)
                sender.handle_timer(now)
            if self._closing and sender.state == SenderState.OPEN:
                sender.close()
                self._transmit(monotonic())
        finally:
            ep.close()

    def _take(self) -> None:
        """Move every record written to the ring into the sender."""
        start = self._taken + 1
        end = int(self._counter.__reduce__()[1][0]) - 1
        if end < start:
            return
        ring = self._ring
        mask = self._mask
        i, j = start & mask, (end & mask) + 1
        chunk = ring[i:j] if i < j else ring[i:] + ring[:j]
        if None in chunk:  # a writer took its seq and has not stored its record yet
            n = chunk.index(None)
            if not n:
                if not self._hole_since:
                    self._hole_since = time.monotonic()
                    self._hole_looks = 0
                self._hole_looks += 1
                return
            del chunk[n:]
        self._hole_since = 0.0
        try:
            # the batch's length table; through a list, which array() takes faster
            lens = array("H", list(map(len, chunk)))  # type: ignore[arg-type]  # no None
        except OverflowError:  # a record of 64 KiB or more: the sender sends it in pieces
            lens = array("H", [min(len(r), 0xFFFF) for r in chunk])  # type: ignore[arg-type]
        n = len(chunk)
        j = (start + n - 1 & mask) + 1
        if i < j:
            ring[i:j] = itertools.repeat(None, n)
        else:
            ring[i:] = itertools.repeat(None, len(ring) - i)
            ring[:j] = itertools.repeat(None, j)
        self._taken += n
        self._sender.push(chunk, lens)  # type: ignore[arg-type]

    def _hole_failed(self, now: float) -> bool:
        """The next seq has been taken and not stored for HOLE_LIMIT seconds: fail
        the link (its queue() call was interrupted; nothing after it can be sent)."""
        if now - self._hole_since <= HOLE_LIMIT or self._hole_looks < HOLE_LIMIT / HOLE_RECHECK / 2:
            return False
        seq = self._taken + 1
        self._error = LinkError(
            f"seq {seq} was taken by a queue() call that never stored its record "
            f"(interrupted by KeyboardInterrupt or another exception a signal handler "
            f"raised): records from seq {seq} on cannot be sent"
        )
        self._set_limits()
        self._parker.unpark()
        log.error("purelink link %s: %s", self.url, self._error)
        return True

    def _transmit(self, now: float) -> None:
        sender = self._sender
        while True:
            out = sender.datagrams_to_send(now)
            if not out:
                return
            self._send(out)

    def _send(self, datagrams: list[bytes]) -> None:
        transport = self._transport
        transport.send(datagrams)
        if transport.too_large:  # EMSGSIZE: the path is smaller than these
            now = time.monotonic()
            for size in transport.too_large:  # as sent, sealed: the sender's own size
                self._sender.on_send_error(size - self._sealing, now)
            transport.too_large.clear()

    def _receive(self, now: float) -> None:
        receive = self._sender.receive_datagram
        self._transport.receive(lambda data: receive(data, now))
        if self._transport.broken:
            self._sender.reset_session(now, "broken")

    def _handle_events(self) -> None:
        sender = self._sender
        advanced = False
        while (ev := sender.next_event()) is not None:
            if isinstance(ev, events.StoredAdvanced):
                self._stored = ev.stored
                self._bytes_out = sender.stored_bytes
                self._set_limits()
                advanced = True
            elif isinstance(ev, events.Connected):
                self._max_record = min(ev.max_record, _MAX_RECORD)
                self._small = min(SMALL, self._max_record + 1)
                if not self._connected.is_set():
                    self._counter = itertools.count(ev.stored + 1)
                    self._next_seq = itertools.islice(self._counter, self._capacity).__next__
                    self._stored = self._told = self._taken = ev.stored
                    self._set_limits()
                    self._connected.set()
                elif ev.stored > self._stored:
                    self._stored = ev.stored
                    self._bytes_out = sender.stored_bytes
                    self._set_limits()
                    advanced = True
            elif isinstance(ev, events.Reconnecting):
                self._transport.reset()
                log.info("link %s: session lost (%s); reconnecting", self.url, ev.reason)
            elif isinstance(ev, events.Fenced):
                self._error = Fenced(
                    f"a newer session of this producer took over stream {self.stream!r}"
                )
                self._set_limits()
                self._connected.set()
                self._parker.unpark()
            elif isinstance(ev, events.Failed):
                if ev.kind == "refused" and not self._connected.is_set():
                    self._error = ConnectError(ev.message)
                else:
                    self._error = LinkError(ev.message)
                self._set_limits()
                self._connected.set()
                self._parker.unpark()
        if advanced:
            self._told = self._stored
            self._parker.unpark()
            callback = self._on_stored
            if callback is not None:
                try:
                    callback(self._stored)
                except Exception:
                    log.exception("on_stored callback raised")


def connect(
    url: str,
    stream: str,
    producer: str | None = None,
    capacity: int = 1_000_000,
    capacity_bytes: int = 256 << 20,
    datagram_size: int = 1400,
    timeout: float = 10.0,
    secret: bytes | None = None,
    key_id: str | None = None,
    on_stored: Callable[[int], Any] | None = None,
) -> Link:
    """Open a link to a listener and return once the handshake is done.

    Raises ConnectError if the listener does not answer within `timeout`
    seconds or refuses the link; ValueError for bad arguments.
    """
    link = Link(
        url,
        stream,
        producer,
        capacity,
        capacity_bytes,
        datagram_size,
        timeout,
        secret,
        key_id,
        on_stored,
    )
    link._start()
    return link
