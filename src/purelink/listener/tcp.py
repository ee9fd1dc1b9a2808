"""The listener's TCP side: connections accepted and read in drains, frames to the core.

Why a module of its own: `Listener` (listener.py) owns the loop, the core, the
store and the UDP socket; this is everything TCP adds.  It is handed what it
needs and knows nothing else of the listener: the `Loop` (`add_source` for
readiness, `routes` for answers to a peer, which go to its connection), the
core, the buffer pool and the list of the round's buffers.  The loop makes two
calls each round, `timeout()` before it sleeps and `expire()` after it wakes.

Mechanism 3 (docs/design.md), after io_uring's multishot accept: one
readiness event of the listening socket is followed by accepts until EAGAIN,
within `ACCEPT_BUDGET` per event so that a connection storm never starves
the reading of connections already open (level-triggered epoll reports the
rest next round).  (The naive way, one accept per event, is the `connections`
benchmark's "before" variant and lives in bench/connections.py.)  A readable
connection is likewise read until it has no more, within `read_budget`
receives per event; a receive that returns less than it asked for means the
socket is empty now, which saves the EAGAIN call -- unless epoll said the
peer's EOF is queued (EPOLLRDHUP), when reading on to the EOF closes the
connection in the same event instead of the next one (and not even then when
the frames read said CLOSE for the connection's last session: it closes
anyway, so the EOF is left unread).  Counters: `accepts`,
`accept_drains` (events of the listening socket), `drains` (events of the
listening socket and of connections), `recv_calls`.

What a short connection costs, cut to what it needs (docs/performance.md,
connections).  On Linux the listening socket asks the kernel to hand over a
connection only once its first bytes are in (TCP_DEFER_ACCEPT): a link's
HELLO then comes with the accept and is read at once, in the accept's own
event -- no readiness event, no timer entry and, when it opens a session,
nothing owed (a silent connection is accepted about `DEFER_ACCEPT` seconds
later and then owes its first frame like any other).  A connection is
registered with epoll once (level-triggered, EPOLLIN | EPOLLRDHUP) and never
unregistered: closing its only descriptor takes it out of the epoll set,
which saves the epoll_ctl(DEL) -- except when a subscription took a dup of
the socket (`shared`), when it is unregistered first.  Accepted sockets
stay blocking and every read and write passes MSG_DONTWAIT, which saves the
FIONBIO ioctl of making them non-blocking.  So a short link costs the
listener an accept, its three reads (HELLO, DATA, CLOSE), two sends (ACCEPT,
"stored"), one epoll_ctl and a close, plus the getsockname the socket
module makes for each socket object; the core's conn ids come from random
bytes read ahead (protocol/core_sessions.py), not one getrandom each.

Mechanism 4, after the SMC-R free-list patch: every read goes into a 64 KiB
buffer from the listener's O(1) free list (the same `BufferPool` as the UDP
receive buffers, so `pool_hits`/`pool_misses` count both).  The frames
found in it go to the core as memoryviews into the buffer, without a copy;
the buffer joins the loop's round buffers and goes back to the free list
after the round's batches are written.  Only the incomplete tail of the
last frame is copied out and kept with the connection until more bytes
come.  Why not a buffer held per connection from accept to close: an idle
connection (or ten thousand of them in a flood) then holds no buffer at all,
and a connection in the middle of a frame holds only the bytes it sent.

Framing (protocol/framing.py): `u32 length` + one datagram.  The listener's
frame limit is its buffer size less the header (65,532 bytes, more than the
65,507 a Sender ever makes), so a frame always fits one buffer.

Each connection is a peer the core knows by the key ("tcp:" + host, port):
unique per connection, never equal to a UDP source address (so answers to a
UDP peer never take a TCP route), and sent with `proven=True`: TCP's
handshake proved the address, so a HELLO needs no cookie round trip.  When
the connection closes the core is told (`disconnected`), which ends its
sessions as a CLOSE would.  The other way round, once a read has fed the
core a CLOSE that left the connection no open session (`finished`), the
connection is closed at once instead of in a later readiness event for the
link's EOF, owing nothing (no timer entry is made for it): a short link then
costs three read events (HELLO, DATA, CLOSE), not four.  (The core also
holds a TCP peer's "received" ACK for the sync in flight, so a short link
gets two answers, ACCEPT and "stored": see protocol/core_answers.py.)

Bad input, all counted by reason in `dropped` and all ending the connection
only: a frame length over the limit (known from its 4 header bytes, before
any body arrives: a "4 GiB" frame costs nothing); a connection that owes its
first frame, or the rest of a frame it started, for `read_timeout` seconds
(one byte a second, a frame never finished, a connection that never speaks);
more than `max_connections` at once (accepted and closed at once, so the
backlog never keeps the listening socket ready forever); more than
`max_buffered` bytes of unfinished frames across all connections; a peer
that does not read its answers (`max_unsent` bytes waiting); a disconnect in
the middle of a frame.  A half-written frame never reaches the core, so it is
never stored.

Timers: every deadline is `now + read_timeout`, and `now` only grows, so
deadlines are made in order and a deque is a sorted timer queue (O(1)).  The
loop sleeps without a timeout when no connection owes bytes: an idle
listener, and idle tcp:// links, burn nothing.  An entry whose connection
closed or caught up is dropped when it comes due; wakeups are coalesced by
TIMER_SLACK.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import select
import socket
import struct
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, Final, Protocol

from .. import _address
from ..errors import Error
from ..primitives.pool import BufferPool
from ..protocol.framing import HEADER, FrameError, split_frames
from ..protocol.listener_core import ListenerCore
from .tail.server import NEED_MORE, TAKEN, Take

__all__ = ["TCP_PREFIX", "Loop", "TcpServer"]

TCP_PREFIX: Final = "tcp:"
"""Prefix of a TCP peer's host in the keys the core and `Listener.routes` use."""
ACCEPT_BUDGET: Final = 64
"""Accepts per readiness event of the listening socket at most: the rest waits
for the next round (level-triggered epoll reports it again), so a connection
storm never starves the reading of connections already open."""
READ_BUDGET: Final = 16
FRAME_BUDGET: Final = 1024
"""Frames fed to the core per readiness event of one connection, about: no more
buffers are read once it is reached (the rest waits in the socket, and epoll
reports it again next round), so a peer of tiny frames cannot hold the loop."""
JUNK_LIMIT: Final = 256
"""Frames of one connection the core may drop, for a reason no link gives
(ListenerCore.junk: not a session that expired or was fenced under it), before
the connection is closed (`junk_frames`): a peer that sends them is not a link."""
BACKLOG: Final = 4096
DEFER_ACCEPT: Final = 1
"""Seconds the kernel holds a new connection back until its first bytes come
(TCP_DEFER_ACCEPT, Linux): a link's connection is then accepted with its HELLO
already in, and read at once (no readiness event of its own for the HELLO).
A connection that stays silent is accepted after about this long anyway, and
then has `read_timeout` to speak, as any other."""
TIMER_SLACK: Final = 0.05
_EPOLLIN: Final = select.EPOLLIN | select.EPOLLRDHUP  # RDHUP: the peer's EOF is queued
_EPOLLOUT: Final = select.EPOLLOUT
_EPOLLRDHUP: Final = select.EPOLLRDHUP
_DONTWAIT: Final = socket.MSG_DONTWAIT  # accepted sockets stay blocking: no FIONBIO per connection
_LEN: Final = struct.Struct("<I")


