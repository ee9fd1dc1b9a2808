"""The link's own thread (the sending side's only I/O) and the state it shares with queue().

Why it exists: link.py is the application's side (queue(), the waits,
close()); this is the other side of the hand-off.  `Link` mixes it in and
sets every attribute declared below in its `__init__`.

The link thread, in a loop: take every record from the ring (stopping at a
slot not yet written, which its writer will fill; ring.py), hand them to
the sans-IO `Sender`, put its datagrams on the wire (up to 64 per system
call with UDP GSO: packing makes the pieces of a batch equal, nothing is
padded; one `send` each where the kernel refuses GSO), read answers until
EAGAIN, run timers, tell the owner (`on_stored`, `wait_stored` via the
Parker, mechanism 2), and sleep in epoll on the socket and the eventfd only
when there is nothing left to do and no record is waiting in the ring
(mechanism 1: primitives/wakeup.py).
"""

from __future__ import annotations

import logging
import select
import threading
import time
from array import array
from collections.abc import Callable
from typing import Any, Final, Protocol

from .. import native
from .._address import format_hostport
from ..errors import ConnectError, Error, Fenced, LinkError
from ..primitives.parker import Parker
from ..primitives.wakeup import Wakeup
from ..protocol import events
from ..protocol.sender import Sender, SenderState
from . import ring
from .transport import TcpTransport, Transport, UdpTransport

__all__ = ["HOLE_LIMIT", "HOLE_RECHECK", "MAX_RECORD", "SMALL", "LinkThread"]

log = logging.getLogger("purelink.link")

_core = native.part("ring")
# the link thread's look at the ring: ring.py's, or the same in C
_ring_has = ring.has if _core is None else _core.ring_has

HOLE_LIMIT = 5.0
"""Seconds a taken seq may stay without its record before the link fails: a
queue() call interrupted between taking its seq and storing the record (a
KeyboardInterrupt, or any signal handler that raises, lands exactly there,
after the C call returns) leaves a hole the link could never send past;
failing loudly beats hanging. (The pure-Python queue() only: the compiled
core's takes the seq and stores the record in one C call.) The link thread
must also have looked at the hole HOLE_LIMIT / HOLE_RECHECK / 2 times, each
after a wait that let every other thread run, so a process that was stopped
(SIGSTOP) or a thread that held the GIL for long is not taken for an
interrupted writer. A signal handler that calls close() in the thread it
interrupted inside queue() waits this long, then gets the LinkError."""
HOLE_RECHECK: Final = 0.1
FAILOVER_SILENCE: Final = 1.0
"""Seconds of silence from the listener, with datagrams in flight, after which
a link given several listeners moves on to the next even though its session
is still open (the listener died with the session: the link would otherwise
retransmit into the void until its own silence timeout)."""
FAILOVER_AFTER: Final = 0.75
"""Seconds a link given several listeners waits for an answer from the one it
is trying (a new session, or a handshake after it lost one) before it moves
on to the next: the listener may have died.  Each HELLO retransmission comes
at most a second after the last (the sender's backoff), so a failover takes
about FAILOVER_AFTER + one handshake."""
SMALL: Final = 1 << 16  # records below this take queue()'s inline path
MAX_RECORD: Final = 16 << 20


def held_reason(reason: str, stream: str) -> str:
    """Why a listener refused a link for now, for people."""
    if reason == "disk_full":
        return f"the listener has no room on its disk for stream {stream!r}"
    if reason == "stream_failed":
        return (
            f"the listener's store failed on stream {stream!r} (see its log): "
            "it takes nothing more there until it is restarted"
        )
    return f"the listener refused the link for now ({reason})"


class _Grant(Protocol):
    """What the grant is: an iterator over a `range` of seqs (PEP 424's length hint
    says how many it has not handed out yet)."""

    def __next__(self) -> int: ...
    def __length_hint__(self) -> int: ...


