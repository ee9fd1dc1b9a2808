"""One producer's receiving state: order, deduplicate, reassemble, answer.

A `Producer` is the listener's memory of one producer on one stream.  It
outlives the sessions (connections) of that producer: a reconnect finds the
same `received`/`stored` seqs, which is what makes resends after a reconnect
exactly-once.  After a listener restart it is rebuilt from the store (the
last seq of the producer's batches).

Seqs of one producer, left to right:

    1 .............. stored .............. received ........... held (out of order)
    |-- durable ------|-- written, waiting --|-- gap --|-- reorder buffer --|
                         for a sync

* a batch starting at received+1 is in order: it goes to the store now (the
  caller collects `writes`), then any held batches that now follow it;
* a batch wholly at or below `received` is a duplicate: dropped, answered;
* a batch above received+1 is held (a copy) while the reorder budget allows,
  else dropped and counted (the sender resends it);
* a batch overlapping `received` is cut to its new part (a misbehaving peer
  only: a session never changes its batch boundaries);
* pieces of a large record are put together in one buffer; when whole, the
  record becomes a one-record batch like any other.

Memory is bounded: the held batches and partial records of a producer stay
under `max_reorder` bytes (the record at received+1 may always be assembled,
up to `max_record`), and the advertised window is what is left of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ProtocolError
from . import wire

__all__ = ["MAX_ACK_DUPLICATES", "Partial", "Producer", "Write"]

Write = tuple[bytes | memoryview, wire.BatchHeader]
MAX_ACK_RANGES = 32
ACK_RANGES_LOW = 8
MAX_ACK_FRAGMENTS = 4
MAX_FRAGMENT_SPANS = 16
MAX_ACK_DUPLICATES = 8


@dataclass
class Partial:
    """A large record being put together from pieces."""

    total: int
    """The record's length."""
    buf: bytearray
    """Where the pieces go."""
    counted: bool
    """Whether it counts against the reorder budget (all but the next record do)."""
    spans: list[tuple[int, int]] = field(default_factory=list)
    """Byte ranges held, sorted and merged."""

    def add(self, offset: int, chunk: memoryview) -> None:
        """Take one piece."""
        end = offset + len(chunk)
        self.buf[offset:end] = chunk
        spans = [*self.spans, (offset, end)]
        spans.sort()
        merged: list[tuple[int, int]] = []
        for a, b in spans:
            if merged and a <= merged[-1][1]:
                if b > merged[-1][1]:
                    merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        self.spans = merged

    def covers(self, start: int, end: int) -> bool:
        """Whether bytes [start, end) are all held already."""
        return any(a <= start and end <= b for a, b in self.spans)

    @property
    def complete(self) -> bool:
        """Every byte is here."""
        return self.spans == [(0, self.total)]


