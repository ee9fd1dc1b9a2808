"""Link: the application-facing object (its thread: thread.py).

`queue()` is the hot path.  It takes no lock and makes no system call unless
the link thread sleeps (mechanism 1): a seq comes from the grant, an
iterator over a `range` of seqs (its `__next__` is one C call, so two threads
never get the same seq), the record goes into slot `seq & mask` of a ring
(each seq owns its slot, so threads never overwrite each other and the order
of seqs is the order in the stream; the ring grows and shrinks with the
backlog, see ring.py), and one flag of the wakeup decides whether the eventfd
is written.  That is all it stores: the link thread reads the lengths off the
records (`map(len, ...)`, in C) and finds new records by looking at the next
ring slot, so queue() writes no mark and no length per record.

The link thread (thread.py, mixed in) takes the records from the ring,
sends them and tells the owner.

The count limit is a grant: the range yields exactly the seqs that keep at
most `capacity` records unstored as of the moment it was made, and when it
runs dry (StopIteration, which costs nothing until it happens) queue() takes
a lock, looks at `stored` again and makes the next grant, or raises Full.
`queued` is read off the grant: `(stop, iterator)` is one tuple attribute,
replaced whole, and the iterator's `__length_hint__()` (PEP 424) is what it
has not handed out yet, so the last seq taken is `stop - 1 - remaining`.
So the count bound is exact with any number of threads; a grant also never
reaches past the ring's size from the next seq the link thread takes, so the
ring never reuses a slot whose record may be unread, and the grant is where
the ring is replaced by a bigger or smaller one (ring.py).  The byte bound
is checked inline before the seq is taken; it is exact for one application
thread, and with several the bound holds up to one record per racing thread.

With the compiled core (purelink.native, part "ring"), Link's first base is
`_speedups.HandOff` and `queue()` is its C method: the same fast path (a
bytes record, small, under the byte limit, a seq left in the grant) in C
with no Python frame, everything else through `_queue_slow` below; the grant
is two C integers behind the same `_next_seq()`, `_new_grant()` and `queued`,
and `_slots`, `_bytes_in`, `_limit_bytes`, `_small` and `_wakeup` are C fields
behind the same names (src/speedups/ring.c).  This module's `queue` is the
pure-Python reference, defined when the core is not in use.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from .. import _address, native
from ..errors import Closed, ConnectError, Error, Fenced, Full, LinkError, os_reason
from ..primitives.parker import Parker
from ..primitives.wakeup import Wakeup
from ..protocol.congestion import NAMES as CONGESTION
from ..protocol.sender import Sender, SenderConfig, SenderState
from . import ring
from .stats import LinkStats, check_arguments
from .thread import HOLE_LIMIT, HOLE_RECHECK, MAX_RECORD, SMALL, LinkThread, held_reason
from .transport import Transport, UdpTransport

if TYPE_CHECKING:
    import asyncio

__all__ = ["HOLE_LIMIT", "HOLE_RECHECK", "Link", "LinkStats", "connect", "connect_async"]

log = logging.getLogger("purelink.link")

_core = native.part("ring")
if TYPE_CHECKING or _core is None:

    class _HandOff:
        """Pure Python: Link.queue below and LinkThread's grant are the hand-off."""

else:  # the compiled core: queue(), the grant and the ring's newest list in C
    _HandOff = _core.HandOff  # (src/speedups/ring.c; Link.queue below is then not defined)

CLOSE_TIMEOUT: Final = 30.0
"""Seconds `close()` with no timeout (and leaving a `with` block) waits by default
for the records still unstored before it fails loudly (connect's `close_timeout`)."""
CLOSE_QUIET: Final = 1.0  # close() waits this long before it logs that it waits ...
CLOSE_LOG_EVERY: Final = 5.0  # ... and then logs again this often


