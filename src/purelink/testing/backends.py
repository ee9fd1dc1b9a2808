"""The simulation's backends behind the storage driver, in virtual time.

Why it exists: the simulation drives its listener core through the same
`StorageDriver` as listener.py (listener/storage.py), so what is behind it
must be a `Backend` too: `append` returns a ticket, durability comes back as
events.  Two backends, both over a `MemoryStore` (fakes.py), which is also
the core's ProducerTable:

* `MemoryBackend` -- the file backend's way: a batch is in the store when
  appended, durable at the next group commit, every `sync_interval` seconds
  (0: at once); a crash loses what was not synced;
* `ReplicatedBackend` -- a replicated log's way (JetStream's): a batch is in
  the store only once a quorum has it, after a delay; a publish may fail (it
  is published again, and nothing behind it in the stream goes first); an
  acknowledgement may be lost (the writer learns it later, when it looks
  again); a crash of the listener keeps a prefix of what was in flight (it
  reached the quorum, the answer did not come back) and loses the rest.
  Every draw comes from one seeded RNG: a seed is the same run each time.
"""

from __future__ import annotations

import errno
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..listener.storage import FAILED, STORED, StorageEvent
from ..protocol.batch import BatchHeader
from .fakes import FakeClock, MemoryStore

__all__ = ["MemoryBackend", "ReplicatedBackend", "Replication"]

Writes = Sequence[tuple[bytes | memoryview, BatchHeader]]


class MemoryBackend:
    """A MemoryStore made durable by group commit every `sync_interval` seconds.

    `disk`, when set, is a simulated file system of that many bytes holding
    every stream: an append that would take more than is `free` raises ENOSPC
    and writes nothing (a test empties or fills it by setting `free`)."""

    def __init__(
        self, store: MemoryStore, clock: FakeClock, sync_interval: float, disk: int | None = None
    ) -> None:
        self.store = store
        self.clock = clock
        self.sync_interval = sync_interval
        self.events: deque[StorageEvent] = deque()
        self.failed: set[str] = set()
        self.disk = disk
        self.free = disk or 0
        self.failing: set[str] = set()
        """Streams whose next sync fails (an injected EIO): FAILED, never STORED."""
        self._dirty: set[str] = set()
        self._next_sync: float | None = None

    def append(self, stream: str, writes: Writes) -> int:
        if self.disk is not None:
            size = sum(len(b) for b, _ in writes)
            if size > self.free:
                raise OSError(errno.ENOSPC, "No space left on device (simulated)")
            self.free -= size
        self._dirty.add(stream)
        return self.store.append(stream, list(writes))

    def space(self, stream: str) -> tuple[int, int, int] | None:
        return None if self.disk is None else (1, self.free, self.disk)

    def flush(self) -> None:
        if not self._dirty:
            return
        if self.sync_interval <= 0:
            for stream in sorted(self._dirty):
                self._sync(stream)
            self._dirty.clear()
        elif self._next_sync is None:
            self._next_sync = self.clock.now + self.sync_interval

    def next_due(self) -> float | None:
        return self._next_sync

    def advance(self, now: float) -> None:
        if self._next_sync is not None and now >= self._next_sync:
            self._next_sync = None
            self._dirty.clear()
            for stream in list(self.store.batches):
                self._sync(stream)

    def _sync(self, stream: str) -> None:
        if stream in self.failing:
            if stream not in self.failed:  # said once; nothing is synced there again
                self.failed.add(stream)
                self.events.append((FAILED, stream, 0))
            return
        self.events.append((STORED, stream, self.store.sync(stream)))

    def stop(self) -> None:
        """The listener stopped cleanly: everything written is synced (not on a
        stream whose sync failed); the next listener opens every stream afresh."""
        for stream in list(self.store.batches):
            if stream not in self.failed:
                self.store.sync(stream)
        self.failed.clear()
        self.events.clear()
        self._dirty.clear()
        self._next_sync = None

    def crash(self) -> None:
        """The listener died: what was not synced is gone."""
        self.store.crash()
        self.failed.clear()
        self.events.clear()
        self._dirty.clear()
        self._next_sync = None  # a sync pending would stay due forever: time would stop


