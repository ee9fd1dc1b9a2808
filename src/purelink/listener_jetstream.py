"""The listener's storage on a NATS JetStream cluster (`Listener("nats://...")`).

Why a module of its own: listener.py drives a data directory with group
commit; with a JetStream cluster the same loop drives this instead.  It is
the protocol core's `StoreView` (a producer's epoch and stored seq, new
epochs) and the loop's `append`; durability comes back from the writer's
thread as `(stream, ticket)` pairs through the same deque and eventfd the
sync thread uses, and the loop hands them to `core.synced` exactly as it
hands the file store's durable positions: the core only ever compares the
numbers it was given in `written` with those in `synced`, so a ticket that
grows per stream serves as well as a position.

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

from .errors import Error
from .protocol.batch import BatchHeader
from .store.jetstream.client import NatsThread
from .store.jetstream.writer import JetStreamWriter

__all__ = ["JetStreamStorage"]

log = logging.getLogger("purelink.listener")


class JetStreamStorage:
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
        self.fenced: deque[tuple[str, int, int]] = deque()
        """(stream, producer, seq) of sessions a newer one elsewhere fenced: the loop
        takes them after each wake."""

    def start(self, synced: deque[tuple[str, int]], wake: Callable[[], None]) -> None:
        """Connect and check the cluster; durable tickets go to `synced`, then `wake()`."""

        def on_stored(stream: str, ticket: int) -> None:
            synced.append((stream, ticket))
            wake()

        def on_fenced(stream: str, producer: int, seq: int) -> None:
            self.fenced.append((stream, producer, seq))
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

    def close(self) -> None:
        if self._nats is not None:
            self._nats.close()
            self._nats = None

    # ------------------------------------------------------------ the loop's
    def append(self, stream: str, writes: Sequence[tuple[bytes | memoryview, BatchHeader]]) -> int:
        return self.writer.append(stream, writes)

    def streams(self) -> list[str]:
        return sorted(self._streams)

    # ------------------------------------------------------------ StoreView
    def _open(self, stream: str) -> None:
        if stream in self.failed:
            raise Error(f"stream {stream!r} cannot be written (see the log)")
        if stream not in self._streams:
            if len(self._streams) >= self.max_streams:
                raise Error(f"max_streams ({self.max_streams}) reached")
            self._streams.add(stream)

    shared = True
    """Other listeners may write the same streams: the core reads a producer's
    state again at each new session (protocol/listener_core.py)."""

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
