"""The JetStream backend: a listener's streams in a JetStream cluster (`Listener("nats://...")`).

Why a module of its own: `JetStreamBackend` is JetStream's `Backend`
(listener/storage.py), as file.py is the data directory's; the listener's
loop drives either through the same `StorageDriver`.  It is also the protocol
core's `ProducerTable` (a producer's epoch and stored seq, new epochs).
`append` returns the writer's ticket, and the writer's thread puts
``(STORED, stream, ticket)`` and ``(FENCED, stream, producer)`` on `events`,
in the order it decided them, then wakes the loop.

Nothing is kept on the listener's disk: every answer it gives comes from the
cluster (store/jetstream/writer.py says how).  An anonymous producer's new
epoch is local (the link instance is the only writer of its records, so a
failover that resends them writes the same bytes, and the writer's
expectation on the producer's subject keeps them from going in twice); a
named producer's is an epoch marker in the cluster, which fences an older
session on any listener.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence

from ...errors import Error
from ...protocol.batch import BatchHeader
from ...store.jetstream.client import NatsThread
from ...store.jetstream.writer import JetStreamWriter
from ..storage import FENCED, STORED, StorageEvent

__all__ = ["JetStreamBackend"]

log = logging.getLogger("purelink.listener")


class JetStreamBackend:
    """A listener's streams in the cluster at `url`."""

    def __init__(
        self,
        url: str,
        *,
        replicas: int,
        max_streams: int,
        timeout: float = 5.0,
    ) -> None:
        if replicas < 1:
            raise ValueError(f"replicas must be at least 1, not {replicas}")
        self.url = url
        self.replicas = replicas
        self.max_streams = max_streams
        self.timeout = timeout
        self.failed: set[str] = set()
        self._epochs: dict[tuple[str, int], int] = {}  # anonymous producers' local epochs
        self._streams: set[str] = set()
        self._nats: NatsThread | None = None
        self._writer: JetStreamWriter | None = None
        self.events: deque[StorageEvent] = deque()
        """Tickets stored and producers fenced, in order (listener/storage.py)."""

    def start(self, wake: Callable[[], None]) -> None:
        """Connect and check the cluster; `wake()` after events are put."""
        events = self.events

        def on_stored(stream: str, ticket: int) -> None:
            events.append((STORED, stream, ticket))
            wake()

        def on_fenced(stream: str, producer: int, seq: int) -> None:
            events.append((FENCED, stream, producer))
            wake()

        self._nats = NatsThread(self.url, timeout=self.timeout)
        try:
            self._writer = JetStreamWriter(
                self._nats, replicas=self.replicas, on_stored=on_stored, on_fenced=on_fenced
            )
            self._writer.check()
        except BaseException:
            self._nats.close()
            raise

    @property
    def nats(self) -> NatsThread:
        """The listener's one connection to the cluster: the writer publishes on it and
        subscriptions (listener/tail/jetstream.py) read through it."""
        assert self._nats is not None, "not started"
        return self._nats

    @property
    def writer(self) -> JetStreamWriter:
        assert self._writer is not None, "not started"
        return self._writer

    def drain(self, timeout: float) -> bool:
        """Wait until every batch handed over was acknowledged (or fenced); False
        if that took longer than `timeout` seconds."""
        if self._nats is None:
            return True
        deadline = time.monotonic() + timeout
        while not self.writer.idle():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def connected(self) -> bool:
        """Whether the connection to the cluster is up now (any thread)."""
        nats = self._nats
        return nats is not None and bool(nats.nc.is_connected)

    def close(self) -> None:
        if self._nats is not None:
            self._nats.close()
            self._nats = None

    # ------------------------------------------------------------ the loop's
    def append(self, stream: str, writes: Sequence[tuple[bytes | memoryview, BatchHeader]]) -> int:
        return self.writer.append(stream, writes)

    def space(self, stream: str) -> tuple[int, int, int] | None:
        """None: the cluster keeps its own disks (JetStream refuses when they fill)."""
        return None

    def flush(self) -> None:
        pass  # the writer publishes as messages come

    def streams(self) -> list[str]:
        return sorted(self._streams)

    # ------------------------------------------------------------ the producer table
    def _open(self, stream: str) -> None:
        if stream in self.failed:
            raise Error(f"stream {stream!r} cannot be written (see the log)")
        if stream not in self._streams:
            if len(self._streams) >= self.max_streams:
                raise Error(f"max_streams ({self.max_streams}) reached")
            self._streams.add(stream)

    shared = True
    """Other listeners may write the same streams: the core reads a producer's
    state again at each new session (protocol/core_sessions.py)."""

    def _state(self, stream: str, pid: int) -> tuple[int, int, int]:
        try:
            return self.writer.producer_state(stream, pid)
        except Exception as exc:  # the cluster did not answer: the core refuses store_error
            raise OSError(f"JetStream: {exc}") from None

    def producer_state(self, stream: str, pid: int) -> tuple[int, int]:
        self._open(stream)
        epoch, stored, _ = self._state(stream, pid)
        return max(epoch, self._epochs.get((stream, pid), 0)), stored

    def epoch_owner(self, stream: str, pid: int) -> int:
        return self._state(stream, pid)[2]

    def new_epoch(self, stream: str, pid: int, durable: bool, owner: int = 0) -> int:
        self._open(stream)
        if durable:
            try:
                return self.writer.new_epoch(stream, pid, owner)
            except Exception as exc:
                raise OSError(f"JetStream: {exc}") from None
        epoch = self.producer_state(stream, pid)[0] + 1
        self._epochs[(stream, pid)] = epoch
        return epoch

    def forget(self, stream: str, pid: int) -> None:
        self._epochs.pop((stream, pid), None)