class Link(_HandOff, LinkThread):
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
        *,
        close_timeout: float | None = CLOSE_TIMEOUT,
        congestion: str = "bbr",
    ) -> None:
        given = _address.parse_urls(url)
        # several: tried in order (failover); a name for several addresses
        # (localhost: 127.0.0.1 and ::1) is each of them
        self._targets = _address.expand(given)
        # one listener under several addresses: the first that answers is the
        # listener; the link stays on that address once it connected
        self._pin = len(given) == 1 and len(self._targets) > 1
        scheme = self._targets[0][0]  # the sender is configured for the first
        if congestion not in CONGESTION:
            raise ValueError(f"congestion must be one of {', '.join(CONGESTION)}")
        check_arguments(
            stream, producer, capacity, capacity_bytes, timeout, secret, key_id, close_timeout
        )
        self.url = url
        self.stream = stream
        self.producer = producer or None
        self._timeout = timeout
        self._close_timeout = close_timeout
        self._on_stored = on_stored
        self._sender = _new_sender(
            scheme, stream, producer, datagram_size, congestion, secret, key_id
        )
        # bytes sealing adds to each datagram (0 without a secret): the sender
        # inside sees, counts and sizes datagrams that much smaller
        self._sealing = datagram_size - self._sender.config.datagram_size
        self._at = 0  # which of the targets the link is on
        self._refused_by: dict[int, str] = {}  # targets that refused it before it connected
        self._refused_for_good: set[int] = set()  # of those, the ones trying again cannot help
        self._move_on = False  # the target tried refused: the next one, now
        self._held = ""  # the listener refused the link for now, and why (disk_full)
        self._transport: Transport = self._first_transport(url)
        self._wakeup = Wakeup()
        self._parker = Parker()
        self._init_hand_off(capacity, capacity_bytes)
        self._init_thread_state()

    def _init_hand_off(self, capacity: int, capacity_bytes: int) -> None:
        """What queue() and the link thread share: the ring, the first grant, the
        bounds and the counts of records and bytes in and out."""
        # the hand-off ring (ring.py): its generations, and the newest's (slots, mask)
        self._largest_ring = ring.largest(capacity)
        self._gens = ()
        self._new_ring(1, min(ring.RING_MIN, self._largest_ring))
        self._capacity = capacity
        self._capacity_bytes = capacity_bytes
        self._max_record = MAX_RECORD  # until the listener says what it accepts
        self._small = SMALL  # records below this take queue()'s inline path
        self._new_grant(1, 1 + min(capacity, len(self._slots[0])))
        self._grant_lock = threading.Lock()  # queue()'s slow path, one thread at a time
        self._stored = 0
        self._told = 0
        self._taken = 0
        self._bytes_in = 0
        self._bytes_out = 0
        self._limit_bytes = capacity_bytes

    def _init_thread_state(self) -> None:
        """The link thread itself and what it keeps about the session, the
        listeners it may fail over to and its own sleeps."""
        self._failovers = 0
        self._sock_fd = -1
        self._trying_since = 0.0
        self._sending_since = 0.0  # since when datagrams are in flight (0: none)
        self._heard = 0.0  # when the listener last sent anything
        self._error: Error | None = None
        self._closing = False
        self._ended = False  # the thread is past its loop (it unparks as it ends)
        self._connected = threading.Event()
        self._stop = False
        self._sleeps = 0
        self._late_pickups = 0
        self._timed_out = False
        self._hole_since = 0.0  # since when the next seq was taken but not stored (0: no hole)
        self._hole_looks = 0  # how often the thread has looked at that hole since
        self._thread = threading.Thread(
            target=self._run, name=f"purelink-link-{self.stream}", daemon=True
        )

    def _first_transport(self, url: str) -> Transport:
        """The transport to the first of the URL's listeners that can be reached,
        tried in order, as a failover later moves on (a TCP connection refused,
        no route to a host: the next one); ConnectError if none can be."""
        error: OSError | None = None
        for at, (scheme, host, port) in enumerate(self._targets):
            try:
                transport = self._make_transport(scheme, host, port)
            except OSError as exc:
                if len(self._targets) > 1:
                    where = _address.format_hostport(host, port)
                    log.info("link %s: cannot reach %s://%s: %s", url, scheme, where, exc)
                error = exc
                self._refused_by[at] = os_reason(exc).lower()
                continue
            self._at = at
            return transport
        assert error is not None  # there is at least one target
        raise ConnectError(f"cannot reach {url}: {os_reason(error)}")

    # ------------------------------------------------------------ the API
    if _core is None:  # else HandOff.queue, the same in C, called as link.queue(record)

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
                    ring, mask = self._slots  # one load: a list and its own mask
                    ring[s & mask] = record
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
        if record.__class__ is not bytes:  # (a subclass of bytes is copied too: the
            # ring and the sender's records hold exact bytes, which refer to nothing,
            # so the compiled core leaves those lists out of the garbage collector)
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
            ring, mask = self._slots
            ring[s & mask] = record
            self._bytes_in += n
        if self._wakeup.armed:
            self._wakeup.signal()
        return s

    def _grant(self) -> int:
        """The last grant is used up: make the next one (the seqs that keep at most
        `capacity` records unstored now) and take its first seq, or raise Full.
        Called with the grant lock held; the old range iterator is exhausted for
        good, so no thread can take a seq from it any more.  This is also where
        the ring is replaced by a bigger or smaller one (ring.py).  Other threads
        take from a grant as soon as it is published, without the lock: between
        its publication and this thread's first take they may use all of it, and
        then this thread makes the next one, as if it had come later."""
        while True:
            queued = self.queued
            allowed = self._stored + self._capacity - queued
            if allowed <= 0:
                raise Full(f"{self._capacity} records are queued and not yet stored")
            taken = self._taken
            size = len(self._slots[0])
            new_size = ring.size_for(queued - taken, size, self._largest_ring)
            if new_size != size:
                self._new_ring(queued + 1, new_size)
            allowed = min(allowed, taken + new_size - queued)  # the ring's room (ring.py)
            if allowed <= 0:  # only if the listener claims more stored than was sent
                raise Full(f"{queued - taken} records are queued and not yet taken")
            self._new_grant(queued + 1, queued + 1 + allowed)
            with contextlib.suppress(StopIteration):  # else others took it all: again
                return self._next_seq()

    @property
    def stored(self) -> int:
        """The last seq the listener said is stored."""
        return self._stored

    def wait_stored(self, seq: int | None = None, timeout: float | None = None) -> bool:
        """Wait until `seq` (default: the last queued) is stored; False on timeout.
        Raises the link's error (Fenced, LinkError) if it fails meanwhile;
        ValueError for a seq never queued; RuntimeError on the link's own thread
        (from `on_stored`), where it would wait for itself."""
        if threading.current_thread() is self._thread:
            raise RuntimeError(
                "wait_stored() called on the link's own thread (from on_stored?): "
                "it would wait for itself"
            )
        target = self._target(seq)
        self._wakeup.mark_and_signal()  # an idle thread looks once more (a hole?)
        ok = self._parker.wait(lambda: self._stored >= target or self._error is not None, timeout)
        if self._stored >= target:
            return True
        if self._error is not None and not isinstance(self._error, Closed):
            raise self._error
        return ok and self._stored >= target

    async def wait_stored_async(self, seq: int | None = None, timeout: float | None = None) -> bool:
        """`wait_stored` for asyncio: the event loop keeps running meanwhile."""
        target = self._target(seq)
        self._wakeup.mark_and_signal()  # an idle thread looks once more (a hole?)
        await self._parker.wait_async(
            lambda: self._stored >= target or self._error is not None, timeout
        )
        if self._stored >= target:
            return True
        if self._error is not None and not isinstance(self._error, Closed):
            raise self._error
        return False

    def _target(self, seq: int | None) -> int:
        """The seq a wait is for: `seq`, or the last queued; raises Fenced once fenced."""
        if isinstance(self._error, Fenced):
            raise self._error
        queued = self.queued
        if seq is None:
            return queued
        if seq > queued:
            raise ValueError(f"seq {seq} was never queued (the last queued is {queued})")
        return seq

    def stats(self) -> LinkStats:
        """A snapshot of the counters, and of the congestion controller's view of
        the path (on a udp:// link; a tcp:// link's is the kernel's).  Read
        without a lock while the link thread runs: each figure is current, not
        all taken at one instant."""
        s = self._sender
        p = self._parker.statistics()
        # the transport in use, not the target: a failover may have failed to
        # make the next one and kept the last
        cc = s.cc.statistics() if isinstance(self._transport, UdpTransport) else None
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
            congestion="kernel" if cc is None else cc.name,
            congestion_state="" if cc is None else cc.state,
            btl_bw=None if cc is None else cc.btl_bw,
            min_rtt=None if cc is None else cc.min_rtt,
            pacing_rate=None if cc is None else cc.pacing_rate,
            competing=None if cc is None else cc.competing,
            cross_traffic=None if cc is None else cc.cross_traffic,
            disk_full=s.stats.disk_full,
            waiting=self._held,
        )

    def close(self, timeout: float | None = None) -> bool:
        """Wait until every queued record is stored (or `timeout`), then close.
        Returns whether everything queued was stored.  Idempotent.

        With no `timeout` it waits at most `close_timeout` (connect's; default
        30 s, logging a warning while it waits) and then fails loudly: it closes
        the link and raises LinkError saying how many records were not stored
        (they are lost with the link).  A fenced link raises Fenced."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("close() called on the link's own thread (from on_stored?)")
        if self._closing:
            return self._closed_again()
        target = self.queued
        limit = self._close_timeout if timeout is None else timeout
        if self._error is None:
            self._wakeup.mark_and_signal()  # an idle thread looks once more (a hole?)
            self._wait_closing(target, limit)
        ok = self._stored >= target
        error = self._shut()
        if self._thread.is_alive():
            self._thread.join(5.0)
        return self._release(ok, error, target, limit, timeout)

    async def _close_async(self, timeout: float | None = None) -> bool:
        """close() for asyncio (`async with`): the same waits, the event loop
        running meanwhile -- for the records to be stored, then for the link
        thread to end (it unparks the parker as it does)."""
        if self._closing:
            return self._closed_again()
        target = self.queued
        limit = self._close_timeout if timeout is None else timeout
        error: Error | None = None
        try:
            if self._error is None:
                self._wakeup.mark_and_signal()
                await self._wait_closing_async(target, limit)
            ok = self._stored >= target
            error = self._shut()
            await self._parker.wait_async(lambda: self._ended or not self._thread.is_alive(), 5.0)
        except BaseException:  # cancelled: close now, as close(timeout=0) would, and go on
            error = error if self._closing else self._shut()
            if self._thread.is_alive():
                self._thread.join(5.0)  # told to stop: a moment
            with contextlib.suppress(Error):
                self._release(False, error, target, limit, 0.0)
            raise
        if self._thread.is_alive():
            self._thread.join(5.0)  # past its loop: a moment, if anything
        return self._release(ok, error, target, limit, timeout)

    def _closed_again(self) -> bool:
        """close() on a closed link: what the first one found."""
        if isinstance(self._error, Fenced):
            raise self._error
        return self._stored >= self.queued

    def _shut(self) -> Error | None:
        """Mark the link closed and tell its thread to stop; returns the error the
        link had before (None if none)."""
        self._closing = True
        error = self._error
        if error is None:
            self._error = Closed("the link is closed")
            self._set_limits()
        self._stop = True
        self._wakeup.mark_and_signal()
        return error

    def _release(
        self, ok: bool, error: Error | None, target: int, limit: float | None, timeout: float | None
    ) -> bool:
        """The end of close(), its thread stopped: free the sockets and say how it went."""
        self._transport.close()
        self._wakeup.close()
        self._parker.unpark()
        if isinstance(error, Fenced):
            raise error
        if not ok and timeout is None and error is None:
            raise LinkError(
                f"link {self.url}: {self._unstored(target)} were not stored within "
                f"{limit:g} s (close_timeout) and are lost with this link: is the listener down?"
            )
        return ok

    def _wait_closing(self, target: int, limit: float | None) -> None:
        """close()'s wait: quiet at first, then a warning every CLOSE_LOG_EVERY."""
        done = lambda: self._stored >= target or self._error is not None  # noqa: E731
        deadline = None if limit is None else time.monotonic() + limit
        step = CLOSE_QUIET if limit is None else min(CLOSE_QUIET, limit)
        while not self._parker.wait(done, step):
            step = self._still_closing(target, deadline)
            if step <= 0:
                return

    async def _wait_closing_async(self, target: int, limit: float | None) -> None:
        """_wait_closing for asyncio: the same waits and warnings."""
        done = lambda: self._stored >= target or self._error is not None  # noqa: E731
        deadline = None if limit is None else time.monotonic() + limit
        step = CLOSE_QUIET if limit is None else min(CLOSE_QUIET, limit)
        while not await self._parker.wait_async(done, step):
            step = self._still_closing(target, deadline)
            if step <= 0:
                return

    def _still_closing(self, target: int, deadline: float | None) -> float:
        """A close's wait went on for a step: warn, and return the next step (0:
        the deadline passed, stop waiting)."""
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return 0.0
        log.warning(
            "link %s: closing: waiting for %s to be stored (%s)",
            self.url,
            self._unstored(target),
            "no limit" if left is None else f"up to {left:.0f} s more",
        )
        return CLOSE_LOG_EVERY if left is None else min(CLOSE_LOG_EVERY, left)

    def __enter__(self) -> Link:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if et is None:
            self.close()
            return
        try:  # an exception is on its way out: say what close() found, do not mask it
            self.close()
        except Error as exc:
            log.error(
                "link %s: %s (while leaving the with block on %s)", self.url, exc, et.__name__
            )

    async def __aenter__(self) -> Link:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        """`async with`: close() as leaving a `with` block does, without blocking
        the event loop while it waits for the records to be stored."""
        if et is None:
            await self._close_async()
            return
        try:
            await self._close_async()
        except Error as exc:
            log.error(
                "link %s: %s (while leaving the async with block on %s)", self.url, exc, et.__name__
            )

    def __repr__(self) -> str:
        return (
            f"<Link {self.url} stream={self.stream!r} queued={self.queued} stored={self._stored}"
            f" state={self._sender.state}>"
        )


