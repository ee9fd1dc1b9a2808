"""What link.py needs besides the Link itself: its counters and its argument checks.

Why it exists: link.py holds the hot path and the link thread; the snapshot
dataclass of its counters and the checks that turn bad arguments into one
ValueError at once (before any socket or thread exists) are kept here, so
that file stays about the mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..native import IMPLEMENTATION
from ..protocol.names import validate_stream_name

__all__ = ["LinkStats", "check_arguments"]


def check_arguments(
    stream: str,
    producer: str | None,
    capacity: int,
    capacity_bytes: int,
    timeout: float,
    secret: bytes | None,
    key_id: str | None,
    close_timeout: float | None,
) -> None:
    """Raise ValueError (TypeError for a wrong type) for what no listener would take."""
    validate_stream_name(stream)
    if producer:  # None or "": anonymous
        validate_stream_name(producer, "producer")
    if capacity < 1 or capacity_bytes < 1:
        raise ValueError("capacity and capacity_bytes must be positive")
    if timeout <= 0:
        raise ValueError("timeout must be positive")
    if close_timeout is not None and close_timeout < 0:
        raise ValueError("close_timeout must be >= 0 (or None: wait as long as it takes)")
    if secret is not None and len(secret) < 16:  # the listener's rule too
        raise ValueError("secret must be at least 16 bytes")
    if key_id is not None and secret is None:
        raise ValueError("key_id needs the key's secret (secret=)")


@dataclass(frozen=True)
class LinkStats:
    """A snapshot of a link's counters."""

    queued: int
    """Last seq queued."""
    stored: int
    """Last seq the listener said is stored."""
    told: int
    """Last seq the owner was told about (on_stored / waiters)."""
    wakeups: int
    """eventfd writes by queue() (mechanism 1)."""
    sleeps: int
    """Times the link thread went to sleep in epoll."""
    datagrams: int
    """Datagrams sent."""
    bytes_sent: int
    """Bytes of datagrams sent (UDP payloads, or TCP frames less their 4-byte
    prefix), retransmissions and probes included; with a secret, before each is
    sealed."""
    payload_bytes: int
    """Bytes of records sent (each record once, however often it was resent)."""
    wire_ratio: float
    """Wire bytes / payload_bytes (0.0 before any record was sent): what the wire
    costs per byte of payload, headers, CRCs, resends and probes included (with
    a secret, the 32 bytes that sealing adds to each datagram too)."""
    datagram_size: int
    """The largest datagram sent now: the path MTU found (UDP), at most the
    `datagram_size` asked for."""
    send_calls: int
    """System calls that sent datagrams (one per GSO group, or per datagram)."""
    gso: bool
    """Whether UDP GSO is in use."""
    batches: int
    """Batches packed (first transmissions)."""
    retransmits: int
    """Datagrams sent again after a loss."""
    probes: int
    """Probes sent because answers stopped."""
    acks: int
    """Answers received."""
    reconnects: int
    """New handshakes after a lost session."""
    parks: int
    """Times a waiter (wait_stored) parked (mechanism 2)."""
    unparks: int
    """Times the link thread signalled a parked waiter."""
    rtt: float
    """Smoothed round-trip time, seconds."""
    cwnd: int
    """Congestion window, bytes."""
    send_errors: int
    """Datagrams the kernel refused to send (counted, then resent as lost)."""
    late_pickups: int
    """Times the thread found queued records after a sleep that only its timer
    ended.  A diagnostic: a lost wakeup would show here, but so does a record
    queued in the instant the timer fired (the lost-wakeup test runs with no
    timers at all, where a lost wakeup would hang instead)."""
    congestion: str
    """The congestion controller in charge: "bbr", "bbr-cooperative", "cubic" or "newreno" on a
    udp:// link (`connect(congestion=...)`); "kernel" on a tcp:// link, whose
    bytes the kernel's own TCP paces (`cwnd` is then only the link's bound on
    bytes in flight, and the fields below say None: the link cannot see them)."""
    congestion_state: str
    """The controller's phase: BBR's "startup", "drain", "probe_bw" or
    "probe_rtt"; CUBIC's and NewReno's "slow_start", "congestion_avoidance" or
    "recovery"; "" on a tcp:// link."""
    btl_bw: float | None
    """The controller's estimate of the path's bottleneck bandwidth, bytes/s
    (BBR's model; 0.0 before the first answer); None for a controller that keeps
    no such estimate (CUBIC, NewReno) and on a tcp:// link."""
    min_rtt: float | None
    """The smallest round trip the controller has seen, seconds (BBR: within
    its 10 s window, the handshake's included; 0.0 before the first sample);
    None for one that does not track it (NewReno) and on a tcp:// link."""
    pacing_rate: float | None
    """Bytes per second at which the link releases datagrams (0.0: not paced,
    the window alone clocks them, as with NewReno); None on a tcp:// link."""
    competing: bool | None
    """Whether the controller believes other traffic shares the path's
    bottleneck with this link (None when it cannot tell, and on a tcp:// link)."""
    cross_traffic: str | None = None
    """What the controller believes shares the bottleneck, and so how the link
    competes (BBR, the default): "none" (alone, or beside purelink links:
    the cooperative rules), "loss" (a loss-based flow such as CUBIC: a
    loss-based window), "model" (a model-based one such as BBR v1: BBR v1's
    rules); None for a controller that cannot tell, and on a tcp:// link."""
    disk_full: int = 0
    """Refusals for now because the listener's disk had no room for the stream."""
    waiting: str = ""
    """Why the link waits now, as the listener said ("disk_full"), until it is
    storing again; "" otherwise."""
    implementation: str = IMPLEMENTATION
    """Which implementation of the hot paths this process runs: "compiled core"
    (purelink._speedups) or "pure Python" (`purelink.native`; PURELINK_NO_EXTENSIONS=1
    forces it).  The same words as `purelink --version`."""