class Loop(Protocol):
    """What TcpServer needs of the loop that runs it (`Listener`, or a test's own)."""

    routes: dict[Any, Callable[[bytes], None]]
    """Where answers to a peer go, by the key the core knows it by: each
    connection's frame writer is put here while it is open."""

    def add_source(self, fd: int, handler: Callable[[float, int], None], events: int = 0) -> None:
        """Poll `fd`; call `handler(now, event_mask)` when it is ready."""

    def remove_source(self, fd: int, closing: bool = False) -> None:
        """Stop polling `fd`.  `closing`: the caller closes `fd` right after and
        holds its only descriptor, so closing it takes it out of the epoll set
        and no epoll_ctl call is needed."""


class _Conn:
    """One accepted connection."""

    __slots__ = (
        "closed",
        "deadline",
        "fd",
        "handler",
        "junk",
        "key",
        "out",
        "partial",
        "queued",
        "shared",
        "sock",
    )

    def __init__(self, sock: socket.socket, key: tuple[str, int], deadline: float) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.key = key
        self.partial = b""  # the start of a frame not yet complete
        self.deadline: float | None = deadline  # when it must have sent more, or None
        self.queued = False  # an entry for it is in the timer queue
        self.out = bytearray()  # answer frames the kernel did not take yet
        self.closed = False
        self.handler: Callable[[float, int], None] | None = None
        self.junk = 0  # its frames the core dropped
        self.shared = False  # another server holds a dup of the socket (tail/server.py)