def _new_sender(
    scheme: str,
    stream: str,
    producer: str | None,
    datagram_size: int,
    congestion: str,
    secret: bytes | None,
    key_id: str | None,
) -> Sender:
    """The link's sans-IO sender, configured for the first listener's scheme;
    with a secret, one that seals every datagram."""
    config = SenderConfig(
        stream=stream,
        producer=producer or "",
        datagram_size=datagram_size,
        pmtu=scheme == "udp",  # DF is set on UDP: find the path's MTU
        # TCP never loses a HELLO (a broken connection starts a new one at
        # once): retrying it early only makes a busy listener busier
        handshake_rto=0.1 if scheme == "udp" else 1.0,
        # over TCP the kernel's own congestion control paces the bytes
        congestion=congestion if scheme == "udp" else "newreno",
    )
    if secret is None:
        return Sender(config)
    # every datagram sealed (protocol/secure_sender.py); cryptography loads here
    from ..protocol.secure_sender import SecureSender  # noqa: PLC0415

    return SecureSender(config, secret, key_id or "")


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
    *,
    close_timeout: float | None = CLOSE_TIMEOUT,
    congestion: str = "bbr",
) -> Link:
    """Open a link to a listener and return once the handshake is done.

    `congestion` is the window policy of a UDP link: "bbr" (paced, the
    default; judges what shares the path and competes with TCP flows by it),
    "bbr-cooperative" (the same BBR without the judgement: for a path only
    purelink links share; yields beside TCP flows), "cubic" (RFC 9438,
    paced) or "newreno"; a TCP link leaves it to the kernel.

    Raises ConnectError if the listener does not answer within `timeout`
    seconds, refuses the link or refuses the connection (tcp://); ValueError
    at once for bad arguments (a stream or producer name against the rule of
    names, a capacity, a timeout).  `close_timeout`: how long `close()` with no
    timeout, and leaving a `with` block, wait for unstored records before they
    fail loudly (None: as long as it takes).
    """
    link = Link(
        url,
        stream,
        producer=producer,
        capacity=capacity,
        capacity_bytes=capacity_bytes,
        datagram_size=datagram_size,
        timeout=timeout,
        secret=secret,
        key_id=key_id,
        on_stored=on_stored,
        close_timeout=close_timeout,
        congestion=congestion,
    )
    launch(link)
    return link


