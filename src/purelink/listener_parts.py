"""What a listener reports (`ListenerStats`) and how its protocol core sees the store.

Why a module of its own: listener.py is the loop, the threads and group
commit; these two are the listener's edges -- the counters it hands to the
application (SPEC section 3, `listener.stats()`) and the `StoreView` its
sans-IO core calls (protocol/core_parts.py) -- and each reads on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import Error
from .store.store import DataDir

__all__ = ["ListenerStats", "StoreOverDataDir"]


@dataclass(frozen=True)
class ListenerStats:
    """A snapshot of a listener's counters."""

    datagrams: int
    """Datagrams received (after splitting GRO buffers)."""
    bytes: int
    """Bytes received."""
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
    """TCP connections open now."""
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


class StoreOverDataDir:
    """The core's StoreView over a DataDir."""

    def __init__(self, data: DataDir, failed: set[str]) -> None:
        self.data = data
        self.failed = failed  # streams a write failed on: no new session may start there

    def producer_state(self, stream: str, pid: int) -> tuple[int, int]:
        log_ = self.data.stream(stream)
        state = log_.producers.get(pid)
        return (state.epoch, state.last_seq) if state is not None else (0, 0)

    def epoch_owner(self, stream: str, pid: int) -> int:
        state = self.data.stream(stream).producers.get(pid)
        return state.owner if state is not None else 0

    def new_epoch(self, stream: str, pid: int, durable: bool, owner: int = 0) -> int:
        if stream in self.failed:
            raise Error(f"stream {stream!r} cannot be written (a store error; see the log)")
        return self.data.stream(stream).new_epoch(pid, durable=durable, owner=owner)

    def forget(self, stream: str, pid: int) -> None:
        self.data.stream(stream).forget(pid)