class TcpServer:
    """Accepts tcp:// links for a `Listener` and feeds their frames to its core."""

    def __init__(
        self,
        loop: Loop,
        core: ListenerCore,
        host: str,
        port: int,
        *,
        pool: BufferPool,
        round_buffers: list[bytearray],
        max_connections: int,
        read_timeout: float,
        defer_accept: bool = True,
        max_buffered: int = 64 << 20,
        max_unsent: int = 1 << 20,
        max_unsent_total: int = 64 << 20,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be positive")
        if read_timeout <= 0:
            raise ValueError("read_timeout must be positive")
        self._loop = loop
        self._core = core
        self._pool = pool  # every read's buffer comes from it (mechanism 4)
        self._round_buffers = round_buffers  # buffers fed to the core: back after the round
        self._bind = (host, port)
        self.max_connections = max_connections
        self.read_timeout = read_timeout
        self.max_buffered = max_buffered
        self.max_unsent = max_unsent
        self.max_unsent_total = max_unsent_total
        """Answer bytes the kernel has not taken, across all connections (each also
        at most `max_unsent`); past it the connection adding more is closed."""
        self.read_budget = READ_BUDGET
        """Receives per readiness event of one connection."""
        self.max_frame = pool.size - HEADER
        self.defer_accept = defer_accept
        """Ask the kernel to accept a connection once its first bytes are in
        (`DEFER_ACCEPT`); False: at once (the hand-turned tests' hosts)."""
        self._deferred = False  # TCP_DEFER_ACCEPT is on: read a new connection at once
        self._sock: socket.socket | None = None
        self._spare = -1  # a file descriptor kept to shed one connection at EMFILE
        self._conns: dict[int, _Conn] = {}
        self._timers: deque[tuple[float, _Conn]] = deque()
        self._buffered = 0
        self._unsent = 0  # sum of len(conn.out)
        self.accepts = 0
        self.accept_drains = 0
        self.drains = 0
        self.recv_calls = 0
        self.frames = 0
        self.bytes = 0
        self.dropped: dict[str, int] = {}
        self.foreign: Callable[[socket.socket, memoryview], Take] | None = None
        """Called when a connection's first bytes are not a frame (a length over the
        limit): TAKEN if it took the connection (a dup of the socket), e.g. a
        subscription (tail/server.py); NEED_MORE if the bytes so far begin its
        preamble (they are kept, and it is asked again when more come); else
        (NOT_MINE) the connection is dropped as before."""

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._conns)

    # ------------------------------------------------------------ control
    def start(self) -> tuple[str, int]:
        """Bind and listen; returns the bound (host, port).  Raises purelink.Error."""
        host, port = self._bind
        family, sockaddr = _address.resolve(host, port, socket.SOCK_STREAM)
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted ones inherit it
            sock.setblocking(False)
            sock.bind(sockaddr)
            sock.listen(BACKLOG)
        except OSError as exc:
            sock.close()
            raise Error(f"cannot bind tcp {_address.format_hostport(host, port)}: {exc}") from None
        if self.defer_accept and hasattr(socket, "TCP_DEFER_ACCEPT"):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, DEFER_ACCEPT)
                self._deferred = True
        self._sock = sock
        _raise_open_files(self.max_connections + 1024)
        self._spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        self._loop.add_source(sock.fileno(), self._on_accept)
        bound = sock.getsockname()
        return (str(bound[0]), int(bound[1]))

    def close(self) -> None:
        """Close every connection and the listening socket (the loop has stopped)."""
        for conn in list(self._conns.values()):
            conn.closed = True
            conn.sock.close()
        self._conns.clear()
        self._timers.clear()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._spare >= 0:
            os.close(self._spare)
            self._spare = -1

    # ------------------------------------------------------------- timers
    def timeout(self, now: float) -> float:
        """Seconds the loop may sleep: -1 (no limit) unless a connection owes bytes."""
        timers = self._timers
        if not timers:
            return -1.0
        return max(timers[0][0] - now, 0.0) + TIMER_SLACK

    def expire(self, now: float) -> None:
        """Close the connections whose deadline passed."""
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, conn = timers.popleft()
            conn.queued = False
            deadline = conn.deadline
            if conn.closed or deadline is None:
                continue
            if deadline <= now:
                self._close(conn, "read_timeout")
            else:
                self._schedule(conn)

    def _schedule(self, conn: _Conn) -> None:
        if not conn.queued and conn.deadline is not None:
            conn.queued = True
            self._timers.append((conn.deadline, conn))

    # ------------------------------------------------------------ accept
    def _on_accept(self, now: float, mask: int) -> None:
        """Accept until EAGAIN, at most `ACCEPT_BUDGET` (mechanism 3)."""
        lsock = self._sock
        if lsock is None:
            return
        self.accept_drains += 1
        self.drains += 1
        # the socket module's accept: its wrapper (enum lookups, a timeout check) costs
        # ~1.5 us more per connection than the private _accept under it, ~1 % of the
        # listener's CPU per connection (docs/performance.md, connections)
        accept = lsock.accept
        for _ in range(ACCEPT_BUDGET):
            try:
                sock, peer = accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    self._shed()
                    continue
                if exc.errno == errno.ECONNABORTED:
                    continue
                self._drop("accept_failed")  # ENOBUFS, ENOMEM: try again next event
                return
            self.accepts += 1
            if len(self._conns) >= self.max_connections:
                sock.close()
                self._drop("connection_limit")
                continue
            self._open(sock, peer, now)

    def _shed(self) -> None:
        """Out of file descriptors: free the spare one, take the waiting connection
        and close it at once (so the listening socket stops being ready), keep the
        spare again.  After libev's and node's EMFILE trick."""
        self._drop("no_fds")
        lsock = self._sock
        if self._spare < 0 or lsock is None:
            return
        os.close(self._spare)
        self._spare = -1
        with contextlib.suppress(OSError):
            sock, _ = lsock.accept()
            sock.close()
        with contextlib.suppress(OSError):
            self._spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)

    def _open(self, sock: socket.socket, peer: Any, now: float) -> None:
        """A new connection: known to the core's answers by its key, read at once
        if it was deferred (its first frame is in: with it, most often, a session
        and nothing owed, so no timer entry either), then polled.

        The socket stays blocking (its reads and writes pass MSG_DONTWAIT), which
        saves a FIONBIO ioctl per connection -- unless a default socket timeout
        is set in this process, which would make it wait in its calls."""
        if socket.getdefaulttimeout() is not None:
            sock.setblocking(False)
        key = (TCP_PREFIX + peer[0], peer[1])
        conn = _Conn(sock, key, now + self.read_timeout)  # owes its first frame
        self._conns[conn.fd] = conn
        loop = self._loop
        loop.routes[key] = partial(self._answer, conn)
        if self._deferred:
            self._read(conn, now)
            if conn.closed:
                return  # it said all it had to (or was dropped): never polled
        conn.handler = partial(self._on_ready, conn)
        loop.add_source(conn.fd, conn.handler, _EPOLLIN)
        if conn.deadline is not None:  # it owes bytes (most often it has a session)
            self._schedule(conn)

    # -------------------------------------------------------------- read
    def _on_ready(self, conn: _Conn, now: float, mask: int) -> None:
        self.drains += 1
        if mask & _EPOLLOUT:
            self._flush(conn)
        if mask & ~_EPOLLOUT and not conn.closed:
            self._read(conn, now, mask & _EPOLLRDHUP)

    def _read(self, conn: _Conn, now: float, closing: int = 0) -> None:
        """Read until the socket is empty (or a budget); frames to the core.

        The connection's unfinished frame, if it had one, is copied to the start
        of a buffer from the pool and the receives go on after it; every whole
        frame goes to the core as a view into the buffer, which then waits in
        the round's buffers (mechanism 4: no copy).  A bad frame ends the read
        (`_bad_frame`); `_settle` keeps what is left and says what is owed."""
        pool = self._pool
        core = self._core
        receive = core.receive_datagram
        key = conn.key
        buf = pool.get()
        size = len(buf)
        view = memoryview(buf)
        had = conn.partial
        start = 0
        end = len(had)
        if end:
            buf[:end] = had
        fed = False  # frames in `buf` went to the core: it goes back after the round
        reason: str | None = None  # why the connection ends, if it does
        eof = False
        drops = core.junk
        junk_at = drops + JUNK_LIMIT - conn.junk  # past it, the peer is not a link (JUNK_LIMIT)
        budget = FRAME_BUDGET  # less what this event fed to the core
        recv_into = conn.sock.recv_into
        for _ in range(self.read_budget):
            if end == size:  # full, and only an incomplete frame left: a fresh buffer
                fresh = self._carry_over(view[start:end], buf, fed)
                buf, view, end, start, fed = fresh, memoryview(fresh), end - start, 0, False
            want = size - end
            try:
                n = recv_into(view[end:], 0, _DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:  # ECONNRESET and the like: the peer is gone
                n = 0
            if not n:
                eof = True
                break
            self.recv_calls += 1
            self.bytes += n
            end += n
            bad: FrameError | None = None
            try:
                frames, start = split_frames(buf, start, end, self.max_frame)
            except FrameError as exc:  # the frames before the bad length still count
                bad, frames, start = exc, exc.frames, exc.at
            if frames:
                fed = True
                budget -= len(frames)
                for frame in frames:
                    receive(frame, key, now, True)
                    if core.junk > junk_at:
                        break
                if core.junk > junk_at:
                    break
            if bad is not None:
                reason, eof, start = self._bad_frame(conn, bad, view, start, end, budget)
                break
            if (n < want and (not closing or core.closing(key))) or budget <= 0:
                # the socket had less than asked (it is empty now, but for the peer's
                # EOF when `closing`: read on to it, unless the last session said
                # CLOSE, which closes the connection anyway), or enough
                break
        self._settle(conn, now, view, start, end, had, budget, eof, reason, drops)
        view.release()
        self._give_back(buf, fed)

    def _carry_over(self, rest: memoryview, buf: bytearray, fed: bool) -> bytearray:
        """A fresh buffer that begins with `rest` (a frame too long for what was
        left of `buf`); `buf` goes back."""
        fresh = self._pool.get()
        fresh[: len(rest)] = rest
        self._give_back(buf, fed)
        return fresh

    def _bad_frame(
        self, conn: _Conn, bad: FrameError, view: memoryview, start: int, end: int, budget: int
    ) -> tuple[str | None, bool, int]:
        """A bad frame: (why the connection ends or None, whether it is gone, where
        what stays with it starts).  When the connection's very first bytes are not
        a frame, `foreign` may want it: a subscription's preamble begun (it stays,
        and is asked again when more comes), or taken (it is gone from here)."""
        if start or budget < FRAME_BUDGET or self.foreign is None:
            return bad.reason, False, start
        taken = self.foreign(conn.sock, view[:end])
        if taken is TAKEN:
            conn.shared = True
            return None, True, end  # another server has (a dup of) the socket
        if taken is NEED_MORE:
            return None, False, start
        return bad.reason, False, start

    def _settle(
        self,
        conn: _Conn,
        now: float,
        view: memoryview,
        start: int,
        end: int,
        had: bytes,
        budget: int,
        eof: bool,
        reason: str | None,
        drops: int,
    ) -> None:
        """After a read that began with `had` and left `budget` of FRAME_BUDGET:
        count the connection's junk frames (the core's drops since `drops`), keep
        its unfinished frame (`view[start:end]`), set what it owes, and close it
        if it ended (`reason`), is gone (`eof`) or is done.

        Deadlines: a connection owes bytes (`read_timeout`) while a frame is
        incomplete, and while it has no session in the core: from its accept, or
        from the first frame after its last session ended.  A frame fed does
        not clear that debt unless it opened a session (junk frames, or a
        refused HELLO, do not keep a connection open)."""
        core = self._core
        fed = budget < FRAME_BUDGET  # frames of this read went to the core
        self.frames += FRAME_BUDGET - budget
        self._buffered -= len(had)
        conn.partial = b""
        junk = core.junk - drops
        if junk:
            conn.junk += junk
            if conn.junk > JUNK_LIMIT and reason is None:
                reason = "junk_frames"
        # its last session said CLOSE: it is closed below, and owes nothing (no
        # timer entry is made for a connection about to close)
        done = fed and reason is None and core.finished(conn.key)
        session = fed and reason is None and not done and core.has_session(conn.key)
        tail = end - start
        if reason is None and tail:
            if eof:
                reason = "truncated_frame"  # gone in the middle of a frame
            elif self._buffered + tail > self.max_buffered:
                reason = "memory_limit"
            else:
                conn.partial = bytes(view[start:end])
                self._buffered += tail
                if not done and (session or (not had and conn.deadline is None)):
                    # a new frame began: it has read_timeout to finish (a connection
                    # without a session keeps the deadline it has)
                    self._owe(conn, now)
        elif fed and reason is None:
            if session:
                conn.deadline = None  # nothing owed
            elif conn.deadline is None and not done:  # frames, but no session: it owes one
                self._owe(conn, now)
        if reason is not None:
            self._close(conn, reason)
        elif eof or done:
            self._close(conn, None)  # gone, or its last session said CLOSE: done with it

    def _owe(self, conn: _Conn, now: float) -> None:
        """The connection must send more within read_timeout."""
        conn.deadline = now + self.read_timeout
        self._schedule(conn)

    def _give_back(self, buf: bytearray, fed: bool) -> None:
        if fed:
            self._round_buffers.append(buf)  # returned after the round's writes
        else:
            self._pool.put(buf)

    # ------------------------------------------------------------- write
    def _answer(self, conn: _Conn, data: bytes) -> None:
        """The route of this connection's key: one answer, one frame."""
        if conn.closed:
            return
        frame = _LEN.pack(len(data)) + data
        if conn.out:
            if self._unsent + len(frame) > self.max_unsent_total:
                self._close(conn, "unsent_limit")
                return
            conn.out += frame
            self._unsent += len(frame)
            if len(conn.out) > self.max_unsent:
                self._close(conn, "slow_reader")
            return
        try:
            n = conn.sock.send(frame, _DONTWAIT)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:
            self._close(conn, None)
            return
        if n < len(frame):
            if self._unsent + len(frame) - n > self.max_unsent_total:
                self._close(conn, "unsent_limit")
                return
            conn.out += frame[n:]
            self._unsent += len(frame) - n
            self._watch(conn, _EPOLLIN | _EPOLLOUT)

    def _flush(self, conn: _Conn) -> None:
        out = conn.out
        try:
            while out:
                n = conn.sock.send(out, _DONTWAIT)
                del out[:n]
                self._unsent -= n
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn, None)
            return
        self._watch(conn, _EPOLLIN)

    def _watch(self, conn: _Conn, events: int) -> None:
        assert conn.handler is not None
        self._loop.remove_source(conn.fd)
        self._loop.add_source(conn.fd, conn.handler, events)

    # ------------------------------------------------------------- close
    def _close(self, conn: _Conn, reason: str | None) -> None:
        if conn.closed:
            return
        conn.closed = True
        if reason is not None:
            self._drop(reason)
        loop = self._loop
        loop.remove_source(conn.fd, not conn.shared)  # closed below: out of the epoll set
        del self._conns[conn.fd]
        loop.routes.pop(conn.key, None)
        self._buffered -= len(conn.partial)
        conn.partial = b""
        self._unsent -= len(conn.out)
        conn.out.clear()
        conn.deadline = None
        conn.sock.close()
        self._core.disconnected(conn.key)

    def _drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1


def _raise_open_files(wanted: int) -> None:
    """Raise the soft limit of open files toward `wanted` (never above the hard
    limit, never lower than it is): a listener of thousands of connections needs
    more than the usual 1,024."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
