"""The exceptions purelink raises into an application, split by blame.

`Error` is the one base to catch.  The caller's misuse (a bad argument) raises
the standard `ValueError`/`TypeError`; what the peer or the system did raises a
subclass of `Error`.  Malformed input from a peer is never raised into the
application at all: it is dropped and counted (docs/security.md).
"""

from __future__ import annotations

__all__ = [
    "Closed",
    "ConnectError",
    "Error",
    "Fenced",
    "Full",
    "LinkError",
    "ProtocolError",
    "os_reason",
]


class Error(Exception):
    """Base class of every purelink error."""


class Full(Error):
    """`Link.queue` would exceed `capacity` records or `capacity_bytes` bytes."""


class Fenced(Error):
    """A newer session of the same named producer took over this link's stream."""


class Closed(Error):
    """The link (or listener) is closed."""


class ConnectError(Error):
    """The handshake did not complete: the listener is unreachable or refused us.

    `permanent` is True when trying again cannot help without a change on one
    side -- a wrong secret, an unknown, expired or revoked key, a stream the key
    may not use, a stream or producer name the rules refuse, a port where
    another service answers -- and False for what can heal by itself: no
    answer, a connection refused (a listener restarting), a listener at its
    limits, a store error, a producer name a live session still holds."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class LinkError(Error):
    """The link cannot keep its promise: e.g. the listener lost records it said were stored."""


class ProtocolError(Error):
    """Bytes from a peer that do not decode.  Raised by the sans-IO decoders only;
    the drivers catch it, count it and drop the datagram."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def os_reason(exc: OSError) -> str:
    """What an OS error says, for people: "connection refused", not
    "[Errno 111] Connection refused" (the same words whoever reports it)."""
    text = exc.strerror or str(exc) or type(exc).__name__
    return text[:1].lower() + text[1:]
