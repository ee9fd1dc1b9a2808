"""Parsing "HOST:PORT" and "udp://HOST:PORT" the one way everything here does.

IPv6 hosts are written in brackets ("[::1]:7400"), as in URLs.  Port 0 means
"any free port" when binding.
"""

from __future__ import annotations

import socket

__all__ = [
    "addresses",
    "connect_tcp",
    "expand",
    "format_hostport",
    "is_loopback",
    "is_numeric",
    "parse_hostport",
    "parse_url",
    "resolves_at_once",
]

LOCALHOST = ("127.0.0.1", "::1")
"""What `localhost` names, whatever the hosts file lists (RFC 6761: always the
loopback): both families, IPv4 first."""


def parse_hostport(text: str) -> tuple[str, int]:
    """'127.0.0.1:7400' or '[::1]:7400' -> (host, port); ValueError if malformed."""
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError(f"bad address {text!r}: expected [IPV6]:PORT")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or not host:
            raise ValueError(f"bad address {text!r}: expected HOST:PORT")
        if ":" in host:
            raise ValueError(f"bad address {text!r}: write IPv6 hosts as [HOST]:PORT")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"bad port in {text!r}")
    return host, int(port_text)


def parse_url(url: str) -> tuple[str, str, int]:
    """'udp://host:port' or 'tcp://host:port' -> (scheme, host, port)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("udp", "tcp"):
        raise ValueError(f"bad URL {url!r}: expected udp://HOST:PORT or tcp://HOST:PORT")
    host, port = parse_hostport(rest.rstrip("/"))
    if port == 0:
        raise ValueError(f"bad URL {url!r}: port 0")
    return scheme, host, port


def parse_urls(url: str) -> list[tuple[str, str, int]]:
    """'udp://a:7400,udp://b:7400' (listeners tried in order) -> [(scheme, host, port), ...]."""
    targets = [parse_url(part.strip()) for part in url.split(",")]
    if not targets:
        raise ValueError(f"bad URL {url!r}: no listener in it")
    return targets


def format_hostport(host: str, port: int) -> str:
    """(host, port) -> 'host:port', bracketing IPv6."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_loopback(host: str) -> bool:
    """Whether `host` names only this machine."""
    if host == "localhost":
        return True
    import ipaddress  # noqa: PLC0415 -- here, not at import: ~5 ms a short process needs not pay

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve(host: str, port: int, kind: int = socket.SOCK_DGRAM) -> tuple[int, tuple[str, int]]:
    """(family, sockaddr) for connecting or binding; OSError if it does not resolve.

    An address written as numbers is taken as it is, without getaddrinfo: that
    is cheaper, and getaddrinfo imports the idna codec on first use, which fails
    in a thread still connecting while the interpreter shuts down (a forked
    child that logs one record and exits, CPython 3.12)."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        return family, (host, port)
    infos = socket.getaddrinfo(host, port, 0, kind)
    family, _, _, _, sockaddr = infos[0]
    return family, (str(sockaddr[0]), int(sockaddr[1]))


def is_numeric(host: str) -> bool:
    """Whether `host` is an IPv4 or IPv6 address written as numbers."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        return True
    return False


def resolves_at_once(host: str) -> bool:
    """Whether `addresses(host)` asks no resolver (so cannot block): a numeric
    host, or localhost."""
    return host.lower() == "localhost" or is_numeric(host)


def addresses(host: str, port: int, kind: int = socket.SOCK_DGRAM) -> list[str]:
    """Every address `host` names, in the order to try them: a numeric host as it
    is; `localhost` both loopbacks (LOCALHOST); a name every distinct address
    getaddrinfo gives, of both families, in its order.  A name that does not
    resolve stays as it is: connecting to it says why (`resolve`)."""
    if is_numeric(host):
        return [host]
    if host.lower() == "localhost":
        return list(LOCALHOST)
    try:
        infos = socket.getaddrinfo(host, port, 0, kind)
    except OSError:
        return [host]
    found = [str(info[4][0]) for info in infos]
    return list(dict.fromkeys(found)) or [host]


def expand(targets: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """parse_urls()'s targets with each host replaced by every address it names
    (`addresses`), so that a link tries each of them in turn: `localhost` is
    127.0.0.1 and then ::1, and the first that answers is the one used."""
    return [
        (scheme, address, port)
        for scheme, host, port in targets
        for address in addresses(
            host, port, socket.SOCK_STREAM if scheme == "tcp" else socket.SOCK_DGRAM
        )
    ]


def connect_tcp(host: str, port: int, timeout: float | None) -> socket.socket:
    """A TCP connection to the first of `addresses(host)` that accepts one (each
    given `timeout`), left with that timeout; the last failure's OSError if none
    does."""
    error: OSError | None = None
    for address in addresses(host, port, socket.SOCK_STREAM):
        try:
            family, sockaddr = resolve(address, port, socket.SOCK_STREAM)
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as exc:
            error = exc
            continue
        try:
            sock.settimeout(timeout)
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        return sock
    assert error is not None  # addresses() is never empty
    raise error
