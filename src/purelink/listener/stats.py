"""What a listener reports: `ListenerStats`, and the sync-time histogram behind it.

Why a module of its own: listener.py is the loop, the threads and group
commit; this is the listener's edge towards the application -- the counters
it hands over (the README's Python API, `listener.stats()`) -- and reads on
its own.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Final

__all__ = ["DROP_REASONS", "SYNC_BUCKETS", "ListenerStats", "SyncTimes"]

SYNC_BUCKETS: Final = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
)  # fmt: skip
"""Upper bounds (seconds) of the fdatasync latency buckets in `ListenerStats.sync_seconds`."""

DROP_REASONS: Final = (
    # a datagram or frame that does not decode, or is not for the listener
    "truncated", "bad_magic", "bad_version", "bad_checksum", "unknown_type", "malformed",
    "unauthenticated", "replayed", "wrong_direction",
    # a batch or piece over a limit
    "too_large", "reorder_full", "memory_limit",
    # a handshake refused
    "handshake_rate_limited", "bad_cookie", "replayed_hello", "replayed_init", "bad_request",
    "bad_stream", "link_limit", "stream_limit", "store_error", "disk_full", "stream_failed",
    "unknown_key", "expired_key", "bad_secret", "forbidden", "key_revoked", "no_handshake",
    "no_channel",
    # a datagram for no live session of its sender
    "unknown_conn", "wrong_address", "stale_epoch", "not_accepted", "session_expired",
    # an answer not sent
    "amplification_limit", "send_failed", "no_route",
    # the TCP side
    "accept_failed", "connection_limit", "no_fds", "read_timeout", "junk_frames",
    "truncated_frame", "frame_too_large", "unsent_limit", "slow_reader",
    # subscriptions refused or abandoned (tail/server.py)
    "tail_bad_request", "tail_unauthenticated", "tail_unknown_key", "tail_expired_key",
    "tail_bad_secret", "tail_forbidden", "tail_key_revoked", "tail_request_timeout",
    "tail_truncated_request", "tail_trailing_bytes", "tail_too_many_pending",
    "tail_too_many_subscribers", "tail_rate_limited", "tail_below_retained", "tail_damaged",
    "tail_failed",
)  # fmt: skip
"""Every reason the listener counts in `ListenerStats.dropped` (docs/security.md says
what each means): the metrics show each from the start, at 0.  tests/test_metrics.py
reads the source for the reasons it counts and checks that each is here."""


@dataclass(frozen=True)
class ListenerStats:
    """A snapshot of a listener's counters."""

    datagrams: int
    """UDP datagrams received (after splitting GRO buffers) and TCP frames
    received: `frames` says how many of them were frames."""
    bytes: int
    """Bytes received (UDP datagrams and TCP frames; `frame_bytes` of TCP)."""
    recv_calls: int
    """Receive system calls that returned data."""
    drains: int
    """Readiness events drained (mechanism 3): of the UDP socket, the TCP listening
    socket and TCP connections."""
    accepts: int
    """TCP connections accepted (mechanism 3)."""
    accept_drains: int
    """Readiness events of the TCP listening socket; accepts / accept_drains is the
    number of connections taken per event."""
    connections: int
    """TCP connections of links open now (and those not yet known to be a
    subscriber's); `tail_connections` counts the subscribers'."""
    sessions: int
    """Sessions accepted (handshakes completed), over UDP and TCP."""
    links: int
    """Sessions open now."""
    batches_stored: int
    """Batches appended to the store."""
    records_stored: int
    """Records appended to the store."""
    syncs: int
    """fdatasync calls (group commits)."""
    duplicates: int
    """Batches received again and dropped (resends)."""
    held: int
    """Batches held out of order, and pieces (FRAGMENT) kept until their batch
    is whole."""
    mtu_probes: int
    """Path MTU probes (padded PROBEs) answered with an MTU_ACK."""
    retries: int
    """RETRY answers (address proofs asked for)."""
    fenced: int
    """Sessions fenced by a newer one."""
    acks: int
    """Answers sent."""
    gro: bool
    """Whether UDP GRO is on."""
    rcvbuf: int
    """The socket's receive buffer, bytes."""
    pool_hits: int
    """Receive buffers reused from the free list (mechanism 4); one free list
    serves UDP receives and TCP connection reads, so this counts both."""
    pool_misses: int
    """Receive buffers allocated because the free list was empty (UDP and TCP)."""
    memory: int
    """Bytes held out of order across all links."""
    dropped: dict[str, int] = field(default_factory=dict)
    """Datagrams dropped, by reason (and TCP connections closed for bad input)."""
    frames: int = 0
    """TCP frames received (counted in `datagrams` too)."""
    subscribers: int = 0
    """Subscriptions being served now (`purelink.subscribe`, `purelink tail`)."""
    tail_connections: int = 0
    """TCP connections of subscribers open now: those served, and those still
    sending their request."""
    frame_bytes: int = 0
    """Bytes of TCP frames received (counted in `bytes` too)."""
    key_reloads: int = 0
    """Key tables the listener took since it started (`set_keys`: SIGHUP in `serve`)."""
    key_reload_failures: int = 0
    """Reloads that failed (a keys file that did not read): the keys in use stayed."""
    stream_first: dict[str, int] = field(default_factory=dict)
    """Position of the first record retained, per stream of a data directory
    (0 when empty): retention moves it."""
    stream_last: dict[str, int] = field(default_factory=dict)
    """Position of the last record written, per stream of a data directory (0 when empty)."""
    stream_records: dict[str, int] = field(default_factory=dict)
    """Records stored since start, per stream."""
    stream_bytes: dict[str, int] = field(default_factory=dict)
    """Bytes of batches stored since start, per stream."""
    sync_seconds: tuple[int, ...] = ()
    """fdatasync calls by duration: one count per bound of SYNC_BUCKETS (at most
    that long, and longer than the bound before), then one for the rest."""
    sync_seconds_sum: float = 0.0
    """Seconds spent in fdatasync calls, all together."""
    no_room: dict[str, str] = field(default_factory=dict)
    """Streams the store has no room for now, and why: "disk_full" (a write
    failed with ENOSPC or EDQUOT) or "min_free" (below the --min-free mark).
    Their links wait; the streams go on by themselves once there is room."""
    free_bytes: dict[str, int] = field(default_factory=dict)
    """Bytes free on the file system of each stream written, as last looked at."""


class SyncTimes:
    """How long the listener's fdatasyncs take, in the buckets of SYNC_BUCKETS.

    One observation per sync (milliseconds apart), so the cost is nothing
    beside the sync; written by whichever thread syncs, read by stats().
    """

    def __init__(self) -> None:
        self.counts = [0] * (len(SYNC_BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(SYNC_BUCKETS, seconds)] += 1
        self.sum += seconds
