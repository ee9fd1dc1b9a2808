"""The messages of the wire protocol, as values: what each datagram type says.

Why a module of its own: these are the protocol's vocabulary, used by both
state machines (sender.py, listener_core.py) and by the tests, while wire.py
is how they become bytes and back.  Field by field they follow docs/wire.md
section 3; `wire` re-exports every name here, so `wire.Hello` and the rest
keep working.  Frozen dataclasses (small, immutable, a docstring per
field); `Data` is a NamedTuple because the listener builds one
per DATA datagram on its hot path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, NamedTuple

__all__ = [
    "Accept",
    "Ack",
    "Close",
    "Data",
    "Fragment",
    "Hello",
    "Message",
    "MsgType",
    "MtuAck",
    "Probe",
    "Refuse",
    "RefuseReason",
    "Retry",
]


class MsgType:
    """Datagram types."""

    HELLO = 1
    RETRY = 2
    ACCEPT = 3
    DATA = 4
    FRAGMENT = 5
    ACK = 6
    PROBE = 7
    CLOSE = 8
    REFUSE = 9
    MTU_ACK = 10


class RefuseReason:
    """Why a listener refused a link."""

    FENCED = 1
    """A newer session of this named producer exists."""
    UNKNOWN = 2
    """The listener has no such connection (it restarted or expired it): reconnect."""
    BAD_STREAM = 3
    """The stream name is not valid."""
    LIMIT = 4
    """A configured limit was reached (a listener sends the codes below, which say which)."""
    BAD_REQUEST = 5
    """The request was well-formed but not acceptable (an anonymous producer id
    without its top bit)."""
    FORBIDDEN = 6
    """The key the link named may not write (or read) this stream."""
    REVOKED = 7
    """The key this session was opened with was removed or narrowed (a reload)."""
    UNKNOWN_KEY = 8
    """(said by a KEYREFUSE) the listener has no key of the id the link named."""
    BAD_SECRET = 9
    """(said by a KEYREFUSE) the link's secret is not the key's."""
    EXPIRED_KEY = 10
    """(said by a KEYREFUSE) the key has expired."""
    MAX_LINKS = 11
    """The listener has `max_links` links open already."""
    MAX_STREAMS = 12
    """The stream is new and the store holds `max_streams` streams already."""
    STORE_ERROR = 13
    """The store could not open the stream or make the session's epoch durable
    (out of descriptors, a disk error, a stream stopped by an earlier write error)."""
    BAD_PRODUCER = 14
    """The producer name is not valid (the stream name's rule)."""
    BAD_DATAGRAM_SIZE = 15
    """The HELLO's `max_datagram` is below 128."""
    DISK_FULL = 16
    """The listener's disk has no room for the stream (full, or below its
    --min-free mark): it stores nothing more there until it has room.  A link
    waits and tries its HELLO again (an open session ends with it: the link
    reconnects, and resends what was not stored)."""
    STREAM_FAILED = 17
    """The listener's store failed on this stream (an fsync failed: what was
    written after the last good one cannot be trusted; or a write failed for
    another reason than room) and takes nothing more
    there until it is restarted, which recovers the stream from its files.  A
    link waits and tries its HELLO again, as for DISK_FULL."""

    NAMES: Final = {
        1: "fenced",
        2: "unknown",
        3: "bad_stream",
        4: "limit",
        5: "bad_request",
        6: "forbidden (the key may not use this stream)",
        7: "key revoked",
        8: "unknown key id",
        9: "wrong secret",
        10: "expired key",
        11: "max_links",
        12: "max_streams",
        13: "store_error",
        14: "bad_producer",
        15: "bad_datagram_size",
        16: "disk_full",
        17: "stream_failed",
    }
    """Each reason's name, as a link reports it ("the listener refused the link: max_links")."""
    FOR_NOW: Final = frozenset({DISK_FULL, STREAM_FAILED})
    """Refusals a link waits out: it tries its HELLO again on its backoff."""
    PERMANENT: Final = frozenset(
        {BAD_STREAM, BAD_REQUEST, FORBIDDEN, REVOKED, UNKNOWN_KEY, BAD_SECRET, EXPIRED_KEY}
        | {BAD_PRODUCER, BAD_DATAGRAM_SIZE}
    )
    """Refusals that trying again cannot heal without a change on one side (a key,
    a name, a setting); the others (a limit, a store error, fenced, unknown) can
    heal by themselves, and a link may be tried again."""
    MEANINGS: Final = {
        "bad_stream": "the stream name is not valid",
        "limit": "a limit of the listener was reached",
        "bad_request": "the listener did not accept the link's request",
        "max_links": "the listener has as many links open as its --max-links allows",
        "max_streams": "the stream is new and the store has as many streams as "
        "the listener's --max-streams allows",
        "store_error": "the listener's store could not open the stream or record the "
        "session (see the listener's log)",
        "bad_producer": "the producer name is not valid",
        "bad_datagram_size": "the link's datagram size is below 128 bytes",
        "disk_full": "the listener's disk has no room for the stream (full, or below its "
        "--min-free); the link waits and tries again",
        "stream_failed": "the listener's store failed on the stream (see its log) and "
        "takes nothing more there until it is restarted; the link waits and tries again",
    }
    """What a refusal means, by name, for people (the command line prints it)."""


@dataclass(frozen=True, slots=True)
class Hello:
    """link -> listener: open (or resume) a session."""

    nonce: int
    """Random per connect attempt; echoed in RETRY/ACCEPT/REFUSE."""
    stream: str
    """Stream name."""
    producer: str
    """Producer name; empty for an anonymous producer."""
    producer_id: int
    """An anonymous producer's id, chosen at random by the link and kept across its
    reconnects; 0 for a named producer (the listener derives its id from the name)."""
    max_datagram: int
    """Largest datagram the link will send."""
    cookie: bytes
    """Address-proving token from a RETRY; empty on the first try."""
    epoch: int = 0
    """The epoch of the session this link had before (0 on its first connect).  A
    listener that knows a newer session of the producer refuses it (fenced), so an
    old session can never come back and take over after a listener restart."""


@dataclass(frozen=True, slots=True)
class Retry:
    """listener -> link: prove your address by sending HELLO again with this cookie."""

    nonce: int
    """The HELLO's nonce."""
    cookie: bytes
    """Opaque token bound to the link's address and a time."""


@dataclass(frozen=True, slots=True)
class Accept:
    """listener -> link: the session is open."""

    conn_id: int
    """Listener-chosen id carried in every later datagram of the session."""
    nonce: int
    """The HELLO's nonce."""
    producer: int
    """Producer id (stable for a named producer)."""
    epoch: int
    """This session's epoch."""
    stored: int
    """Last seq of this producer that is durably stored."""
    received: int
    """Last seq received in order (stored, or written and waiting for a sync)."""
    window: int
    """Bytes the listener accepts beyond `received`."""
    max_record: int
    """Largest record the listener accepts."""


class Data(NamedTuple):
    """link -> listener: one batch of whole records (a NamedTuple: hot path)."""

    conn_id: int
    """The session."""
    pn: int
    """Packet number: new for every datagram sent, retransmissions included."""
    batch: memoryview
    """The batch bytes, exactly as they will be stored (position 0)."""


@dataclass(frozen=True, slots=True)
class Fragment:
    """link -> listener: a piece of a batch larger than one datagram."""

    conn_id: int
    """The session."""
    pn: int
    """Packet number."""
    epoch: int
    """The session's epoch."""
    seq: int
    """The batch's first seq (it names the batch)."""
    total: int
    """The batch's full length, header included."""
    offset: int
    """Where this piece starts in the batch."""
    chunk: memoryview
    """The piece: batch bytes [offset, offset + len(chunk))."""


@dataclass(frozen=True, slots=True)
class Ack:
    """listener -> link: what is stored, what is received, what is held."""

    conn_id: int
    """The session."""
    epoch: int
    """The session's epoch."""
    stored: int
    """Last seq durably stored (contiguous)."""
    received: int
    """Last seq received in order."""
    window: int
    """Bytes the listener accepts beyond `received`."""
    largest_pn: int
    """Largest packet number received since the previous answer (0: none)."""
    ack_delay: int
    """Microseconds between receiving `largest_pn` and sending this answer."""
    ranges: tuple[tuple[int, int], ...]
    """Inclusive seq ranges above `received` that are held (out of order)."""
    fragments: tuple[tuple[int, tuple[tuple[int, int], ...]], ...]
    """For partly reassembled large records: (seq, ((start, end), ...)) byte ranges held."""
    duplicates: tuple[int, ...] = ()
    """Packet numbers of datagrams received since the previous answer that brought
    nothing new (every record in them was already received or held), at most 8:
    a retransmission named here proves that the loss it repaired was spurious."""


@dataclass(frozen=True, slots=True)
class Probe:
    """link -> listener: answer now (data outstanding, answers stopped); with
    padding, a path MTU probe, answered by an MtuAck."""

    conn_id: int
    """The session."""
    pn: int
    """Packet number."""
    epoch: int
    """The session's epoch."""
    padding: int = 0
    """Zero bytes after the fields (a path MTU probe is padded to its size)."""


@dataclass(frozen=True, slots=True)
class MtuAck:
    """listener -> link: a padded PROBE (a path MTU probe) arrived."""

    conn_id: int
    """The session."""
    epoch: int
    """The session's epoch."""
    pn: int
    """The probe's packet number."""
    size: int
    """The probe's size as received, bytes (the whole datagram)."""


@dataclass(frozen=True, slots=True)
class Close:
    """link -> listener: the session ends; its state may be dropped."""

    conn_id: int
    """The session."""
    epoch: int
    """The session's epoch."""


@dataclass(frozen=True, slots=True)
class Refuse:
    """listener -> link: no (see RefuseReason)."""

    conn_id: int
    """The session, or 0 when refusing a HELLO."""
    nonce: int
    """The HELLO's nonce (0 when refusing a session's datagram)."""
    epoch: int
    """The refused epoch (0 when refusing a HELLO)."""
    reason: int
    """A RefuseReason."""


Message = Hello | Retry | Accept | Data | Fragment | Ack | Probe | Close | Refuse | MtuAck
