"""The listener core's parts that are not its state machine: configuration,
counters, the store it talks to, and the handshake cookies.

Kept apart from the state machine (listener_core.py and its core_*.py parts)
so that the core reads as what it does with each datagram (small files,
split by concept).
"""

from __future__ import annotations

import hmac
import os
import struct
from dataclasses import dataclass, field
from hashlib import blake2b
from typing import Final, Protocol

__all__ = [
    "COOKIE_SIZE",
    "Address",
    "Cookies",
    "CoreConfig",
    "CoreStats",
    "ProducerTable",
    "cookie_time",
    "named_producer_id",
]

Address = tuple[str, int] | tuple[str, int, int, int]
_COOKIE_TIME = struct.Struct("<I")
COOKIE_SIZE: Final = _COOKIE_TIME.size + 16


def named_producer_id(name: str) -> int:
    """The stable id of a named producer (top bit clear; anonymous ids have it set)."""
    digest = blake2b(name.encode("utf-8"), digest_size=8, person=b"purelink.prod").digest()
    return (int.from_bytes(digest, "little") & ~(1 << 63)) or 1


class ProducerTable(Protocol):
    """The producer table: what the core needs of a store about producers
    (epochs, last seqs); `DataDirProducers` for a data directory, the
    JetStream backend itself for a cluster."""

    def producer_state(self, stream: str, pid: int) -> tuple[int, int]:
        """(highest epoch, last seq written) of a producer; (0, 0) if unknown.
        Opens (creating) the stream: raises ValueError for a bad name and
        purelink.Error when a limit forbids a new stream."""

    def epoch_owner(self, stream: str, pid: int) -> int:
        """The link instance the producer's highest epoch was handed to (0: unknown)."""

    def new_epoch(self, stream: str, pid: int, durable: bool, owner: int = 0) -> int:
        """The next epoch of a producer, handed to link instance `owner`; persisted
        before it returns when durable."""

    def forget(self, stream: str, pid: int) -> None:
        """An anonymous producer's link said CLOSE with every record stored: that
        link instance never comes back, so its deduplication state may go."""


@dataclass(frozen=True)
class CoreConfig:
    """How a listener's protocol core behaves."""

    max_links: int = 100_000
    """Most sessions at once; a HELLO past it is refused (limit)."""
    max_record: int = 16 << 20
    """Largest record accepted."""
    max_reorder: int = 4 << 20
    """Bytes of out-of-order batches and partial records held per producer."""
    max_memory: int = 1 << 30
    """Bytes held out of order across all producers; past it, out-of-order data is dropped."""
    cookie_lifetime: float = 30.0
    """Seconds a RETRY cookie stays valid."""
    fenced_memory: int = 10_000
    """Fenced or closed sessions remembered (so their datagrams get a precise refusal)."""
    handshake_rate: float = 1000.0
    """HELLOs per second a source IP may send, sustained (its token bucket's refill
    rate); past it they are dropped (handshake_rate_limited).  0 = no limit."""
    handshake_burst: float = 2000.0
    """HELLOs a source IP may send at once (its bucket's size)."""
    handshake_sources: int = 16_384
    """Source IPs whose buckets are remembered; the least recently seen goes first."""
    hello_memory: int = 100_000
    """HELLOs of ended sessions remembered while their cookie is fresh, so that a
    replay of one cannot open a session that fences the live one."""
    ack_hold: float = 0.005
    """Seconds an ACK to a proven peer (a TCP connection) that would say "received"
    ahead of "stored" may wait for the sync in flight, so that one ACK says both
    (0 = never held).  Well under the link's smallest RTO (20 ms): the wait is
    reported as ack_delay and never makes the link probe."""
    idle_timeout: float = 600.0
    """Seconds without a datagram after which a session may be expired (its link
    vanished without a CLOSE).  Expiry is lazy: checked when HELLOs come, so an
    idle listener keeps no timer.  A link whose session expired just reconnects
    (REFUSE(unknown)) and resumes from the store, exactly once."""


@dataclass
class CoreStats:
    """Counters of the core (plain ints)."""

    datagrams: int = 0
    bytes: int = 0
    batches: int = 0
    records: int = 0
    duplicates: int = 0
    held: int = 0
    acks: int = 0
    mtu_probes: int = 0
    """Path MTU probes (padded PROBEs) answered with an MTU_ACK."""
    retries: int = 0
    accepts: int = 0
    fenced: int = 0
    forgotten: int = 0
    """Anonymous producers whose state was let go: after their link's CLOSE, or at
    the end of a session in which they never stored a record."""
    dropped: dict[str, int] = field(default_factory=dict)


class Cookies:
    """RETRY cookies (QUIC Retry style): a u32 of the listener's clock in whole
    seconds, then a 16-byte keyed BLAKE2b of the source address and that time
    under a random per-process key.  Valid for `lifetime` seconds, from the
    address it was given to only; after a restart every old cookie is foreign."""

    def __init__(self, lifetime: float) -> None:
        self.lifetime = lifetime
        self._key = os.urandom(32)

    def make(self, addr: Address, stamp: int) -> bytes:
        """The cookie for `addr` at time `stamp` (whole seconds)."""
        mac = blake2b(
            repr(addr[:2]).encode() + _COOKIE_TIME.pack(stamp), key=self._key, digest_size=16
        ).digest()
        return _COOKIE_TIME.pack(stamp) + mac

    def check(self, cookie: bytes, addr: Address, now: float) -> bool:
        """Whether `cookie` was made by this process for `addr` and is still fresh."""
        if len(cookie) != COOKIE_SIZE:
            return False
        (stamp,) = _COOKIE_TIME.unpack_from(cookie)
        age = int(now) - stamp
        if age < -1 or age > self.lifetime:
            return False
        return hmac.compare_digest(self.make(addr, stamp), cookie)


def cookie_time(cookie: bytes) -> int:
    """When a well-formed cookie was made (whole seconds of the listener's clock)."""
    return int(_COOKIE_TIME.unpack_from(cookie)[0])
