"""How a link's datagrams reach the listener: the only socket code on the sending side.

A transport is what the link thread polls (`fileno`), hands datagrams to
(`send`) and drains answers from (`receive`).  `UdpTransport` puts up to 64
equal datagrams into one system call with UDP GSO (`UDP_SEGMENT`), and
falls back to one `send` per datagram for good when the kernel refuses; a
datagram the kernel cannot take now (buffer full, nobody listening) is
counted and left to the sender's loss detection, never retried here.

`reset()` is called when the sender starts a new handshake after losing its
session; a connection-oriented transport reconnects there.  `broken` tells
the link that the transport itself saw the session die (a TCP reset), so
the sender can start that handshake at once instead of waiting for silence.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import struct
from collections.abc import Callable
from typing import Final, Protocol

from . import _address

__all__ = ["Transport", "UdpTransport"]

log = logging.getLogger("purelink.link")

SOL_UDP: Final = 17
UDP_SEGMENT: Final = 103
GSO_MAX_SEGMENTS: Final = 64
GSO_MAX_BYTES: Final = 65000
_GSO_REFUSED: Final = (errno.EINVAL, errno.EIO, errno.ENOPROTOOPT, errno.EOPNOTSUPP, errno.EMSGSIZE)


class Transport(Protocol):
    """What the link thread needs of a transport."""

    gso: bool
    """Whether datagrams of a burst should be padded to equal size (UDP GSO)."""
    send_calls: int
    """System calls that sent datagrams."""
    send_errors: int
    """Datagrams that could not be handed to the kernel."""
    broken: bool
    """The transport saw the session die; cleared by reset()."""

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
        self.gso = True
        self.send_calls = 0
        self.send_errors = 0
        self.broken = False

    def fileno(self) -> int:
        return self._sock.fileno()

    def send(self, datagrams: list[bytes]) -> None:
        sock = self._sock
        i = 0
        n = len(datagrams)
        while i < n:
            size = len(datagrams[i])
            j = i + 1
            if self.gso:
                limit = min(GSO_MAX_SEGMENTS, GSO_MAX_BYTES // size)
                while j < n and j - i < limit and len(datagrams[j]) == size:
                    j += 1
                if j < n and j - i < limit and len(datagrams[j]) < size:
                    j += 1  # a shorter last segment is allowed
            try:
                if j - i > 1:
                    sock.sendmsg(
                        [b"".join(datagrams[i:j])],
                        [(SOL_UDP, UDP_SEGMENT, struct.pack("=H", size))],
                    )
                else:
                    sock.send(datagrams[i])
                self.send_calls += 1
            except OSError as exc:
                if j - i > 1 and exc.errno in _GSO_REFUSED:
                    log.info("UDP GSO refused (%s); sending one datagram per call", exc)
                    self.gso = False
                    continue  # the same datagrams again, one at a time
                # buffer full, or the listener is down (ECONNREFUSED): lost here;
                # the sender's loss detection resends them
                self.send_errors += j - i
            i = j

    def receive(self, handle: Callable[[bytes], None]) -> None:
        recv = self._sock.recv
        for _ in range(1024):
            try:
                data = recv(65536)
            except BlockingIOError:
                return
            except OSError:
                continue  # ECONNREFUSED from an ICMP error: nobody listens right now
            handle(data)

    def reset(self) -> None:
        self.broken = False

    def close(self) -> None:
        self._sock.close()
