"""How a link's datagrams reach the listener: the only socket code on the sending side.

A transport is what the link thread polls (`fileno`), hands datagrams to
(`send`) and drains answers from (`receive`).  `UdpTransport` puts up to 64
equal datagrams into one system call with UDP GSO (`UDP_SEGMENT`), and
falls back to one `send` per datagram for good when the kernel refuses; a
datagram the kernel cannot take now (buffer full, nobody listening) is
counted and left to the sender's loss detection, never retried here.  An
ICMP "port unreachable" (ECONNREFUSED on the connected socket) sets
`refused`: a link that has not connected yet then fails at once, as a TCP
link whose connection is refused does; once connected, the link just
keeps resending (a listener restarting) and `refused` means nothing.

Its datagrams go out with DF set (`dont_fragment`: IP_MTU_DISCOVER =
IP_PMTUDISC_PROBE, IPV6_MTU_DISCOVER = IPV6_PMTUDISC_PROBE and IPV6_DONTFRAG
on Linux): a datagram too large for the path is dropped, never fragmented,
and the link finds the path's size itself (protocol/pmtu.py).  PROBE, not
DO: the kernel then neither caps datagrams at a path MTU it learned from
ICMP (which anyone on the path can forge) nor refuses the link's probes;
only a datagram over the local interface's MTU is refused (EMSGSIZE), and
its size is handed to the sender (`too_large`) as a failed size.  An ICMP
"fragmentation needed" that a router sends back for a probe is reported on
the connected socket's next call as EMSGSIZE too, whatever that call sends;
a send that fails so is made once more, and if it passes then, the error was
that report (`path_too_big`, a hint for the probe in flight), not these
datagrams, which are neither dropped nor taken for too large (nor is GSO
given up for them).

`reset()` is called when the sender starts a new handshake after losing its
session; a connection-oriented transport reconnects there.  `broken` tells
the link that the transport itself saw the session die (a TCP reset), so
the sender can start that handshake at once instead of waiting for silence.

`TcpTransport` carries the same datagrams over one TCP connection, each in a
length-prefixed frame (protocol/framing.py).  Theory of operation:

* `fileno()` is an epoll fd of the transport's own, holding the current
  socket.  The link thread polls that fd once for its whole life, so a new
  connection after a reconnect needs no change in the link's loop, and the
  transport asks for writability itself (EPOLLOUT on the socket, only while
  bytes wait) -- the link's epoll sees the inner one readable whenever its
  socket is ready for what was asked;
* `send` frames the datagrams into an outgoing buffer and writes as much as
  the kernel takes now; the rest waits for writability (never a partial frame
  on a new connection: the buffer dies with its connection).  Past
  MAX_UNSENT bytes waiting, datagrams are counted in `send_errors` and left
  to the sender's loss detection, as UDP would lose them;
* with no connection, `send` opens one (non-blocking connect; what is sent
  meanwhile waits in the buffer) -- but only once the link has seen the old
  one break, so a session never silently moves to a new connection.  The
  sender paces those attempts: it sends only HELLOs, with backoff, until a
  handshake succeeds;
* the first connection is waited for, briefly (`FIRST_CONNECT_WAIT`): a
  refusal then is raised from the constructor (`connect()` reports
  "connection refused" at once); later ones are the reconnects above;
* EOF, a reset, or a frame over the limit from the listener closes the
  connection and sets `broken`; the link then starts a new handshake at
  once (`Sender.reset_session`).  A failure seen while sending is reported
  through an eventfd in the inner epoll, so the link learns it on its next
  `receive` like any other;
* TCP_USER_TIMEOUT bounds how long sent bytes may stay unacknowledged, so a
  connection into a black hole breaks (and is replaced) instead of hanging.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import socket
import struct
import sys
from collections.abc import Callable
from typing import Final, Protocol

from .. import _address, native
from .._udp import SOL_UDP, UDP_SEGMENT
from ..errors import ProtocolError
from ..protocol.framing import FrameDecoder, encode_frames
from . import nogil

__all__ = ["TcpTransport", "Transport", "UdpTransport", "run_end"]

log = logging.getLogger("purelink.link")

_pack = native.part("pack")  # the compiled core's gso_run, or None
_send_run = getattr(_pack, "send_run", None)
"""The compiled core's send of a run: each datagram one iovec of one sendmsg (no
join, no ctypes); None where the core is not in use (or not on Linux)."""
_send_runs = getattr(_pack, "send_runs", None)
"""The compiled core's loop of `send` over a list's runs, up to the first that
fails (whose error the loop below then handles); None likewise."""
SEND_RELEASES_GIL: Final = False
"""Whether the compiled send gives the GIL up around sendmsg (see nogil.py and
docs/performance.md: measured both ways under load, the GIL is kept)."""

GSO_MAX_SEGMENTS: Final = 64
GSO_MAX_BYTES: Final = 65000
_GSO_REFUSED: Final = (errno.EINVAL, errno.EIO, errno.ENOPROTOOPT, errno.EOPNOTSUPP, errno.EMSGSIZE)
MAX_UNSENT: Final = 32 << 20
# a read's most: under glibc's mmap threshold (128 KiB), so that the bytes a
# read allocates for an answer of a few dozen come from the heap, not from a
# fresh mapping that is shrunk and unmapped again (docs/performance.md, latency)
TCP_READ: Final = 64 << 10
TCP_READ_BUDGET: Final = 64
TCP_USER_TIMEOUT_MS: Final = 30_000
FIRST_CONNECT_WAIT: Final = 1.0
"""Seconds a TcpTransport waits for its first connection to be made or refused."""


def _linux(name: str, value: int) -> int | None:
    """A socket option's number: the socket module's, else Linux's own (linux/in.h,
    linux/in6.h: Python builds lack some of them), else None elsewhere."""
    found = getattr(socket, name, None)
    if isinstance(found, int):
        return found
    return value if sys.platform.startswith("linux") else None


IP_MTU_DISCOVER: Final = _linux("IP_MTU_DISCOVER", 10)
IP_PMTUDISC_DO: Final = _linux("IP_PMTUDISC_DO", 2)
IP_PMTUDISC_PROBE: Final = _linux("IP_PMTUDISC_PROBE", 3)
IPV6_MTU_DISCOVER: Final = _linux("IPV6_MTU_DISCOVER", 23)
IPV6_PMTUDISC_DO: Final = _linux("IPV6_PMTUDISC_DO", 2)
IPV6_PMTUDISC_PROBE: Final = _linux("IPV6_PMTUDISC_PROBE", 3)
IPV6_DONTFRAG: Final = _linux("IPV6_DONTFRAG", 62)


def dont_fragment(sock: socket.socket, family: int) -> str:
    """Set DF on a UDP socket's datagrams; returns how: "probe" (DF, the kernel's
    own path MTU ignored), "do" (DF, where PROBE is refused), or "" (neither
    could be set: the kernel may fragment, and the link still probes)."""
    if family == socket.AF_INET6:
        level, option = socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER
        modes = (("probe", IPV6_PMTUDISC_PROBE), ("do", IPV6_PMTUDISC_DO))
        if IPV6_DONTFRAG is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_IPV6, IPV6_DONTFRAG, 1)
    else:
        level, option = socket.IPPROTO_IP, IP_MTU_DISCOVER
        modes = (("probe", IP_PMTUDISC_PROBE), ("do", IP_PMTUDISC_DO))
    if option is None:
        return ""
    for name, value in modes:
        if value is None:
            continue
        try:
            sock.setsockopt(level, option, value)
        except OSError:
            continue
        return name
    return ""


def run_end(datagrams: list[bytes], i: int, limit: int) -> int:
    """Where the run of datagrams that goes in one GSO call from datagrams[i]
    ends: up to `limit` datagrams of its size, then one shorter last one (the
    compiled core's `gso_run` where it is in use)."""
    size = len(datagrams[i])
    j = i + 1
    n = len(datagrams)
    while j < n and j - i < limit and len(datagrams[j]) == size:
        j += 1
    if j < n and j - i < limit and len(datagrams[j]) < size:
        j += 1  # a shorter last segment is allowed
    return j


class Transport(Protocol):
    """What the link thread needs of a transport."""

    gso: bool
    """Whether runs of equal-sized datagrams go to the kernel in one call (UDP GSO)."""
    send_calls: int
    """System calls that sent datagrams."""
    send_errors: int
    """Datagrams that could not be handed to the kernel."""
    broken: bool
    """The transport saw the session die; cleared by reset()."""
    refused: bool
    """The listener's host refused the last connection, or (UDP) answered with an
    ICMP "port unreachable": ECONNREFUSED, nothing listens there; or `foreign`."""
    foreign: bool
    """(TCP) The peer's first bytes were no frame, and no frame ever came from
    it: another service's port, not a listener's (`refused` is set too)."""
    too_large: list[int]
    """Sizes of datagrams the kernel refused as larger than the path (EMSGSIZE),
    since the link last emptied the list."""
    path_too_big: int
    """ICMP "too big" reports the kernel passed on for earlier datagrams (an
    EMSGSIZE that a retry of the same call, or a receive, shows was not about
    the datagrams at hand), since the link last zeroed it."""

    def fileno(self) -> int:
        """The fd to poll for readability."""

    def send(self, datagrams: list[bytes]) -> None:
        """Put datagrams on the wire (best effort)."""

    def receive(self, handle: Callable[[bytes], None]) -> None:
        """Call `handle` for every datagram that arrived, until EAGAIN."""

    def reset(self) -> None:
        """A new session starts: reconnect if the transport has connections."""

    def close(self) -> None:
        """Release the socket."""


class UdpTransport:
    """A connected UDP socket, with GSO where the kernel has it."""

    def __init__(self, host: str, port: int) -> None:
        family, sockaddr = _address.resolve(host, port)
        self._sock = socket.socket(family, socket.SOCK_DGRAM)
        self._sock.setblocking(False)
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            with contextlib.suppress(OSError):  # only on unusual kernels
                self._sock.setsockopt(socket.SOL_SOCKET, opt, 4 << 20)
        self._sock.connect(sockaddr)
        self.dont_fragment = dont_fragment(self._sock, family)
        """How DF is set ("probe", "do", or "" where it could not be)."""
        self.too_large: list[int] = []
        # sends and receives that keep the GIL (see nogil.py); the socket module's
        # where ctypes cannot reach libc
        self._fast = nogil.NoGilSocket(self._sock) if nogil.available else None
        self._fd = self._sock.fileno()
        self.gso = True
        self.send_calls = 0
        self.send_errors = 0
        self.broken = False
        self.refused = False  # set by an ICMP "port unreachable" (ECONNREFUSED)
        self.foreign = False  # datagrams that are not a listener's are dropped: no word
        self.path_too_big = 0
        self._failed: OSError | None = None  # send_runs' error for the next run sent

    def fileno(self) -> int:
        return self._sock.fileno()

    def send(self, datagrams: list[bytes]) -> None:
        i = 0
        if _send_runs is not None and self.gso:  # the runs that pass, in one C call
            i, calls, err = _send_runs(
                self._fd, datagrams, GSO_MAX_SEGMENTS, GSO_MAX_BYTES, SEND_RELEASES_GIL
            )
            self.send_calls += calls
            if err:  # the run at i failed: the loop's first send raises its error
                self._failed = OSError(err, os.strerror(err))
        n = len(datagrams)
        while i < n:
            size = len(datagrams[i])
            j = i + 1
            if self.gso:
                limit = min(GSO_MAX_SEGMENTS, GSO_MAX_BYTES // size)
                j = (
                    run_end(datagrams, i, limit)
                    if _pack is None
                    else _pack.gso_run(datagrams, i, limit)
                )
            try:
                try:
                    self._send_run(datagrams, i, j, size)
                except OSError as exc:
                    if exc.errno != errno.EMSGSIZE:
                        raise
                    # An ICMP "too big" for an earlier datagram (a path MTU probe)
                    # is reported on the connected socket's next call, whatever
                    # that call sends: if the same call passes now, it was that
                    # report, not these datagrams
                    self._send_run(datagrams, i, j, size)
                    self.path_too_big += 1
                self.send_calls += 1
            except OSError as exc:
                if j - i > 1 and exc.errno in _GSO_REFUSED:
                    # GSO refused, or a segment over the interface's MTU (EINVAL or
                    # EMSGSIZE): one at a time tells which
                    if not self._send_each(datagrams[i:j]):
                        log.info("UDP GSO refused (%s); sending one datagram per call", exc)
                        self.gso = False
                elif exc.errno == errno.EMSGSIZE:
                    self.too_large.append(size)
                    self.send_errors += 1
                else:
                    # buffer full, or the listener is down (ECONNREFUSED): lost here;
                    # the sender's loss detection resends them
                    self.send_errors += j - i
                    if exc.errno == errno.ECONNREFUSED:
                        self.refused = True
            i = j

    def _send_run(self, datagrams: list[bytes], i: int, j: int, size: int) -> None:
        """datagrams[i:j] in one system call (GSO when more than one)."""
        if _send_run is not None:
            failed = self._failed
            if failed is not None:  # send_runs' own try of this run
                self._failed = None
                raise failed
            _send_run(self._fd, datagrams, i, j, size, SEND_RELEASES_GIL)
            return
        fast = self._fast
        if j - i > 1:
            if fast is not None:
                fast.send_gso(b"".join(datagrams[i:j]), size)
            else:
                self._sock.sendmsg(
                    [b"".join(datagrams[i:j])],
                    [(SOL_UDP, UDP_SEGMENT, struct.pack("=H", size))],
                )
        elif fast is not None:
            fast.send(datagrams[i])
        else:
            self._sock.send(datagrams[i])

    def _send_each(self, datagrams: list[bytes]) -> bool:
        """Send one datagram per call; True if one was too large for the path."""
        fast = self._fast
        too_large = False
        for data in datagrams:
            try:
                if _send_run is not None:
                    _send_run(self._fd, [data], 0, 1, 0, SEND_RELEASES_GIL)
                elif fast is not None:
                    fast.send(data)
                else:
                    self._sock.send(data)
                self.send_calls += 1
            except OSError as exc:
                self.send_errors += 1
                if exc.errno == errno.EMSGSIZE:
                    self.too_large.append(len(data))
                    too_large = True
        return too_large

    def receive(self, handle: Callable[[bytes], None]) -> None:
        fast = self._fast
        recv = fast.recv if fast is not None else lambda: self._sock.recv(65536)
        for _ in range(1024):
            try:
                data = recv()
            except BlockingIOError:
                return
            except ConnectionRefusedError:  # an ICMP "port unreachable": nobody
                self.refused = True  # listens there right now (the link may say so)
                continue
            except OSError as exc:
                # another ICMP error reported on the socket: EMSGSIZE, a datagram
                # was too big for the path (a path MTU probe)
                if exc.errno == errno.EMSGSIZE:
                    self.path_too_big += 1
                continue
            handle(data)

    def reset(self) -> None:
        self.broken = False

    def close(self) -> None:
        self._sock.close()


class TcpTransport:
    """One TCP connection at a time, datagrams in length-prefixed frames."""

    def __init__(self, host: str, port: int) -> None:
        family, sockaddr = _address.resolve(host, port, socket.SOCK_STREAM)
        self._family = family
        self._sockaddr = sockaddr
        self._sock: socket.socket | None = None
        self._out = bytearray()
        self._decoder = FrameDecoder()
        self._writing = False  # EPOLLOUT is asked for
        self._unseen = False  # dropped, and the link has not called receive() since
        self._notified = False  # the notice eventfd was written
        self._epoll = select.epoll()
        self._notice = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.gso = False
        self.send_calls = 0
        self.send_errors = 0
        self.broken = False
        self.refused = False
        self.foreign = False
        self._framed = False  # a frame came, on any connection: a listener is there
        self.too_large: list[int] = []  # TCP has no MTU: always empty
        self.path_too_big = 0
        self.dropped = 0
        """Connections closed because the listener sent a frame over the limit."""
        try:
            self._epoll.register(self._notice, select.EPOLLIN)
            self._connect()
            self._first_outcome()
        except OSError:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
            self._epoll.close()
            os.close(self._notice)
            raise

    def fileno(self) -> int:
        return self._epoll.fileno()

    # ------------------------------------------------------------ sending
    def send(self, datagrams: list[bytes]) -> None:
        if self._sock is None:
            if self._unseen:  # the link learns of the drop first (its next receive)
                self.send_errors += len(datagrams)
                return
            self._connect()
        if len(self._out) > MAX_UNSENT:
            self.send_errors += len(datagrams)  # lost here; the sender resends them
            return
        self._out += encode_frames(datagrams)
        self._flush()

    def _flush(self) -> None:
        sock = self._sock
        out = self._out
        while out and sock is not None:
            try:
                n = sock.send(out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self.refused = isinstance(exc, ConnectionRefusedError)
                self._drop(notify=True)
                return
            self.send_calls += 1
            del out[:n]
        self._want_write(bool(out))

    def _want_write(self, want: bool) -> None:
        if want != self._writing and self._sock is not None:
            mask = select.EPOLLIN | (select.EPOLLOUT if want else 0)
            self._epoll.modify(self._sock, mask)
            self._writing = want

    # ---------------------------------------------------------- receiving
    def receive(self, handle: Callable[[bytes], None]) -> None:
        try:
            self._receive(handle)
        finally:
            self._unseen = False  # the link looks at `broken` right after this

    def _receive(self, handle: Callable[[bytes], None]) -> None:
        if self._notified:
            self._notified = False
            with contextlib.suppress(BlockingIOError):
                os.eventfd_read(self._notice)
        if self._sock is None:
            return
        if self._writing:
            self._flush()
        sock = self._sock
        feed = self._decoder.feed
        for _ in range(TCP_READ_BUDGET):
            if sock is not self._sock:
                return  # dropped meanwhile
            try:
                data = sock.recv(TCP_READ)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # ECONNREFUSED, ECONNRESET, ETIMEDOUT: the connection is gone
                self.refused = isinstance(exc, ConnectionRefusedError)
                self._drop()
                return
            if not data:
                self._drop()
                return
            try:
                frames = feed(data)
            except ProtocolError:
                self.dropped += 1
                if not self._framed:  # another service: as good as a refusal
                    self.refused = self.foreign = True
                self._drop()
                return
            if frames:
                self._framed = True
            for frame in frames:
                handle(frame)
            if len(data) < TCP_READ:
                return  # less than asked: the socket is empty now (no EAGAIN call)

    # --------------------------------------------------------- connection
    def _connect(self) -> None:
        sock = socket.socket(self._family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with contextlib.suppress(OSError):  # Linux only; TCP's own timeouts otherwise
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, TCP_USER_TIMEOUT_MS)
            # EINPROGRESS, or a refusal that the first send or receive will see
            sock.connect_ex(self._sockaddr)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self._out.clear()
        self._decoder.clear()
        self.broken = False
        self._writing = False  # the first send asks for EPOLLOUT if the kernel defers it
        self._epoll.register(sock, select.EPOLLIN)

    def _first_outcome(self) -> None:
        """Wait up to FIRST_CONNECT_WAIT seconds for the first connection to be
        made or refused; raise the refusal (ECONNREFUSED, EHOSTUNREACH, ...) as
        OSError, so that `connect()` says at once that nobody listens there,
        as a TCP client does, instead of waiting out its handshake timeout.  A
        connection still pending then (a black hole, a long path) is left to
        the handshake's own timeout."""
        sock = self._sock
        assert sock is not None
        waiting = select.poll()
        waiting.register(sock, select.POLLOUT)
        if not waiting.poll(FIRST_CONNECT_WAIT * 1000):
            return
        error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if error:
            raise OSError(error, os.strerror(error))

    def _drop(self, notify: bool = False) -> None:
        """The connection is gone: close it and tell the link (`broken`)."""
        sock = self._sock
        if sock is None:
            return
        self._sock = None
        with contextlib.suppress(OSError):
            self._epoll.unregister(sock)
        sock.close()
        self._out.clear()
        self._decoder.clear()
        self._writing = False
        self.broken = True
        self._unseen = True
        if notify:  # seen while sending: wake the link thread's receive
            self._notified = True
            os.eventfd_write(self._notice, 1)

    def reset(self) -> None:
        """A new session starts.  A connection that broke is gone already (and a
        new one may carry the new HELLO by now); one that still works is kept:
        TCP itself proved it alive, and the new session goes over it."""
        self.broken = False

    def close(self) -> None:
        sock = self._sock
        if sock is not None:
            self._sock = None
            with contextlib.suppress(OSError):
                if self._out:
                    sock.send(self._out)  # a last CLOSE, if the kernel takes it now
                # read what is unread, so that close() sends FIN, not RST
                while sock.recv(TCP_READ):
                    pass
            sock.close()
        self._epoll.close()
        os.close(self._notice)