@dataclass(frozen=True)
class Replication:
    """How a simulated replicated store behaves."""

    seed: int = 0
    """Seeds the store's own RNG."""
    delay: tuple[float, float] = (0.001, 0.02)
    """Seconds from append to the quorum having it (uniform in this range)."""
    fail: float = 0.1
    """Chance that a publish fails (nothing stored; published again)."""
    retry: float = 0.05
    """Seconds before a failed publish goes again."""
    lose_ack: float = 0.05
    """Chance that a stored batch's acknowledgement is lost."""
    look_again: float = 0.2
    """Seconds until a writer whose acknowledgement was lost finds the batch stored."""


@dataclass
class _InFlight:
    ticket: int
    writes: list[tuple[bytes | memoryview, BatchHeader]]
    due: float


@dataclass
class _Stream:
    flying: deque[_InFlight] = field(default_factory=deque)  # not stored yet, in order
    telling: deque[tuple[float, int]] = field(default_factory=deque)  # stored: (tell at, ticket)
    tickets: int = 0


class ReplicatedBackend:
    """A MemoryStore written as a replicated log: delayed, failing, lossy acks."""

    def __init__(self, store: MemoryStore, clock: FakeClock, config: Replication) -> None:
        self.store = store
        self.clock = clock
        self.config = config
        self.rng = random.Random(config.seed)
        self.events: deque[StorageEvent] = deque()
        self.failed: set[str] = set()
        self.streams: dict[str, _Stream] = {}
        self.failures = 0
        self.lost_acks = 0

    def append(self, stream: str, writes: Writes) -> int:
        s = self.streams.setdefault(stream, _Stream())
        s.tickets += 1
        copied: list[tuple[bytes | memoryview, BatchHeader]] = [
            (bytes(data), h)
            for data, h in writes  # receive buffers go back to the pool
        ]
        s.flying.append(_InFlight(s.tickets, copied, self._due()))
        return s.tickets

    def space(self, stream: str) -> tuple[int, int, int] | None:
        return None

    def flush(self) -> None:
        pass  # every append is in flight already

    def _due(self) -> float:
        low, high = self.config.delay
        return self.clock.now + self.rng.uniform(low, high)

    def next_due(self) -> float | None:
        times = [s.flying[0].due for s in self.streams.values() if s.flying]
        times += [s.telling[0][0] for s in self.streams.values() if s.telling]
        return min(times) if times else None

    def advance(self, now: float) -> None:
        cfg = self.config
        for name in sorted(self.streams):
            s = self.streams[name]
            while s.flying and s.flying[0].due <= now:
                head = s.flying[0]
                if self.rng.random() < cfg.fail:  # nothing stored; nothing behind goes first
                    self.failures += 1
                    head.due = now + cfg.retry + self.rng.uniform(*cfg.delay)
                    break
                s.flying.popleft()
                self._store(name, head)
                if self.rng.random() < cfg.lose_ack:
                    self.lost_acks += 1
                    s.telling.append((now + cfg.look_again, head.ticket))
                else:
                    s.telling.append((now, head.ticket))
            told = 0
            while s.telling and s.telling[0][0] <= now:  # in order: a ticket covers those before
                told = s.telling.popleft()[1]
            if told:
                self.events.append((STORED, name, told))

    def _store(self, stream: str, flight: _InFlight) -> None:
        self.store.append(stream, flight.writes)
        self.store.sync(stream)  # in the quorum's hands: a listener crash cannot lose it

    def stop(self) -> None:
        """The listener stopped cleanly: it waited for everything in flight."""
        for name in sorted(self.streams):
            s = self.streams[name]
            for flight in s.flying:
                self._store(name, flight)
            s.flying.clear()
            s.telling.clear()
        self.events.clear()

    def crash(self) -> None:
        """The listener died: of what was in flight, a prefix reached the quorum."""
        for name in sorted(self.streams):
            s = self.streams[name]
            keep = self.rng.randrange(len(s.flying) + 1)
            for flight in list(s.flying)[:keep]:
                self._store(name, flight)
            s.flying.clear()
            s.telling.clear()
        self.events.clear()
        self.store.crash()  # in-memory epochs; every batch stored is synced
