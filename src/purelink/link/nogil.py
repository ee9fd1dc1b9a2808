"""Short non-blocking socket calls that keep the GIL.

Why: the socket module releases the GIL around every send and recv.  When an
application thread is busy running Python (queuing records as fast as it
can), a link thread that gives the GIL up for a 20-microsecond send gets it
back only when the busy thread is forced to switch: after the interpreter's
switch interval, 5 ms by default.  The link thread then moves one burst per
5 ms and throughput collapses to a few hundred thousand records a second
(the "convoy" effect, measured in docs/performance.md).

A call through `ctypes.PyDLL` does not release the GIL.  For a send or a
receive on a NON-BLOCKING socket that is what we want: the kernel either
takes the datagrams (loopback: tens of microseconds for 64 KiB) or says
EAGAIN at once, so no other thread could have used the GIL meanwhile
anyway.  Blocking waits (epoll with a timeout) still release it.

The compiled core's send (`_speedups.send_run`, used by transport.py where
the core is in use: each datagram of a GSO run one iovec, no join) makes the
same choice, measured again with it (docs/performance.md, "The compiled
core: the link thread"): giving the GIL up around sendmsg cost the `queue`
benchmark a quarter of its records/s, so it keeps the GIL too.

Everything falls back to the socket module where libc or a symbol cannot be
loaded, so behaviour never depends on this module, only speed.  The flags and
errno values are the socket and errno modules' own; the structures are C's,
laid out by ctypes, and the one this module fills in by hand (the control
message's header) is checked against the C library's CMSG_LEN at import.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
from typing import Final

from .._udp import SOL_UDP, UDP_SEGMENT

__all__ = ["NoGilSocket", "available", "native_cmsg"]

MSG_DONTWAIT: Final = socket.MSG_DONTWAIT


class _IoVec(ctypes.Structure):
    """struct iovec."""

    _fields_ = (("base", ctypes.c_void_p), ("len", ctypes.c_size_t))


class _MsgHdr(ctypes.Structure):
    """struct msghdr as glibc declares it (ctypes lays it out with C's alignment)."""

    _fields_ = (
        ("name", ctypes.c_void_p),
        ("namelen", ctypes.c_uint),  # socklen_t
        ("iov", ctypes.POINTER(_IoVec)),
        ("iovlen", ctypes.c_size_t),
        ("control", ctypes.c_void_p),
        ("controllen", ctypes.c_size_t),
        ("flags", ctypes.c_int),
    )


class _CmsgHdr(ctypes.Structure):
    """struct cmsghdr as glibc declares it; the data follows at CMSG_LEN(0)."""

    _fields_ = (("len", ctypes.c_size_t), ("level", ctypes.c_int), ("type", ctypes.c_int))


# The control message is built here by hand, so its header must be the one the
# kernel reads.  CMSG_LEN(0), which the socket module computes with the C
# library's own macro, is the header's size rounded to the platform's alignment:
# where ours differs (a C library that declares the header otherwise), GSO goes
# through the socket module's sendmsg instead, which builds the header itself and
# only gives the GIL up around the call (tests/link/test_nogil.py covers both ways).
native_cmsg: bool = ctypes.sizeof(_CmsgHdr) == socket.CMSG_LEN(0)

try:
    # the process's own symbols, libc's among them: no library search
    # (ctypes.util.find_library runs ldconfig in a child process: ~8 ms at import)
    _libc = ctypes.PyDLL(None, use_errno=True)
    _send = _libc.send
    _send.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int)
    _send.restype = ctypes.c_ssize_t
    _sendmsg = _libc.sendmsg
    _sendmsg.argtypes = (ctypes.c_int, ctypes.POINTER(_MsgHdr), ctypes.c_int)
    _sendmsg.restype = ctypes.c_ssize_t
    _recv = _libc.recv
    _recv.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    _recv.restype = ctypes.c_ssize_t
    available = True
except (OSError, AttributeError):  # pragma: no cover - no libc to speak of
    available = False


class NoGilSocket:
    """send/sendmsg-with-GSO/recv on a connected non-blocking socket, GIL held.

    Methods raise OSError like the socket module's (BlockingIOError for EAGAIN).
    """

    def __init__(self, sock: socket.socket) -> None:
        if not available:
            raise OSError("libc is not available through ctypes")
        self._sock = sock
        self._fd = sock.fileno()
        self._iov = _IoVec()
        self._cmsg = ctypes.create_string_buffer(socket.CMSG_SPACE(2))
        if native_cmsg:
            header = _CmsgHdr.from_buffer(self._cmsg)
            header.len, header.level, header.type = socket.CMSG_LEN(2), SOL_UDP, UDP_SEGMENT
        self._segment_at = socket.CMSG_LEN(0)  # CMSG_DATA: the u16 segment size
        self._msg = _MsgHdr()
        self._msg.iov = ctypes.pointer(self._iov)
        self._msg.iovlen = 1
        self._msg.control = ctypes.cast(self._cmsg, ctypes.c_void_p)
        self._msg.controllen = socket.CMSG_SPACE(2)
        self._rbuf = ctypes.create_string_buffer(65536)

    @staticmethod
    def _error() -> OSError:
        err = ctypes.get_errno()
        return OSError(err, os.strerror(err))  # BlockingIOError for EAGAIN, and so on

    def send(self, data: bytes) -> int:
        """send(2) of one datagram."""
        n = _send(self._fd, data, len(data), MSG_DONTWAIT)
        if n < 0:
            raise self._error()
        return int(n)

    def send_gso(self, data: bytes, segment: int) -> int:
        """sendmsg(2) of equal `segment`-byte datagrams back to back (UDP_SEGMENT)."""
        if not native_cmsg:
            return self._sock.sendmsg(
                [data], [(SOL_UDP, UDP_SEGMENT, struct.pack("=H", segment))], MSG_DONTWAIT
            )
        struct.pack_into("=H", self._cmsg, self._segment_at, segment)
        self._iov.base = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p)
        self._iov.len = len(data)
        n = _sendmsg(self._fd, ctypes.byref(self._msg), MSG_DONTWAIT)
        self._iov.base = None
        if n < 0:
            raise self._error()
        return int(n)

    def recv(self) -> bytes:
        """recv(2) of one datagram (up to 64 KiB)."""
        n = _recv(self._fd, self._rbuf, 65536, MSG_DONTWAIT)
        if n < 0:
            raise self._error()
        return ctypes.string_at(self._rbuf, n)