class Producer:
    """The listener's state for one producer on one stream."""

    __slots__ = (
        "conn",
        "epoch",
        "held",
        "held_bytes",
        "max_record",
        "max_reorder",
        "owner",
        "partials",
        "pid",
        "received",
        "stored",
        "stream",
    )

    def __init__(
        self,
        stream: str,
        pid: int,
        epoch: int,
        last_seq: int,
        *,
        max_reorder: int = 4 << 20,
        max_record: int = 16 << 20,
    ) -> None:
        self.stream = stream
        self.pid = pid
        self.epoch = epoch
        self.received = last_seq
        self.stored = last_seq
        self.owner = 0
        """The link instance the current epoch was handed to."""
        self.held: dict[int, Write] = {}
        self.held_bytes = 0
        self.partials: dict[int, Partial] = {}
        self.max_reorder = max_reorder
        self.max_record = max_record
        self.conn: object | None = None  # the current session (a listener_core._Conn)

    # ----------------------------------------------------------- batches
    def on_batch(
        self, batch: bytes | memoryview, header: wire.BatchHeader, writes: list[Write]
    ) -> str:
        """Take a verified batch of this producer's current epoch.

        Appends what is now in order to `writes`; returns "stored",
        "duplicate", "held" or the reason it was dropped ("reorder_full").
        """
        first, last = header.first_seq, header.last_seq
        received = self.received
        if last <= received:
            return "duplicate"
        if first <= received:
            batch, header = _trim(batch, header, received + 1)
            first = received + 1
        if first == received + 1:
            writes.append((batch, header))
            self.received = last
            self._release_held(writes)
            if self.partials:
                self._drop_passed_partials()
            return "stored"
        if first in self.held:
            return "duplicate"
        size = len(batch)
        if self.held_bytes + size > self.max_reorder:
            return "reorder_full"
        self.held[first] = (bytes(batch), header)
        self.held_bytes += size
        return "held"

    def on_fragment(self, frag: wire.Fragment, writes: list[Write]) -> str:
        """Take one piece of a large record; returns "stored", "held",
        "duplicate", or a drop reason ("too_large", "reorder_full", "malformed")."""
        seq = frag.seq
        if seq <= self.received or seq in self.held:
            return "duplicate"
        if frag.total > self.max_record:
            return "too_large"
        part = self.partials.get(seq)
        if part is None:
            counted = seq != self.received + 1
            if counted and self.held_bytes + frag.total > self.max_reorder:
                return "reorder_full"
            part = Partial(frag.total, bytearray(frag.total), counted)
            self.partials[seq] = part
            if counted:
                self.held_bytes += frag.total
        elif part.total != frag.total:
            return "malformed"
        elif part.covers(frag.offset, frag.offset + len(frag.chunk)):
            return "duplicate"
        part.add(frag.offset, frag.chunk)
        if not part.complete:
            return "held"
        del self.partials[seq]
        if part.counted:
            self.held_bytes -= part.total
        record = bytes(part.buf)
        batch = wire.encode_large_batch(self.pid, self.epoch, seq, record)
        header = wire.decode_batch_header(batch)
        return self.on_batch(memoryview(batch), header, writes)

    def _drop_passed_partials(self) -> None:
        """Forget pieces of records that are now in order by another way (a
        misbehaving peer sent the seq as a batch too): they can never complete."""
        for seq in [s for s in self.partials if s <= self.received]:
            part = self.partials.pop(seq)
            if part.counted:
                self.held_bytes -= part.total

    def _release_held(self, writes: list[Write]) -> None:
        held = self.held
        while held:
            item = held.pop(self.received + 1, None)
            if item is None:
                # a held batch may start below received+1 after a trim; drop the covered ones
                stale = [s for s, (_, h) in held.items() if h.first_seq <= self.received]
                if not stale:
                    return
                for s in stale:
                    data, h = held.pop(s)
                    self.held_bytes -= len(data)
                    if h.last_seq > self.received:
                        view, h2 = _trim(memoryview(data), h, self.received + 1)
                        writes.append((view, h2))
                        self.received = h2.last_seq
                continue
            data, header = item
            self.held_bytes -= len(data)
            writes.append((data, header))
            self.received = header.last_seq

    # ------------------------------------------------------------ answers
    @property
    def window(self) -> int:
        """Bytes the producer may still send beyond `received`."""
        return max(self.max_reorder - self.held_bytes, 0)

    def ranges(self) -> tuple[tuple[int, int], ...]:
        """Seq ranges held above received, merged, lowest first: all of them, or
        the lowest ACK_RANGES_LOW and the highest of MAX_ACK_RANGES in all."""
        if not self.held:
            return ()
        spans = sorted((h.first_seq, h.last_seq) for _, h in self.held.values())
        out: list[tuple[int, int]] = []
        for a, b in spans:
            if out and a <= out[-1][1] + 1:
                if b > out[-1][1]:
                    out[-1] = (out[-1][0], b)
            else:
                out.append((a, b))
        if len(out) > MAX_ACK_RANGES:
            # the lowest (the gaps that hold `received` back) and the highest (what
            # just arrived: the link's loss detection needs it now, as QUIC's ACK
            # frames put the newest ranges first); the middle was said before
            out = out[:ACK_RANGES_LOW] + out[ACK_RANGES_LOW - MAX_ACK_RANGES :]
        return tuple(out)

    def fragment_spans(self) -> tuple[tuple[int, tuple[tuple[int, int], ...]], ...]:
        """Byte ranges held of the lowest partial records."""
        if not self.partials:
            return ()
        seqs = sorted(self.partials)[:MAX_ACK_FRAGMENTS]
        return tuple((s, tuple(self.partials[s].spans[:MAX_FRAGMENT_SPANS])) for s in seqs)

    def reset_volatile(self) -> None:
        """Forget held batches and partial records (a new session re-sends them)."""
        self.held.clear()
        self.partials.clear()
        self.held_bytes = 0

    @property
    def memory(self) -> int:
        """Bytes held in memory for this producer."""
        return self.held_bytes + sum(p.total for p in self.partials.values() if not p.counted)


def _trim(
    batch: memoryview | bytes, header: wire.BatchHeader, first: int
) -> tuple[bytes, wire.BatchHeader]:
    """Cut the records below `first` off a batch (re-encoding it: a rare path)."""
    records = wire.batch_records(batch, header)
    drop = first - header.first_seq
    if drop <= 0 or drop >= len(records):
        raise ProtocolError("malformed", "trim outside the batch")
    rest = records[drop:]
    if header.flags & wire.FLAG_LARGE:  # pragma: no cover - a large batch holds one record
        raise ProtocolError("malformed", "trim of a large batch")
    data = wire.encode_batch(header.producer, header.epoch, first, rest)
    return data, wire.decode_batch_header(data)
