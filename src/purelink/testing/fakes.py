"""A hand-stepped clock, a seeded terrible network and an in-memory store.

After trio's FakeNet: every datagram handed to `FakeNet.send` is, by a
seeded RNG, dropped, duplicated, and delivered after a random delay (so
datagrams overtake each other; `symmetric` jitter spreads it both ways
around the delay, as a real path and the TUN emulator do); a blackout drops
everything for a while; a datagram larger than the path's MTU is dropped
(DF is set: never fragmented).  Given the same seed, a run is the same run,
so a failing seed is a regression test.

Each direction may also have a **bottleneck**: a link of `rate` bytes per
second with a drop-tail queue of `queue` bytes in front of it (a router's
buffer).  A datagram waits for the ones queued before it, then takes
len / rate to go through, then the path's `delay` plus its random `jitter`;
one that finds the queue full is dropped (counted in `overflowed`).  All
senders share a direction's bottleneck, so links compete for it as they
would on a real path.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from ..protocol import wire
from ..protocol.names import validate_stream_name

__all__ = ["FakeClock", "FakeNet", "MemoryStore", "NetConfig"]


class FakeClock:
    """Time that moves only when told."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.now += seconds


@dataclass(frozen=True)
class NetConfig:
    """How bad the network is, per direction."""

    loss: float = 0.0
    """Probability that a datagram is dropped."""
    duplicate: float = 0.0
    """Probability that a datagram is delivered twice."""
    delay: float = 0.0005
    """Fixed one-way delay, seconds."""
    jitter: float = 0.0
    """Extra uniform random delay up to this, seconds (this is what reorders)."""
    symmetric: bool = False
    """Jitter both ways: a delay drawn uniformly from `delay` - `jitter` to `delay`
    + `jitter` (at least 0), as netem and bench/pathemu.py draw it, so the
    smallest round trip is well below the typical one; False: `delay` to
    `delay` + `jitter`, so the smallest is the propagation delay."""
    rate: float = 0.0
    """Bottleneck rate, bytes per second (0: no bottleneck)."""
    queue: int = 256 << 10
    """Bytes the bottleneck's drop-tail queue holds (with a rate)."""
    mtu: int | None = None
    """Largest datagram (UDP payload bytes) the path carries; larger ones are
    dropped and counted in `FakeNet.too_big`.  None: no limit."""


@dataclass(order=True)
class _InFlight:
    due: float
    order: int
    dest: str = field(compare=False)
    data: bytes = field(compare=False)
    source: tuple[str, int] = field(compare=False)


class FakeNet:
    """Datagrams between named endpoints, through a seeded bad network."""

    def __init__(self, seed: int, up: NetConfig | None = None, down: NetConfig | None = None):
        self.rng = random.Random(seed)
        self.up = up or NetConfig()
        """Link -> listener."""
        self.down = down or self.up
        """Listener -> link."""
        self._queue: list[_InFlight] = []
        self._order = 0
        self.blackout_until = 0.0
        self.sent = 0
        self.dropped = 0
        self.duplicated = 0
        self.overflowed = 0
        """Datagrams dropped because a bottleneck's queue was full (also in `dropped`)."""
        self._free_at = {True: 0.0, False: 0.0}  # when each direction's bottleneck is idle
        self.too_big = 0
        """Datagrams dropped for being larger than the path's MTU."""

    def send(self, data: bytes, source: tuple[str, int], dest: str, now: float, up: bool) -> None:
        """Put a datagram on the network at `now`."""
        cfg = self.up if up else self.down
        self.sent += 1
        if cfg.mtu is not None and len(data) > cfg.mtu:
            self.too_big += 1
            return
        if now < self.blackout_until or self.rng.random() < cfg.loss:
            self.dropped += 1
            return
        copies = 2 if self.rng.random() < cfg.duplicate else 1
        self.duplicated += copies - 1
        for _ in range(copies):
            start = now
            if cfg.rate:
                free = max(self._free_at[up], now)
                if (free - now) * cfg.rate + len(data) > cfg.queue:
                    self.dropped += 1
                    self.overflowed += 1
                    continue
                start = self._free_at[up] = free + len(data) / cfg.rate
            if cfg.symmetric:
                due = start + max(0.0, cfg.delay + (2 * self.rng.random() - 1) * cfg.jitter)
            else:
                due = start + cfg.delay + self.rng.random() * cfg.jitter
            self._order += 1
            heapq.heappush(self._queue, _InFlight(due, self._order, dest, data, source))

    def next_due(self) -> float | None:
        """When the next datagram arrives, or None."""
        return self._queue[0].due if self._queue else None

    def deliver(self, now: float) -> list[tuple[str, bytes, tuple[str, int]]]:
        """Every datagram due by `now`: (dest, data, source)."""
        out = []
        while self._queue and self._queue[0].due <= now:
            item = heapq.heappop(self._queue)
            out.append((item.dest, item.data, item.source))
        return out


