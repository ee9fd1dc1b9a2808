"""ListenerConfig: everything a `Listener` is told, checked once, in one place.

Why it exists: most of a listener's keyword arguments are limits, and checking
them one by one made `Listener.__init__` mostly validation.  Here every limit
is checked against the one table of bounds (limits.py, which `purelink serve`
holds its options to as well), and the rules between arguments -- something
to listen on, no open address without keys (docs/security.md), retention only
for a data directory -- each in a step of its own.  A `ListenerConfig` that
exists is valid; `Listener(...)` builds one from its keyword arguments (the
public signature, with its defaults, is Listener's), so the errors a caller
sees are the ones it always saw.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Final

from .. import _address
from ..protocol.core_parts import CoreConfig
from ..protocol.keys import KeyTable
from ..protocol.names import validate_stream_name
from ..store.jetstream.layout import parse_servers
from .limits import LIMITS, check
from .storage import MinFree

__all__ = ["SYNC_MODES", "ListenerConfig"]

DEFAULT_MIN_FREE: Final = "1%"
"""The default low-space mark: 1 % of the file system (a 100 GB disk keeps 1 GB free)."""


def parse_min_free(value: int | str) -> MinFree:
    """BYTES (an int, or its digits) or "P%" (P from 0 to 50) -> MinFree; ValueError else."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError("min_free must be a number of bytes or a percentage like '1%'")
    text = str(value).strip()
    try:
        if text.endswith("%"):
            percent = float(text[:-1])
            if not 0 <= percent <= 50:
                raise ValueError
            return MinFree(fraction=percent / 100)
        count = int(text)
        if count < 0:
            raise ValueError
        return MinFree(bytes=count)
    except ValueError:
        raise ValueError(
            f"min_free must be bytes (0 or more) or a percentage from 0% to 50%, not {value!r}"
        ) from None


SYNC_MODES: Final = ("batch", "always", "none")
"""When a data directory's writes are synced: group commit, every write, never."""


@dataclass(frozen=True)
class ListenerConfig:
    """A listener's settings, every one within its bounds (see the module)."""

    store: str | os.PathLike[str]
    """Where the streams are kept: a data directory's path, or a JetStream
    cluster's nats://HOST:PORT[,HOST:PORT...] (docs/jetstream.md)."""
    udp: str | None
    """UDP address to bind, "HOST:PORT" (port 0: any free port); None: no UDP."""
    tcp: str | None
    """TCP address to bind, "HOST:PORT"; None: no TCP (nor subscriptions)."""
    sync: str
    """One of SYNC_MODES: when a data directory's writes are made durable."""
    keys: KeyTable | None
    """The keys every datagram and frame is encrypted under; None: none.  Given
    `secret`, it becomes the one key that may do everything."""
    insecure: bool
    """Whether a non-loopback address may be bound without keys."""
    segment_bytes: int
    """A stream rolls to a new segment file past this many bytes."""
    retain_bytes: int | None
    """Every stream's retention by size, bytes (None: keep all)."""
    retain_age: float | None
    """Every stream's retention by age, seconds (None: keep all)."""
    retention: Mapping[str, tuple[int | None, float | None]]
    """Streams with a retention of their own: (retain_bytes, retain_age) by name."""
    max_links: int
    """Sessions open at once, at most."""
    max_streams: int
    """Streams in the store, at most."""
    max_record: int
    """The largest record accepted, bytes."""
    max_reorder: int
    """Bytes held out of order per link."""
    max_memory: int
    """Bytes held out of order across all links."""
    handshake_rate: float
    """HELLOs per second per source IP; 0 = no limit."""
    handshake_burst: float
    """The HELLO bucket's size, per source IP."""
    max_connections: int
    """TCP connections open at once, at most."""
    read_timeout: float
    """Seconds a TCP connection has to finish a frame, or to open a session."""
    max_subscriptions: int
    """Subscriptions served at once, at most."""
    replicas: int
    """With a JetStream cluster: the copies it keeps of each stream."""
    secret: bytes | None = None
    """One pre-shared secret instead of `keys` (at least 16 bytes)."""
    min_free: int | str = DEFAULT_MIN_FREE
    """The low-space mark of a data directory's file systems: bytes, or "P%" of
    the file system's size; below it a stream there stores nothing more until
    there is room (listener/storage.py)."""

    def __post_init__(self) -> None:
        if self.sync not in SYNC_MODES:
            raise ValueError(f"sync must be one of {', '.join(SYNC_MODES)}, not {self.sync!r}")
        if self.udp is None and self.tcp is None:
            raise ValueError("nothing to listen on: give udp=, tcp= or both")
        for address in (self.udp, self.tcp):
            if address is not None:
                _address.parse_hostport(address)  # ValueError for a malformed one
        self._check_limits()
        parse_min_free(self.min_free)  # ValueError now for a bad one
        self._key_table()
        self._refuse_open_addresses()
        self._check_retention()

    def _check_limits(self) -> None:
        """Every limit within LIMITS, as the int or float it is: retain_bytes and
        retain_age may be None, and bind the streams of `retention` too."""
        for field in fields(self):
            if field.name in LIMITS:
                value = getattr(self, field.name)
                if value is not None:
                    object.__setattr__(self, field.name, check(field.name, value))
        for bytes_, age in self.retention.values():
            if bytes_ is not None:
                check("retain_bytes", bytes_)
            if age is not None:
                check("retain_age", age)

    def _key_table(self) -> None:
        """`keys`, or `secret` as one key that may do everything (not both)."""
        if self.secret is not None:
            if self.keys is not None:
                raise ValueError("give secret= or keys=, not both")
            keys = KeyTable.single(self.secret)  # raises ValueError below 16 bytes
            object.__setattr__(self, "keys", keys)

    def _refuse_open_addresses(self) -> None:
        """Without keys, only loopback addresses, unless `insecure` (docs/security.md;
        `serve` says the same of its options)."""
        if self.keys is not None or self.insecure:
            return
        for name, text in (("udp", self.udp), ("tcp", self.tcp)):
            if text is not None and not _address.is_loopback(_address.parse_hostport(text)[0]):
                raise ValueError(
                    f"refusing to listen on non-loopback {name}={text!r} without a secret "
                    "(pass insecure=True to do it anyway)"
                )

    def _check_retention(self) -> None:
        """A JetStream cluster's URL is well formed and has no retention of ours
        (its streams' limits say what it keeps); a directory's per-stream
        retention names valid streams."""
        if self.jetstream_url is not None:
            parse_servers(self.jetstream_url)  # ValueError now for a bad URL
            if self.retain_bytes is not None or self.retain_age is not None or self.retention:
                raise ValueError(
                    "a JetStream cluster keeps what its streams' limits say: "
                    "retain_bytes, retain_age and retention are for a data directory"
                )
        retention = {validate_stream_name(k): v for k, v in self.retention.items()}
        object.__setattr__(self, "retention", retention)

    def min_free_mark(self) -> MinFree:
        """`min_free`, parsed."""
        return parse_min_free(self.min_free)

    @property
    def jetstream_url(self) -> str | None:
        """The cluster's URL when the store is a JetStream cluster, else None."""
        where = str(self.store)
        return where if where.startswith("nats://") else None

    def core_config(self) -> CoreConfig:
        """The limits the sans-IO listener core enforces."""
        return CoreConfig(
            max_links=self.max_links,
            max_record=self.max_record,
            max_reorder=self.max_reorder,
            max_memory=self.max_memory,
            handshake_rate=self.handshake_rate,
            handshake_burst=self.handshake_burst,
        )
