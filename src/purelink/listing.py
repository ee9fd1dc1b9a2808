"""`list_streams`: ask a listener over TCP which streams it holds (docs/store.md).

Why it exists: `purelink streams tcp://HOST:PORT` lists a listener's streams
from another machine, without its data directory, as `purelink tail` reads
a stream.  The bytes are in protocol/tail_list.py (a request on the
subscription port); the listener's side is listener/tail/listing.py.

    for info in list_streams("tcp://127.0.0.1:7401"):
        print(info.name, info.first, info.last, info.records, info.bytes)

With keys on the listener, pass the key's `secret` (and `key_id`): the
exchange is encrypted as a subscription is (protocol/tail_seal.py), and the
listing holds only the streams that key may read.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from . import _address
from .errors import ConnectError, Error, ProtocolError, os_reason
from .protocol.tail import encode_list_request
from .protocol.tail_list import ListDecoder
from .store.reader import StreamInfo

__all__ = ["list_streams"]

_RECEIVE = 64 << 10
_FOREIGN = " (is it a purelink listener's TCP port?)"


def list_streams(
    url: str,
    *,
    secret: bytes | None = None,
    key_id: str | None = None,
    timeout: float = 10.0,
) -> list[StreamInfo]:
    """The streams of the listener at "tcp://HOST:PORT", sorted by name: first and
    last stored position, records, bytes.

    Raises ValueError for a bad URL or secret, ConnectError if the listener
    cannot be reached (or does not answer) within `timeout` seconds or is not
    a listener, and purelink.Error when it refuses (a wrong secret, an unknown
    key, no secret where it needs one).  A listener too old to list says
    `bad_flags`.
    """
    scheme, host, port = _address.parse_url(url)
    if scheme != "tcp":
        raise ValueError(f"listing streams needs the listener's tcp:// address, not {url!r}")
    if secret is not None and len(secret) < 16:
        raise ValueError("secret must be at least 16 bytes")
    if key_id is not None and secret is None:
        raise ValueError("key_id needs the key's secret (secret=)")
    request = encode_list_request()
    sealed: Any = None
    if secret is not None:
        from .protocol.tail_seal import SealedReader, seal_request  # noqa: PLC0415

        request, init = seal_request(request, key_id or "", secret)
        sealed = SealedReader(init, time.monotonic)
    sock = _connect(url, host, port, request, timeout)
    decoder = ListDecoder()
    infos: list[StreamInfo] = []
    first = True
    with sock:
        while not decoder.ended:
            data = _receive(sock, url, timeout)
            if not data:
                raise ConnectError(f"the listener at {url} closed the listing before its end")
            try:
                listed = decoder.feed(sealed.feed(data) if sealed is not None else data)
            except ProtocolError as exc:
                raise _refusal(exc, url, first=first and sealed is None) from None
            first = False
            infos.extend(
                StreamInfo(*item[:5], item.last_ms / 1000 if item.last_ms else None)
                for item in listed
            )
    return infos


def _connect(url: str, host: str, port: int, request: bytes, timeout: float) -> socket.socket:
    """Connect (each address of `host` in turn: `localhost` is 127.0.0.1 or ::1) and ask."""
    try:
        sock = _address.connect_tcp(host, port, timeout)
    except OSError as exc:
        raise ConnectError(f"cannot reach the listener at {url}: {os_reason(exc)}") from None
    try:
        sock.sendall(request)
    except OSError as exc:
        sock.close()
        raise ConnectError(f"cannot reach the listener at {url}: {os_reason(exc)}") from None
    return sock


def _receive(sock: socket.socket, url: str, timeout: float) -> bytes:
    try:
        return sock.recv(_RECEIVE)
    except TimeoutError:
        raise ConnectError(
            f"cannot reach the listener at {url}: no answer within {timeout:g} s{_FOREIGN}"
        ) from None
    except OSError as exc:
        raise ConnectError(f"the listing from {url} broke: {os_reason(exc)}") from None


def _refusal(exc: ProtocolError, url: str, *, first: bool) -> Error:
    """What a ProtocolError in the reply means for the caller."""
    if exc.reason == "refused":
        return Error(
            f"the listener at {url} refused the listing: " + str(exc).removeprefix("refused: ")
        )
    if first and exc.reason != "bad_checksum":
        return ConnectError(
            f"cannot reach the listener at {url}: it answered what no purelink listener "
            f"sends{_FOREIGN}",
            permanent=True,
        )
    return Error(f"the listing from {url}: {exc}")
