"""A hand-stepped clock, a seeded terrible network and an in-memory store.

After trio's FakeNet: every datagram handed to `FakeNet.send` goes through
the path model of its direction (testing/pathmodel.py: blackout, MTU, loss,
duplication, a bottleneck with a drop-tail queue, delay and jitter, in that
order, each direction with its own seeded RNG) and comes out of `deliver`
when virtual time reaches its release time, so datagrams overtake each
other.  Given the same seed, a run is the same run, so a failing seed is a
regression test.  All senders share a direction's bottleneck, so links
compete for it as they would on a real path.
"""

from __future__ import annotations

import heapq
from typing import NamedTuple, overload

from ..protocol import wire
from ..protocol.names import validate_stream_name
from .pathmodel import NetConfig, PathModel, PathStats, seeded_rng

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


class _InFlight(NamedTuple):
    """A datagram on its way; the heap orders by (due, order), order being unique
    (a tuple compares in C: the heap is the simulation's hottest path)."""

    due: float
    order: int
    dest: str
    data: bytes
    source: tuple[str, int]


class _Total:
    """A FakeNet counter: the sum of some of both directions' PathStats, plus
    what a subclass added to it (`self.dropped += 1` works as on a plain int)."""

    def __init__(self, *names: str) -> None:
        self.names = names
        self.key = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = name

    @overload
    def __get__(self, net: None, owner: type) -> _Total: ...
    @overload
    def __get__(self, net: FakeNet, owner: type | None = None) -> int: ...
    def __get__(self, net: FakeNet | None, owner: type | None = None) -> int | _Total:
        if net is None:
            return self
        total = net._added.get(self.key, 0)
        for model in (net.up_path, net.down_path):
            st: PathStats = model.stats
            total += sum(getattr(st, name) for name in self.names)
        return total

    def __set__(self, net: FakeNet, value: int) -> None:
        net._added[self.key] = net._added.get(self.key, 0) + value - self.__get__(net)


class FakeNet:
    """Datagrams between named endpoints, through a seeded bad network.

    `up` (link -> listener) and `down` (listener -> link, default: as up)
    may be replaced at any time (a path that changes mid-run).  Blackout
    schedules count from `epoch`, or, when it is None, from the first
    datagram sent; `blackout_until` darkens both directions at once.
    """

    sent = _Total("packets")
    """Datagrams put on the network."""
    dropped = _Total("blackout_drops", "lost", "queue_drops")
    """Dropped by a blackout, the random loss or a full bottleneck queue."""
    duplicated = _Total("duplicated")
    """Extra copies made."""
    overflowed = _Total("queue_drops")
    """Datagrams dropped because a bottleneck's queue was full (also in `dropped`)."""
    too_big = _Total("mtu_drops")
    """Datagrams dropped for being larger than the path's MTU."""

    def __init__(
        self,
        seed: int,
        up: NetConfig | None = None,
        down: NetConfig | None = None,
        *,
        epoch: float | None = None,
    ) -> None:
        up = up or NetConfig()
        self._added: dict[str, int] = {}
        self.up_path = PathModel(up, seeded_rng(seed, "up"))
        """The model of the link -> listener direction."""
        self.down_path = PathModel(down or up, seeded_rng(seed, "down"))
        """The model of the listener -> link direction."""
        self._epoch = epoch
        if epoch is not None:
            self.up_path.reset(epoch)
            self.down_path.reset(epoch)
        self._queue: list[_InFlight] = []
        self._order = 0

    @property
    def up(self) -> NetConfig:
        """Link -> listener."""
        return self.up_path.config

    @up.setter
    def up(self, config: NetConfig) -> None:
        self.up_path.config = config

    @property
    def down(self) -> NetConfig:
        """Listener -> link."""
        return self.down_path.config

    @down.setter
    def down(self, config: NetConfig) -> None:
        self.down_path.config = config

    @property
    def blackout_until(self) -> float:
        """Both directions are dark until this time (a one-off outage)."""
        return max(self.up_path.dark_until, self.down_path.dark_until, 0.0)

    @blackout_until.setter
    def blackout_until(self, when: float) -> None:
        self.up_path.dark_until = self.down_path.dark_until = when

    def send(self, data: bytes, source: tuple[str, int], dest: str, now: float, up: bool) -> None:
        """Put a datagram on the network at `now`."""
        if self._epoch is None:
            self._epoch = now
            self.up_path.epoch = self.down_path.epoch = now
        model = self.up_path if up else self.down_path
        for due, copy in model.arrive(data, now):
            self._order += 1
            heapq.heappush(self._queue, _InFlight(due, self._order, dest, copy, source))

    def next_due(self) -> float | None:
        """When the next datagram arrives, or None."""
        return self._queue[0].due if self._queue else None

    def deliver(self, now: float) -> list[tuple[str, bytes, tuple[str, int]]]:
        """Every datagram due by `now`: (dest, data, source)."""
        queue, pop, out = self._queue, heapq.heappop, []
        while queue and queue[0].due <= now:
            out.append(pop(queue)[2:])
        return out


class MemoryStore:
    """A store stand-in: the store, in memory -- a list of batches per stream,
    and durable epochs.  It is also the core's producer table (`ProducerTable`,
    the methods so marked), as a data directory has `DataDirProducers`; the
    simulation's backends (testing/backends.py) write to it.

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
        """Producers the core let go (ProducerTable.forget); their batches stay."""
        self.written: dict[int, int] = {}
        """Producer id -> payload bytes appended (for throughput figures)."""

    def _check(self, stream: str) -> None:
        validate_stream_name(stream)  # the store's own rule, so fakes and store agree

    def producer_state(self, stream: str, pid: int) -> tuple[int, int]:
        """ProducerTable: (epoch, last seq) of a producer."""
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
        """ProducerTable: the link instance the producer's highest epoch went to."""
        return self.owners.get((stream, pid), 0)

    def new_epoch(self, stream: str, pid: int, durable: bool, owner: int = 0) -> int:
        """ProducerTable: the next epoch."""
        epoch = max(self.epochs.get((stream, pid), 0), self.producer_state(stream, pid)[0]) + 1
        self.epochs[(stream, pid)] = epoch
        self.owners[(stream, pid)] = owner
        if durable:
            self.durable_epochs[(stream, pid)] = epoch
            self.durable_owners[(stream, pid)] = owner
        return epoch

    def forget(self, stream: str, pid: int) -> None:
        """ProducerTable: let go of a producer's state (its batches stay)."""
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