def launch(link: Link, started: threading.Event | None = None) -> None:
    """Start a link built with `Link(...)`: its thread (then set `started`), and
    wait for the handshake; ConnectError if it fails.  `connect()` is a
    `Link(...)` followed by this.  A function of this module, not a method, so
    that the public `Link` shows only the API of SPEC §3; it is here for what
    builds a Link itself and must know when its thread is up (purelink.logging's
    handler, the benchmarks' variants)."""
    link._thread.start()
    if started is not None:
        started.set()
    if not link._connected.wait(link._timeout) or link._sender.state != SenderState.OPEN:
        error = link._error
        _halt(link)
        _free(link)
        raise _connect_error(link, error)


async def connect_async(
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
    *,
    close_timeout: float | None = CLOSE_TIMEOUT,
    congestion: str = "bbr",
) -> Link:
    """`connect()` for asyncio: the same arguments, the same Link and the same
    errors, and the event loop keeps running while the handshake goes on.

    The link's own thread does the handshake; this awaits its outcome (the
    link's Parker resolves a future, no thread waits for it).  Cancelling the
    await (`asyncio.timeout`, `wait_for`, `task.cancel()`) stops the attempt:
    the link's thread ends and its socket is closed before CancelledError
    propagates.  A URL naming hosts by name, or a tcp:// one, is built in the
    loop's default executor (the name lookup and the first TCP outcome may
    block for a moment); a cancelled build is closed once it returns."""

    def build() -> Link:
        return Link(
            url,
            stream,
            producer=producer,
            capacity=capacity,
            capacity_bytes=capacity_bytes,
            datagram_size=datagram_size,
            timeout=timeout,
            secret=secret,
            key_id=key_id,
            on_stored=on_stored,
            close_timeout=close_timeout,
            congestion=congestion,
        )

    link = build() if _builds_at_once(url) else await _build_elsewhere(build)
    await _launch_async(link)
    return link


