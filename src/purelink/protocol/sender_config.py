"""What configures a sender and what it counts (apart from sender.py, which is
the state machine itself; one configuration dataclass with a
docstring under every field)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SenderConfig", "SenderStats"]


@dataclass(frozen=True)
class SenderConfig:
    """How a sender behaves."""

    stream: str
    """The stream written to."""
    producer: str = ""
    """Producer name; empty for an anonymous producer."""
    anonymous_id: int = 0
    """An anonymous producer's id (top bit set); 0 to draw one at random."""
    datagram_size: int = 1400
    """Largest datagram put on the wire."""
    pmtu: bool = False
    """Find the path MTU (DPLPMTUD, pmtu.py) and send datagrams of that size, at
    most datagram_size; off: always datagram_size (TCP, or a known path)."""
    handshake_rto: float = 0.1
    """First handshake retry interval; doubled on each retry up to max_handshake_rto."""
    max_handshake_rto: float = 1.0
    """Ceiling of the handshake retry interval (also the reconnect backoff cap)."""
    silence_timeout: float = 20.0
    """Seconds without any answer, while data is outstanding, after which the
    session is taken as lost and the sender reconnects (a restarted listener
    answers REFUSE(unknown) at once, so this only matters when nothing answers)."""
    max_probe_interval: float = 1.0
    """Ceiling of the backed-off probe interval."""
    burst: int = 64
    """Most datagrams returned by one datagrams_to_send call (a paced sender
    returns at most one pacing quantum's worth, which may be fewer)."""
    congestion: str = "bbr"
    """The congestion controller: "bbr" (paced, model-based; judges what shares
    the path and competes with TCP flows by it), "bbr-cooperative" (the same
    without the judgement), "cubic" (paced, loss-based) or "newreno"."""


@dataclass
class SenderStats:
    """Counters of a sender (plain ints; the driver snapshots them)."""

    datagrams: int = 0
    bytes: int = 0
    batches: int = 0
    fragments: int = 0
    payload: int = 0
    retransmits: int = 0
    retransmit_bytes: int = 0
    probes: int = 0
    acks: int = 0
    lost: int = 0
    spurious: int = 0
    """Losses that proved spurious (the original arrived after all)."""
    handshakes: int = 0
    reconnects: int = 0
    disk_full: int = 0
    """Refusals for now because the listener's disk had no room (the link waited)."""
    stream_failed: int = 0
    """Refusals for now because the listener's store failed on the stream (the
    link waited for a restart of the listener)."""
    dropped: int = 0
