"""The storage driver: one backend-neutral mover of batches between the core and a backend.

Why it exists: the protocol core hands out batches in order (`take_writes`)
and is told when they are durable (`written`, then `synced`); how a backend
gets them durable differs -- the file backend appends and fdatasyncs with
group commit, the JetStream backend publishes and waits for a quorum's
PubAck, the simulation's backends (testing/backends.py) do it in virtual
time -- but the driving does not.  So
the listener's loop (listener.py) and the simulation (testing/sim.py) run
this same `StorageDriver`, over any `Backend`:

* `append(stream, writes)` takes one drain's in-order batches of a stream
  (their memoryviews point into receive buffers: a store copies what it
  keeps before it returns) and returns a *ticket*, a number that grows per
  stream; it raises `Error` or `OSError` when the store cannot write;
* `flush()` ends a drain's appends (the file store hands its dirty streams
  to its sync thread there);
* durability comes back as *events* on the store's `events` deque, in
  order: ``(STORED, stream, t)`` -- everything of `stream` up to ticket `t`
  is durable -- or ``(FENCED, stream, producer)`` -- a newer session of that
  producer lives elsewhere (a shared store); the driver hands them to the
  core (`synced`, `fence_producer`) when `take_events()` is called.  One
  deque keeps them in the order the store said them: a producer is fenced
  before a ticket covering its refused batches is told.

The core compares only the numbers it was given in `written` with those in
`synced`, so the file store's positions serve as tickets as well as
JetStream's counters do.

A write failure stops a stream: its batches are never stored, so never
answered "stored", and nothing more is written to it until a restart (a
later batch stored after the gap would make its producer's "stored" cover
the records lost in it); new sessions there are refused (`store_error`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from typing import Final, Protocol

from ..errors import Error
from ..protocol.batch import BatchHeader
from ..protocol.listener_core import ListenerCore

__all__ = ["FENCED", "STORED", "Backend", "StorageDriver", "StorageEvent"]

log = logging.getLogger("purelink.listener")

STORED: Final = 0
FENCED: Final = 1
StorageEvent = tuple[int, str, int]
"""(STORED, stream, ticket) or (FENCED, stream, producer id)."""


class Backend(Protocol):
    """A backend: one kind of store as the listener writes it -- what the driver
    needs of it (the core's ProducerTable is apart)."""

    events: deque[StorageEvent]
    """Durability and fencing, in order; the driver takes them from the left."""
    failed: set[str]
    """Streams a write failed on: nothing more is written there."""

    def append(self, stream: str, writes: Sequence[tuple[bytes | memoryview, BatchHeader]]) -> int:
        """Take these batches of `stream` (in order); their ticket."""

    def flush(self) -> None:
        """The drain's appends are done."""


class StorageDriver:
    """Moves batches from a core to a backend, and durability back."""

    def __init__(self, core: ListenerCore, backend: Backend) -> None:
        self.core = core
        self.backend = backend
        self.store_errors = 0
        """Batches received that the store failed to write."""
        self.stream_records: dict[str, int] = {}
        """Records handed to the store since start, per stream."""
        self.stream_bytes: dict[str, int] = {}

    def write(self) -> None:
        """Hand the core's in-order batches to the store (after each drain)."""
        core = self.core
        backend = self.backend
        failed = backend.failed
        records, sizes = self.stream_records, self.stream_bytes
        for stream, writes in core.take_writes().items():
            if not writes:
                continue
            if stream in failed:  # see the module header: nothing more is written there
                self.store_errors += len(writes)
                core.write_failed(stream)
                continue
            try:
                ticket = backend.append(stream, writes)
            except (Error, OSError) as exc:
                self.store_errors += len(writes)
                failed.add(stream)
                core.write_failed(stream)
                log.error("purelink: stream %s cannot be written until a restart: %s", stream, exc)
                continue
            core.written(stream, ticket)
            records[stream] = records.get(stream, 0) + sum([h.count for _, h in writes])
            sizes[stream] = sizes.get(stream, 0) + sum([h.length for _, h in writes])
        backend.flush()

    def take_events(self) -> None:
        """Hand the store's events to the core, in order."""
        core = self.core
        events = self.backend.events
        while events:
            kind, stream, n = events.popleft()
            if kind == STORED:
                core.synced(stream, n)
            else:
                core.fence_producer(stream, n)