def _builds_at_once(url: str) -> bool:
    """Whether `Link(url, ...)` cannot block: UDP only, to numeric hosts or localhost
    (a bad URL too: Link raises ValueError at once)."""
    try:
        targets = _address.parse_urls(url)
    except ValueError:
        return True
    return all(s == "udp" and _address.resolves_at_once(h) for s, h, _ in targets)


async def _build_elsewhere(build: Callable[[], Link]) -> Link:
    """Build a Link in the loop's default executor, where its name lookups and a
    TCP connection's first outcome (transport.FIRST_CONNECT_WAIT) cannot hold
    the loop.  Cancelled meanwhile, the link is closed as soon as it is built
    (it has no thread yet: closing it is closing its sockets)."""
    import asyncio  # noqa: PLC0415 -- see the parker: only a process that awaits pays for it

    future = asyncio.get_running_loop().run_in_executor(None, build)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        future.add_done_callback(_discard)
        raise


def _discard(future: asyncio.Future[Link]) -> None:
    """A build whose awaiter was cancelled is done: close what it built."""
    if not future.cancelled() and future.exception() is None:
        _free(future.result())


async def _launch_async(link: Link) -> None:
    """launch() for asyncio: start the thread, await the handshake's outcome on the
    link's Parker; cancelled, stop the thread and await its end."""
    import asyncio  # noqa: PLC0415

    link._thread.start()

    def ended() -> bool:
        return link._ended

    try:
        await link._parker.wait_async(lambda: link._connected.is_set() or ended(), link._timeout)
    except asyncio.CancelledError:
        _halt(link)
        try:
            await link._parker.wait_async(ended, 5.0)
        finally:  # cancelled once more: the thread is stopping, wait for it here
            _free(link)
        raise
    if link._connected.is_set() and link._sender.state == SenderState.OPEN:
        return
    error = link._error
    _halt(link)
    try:
        await link._parker.wait_async(ended, 5.0)
    finally:  # cancelled meanwhile, too: the sockets go
        _free(link)
    raise _connect_error(link, error)


def _halt(link: Link) -> None:
    """Tell a link that did not connect to stop its thread."""
    link._stop = True
    link._wakeup.mark_and_signal()


def _free(link: Link) -> None:
    """Once its thread is told to stop: wait for it (a moment), close the sockets."""
    if link._thread.is_alive():
        link._thread.join(5.0)
    link._transport.close()
    link._wakeup.close()


def _connect_error(link: Link, error: Error | None) -> ConnectError:
    """Why a link did not connect (`error`: what its thread found, if anything)."""
    if isinstance(error, Fenced):  # the session holding the name may end: not permanent
        return ConnectError(f"{link.url}: {error}")
    if error is not None:
        permanent = isinstance(error, ConnectError) and error.permanent
        return ConnectError(f"{link.url}: {error}", permanent=permanent)
    if link._held:
        return ConnectError(f"{link.url}: {held_reason(link._held, link.stream)}; try again later")
    # a listener with keys answers a wrong key id or secret (KEYREFUSE); one
    # without drops an INIT unanswered, and a keyed one drops plaintext, so
    # silence is all a link can observe then
    return ConnectError(
        f"no answer from {link.url} within {link._timeout:g} s "
        "(no listener there, or a missing or unexpected secret?)"
    )
