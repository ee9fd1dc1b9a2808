"""The listener core's batch intake: DATA and FRAGMENT datagrams in, batches out.

Why it exists: this is the per-datagram hot path, and what it does to a batch
(in order: written; ahead: held; again: a duplicate; too big for memory:
refused) is the core of exactly-once.  The reordering and reassembly
themselves are per producer (receiver.py); here is what ties them to
sessions, to the memory limit and to the batches the driver writes.

The fast paths.  A DATA datagram of an open session that carries exactly the
next batch in order -- nearly all of them -- is checked and taken in one go
(`_fast_data`: one unpack of its fixed part, two CRCs, the length table's sum
in C), and so is the next in-order piece of a FRAGMENTed batch
(`_fast_piece`).  Anything else, including anything malformed, returns False
there and takes the general path, which decodes step by step and counts
drops by reason.  They are written for the interpreter (STYLE.md, 14): keep
them inline.

The compiled core (src/speedups/intake.c, `INTAKE`) does the same in C where
it is built: the same checks over the same Python state, plus the piece that
completes a batch (checked whole), and it declines everything else to the
general path here, which stays the one place for drops, reasons and policy.
`receive_datagram` (listener_core.py) and the listener's drain use it; the
Python fast paths stay the reference (PURELINK_NO_EXTENSIONS=1 runs them).

Memory.  Only data that would be held out of order is refused for memory:
the batch or record that fills a producer's gap always gets in, or the held
data could never drain.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

from .._crc32c import crc32c
from ..errors import ProtocolError
from ..native import part
from . import wire
from .core_parts import Address
from .core_sessions import CoreSessions
from .core_state import Session, SessionState
from .receiver import MAX_ACK_DUPLICATES, Partial, Producer, Write, largest_record

if TYPE_CHECKING:
    from .._speedups import Intake


__all__ = ["DATA_FAST", "INTAKE", "CoreIntake"]

# a DATA datagram's fixed part: header, packet number, batch header
DATA_FAST: Final = struct.Struct("<2sBBIQQI2sBBIIQQI")
# a FRAGMENT datagram's fixed part: header, pn, epoch, seq, total, offset
_FRAG_FAST: Final = struct.Struct("<2sBBIQIQII")
_U32: Final = struct.Struct("<I")
_ZEROS: Final = memoryview(bytes(65536))
_OPEN: Final = SessionState.OPEN

_native = part("intake")
INTAKE: Final[Intake | None] = (
    _native.Intake(wire.BatchHeader, Partial, _OPEN) if _native is not None else None
)
"""The compiled fast intake (`purelink._speedups.Intake`), or None: the Python
fast paths below run instead."""


class CoreIntake(CoreSessions):
    """What a listener core does with the data of its sessions."""

    def take_writes(self) -> dict[str, list[Write]]:
        """Batches now in order, per stream, to append to the store in this order.
        Their memoryviews may point into the driver's receive buffers."""
        writes, self._writes = self._writes, {}
        return writes

    def _fast_data(self, data: bytes | memoryview, addr: Address, now: float) -> bool:
        """The common case in one go: a well-formed DATA datagram of an open
        session whose batch is exactly the next in order.  One unpack of the
        fixed 60 bytes, two CRCs, the length table's sum in C.  Anything else
        (including anything malformed) returns False and takes the general
        path, which decodes step by step and counts drops by reason."""
        view = memoryview(data)
        size = len(view)
        if size < DATA_FAST.size + 4:
            return False
        (
            magic, version, _kind, conn_id, pn, position, bcrc, bmagic, bversion, flags,
            length, count, producer, first, epoch,
        ) = DATA_FAST.unpack_from(view)  # fmt: skip
        end = size - 4
        if (
            magic != wire.DATAGRAM_MAGIC
            or bmagic != wire.BATCH_MAGIC
            or version != wire.DATAGRAM_VERSION
            or bversion != wire.VERSION
            or flags
            or not count
            or 16 + length > end
            or length < wire.BATCH_HEADER + 2 * count
        ):
            return False
        conn = self._conns.get(conn_id)
        if conn is None or conn.state is not _OPEN or conn.addr != addr or conn.epoch != epoch:
            return False
        p = conn.producer
        if producer != p.pid or first != p.received + 1 or p.held or p.partials:
            return False
        if crc32c(view[:end]) != _U32.unpack_from(view, end)[0]:
            return False
        batch = view[16 : 16 + length]
        if crc32c(batch[12:]) != bcrc:
            return False
        # padding must be zeros (the general path says "malformed"); tobytes() and a
        # bytes compare are twice as fast as comparing the memoryview itself
        if 16 + length < end and view[16 + length : end].tobytes() != _ZEROS[: end - 16 - length]:
            return False
        table_end = wire.BATCH_HEADER + 2 * count
        if sum(batch[wire.BATCH_HEADER : table_end].cast("H")) != length - table_end:
            return False
        if length - table_end > p.max_record:
            return False  # may hold a record over max_record: the general path checks
        last = first + count - 1
        stream = p.stream
        header = wire.BatchHeader(position, bcrc, 0, length, count, producer, first, epoch)
        writes = self._writes.get(stream)
        if writes is None:
            self._writes[stream] = [(batch, header)]
        else:
            writes.append((batch, header))
        p.received = last
        owners = self._write_owners.get(stream)
        if owners is None:
            self._write_owners[stream] = [(p, last)]
        else:
            owners.append((p, last))
        stats = self.stats
        stats.batches += 1
        stats.records += count
        if pn > conn.largest_pn:
            conn.largest_pn = pn
            conn.ack_delay_from = now
        conn.last_seen = now
        if not conn.ack_due:
            conn.ack_due = True
            self._ack_due.add(conn_id)
        return True

    def _fast_piece(self, data: bytes | memoryview, addr: Address, now: float) -> bool:
        """The common case of a FRAGMENT in one go: the next piece, in order, of
        the batch that comes next (not its last piece: that one completes the
        batch and takes the general path, which checks it whole).  Anything
        else returns False and takes the general path."""
        view = memoryview(data)
        size = len(view)
        head = _FRAG_FAST.size
        if size <= head + 4:
            return False
        magic, version, _kind, conn_id, pn, epoch, seq, total, offset = _FRAG_FAST.unpack_from(view)
        end = offset + size - head - 4
        if magic != wire.DATAGRAM_MAGIC or version != wire.DATAGRAM_VERSION or end >= total:
            return False
        conn = self._conns.get(conn_id)
        if conn is None or conn.state is not _OPEN or conn.addr != addr or conn.epoch != epoch:
            return False
        p = conn.producer
        if seq != p.received + 1:
            return False
        part = p.partials.get(seq)
        if part is None:
            if (
                offset
                or total > p.max_record + wire.BATCH_HEADER
                or total < wire.BATCH_HEADER
                or self._memory + total > self.config.max_memory
            ):
                return False
        elif (
            part.total != total
            or part.epoch != epoch
            or len(part.spans) != 1
            or part.spans[0] != (0, offset)
        ):
            return False
        if crc32c(view[: size - 4]) != _U32.unpack_from(view, size - 4)[0]:
            return False
        if part is None:
            part = Partial(total, False, epoch)
            p.partials[seq] = part
            part.buf[:end] = view[head : size - 4]
            part.spans.append((0, end))
            self._account(p)
        else:
            part.buf[offset:end] = view[head : size - 4]
            part.spans[0] = (0, end)
        self.stats.held += 1
        if pn > conn.largest_pn:
            conn.largest_pn = pn
            conn.ack_delay_from = now
        conn.last_seen = now
        if not conn.ack_due:
            conn.ack_due = True
            self._ack_due.add(conn_id)
        return True

    def _on_data(self, msg: wire.Data, addr: Address, now: float, size: int) -> None:
        try:
            header = wire.verify_batch(msg.batch)
        except ProtocolError as exc:
            self._drop(exc.reason)
            return
        conn = self._session(msg.conn_id, header.epoch, addr, size)
        if conn is None:
            return
        p = conn.producer
        if header.producer != p.pid:
            self._drop("malformed")
            return
        if header.length - wire.BATCH_HEADER > p.max_record and largest_record(
            msg.batch, header
        ) > (p.max_record):
            self._drop("too_large")
            return
        if (
            header.first_seq > p.received + 1
            and self._memory + len(msg.batch) > self.config.max_memory
        ):
            # only data that would be held out of order is refused: the batch that
            # fills the gap must always get in, or the held data could never drain
            self._drop("memory_limit")
            return
        writes = self._writes.setdefault(p.stream, [])
        before = len(writes)
        try:
            result = p.on_batch(msg.batch, header, writes)
        except ProtocolError as exc:
            self._drop(exc.reason)
            return
        self._after(p, result, writes, before)
        self._note_pn(conn, msg.pn, now, result == "duplicate")

    def _on_fragment(self, msg: wire.Fragment, addr: Address, now: float, size: int) -> None:
        conn = self._session(msg.conn_id, msg.epoch, addr, size)
        if conn is None:
            return
        p = conn.producer
        seq = msg.seq
        if (
            seq > p.received
            and seq not in p.partials
            and seq not in p.held
            and msg.total <= p.max_record
            and self._memory + msg.total > self.config.max_memory
            and (seq != p.received + 1 or self._memory > self.config.max_memory)
        ):
            # a new record to put together and no room for it.  The next record
            # of a producer (seq = received + 1) may overshoot by one record while
            # the total is not past the limit: that is what lets held data drain.
            self._drop("memory_limit")
            return
        writes = self._writes.setdefault(p.stream, [])
        before = len(writes)
        try:
            result = p.on_fragment(msg, writes)
        except ProtocolError as exc:  # the batch put together does not verify
            result = exc.reason
        self._after(p, result, writes, before)
        self._note_pn(conn, msg.pn, now, result == "duplicate")

    def _after(self, p: Producer, result: str, writes: list[Write], before: int) -> None:
        if result == "stored":
            added = writes[before:]
            self.stats.batches += len(added)
            self.stats.records += sum(h.count for _, h in added)
            self._write_owners.setdefault(p.stream, []).append((p, p.received))
            if self._holding and p in self._holding:
                self._account(p)  # in-order data may have released held bytes
        elif result == "duplicate":
            self.stats.duplicates += 1
        elif result == "held":
            self.stats.held += 1
            self._account(p)
        else:
            self._drop(result)
            if self._holding and p in self._holding:
                self._account(p)  # a batch put together and refused: its buffer went

    def _note_pn(self, conn: Session, pn: int, now: float, duplicate: bool = False) -> None:
        if duplicate and len(conn.duplicates) < MAX_ACK_DUPLICATES:
            conn.duplicates.append(pn)  # the link learns its retransmission was spurious
        if pn > conn.largest_pn:
            conn.largest_pn = pn
            conn.ack_delay_from = now
        conn.last_seen = now
        self._want_ack(conn)
