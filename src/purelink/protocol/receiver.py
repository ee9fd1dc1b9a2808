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
* a batch larger than one datagram comes in pieces (FRAGMENT), put together
  in one buffer per batch, in order in O(1) per piece; when whole it is
  checked (CRC, producer, seq, epoch, record sizes) and then is a batch like
  any other, stored byte for byte as the link built it.  Pieces of a batch
  are trusted only within the session that sent them (`reset_partials`): a
  new session may cut its records into other batches.

Memory is bounded: the held batches and partial records of a producer stay
under `max_reorder` bytes (the record at received+1 may always be assembled,
up to `max_record`), and the advertised window is what is left of it.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Final

from ..errors import ProtocolError
from . import wire

__all__ = ["MAX_ACK_DUPLICATES", "Partial", "Producer", "Write"]

Write = tuple[bytes | memoryview, wire.BatchHeader]
MAX_ACK_RANGES: Final = 32
ACK_RANGES_LOW: Final = 8
MAX_ACK_FRAGMENTS: Final = 16
FRAGMENTS_LOW: Final = 4
MAX_FRAGMENT_SPANS: Final = 16
MAX_ACK_DUPLICATES: Final = 8
FRAGMENT_ROOM: Final = 535
"""Bytes an ACK gives its fragment entries at most, so that with its 32 ranges
and 8 duplicates it stays within 1,200 bytes, the smallest datagram a path must carry (pmtu.py)."""
MAX_PIECED_BATCH: Final = 0xFFFF + 2
"""Bytes of records and length table a batch that comes in pieces may hold
(one record of 65,535 bytes and its length; many records within 65,535), unless
max_record is larger (a one-record large batch: up to max_record).  So the
batch a producer needs next, which may always be put together, is at most
max(max_record, 65,537) + 44 bytes: the listener's memory bound is max_memory
plus that."""


class Partial:
    """A batch being put together from pieces."""

    __slots__ = ("buf", "counted", "epoch", "spans", "total")

    def __init__(self, total: int, counted: bool, epoch: int) -> None:
        self.total = total
        """The batch's length."""
        self.buf = bytearray(total)
        """Where the pieces go."""
        self.counted = counted
        """Whether it counts against the reorder budget (all but the next batch do)."""
        self.epoch = epoch
        """The epoch of the session that sent it."""
        self.spans: list[tuple[int, int]] = []
        """Byte ranges held, sorted and merged."""

    def add(self, offset: int, chunk: memoryview) -> bool:
        """Take one piece; False if every byte of it was here already."""
        end = offset + len(chunk)
        spans = self.spans
        if spans and spans[-1][1] == offset:  # the common case: the next piece in order
            self.buf[offset:end] = chunk
            spans[-1] = (spans[-1][0], end)
            if len(spans) > 1:
                self._merge(len(spans) - 1)
            return True
        i = bisect_right(spans, (offset, end))
        if i and spans[i - 1][0] <= offset and end <= spans[i - 1][1]:
            return False  # a duplicate
        self.buf[offset:end] = chunk
        spans.insert(i, (offset, end))
        self._merge(i)
        return True

    def _merge(self, i: int) -> None:
        """Merge the span at i with its neighbours where they touch or overlap."""
        spans = self.spans
        if i and spans[i - 1][1] >= spans[i][0]:
            i -= 1
            spans[i] = (spans[i][0], max(spans[i][1], spans[i + 1][1]))
            del spans[i + 1]
        while i + 1 < len(spans) and spans[i][1] >= spans[i + 1][0]:
            spans[i] = (spans[i][0], max(spans[i][1], spans[i + 1][1]))
            del spans[i + 1]

    @property
    def complete(self) -> bool:
        """Every byte is here."""
        spans = self.spans
        return len(spans) == 1 and spans[0] == (0, self.total)


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
        self.conn: object | None = None  # the current session (a core_state.Session)

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
        """Take one piece of a batch (named by its first seq); returns "stored",
        "held", "duplicate", or a drop reason ("too_large", "reorder_full",
        "malformed", "bad_checksum", ...: the whole batch is dropped when it
        is complete and does not verify)."""
        seq = frag.seq
        if seq <= self.received or seq in self.held:
            return "duplicate"
        total = frag.total
        if total > max(self.max_record, MAX_PIECED_BATCH) + wire.BATCH_HEADER:
            return "too_large"
        part = self.partials.get(seq)
        if part is None:
            counted = seq != self.received + 1
            if counted and self.held_bytes + total > self.max_reorder:
                return "reorder_full"
            part = Partial(total, counted, frag.epoch)
            self.partials[seq] = part
            if counted:
                self.held_bytes += total
        elif part.total != total or part.epoch != frag.epoch:
            return "malformed"
        if not part.add(frag.offset, frag.chunk):
            return "duplicate"
        if not part.complete:
            return "held"
        del self.partials[seq]
        if part.counted:
            self.held_bytes -= part.total
        batch = memoryview(part.buf)
        header = wire.verify_batch(batch)  # raises ProtocolError: the caller drops it
        if header.producer != self.pid or header.first_seq != seq or header.epoch != part.epoch:
            return "malformed"
        if header.length - wire.BATCH_HEADER > self.max_record and (
            largest_record(batch, header) > self.max_record
        ):
            return "too_large"
        return self.on_batch(batch, header, writes)

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
        """Byte ranges held of partial batches: at most MAX_ACK_FRAGMENTS of them,
        MAX_FRAGMENT_SPANS spans each, and FRAGMENT_ROOM bytes in all (9 per
        entry, 8 per span), lowest seq first.  When they do not all fit: the
        lowest FRAGMENTS_LOW (they hold `received` back) and then the highest
        (what just arrived: the link's loss detection needs it now; the middle
        was said before), as ranges() does."""
        if not self.partials:
            return ()
        seqs = sorted(self.partials)
        if len(seqs) > FRAGMENTS_LOW:
            seqs = seqs[:FRAGMENTS_LOW] + seqs[: FRAGMENTS_LOW - 1 : -1]
        room = FRAGMENT_ROOM
        out = []
        for seq in seqs[:MAX_ACK_FRAGMENTS]:
            fit = min(MAX_FRAGMENT_SPANS, (room - 9) // 8)
            spans = self.partials[seq].spans
            if fit < 1:
                break
            if not spans:
                continue
            out.append((seq, tuple(spans[:fit])))
            room -= 9 + 8 * min(fit, len(spans))
        out.sort()
        return tuple(out)

    def reset_partials(self) -> None:
        """Forget batches half put together (a new session cuts its own batches)."""
        for part in self.partials.values():
            if part.counted:
                self.held_bytes -= part.total
        self.partials.clear()

    def reset_volatile(self) -> None:
        """Forget held batches and partial records (a new session re-sends them)."""
        self.held.clear()
        self.partials.clear()
        self.held_bytes = 0

    @property
    def memory(self) -> int:
        """Bytes held in memory for this producer."""
        return self.held_bytes + sum(p.total for p in self.partials.values() if not p.counted)


def largest_record(batch: bytes | memoryview, header: wire.BatchHeader) -> int:
    """The largest record of a verified batch."""
    if header.flags & wire.FLAG_LARGE:
        return header.length - wire.BATCH_HEADER
    table = memoryview(batch)[wire.BATCH_HEADER : wire.BATCH_HEADER + 2 * header.count]
    return max(table.cast("H"))


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
