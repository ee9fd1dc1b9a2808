"""Where a subscription's batches come from: the reader interface of the tail server.

Why it exists: server.py serves subscriptions the same way whatever the
store (the request, the slots and limits, refusals, keys, hang-ups); what
differs is where the stored batches come from and what a follower waits on.
A listener's `TailSource` opens one `TailReader` per subscriber:

* file.py: a data directory, its segments sent by `sendfile`, a
  follower parked on the stream log's parker;
* jetstream.py: a JetStream stream, its messages' bodies (already the
  store's batch format) sent as they come through a pull consumer, a
  follower parked until the cluster delivers more.

The contract, which the server relies on:

* `send` sends every batch that is stored and not yet sent, whole batches
  only and never a record before it is stored; the first batch holds the
  start position.  It blocks only on the subscriber's socket (a slow
  subscriber).  It returns True when a read without follow has sent all it
  will (the server sends END), else False: then the server parks on
  `parker` until `ready()` holds.
* `ready()` is cheap and true once `send` has more to do (or the stream
  went away: `ended()` then says so); whoever makes it true unparks `parker`.
* Refusals are `Refused(reason, text)`: counted under `reason`, and the
  subscriber gets an ERROR item saying `text`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ...primitives.parker import Parker
    from ...store.reader import StreamInfo
    from .out import Out

__all__ = ["Refused", "TailReader", "TailSource"]


class Refused(Exception):
    """Refuse the subscription: count `reason`, send an ERROR item saying `text`."""

    def __init__(self, reason: str, text: str) -> None:
        super().__init__(text)
        self.reason = reason
        self.text = text


class TailReader(Protocol):
    """One subscriber's read of one stream, used by that subscriber's thread only."""

    @property
    def parker(self) -> Parker:
        """What the subscriber's thread parks on while `ready()` is false."""
        ...

    def send(self, out: Out) -> bool:
        """Send what is stored and not yet sent; True once a read without follow is done."""
        ...

    def ready(self) -> bool:
        """Whether `send` has more to do (or the stream ended)."""
        ...

    def ended(self) -> bool:
        """Whether nothing more will ever come (the stream was closed under it)."""
        ...

    def close(self) -> None:
        """Free what the read holds (descriptors, a consumer)."""
        ...


class TailSource(Protocol):
    """A listener's stored streams, as subscriptions read them."""

    def open(self, stream: str, start: int, follow: bool) -> TailReader | None:
        """A read of `stream` from position `start` (0: the first retained);
        None while the stream does not exist.  Raises Refused (below retained)."""
        ...

    def streams(self) -> list[StreamInfo]:
        """Every stream, sorted by name: first and last *stored* position, records,
        bytes (a listing, protocol/tail_list.py)."""
        ...

    def position_at(self, stream: str, when: float) -> int:
        """The position of the first record of `stream` stored at or after `when`
        (Unix seconds), by seeking; purelink.Error if that cannot be told."""
        ...

    def wake(self) -> None:
        """Unpark every parked reader (the server is closing)."""
        ...

    def close(self) -> None:
        """After every reader closed: free the source's own resources."""
        ...
