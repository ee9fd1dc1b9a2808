"""The argument types and checks that several verbs of the `purelink` command share.

Why it exists: a value argparse refuses is a one-line error with exit code 2
(command.py's parser), so every type here raises ArgumentTypeError with a
message that says what is wrong; checks that need the file system
(`require_store`) raise UsageError instead.  The verbs' own modules (serve.py,
send.py, read.py) build their options from these.

Sizes and durations read the way such options read in other Linux tools
(`dd`, `truncate`, `sort -S`, systemd): a size is bytes, or a number with
K, M, G or T -- powers of 1024, as are KiB, MiB, GiB and TiB -- while KB, MB,
GB and TB are powers of 1000 (GNU coreutils' rule; any case).  A duration is
seconds, or numbers with ms, s, m, h or d (`90s`, `10m`, `1h30m`, `7d`).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

from .. import _address
from ..listener.limits import MAX_SECONDS
from ..protocol.names import is_valid_name, validate_stream_name
from .common import UsageError

__all__ = [
    "MAX_POSITION",
    "add_from",
    "add_stream",
    "bind_address",
    "data_dir",
    "duration",
    "int_at_least",
    "producer_type",
    "require_store",
    "seconds",
    "size",
    "size_at_least",
    "stream_type",
    "url_type",
]


def bind_address(text: str) -> str | None:
    """--udp/--tcp value: "HOST:PORT", or "none" to disable the transport."""
    if text.lower() == "none":
        return None
    try:
        _address.parse_hostport(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def url_type(text: str) -> str:
    """send's URL: udp://HOST:PORT or tcp://HOST:PORT (IPv6 as [ADDR])."""
    try:
        _address.parse_urls(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def stream_type(text: str) -> str:
    """A stream name by the store's own rule (protocol/names.py, the README)."""
    try:
        return validate_stream_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def producer_type(text: str) -> str:
    """A producer name: the same rule as a stream's, checked here, not by the listener."""
    if not is_valid_name(text):
        raise argparse.ArgumentTypeError(
            f"bad producer name {text[:40]!r}: use 1-200 characters of A-Z a-z 0-9 . _ -, "
            "not starting with '.'"
        )
    return text


MAX_POSITION = (1 << 64) - 1
"""The largest position there can be (a u64 on the wire and in the store)."""


def add_stream(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--stream",
        required=True,
        type=stream_type,
        metavar="S",
        help="the stream: 1-200 characters of A-Z a-z 0-9 . _ -, not starting with '.'",
    )


def add_from(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--from",
        dest="start",
        type=int_at_least(1, MAX_POSITION),
        metavar="N",
        help="first position (default, and 1: the first record retained; "
        "a later position below it is an error naming it)",
    )


def int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}: {text!r}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high:,}: {text!r}")
        return value

    parse.__name__ = "integer"
    return parse


SIZE_HELP = "sizes: bytes, or K/M/G/T = KiB/MiB/GiB/TiB (1024-based), KB/MB/GB/TB 1000-based"
"""What --help says of sizes (serve's epilog)."""

DURATION_HELP = "durations: seconds, or 500ms, 90s, 10m, 2h, 7d, 1h30m"
"""What --help says of durations (serve's epilog)."""

_NUMBER = r"(\d[\d_]*(?:\.\d*)?|\.\d+)"
"""A decimal number, `_` allowed between digits (as Python and TOML write them)."""

_SIZE = re.compile(_NUMBER + r"\s*([a-z]*)")
_SIZE_UNITS = {"": 1, "b": 1} | {
    form: base**power
    for power, letter in enumerate("kmgt", start=1)
    for form, base in ((letter, 1024), (letter + "ib", 1024), (letter + "b", 1000))
}


def size(text: str) -> int:
    """A number of bytes: digits (`_` allowed), or a number with a unit of
    _SIZE_UNITS (`64M`, `1.5GiB`, `500MB`), rounded down to whole bytes."""
    match = _SIZE.fullmatch(text.strip().lower())
    if match is None or match.group(2) not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(
            f"not a size: {text!r} (bytes, or a number with K, M, G, T, KiB..., KB...)"
        )
    return int(Decimal(match.group(1).replace("_", "")) * _SIZE_UNITS[match.group(2)])


def size_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """A size (see `size`) within [low, high]."""

    def parse(text: str) -> int:
        value = size(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low:,} bytes: {text!r}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(
                f"must be at most {high:,} bytes ({_binary(high)}): {text!r}"
            )
        return value

    parse.__name__ = "size"
    return parse


def _binary(count: int) -> str:
    """`count` bytes in the largest 1024-based unit that divides it: "16 MiB"."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        scale = _SIZE_UNITS[unit.lower()]
        if count >= scale and count % scale == 0:
            return f"{count // scale:,} {unit}"
    return f"{count:,} bytes"


_DURATION_PART = re.compile(_NUMBER + r"\s*(ms|s|m|h|d)\s*")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration(text: str) -> float:
    """A number of seconds: a plain number (`90`, `0.5`), or numbers each with a
    unit of _DURATION_UNITS, added up (`90s`, `10m`, `1h30m`, `7d`)."""
    stripped = text.strip()
    if re.fullmatch(_NUMBER, stripped):
        return float(stripped.replace("_", ""))
    total, at = 0.0, 0
    while at < len(stripped):
        part = _DURATION_PART.match(stripped, at)
        if part is None:
            break
        total += float(part.group(1).replace("_", "")) * _DURATION_UNITS[part.group(2)]
        at = part.end()
    if at == 0 or at < len(stripped):
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (seconds, or numbers with ms, s, m, h or d: "
            "90s, 10m, 1h30m, 7d)"
        )
    return total


def seconds(text: str) -> float:
    """A duration (see `duration`) of more than 0 and at most MAX_SECONDS."""
    value = duration(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds: {text!r}")
    if not value <= MAX_SECONDS:  # a value the OS timeouts overflow on
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SECONDS:g} seconds: {text!r}")
    return value


def data_dir(text: str) -> str:
    """--data: a directory's path, or a JetStream cluster's nats://H:P[,H:P...];
    '' is refused (it would mean the current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must name a directory, not an empty string")
    if text.startswith("nats://"):
        from ..store.jetstream.layout import parse_servers  # noqa: PLC0415 -- on use

        try:
            parse_servers(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def require_store(path: str) -> Path | str:
    """A directory that is a purelink data directory (`streams/`, `purelink.lock`),
    or empty (a store with no streams yet); else a usage error naming it.  A
    nats:// URL is taken as it is (the cluster is asked when it is read)."""
    if path.startswith("nats://"):
        return path
    directory = Path(path)
    if not directory.is_dir():
        raise UsageError(f"--data {path!r} is not a directory")
    if not any((directory / name).exists() for name in ("streams", "purelink.lock")):
        try:
            empty = next(directory.iterdir(), None) is None
        except OSError as exc:
            raise UsageError(f"cannot read --data {path!r}: {exc.strerror}") from None
        if not empty:
            raise UsageError(
                f"--data {path!r} is not a purelink data directory "
                "(no streams/ folder or purelink.lock in it)"
            )
    return directory