class LinkThread:
    """The link thread's loop and the shared state (see the module header)."""

    url: str
    stream: str
    producer: str | None
    _sender: Sender
    _transport: Transport
    _targets: list[tuple[str, str, int]]
    _at: int
    _refused_by: dict[int, str]
    _refused_for_good: set[int]
    _held: str
    _move_on: bool
    _failovers: int
    _sock_fd: int
    _trying_since: float
    _sending_since: float
    _heard: float
    _wakeup: Wakeup
    _parker: Parker
    _connected: threading.Event
    _grant_lock: threading.Lock
    _on_stored: Callable[[int], Any] | None
    _gens: tuple[ring.Gen, ...]
    _slots: tuple[list[bytes | None], int]
    _next_seq: Callable[[], int]
    _grant_range: tuple[int, _Grant]
    _capacity: int
    _sealing: int
    _capacity_bytes: int
    _max_record: int
    _small: int
    _limit_bytes: int
    _bytes_out: int
    _error: Error | None
    _stop: bool
    _closing: bool
    _ended: bool
    _pin: bool
    _stored: int
    _told: int
    _taken: int
    _sleeps: int
    _late_pickups: int
    _timed_out: bool
    _hole_since: float
    _hole_looks: int

    @property
    def queued(self) -> int:
        """The last seq queued."""
        stop, grant = self._grant_range
        return stop - 1 - grant.__length_hint__()

    def _new_ring(self, since: int, size: int) -> None:
        """Publish a ring of `size` slots for the seqs granted from `since` on: the
        generation first (the link thread must know every list a writer may
        use), then the pair queue() loads.  With the grant lock held (or before
        the link is shared)."""
        gen = ring.new_gen(since, size)
        if _core is not None:  # exact bytes and None only: nothing for the collector
            _core.untracked(gen[1])
        self._gens = (*self._gens, gen)
        self._slots = (gen[1], gen[2])

    def _new_grant(self, first: int, stop: int) -> None:
        """Hand out seqs first .. stop - 1 from now on.  The (stop, iterator) pair is
        published before `_next_seq`, so `queued` never sees seqs of a grant whose
        stop it does not know; until `_next_seq` changes, callers still take from
        the old, exhausted grant and come here under the lock."""
        grant: _Grant = iter(range(first, stop))  # type: ignore[assignment]
        self._grant_range = (stop, grant)
        self._next_seq = grant.__next__

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

    def _unstored(self, last: int) -> str:
        """'N records (seqs a..b)': what is queued up to `last` and not stored."""
        first = self._stored + 1
        n = last - self._stored
        seqs = f"seq {first}" if n == 1 else f"seqs {first}..{last}"
        return f"{n:,} record{'' if n == 1 else 's'} ({seqs})"

    # ------------------------------------------------------ the loop
    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # pragma: no cover - a bug; fail loudly, not silently
            log.exception("purelink link thread crashed")
            self._error = LinkError(f"the link thread crashed: {exc!r}")
            self._set_limits()
            self._connected.set()
        finally:
            self._ended = True  # what an asyncio close or connect waits for
            self._parker.unpark()

    def _loop(self) -> None:
        sender = self._sender
        wakeup = self._wakeup
        ep = self._epoll()
        monotonic = time.monotonic
        open_ = SenderState.OPEN
        has = _ring_has

        def has_next() -> bool:
            """Whether the thread has work: the next record it reads is in the ring
            (the "mark" of mechanism 1 is the record itself: see
            primitives/wakeup.py), or close() asked it to stop.  close() stores
            `_stop` and then loads `armed`; this runs after the thread stored
            `armed`: one of the two sees the other, so a stop is never slept through."""
            return self._stop or (has(self._gens, self._taken + 1) and sender.state == open_)

        sender.connect(monotonic())
        try:
            while not self._stop:
                wakeup.begin_look()
                now = monotonic()
                if sender.state == open_:
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
                if len(self._targets) > 1 and (self._move_on or self._should_fail_over(now)):
                    self._failover(ep, now)
                now = monotonic()
                resume = sender.resume_time(now) if not self._stop else None
                if resume is not None:
                    self._wait_paced(ep, resume - now, has_next)
                elif not wakeup.prepare_sleep(has_next):
                    # more was queued meanwhile: no sleep, but answers and timers
                    # must not wait until the application pauses
                    sender.handle_timer(self._receive(monotonic()))
                else:
                    self._sleep(ep, has_next)
            if self._closing and sender.state == open_:
                sender.close()
                self._transmit(monotonic())
        finally:
            ep.close()

    def _epoll(self) -> select.epoll:
        """The loop's one epoll: the socket's answers and the wakeup's eventfd."""
        ep = select.epoll()
        self._sock_fd = self._transport.fileno()
        ep.register(self._sock_fd, select.EPOLLIN)
        self._trying_since = 0.0  # set by the first datagram to the listener tried
        ep.register(self._wakeup.fileno(), select.EPOLLIN)
        return ep

    def _wait_paced(self, ep: select.epoll, timeout: float, has_next: Callable[[], bool]) -> None:
        """The window or the pacer holds everything back until an answer or the send
        time: wait for those without arming the wakeup, so queue() writes no
        eventfd meanwhile and nobody spins on the GIL."""
        ready = ep.poll(timeout)
        now = time.monotonic()
        for fd, _ in ready:
            if fd == self._sock_fd:
                now = self._receive(now)
            else:
                self._wakeup.after_wake(has_next)
        self._sender.handle_timer(now)

    def _sleep(self, ep: select.epoll, has_next: Callable[[], bool]) -> None:
        """Nothing to do (the wakeup is armed): sleep until an answer, a record
        (the eventfd), the sender's next timer or one of the looks below."""
        self._sleeps += 1
        ready = ep.poll(self._sleep_timeout())
        self._timed_out = not ready
        self._wakeup.after_wake(has_next)
        now = time.monotonic()
        for fd, _ in ready:
            if fd == self._sock_fd:
                now = self._receive(now)
        self._sender.handle_timer(now)

    def _sleep_timeout(self) -> float:
        """How long a sleep may last (-1: until woken): to the sender's next timer,
        and shorter while a hole or a silent listener must be looked at again."""
        sender = self._sender
        timer = sender.get_timer()
        timeout = -1.0 if timer is None else max(timer - time.monotonic(), 0.0)
        if self._hole_since and sender.state == SenderState.OPEN:  # look again soon: its
            # writer may store it yet (not while reconnecting: no take then)
            timeout = HOLE_RECHECK if timeout < 0 else min(timeout, HOLE_RECHECK)
        if len(self._targets) > 1 and sender.in_flight:  # look at the silence
            timeout = FAILOVER_SILENCE / 4 if timeout < 0 else min(timeout, FAILOVER_SILENCE / 4)
        return timeout

    def _take(self) -> None:
        """Move every record written to the ring into the sender."""
        start = self._taken + 1
        end = self.queued
        if end < start:
            return
        gens = self._gens  # loaded after `end`: see ring.py
        if _core is not None:  # straight into the sender's list, lengths too: one C call
            taken = self._sender.push_taken(gens, start, end)
            if not taken:
                self._hole()
                return
            self._hole_since = 0.0
            self._taken += taken
        else:
            chunk = ring.take(gens, start, end)
            if not chunk:  # a writer took its seq and has not stored its record yet
                self._hole()
                return
            self._hole_since = 0.0
            try:
                # the batch's length table; through a list, which array() takes faster
                lens = array("H", list(map(len, chunk)))
            except OverflowError:  # a record of 64 KiB or more: the sender sends it in pieces
                lens = array("H", [min(len(r), 0xFFFF) for r in chunk])
            self._taken += len(chunk)
            self._sender.push(chunk, lens)
        if len(gens) > 1 and (old := ring.done(gens, self._taken)):
            with self._grant_lock:  # a grant may be adding a generation meanwhile
                self._gens = self._gens[old:]

    def _hole(self) -> None:
        """The take found nothing: a writer took the next seq and has not stored its
        record yet (looked at again until HOLE_LIMIT)."""
        if not self._hole_since:
            self._hole_since = time.monotonic()
            self._hole_looks = 0
        self._hole_looks += 1

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
        if not self._trying_since:
            self._trying_since = time.monotonic()
        if transport.too_large:  # EMSGSIZE: the path is smaller than these
            now = time.monotonic()
            for size in transport.too_large:  # as sent, sealed: the sender's own size
                self._sender.on_send_error(size - self._sealing, now)
            transport.too_large.clear()
        self._path_too_big()

    def _path_too_big(self) -> None:
        """Hand the sender the ICMP "too big" reports the transport saw."""
        transport = self._transport
        if transport.path_too_big:
            transport.path_too_big = 0
            self._sender.on_path_too_big(time.monotonic())

    def _should_fail_over(self, now: float) -> bool:
        """Whether the listener tried now looks dead: no handshake answered for
        FAILOVER_AFTER, or an open session silent for FAILOVER_SILENCE with
        datagrams in flight (silence counted from when the first of them went)."""
        sender = self._sender
        if sender.state != SenderState.OPEN:
            # counted from the first datagram this listener was sent (a HELLO may
            # wait out the handshake's backoff after a move)
            return bool(self._trying_since) and now - self._trying_since >= FAILOVER_AFTER
        if not sender.in_flight:
            self._sending_since = 0.0
            return False
        if not self._sending_since:
            self._sending_since = now
        return now - max(self._heard, self._sending_since) >= FAILOVER_SILENCE

    def _failover(self, ep: select.epoll, now: float) -> None:
        """No answer from this listener for FAILOVER_AFTER: try the next one of the
        link's URL.  Listeners that share a JetStream cluster know the producer's
        stored seq (docs/jetstream.md), so the new one resumes it exactly."""
        old = self._transport
        self._move_on = False
        self._at = (self._at + 1) % len(self._targets)
        scheme, host, port = self._targets[self._at]
        try:
            new = self._make_transport(scheme, host, port)
        except OSError as exc:  # e.g. no route to it: the next one, next time
            log.info("link %s: cannot reach %s: %s", self.url, format_hostport(host, port), exc)
            self._trying_since = now  # the next one, FAILOVER_AFTER from now
            if not self._connected.is_set():  # once connected, listeners may restart
                self._refused((exc.strerror or str(exc)).lower())
            return
        ep.unregister(self._sock_fd)
        old.close()
        self._transport = new
        self._sock_fd = new.fileno()
        ep.register(self._sock_fd, select.EPOLLIN)
        self._trying_since = 0.0
        self._sending_since = 0.0
        self._failovers += 1
        where = format_hostport(host, port)
        log.info("link %s: no answer; trying %s://%s", self.url, scheme, where)
        self._sender.reset_session(now, "failover")

    def _refused(self, why: str, permanent: bool = False) -> None:
        """The listener tried refused the link before it ever connected: fail the
        link with ConnectError if every listener of its URL has (a single one: at
        once), else move on to the next one now, not after FAILOVER_AFTER.  The
        error is permanent when every refusal was."""
        self._refused_by[self._at] = why
        if permanent:
            self._refused_for_good.add(self._at)
        if len(self._refused_by) < len(self._targets):
            self._move_on = True
            return
        if len(self._targets) == 1:
            message = why
        else:
            said = "; ".join(
                f"{scheme}://{format_hostport(host, port)}: {self._refused_by[k]}"
                for k, (scheme, host, port) in enumerate(self._targets)
            )
            whom = "every address" if self._pin else "every listener"
            message = f"{whom} refused ({said})"
        permanent = len(self._refused_for_good) == len(self._targets)
        self._error = ConnectError(message, permanent=permanent)
        self._stop = True
        self._connected.set()

    def _make_transport(self, scheme: str, host: str, port: int) -> Transport:
        return UdpTransport(host, port) if scheme == "udp" else TcpTransport(host, port)

    def _receive(self, now: float) -> float:
        """Hand every datagram waiting on the socket to the sender; returns the
        time after the last.  Each datagram is stamped when it is read, not when
        the drain began: a drain of a few hundred answers takes milliseconds on a
        busy machine, and an answer stamped before it was read gave an RTT sample
        that short (below the path's propagation delay: BBR's min_rtt and its
        model with it)."""
        receive = self._sender.receive_datagram
        transport = self._transport
        monotonic = time.monotonic

        def heard(data: bytes | memoryview) -> None:
            self._heard = t = monotonic()
            receive(data, t)

        transport.receive(heard)
        now = max(now, self._heard)
        self._path_too_big()
        if transport.refused and not self._connected.is_set():
            # nothing listens there (a TCP reset, or over UDP an ICMP "port
            # unreachable"), or another service does: say so now, not after the
            # handshake timeout -- or, given several listeners, move on to the next
            # at once, and say so once every one of them refused
            transport.refused = False
            if transport.foreign:  # another service's port: no use trying it again
                self._refused(
                    "it answered what no purelink listener sends "
                    "(is it a purelink listener's port?)",
                    permanent=True,
                )
            else:
                self._refused("connection refused")
            return now
        if transport.broken:
            self._sender.reset_session(now, "broken")
        return now

    def _on_connected(self, ev: events.Connected) -> bool:
        """A handshake succeeded: the first (the link is connected now: its seqs
        start after what the listener has stored), or a reconnection; returns
        whether `stored` advanced."""
        self._refused_by.clear()  # counted only on the way to a first connection
        self._refused_for_good.clear()
        if self._held:
            self._held = ""
            log.warning("link %s: the listener is storing again", self.url)
        self._max_record = min(ev.max_record, MAX_RECORD)
        self._small = min(SMALL, self._max_record + 1)
        if not self._connected.is_set():
            self._gens = ()
            self._new_ring(ev.stored + 1, len(self._slots[0]))
            self._new_grant(ev.stored + 1, ev.stored + 1 + min(self._capacity, len(self._slots[0])))
            self._stored = self._told = self._taken = ev.stored
            self._set_limits()
            if self._pin:  # one listener, several addresses: this one answered
                self._targets = [self._targets[self._at]]
                self._at = 0
            self._connected.set()
            self._parker.unpark()  # an asyncio connect waits on the parker
            return False
        if ev.stored > self._stored:
            self._stored = ev.stored
            self._bytes_out = self._sender.stored_bytes
            self._set_limits()
            return True
        return False

    def _handle_events(self) -> None:
        sender = self._sender
        advanced = False
        while (ev := sender.next_event()) is not None:
            if isinstance(ev, events.StoredAdvanced):
                self._stored = ev.stored
                self._bytes_out = sender.stored_bytes
                self._set_limits()
                advanced = True
            elif isinstance(ev, events.Held):
                self._held = ev.reason
                log.warning(
                    "link %s: %s; waiting: what it did not store is sent again once it can",
                    self.url,
                    held_reason(ev.reason, self.stream),
                )
            elif isinstance(ev, events.Connected):
                advanced = self._on_connected(ev) or advanced
            elif isinstance(ev, events.Reconnecting):
                self._trying_since = 0.0
                self._transport.reset()
                log.info("link %s: session lost (%s); reconnecting", self.url, ev.reason)
            elif isinstance(ev, events.Fenced):
                queued = self.queued
                lost = f"; {self._unstored(queued)} not stored" if queued > self._stored else ""
                self._error = Fenced(
                    f"a newer session of producer {self.producer!r} took over stream "
                    f"{self.stream!r}{lost}"
                )
                self._set_limits()
                self._connected.set()
                self._parker.unpark()
            elif isinstance(ev, events.Failed):
                if ev.kind == "refused" and not self._connected.is_set():
                    self._error = ConnectError(ev.message, permanent=ev.permanent)
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
