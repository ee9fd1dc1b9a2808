"""How a purelink stream lies in NATS JetStream: names, subjects, headers.

Why a module of its own: this is the part any NATS client in any language
must know to read a stream (docs/jetstream.md spells it out), and the part
the writer and the reader must agree on byte for byte.  It is pure code: no
client, no clock, tested alone.

* One JetStream stream per purelink stream, named ``PURELINK_`` + the name
  with ``_`` written ``__`` and ``.`` written ``_d`` (JetStream names may not
  hold a dot); a name whose encoding is longer than `MAX_ENCODED` is
  ``PURELINK_H`` + the first 32 hex digits of its SHA-256.  The stream's
  metadata holds the real name under ``purelink.stream``.
* Every message of that JetStream stream is one purelink batch, on the
  subject ``purelink.<encoded>.b.<producer as 16 hex digits>`` (the
  producer's id is in the subject so that "the last batch of producer P",
  which is what deduplication needs after a failover, is one get of the last message on a subject).
* The body is the batch exactly as the file store keeps it (docs/wire.md,
  section 1): its 8-byte position field holds the stream position of its
  first record, its CRC-32C covers the rest.  A batch larger than
  `MAX_BODY` (a record of more than ~1 MB) is cut into parts: consecutive
  messages, each with the same headers and ``Purelink-Part: i/n``.
* Headers (for readers that do not parse the body): ``Purelink-Position``,
  ``Purelink-Count``, ``Purelink-Producer`` (16 hex), ``Purelink-Seq`` (the
  first record's seq on its producer), ``Purelink-Epoch``, ``Purelink-Base``
  (the producer's last stored seq when that epoch began), ``Purelink-Owner``
  (the link instance that epoch went to, 16 hex).
* A producer's new epoch (a new session, which fences the older ones) is an
  *epoch marker* on the producer's own subject: no body, headers
  ``Purelink-Kind: epoch``, ``Purelink-Epoch``, ``Purelink-Owner`` (the link
  instance it went to, 16 hex) and ``Purelink-Seq`` (the producer's last
  stored seq when it was taken).  A marker holds no records and takes no
  position: readers skip it.  Because batches are written with an expected
  last sequence *on the producer's subject*, a batch of an older session is
  refused by JetStream once a marker stands after what that session saw.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final

__all__ = [
    "MAX_BODY",
    "STREAM_PREFIX",
    "BatchHeaders",
    "EpochMarker",
    "batch_subject",
    "decode_headers",
    "decode_marker",
    "encode_headers",
    "encode_marker",
    "parse_servers",
    "stream_name",
]

STREAM_PREFIX: Final = "PURELINK_"
METADATA_KEY: Final = "purelink.stream"
MAX_ENCODED: Final = 200
"""Longest encoded name kept readable; longer ones are hashed (a JetStream stream
is a directory on each server: its name must stay well under 255 bytes)."""
MAX_BODY: Final = 1_000_000
"""Largest message body: under NATS's default `max_payload` (1 MiB) with room for
the headers, so a cluster with default settings takes every message."""


def parse_servers(url: str) -> list[str]:
    """`nats://h1:4222,h2:4222` (or `nats://h1:4222,nats://h2:4222`) -> the list
    of server URLs; ValueError naming the problem for anything else."""
    if not url.startswith("nats://"):
        raise ValueError(f"a JetStream URL starts with nats://, not {url!r}")
    servers = []
    for raw in url[len("nats://") :].split(","):
        part = raw.strip().removeprefix("nats://")
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad NATS server {part!r} in {url!r} (expected HOST:PORT)")
        servers.append(f"nats://{host}:{int(port)}")
    return servers


def _encode(name: str) -> str:
    encoded = name.replace("_", "__").replace(".", "_d")
    if len(encoded) > MAX_ENCODED:
        return "H" + hashlib.sha256(name.encode()).hexdigest()[:32]
    return encoded


def stream_name(name: str) -> str:
    """The JetStream stream that holds purelink stream `name`."""
    return STREAM_PREFIX + _encode(name)


def batch_subject(name: str, producer: int) -> str:
    """The subject of producer `producer`'s batches in stream `name`."""
    return f"purelink.{_encode(name)}.b.{producer:016x}"