class MemoryStore:
    """The store, in memory: a list of batches per stream, and durable epochs.

    `crash()` forgets what was written but not synced, like a listener that
    was killed before its sync (a process crash keeps the page cache, but a
    power cut does not; the simulation takes the harsher view).
    """

    def __init__(self) -> None:
        self.batches: dict[str, list[tuple[int, bytes]]] = {}
        self.synced: dict[str, int] = {}
        self.epochs: dict[tuple[str, int], int] = {}
        self.durable_epochs: dict[tuple[str, int], int] = {}
        self.owners: dict[tuple[str, int], int] = {}
        self.durable_owners: dict[tuple[str, int], int] = {}
        self.forgotten: set[tuple[str, int]] = set()
        """Producers the core let go (StoreView.forget); their batches stay."""
        self.written: dict[int, int] = {}
        """Producer id -> payload bytes appended (for throughput figures)."""

    def _check(self, stream: str) -> None:
        validate_stream_name(stream)  # the store's own rule, so fakes and store agree

    def producer_state(self, stream: str, pid: int) -> tuple[int, int]:
        """StoreView: (epoch, last seq) of a producer."""
        self._check(stream)
        self.batches.setdefault(stream, [])
        last = 0
        epoch = self.epochs.get((stream, pid), 0)
        if (stream, pid) in self.forgotten:  # as the real store: no state in memory
            return epoch, last
        for _, batch in self.batches[stream]:
            h = wire.decode_batch_header(batch)
            if h.producer == pid:
                last = max(last, h.last_seq)
                epoch = max(epoch, h.epoch)
        return epoch, last

    def epoch_owner(self, stream: str, pid: int) -> int:
        """StoreView: the link instance the producer's highest epoch went to."""
        return self.owners.get((stream, pid), 0)

    def new_epoch(self, stream: str, pid: int, durable: bool, owner: int = 0) -> int:
        """StoreView: the next epoch."""
        epoch = max(self.epochs.get((stream, pid), 0), self.producer_state(stream, pid)[0]) + 1
        self.epochs[(stream, pid)] = epoch
        self.owners[(stream, pid)] = owner
        if durable:
            self.durable_epochs[(stream, pid)] = epoch
            self.durable_owners[(stream, pid)] = owner
        return epoch

    def forget(self, stream: str, pid: int) -> None:
        """StoreView: let go of a producer's state (its batches stay)."""
        self._check(stream)
        self.forgotten.add((stream, pid))
        self.epochs.pop((stream, pid), None)
        self.owners.pop((stream, pid), None)

    def append(self, stream: str, writes: list[tuple[bytes | memoryview, wire.BatchHeader]]) -> int:
        """Append batches, stamping positions; returns the last position."""
        log = self.batches.setdefault(stream, [])
        pos = self.last(stream)
        for data, header in writes:
            self.forgotten.discard((stream, header.producer))  # known again, as the store
            payload = (
                header.length
                - wire.BATCH_HEADER
                - (0 if header.flags & wire.FLAG_LARGE else 2 * header.count)
            )
            self.written[header.producer] = self.written.get(header.producer, 0) + payload
            log.append((pos + 1, bytes(data)))
            pos += header.count
        return pos

    def last(self, stream: str) -> int:
        """Last position written."""
        log = self.batches.get(stream)
        if not log:
            return 0
        pos, data = log[-1]
        return pos + wire.decode_batch_header(data).count - 1

    def sync(self, stream: str) -> int:
        """Make everything written durable; returns the position."""
        self.synced[stream] = self.last(stream)
        return self.synced[stream]

    def crash(self) -> None:
        """Lose everything not synced (and in-memory epochs)."""
        for stream, log in self.batches.items():
            keep = self.synced.get(stream, 0)
            self.batches[stream] = [(p, d) for p, d in log if p <= keep]
        self.epochs = dict(self.durable_epochs)
        self.owners = dict(self.durable_owners)

    def records(self, stream: str) -> list[tuple[int, int, int, bytes]]:
        """(position, producer, seq, payload) of every stored record."""
        out = []
        for pos, data in self.batches.get(stream, []):
            h = wire.verify_batch(data)
            for i, rec in enumerate(wire.batch_records(data, h)):
                out.append((pos + i, h.producer, h.first_seq + i, rec))
        return out