def batches_filter(name: str) -> str:
    """The subject filter of every batch of stream `name`."""
    return f"purelink.{_encode(name)}.b.*"


@dataclass(frozen=True)
class BatchHeaders:
    """What the headers of one batch message say."""

    position: int
    """Stream position of the batch's first record."""
    count: int
    """Records in the batch."""
    producer: int
    """The producer's id."""
    seq: int
    """The first record's seq on its producer."""
    epoch: int
    """The producer's session epoch that sent it."""
    part: int = 1
    """Which part of a batch cut into several messages (1-based)."""
    parts: int = 1
    """How many parts the batch was cut into."""
    base: int = 0
    """The producer's last stored seq when the epoch of this batch was taken (so
    that a later batch of a newer epoch still says what the older one stored)."""
    owner: int = 0
    """The link instance the batch's epoch went to (0: not known, an anonymous
    producer's)."""

    @property
    def last_seq(self) -> int:
        return self.seq + self.count - 1

    @property
    def end(self) -> int:
        """The position after the batch's last record."""
        return self.position + self.count


def encode_headers(h: BatchHeaders) -> dict[str, str]:
    out = {
        "Purelink-Position": str(h.position),
        "Purelink-Count": str(h.count),
        "Purelink-Producer": f"{h.producer:016x}",
        "Purelink-Seq": str(h.seq),
        "Purelink-Epoch": str(h.epoch),
        "Purelink-Base": str(h.base),
        "Purelink-Owner": f"{h.owner:016x}",
    }
    if h.parts > 1:
        out["Purelink-Part"] = f"{h.part}/{h.parts}"
    return out


def decode_headers(headers: dict[str, str] | None) -> BatchHeaders:
    """The headers of a batch message; ValueError when they are missing or bad."""
    if not headers:
        raise ValueError("not a purelink batch message: no headers")
    try:
        part, parts = 1, 1
        if "Purelink-Part" in headers:
            a, _, b = headers["Purelink-Part"].partition("/")
            part, parts = int(a), int(b)
        h = BatchHeaders(
            position=int(headers["Purelink-Position"]),
            count=int(headers["Purelink-Count"]),
            producer=int(headers["Purelink-Producer"], 16),
            seq=int(headers["Purelink-Seq"]),
            epoch=int(headers["Purelink-Epoch"]),
            part=part,
            parts=parts,
            base=int(headers.get("Purelink-Base", "0")),
            owner=int(headers.get("Purelink-Owner", "0"), 16),
        )
    except (KeyError, ValueError) as exc:
        raise ValueError(f"not a purelink batch message: bad headers ({exc})") from None
    if h.position < 1 or h.count < 1 or h.seq < 1 or not 1 <= h.part <= h.parts:
        raise ValueError(f"not a purelink batch message: headers out of range ({headers})")
    return h


@dataclass(frozen=True)
class EpochMarker:
    """An epoch taken by a new session of a producer."""

    epoch: int
    """The new epoch."""
    owner: int
    """The link instance the epoch went to."""
    seq: int
    """The producer's last stored seq when the epoch was taken."""


def encode_marker(m: EpochMarker) -> dict[str, str]:
    return {
        "Purelink-Kind": "epoch",
        "Purelink-Epoch": str(m.epoch),
        "Purelink-Owner": f"{m.owner:016x}",
        "Purelink-Seq": str(m.seq),
    }


def decode_marker(headers: dict[str, str] | None) -> EpochMarker | None:
    """The marker a message's headers describe, or None if it is not a marker
    (ValueError if it says it is one and its headers are bad)."""
    if not headers or headers.get("Purelink-Kind") != "epoch":
        return None
    try:
        m = EpochMarker(
            int(headers["Purelink-Epoch"]),
            int(headers["Purelink-Owner"], 16),
            int(headers["Purelink-Seq"]),
        )
    except (KeyError, ValueError) as exc:
        raise ValueError(f"bad epoch marker headers ({exc})") from None
    if m.epoch < 1 or m.seq < 0:
        raise ValueError(f"epoch marker out of range ({headers})")
    return m
