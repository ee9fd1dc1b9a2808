"""Packing: records in, datagrams of at most N bytes out, each remembering what it carried.

Why a module of its own: the sender's loss detection, congestion control and
pacing decide *when* and *how many* datagrams go out; this decides *what is
in them*, so that wire bytes stay close to payload bytes (docs/wire.md
section 7).  The sender treats it as a black box: `fill()` builds the next
first transmissions, `resend()` a lost datagram again, and each `Flight`
says what its datagram carried, which is all an answer is matched against.

How records become datagrams:

* the records not yet sent are cut into **batches** (the unit the listener
  stores, unchanged: batch.py).  A batch takes as many whole records as
  keep it at most `batch_limit` bytes (just under 64 KiB, so that it fills a
  whole number of datagrams; a record of 64 KiB or more is a one-record
  large batch of its own);
* a batch that fits one datagram goes in one DATA datagram;
* a larger batch goes as FRAGMENT datagrams, its bytes cut into pieces of
  `size - FRAGMENT_OVERHEAD`: every piece fills its datagram
  exactly, but the batch's last.  So a run of pieces is a run of equal
  datagrams, as UDP GSO wants, and nothing is ever padded.  The listener
  puts the pieces together and stores the batch's bytes as they are
  (receiver.py): one CRC of its own covers the whole batch, besides the
  CRC of every datagram;
* the pieces of one batch go out lazily: `fill()` sends only as many as it
  is allowed, the batch stays open, and the next call goes on from there.

Bytes: with 1,400-byte datagrams a piece carries 1,360 bytes of batch (40 of
datagram header, fragment head and CRC), and a batch of 1,000-byte records
spends 44 + 2 per record on its header and length table: 1,400 / 1,360 x
1,002 / 1,000 + 44 / 65,000 = 1.032 wire bytes per payload byte.

A datagram in flight is resolved by what it carried: a whole batch (DATA) is
delivered once its seqs are received or held; a piece once its byte range of
its batch is held (an ACK's fragment spans) or the whole batch is received.
A lost datagram is sent again with the same bytes under a new packet number
(`resend`), unless the path's datagram size has shrunk below it since
(path MTU, pmtu.py): then its bytes (taken from the datagram itself: a flight
keeps nothing but its datagram) go again as smaller pieces of the same batch,
which the listener puts together just the same.

Invariants: every record from `next_seq` on is in no batch yet; the open
batch's bytes before `_at` are sent; a batch's bytes never change once it
is built (a retransmission is byte for byte the same batch), and batch
boundaries never change within a session.

Two implementations: the classes below are the reference; where the compiled
core has its "pack" part (purelink.native), `Packer` and `Flight` are its C
types instead (src/speedups/pack.c: the same decisions and the same wire
bytes, each datagram written once at its final size).  `PurePacker` and
`PureFlight` are the pure-Python ones either way.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Reversible, Sequence
from typing import Final, Protocol

from .. import native
from . import wire

__all__ = ["BATCH_LIMIT", "Flight", "FlightMap", "Packer", "PureFlight", "PurePacker", "Stamps"]

_core = native.part("pack")

BATCH_LIMIT: Final = 0xFFFF
"""Most bytes of records and length table in one small batch.  At most 65,535,
so that a run of records that fits holds no record whose length table entry
was clamped (every such record is at least 65,535 bytes on its own)."""


_BATCH: Final = wire.HEADER + 8  # where a DATA datagram's batch starts (after the pn)
_LENGTH: Final = _BATCH + 16  # the batch's length field
_TOTAL: Final = wire.HEADER + 20  # a FRAGMENT's `total` field
_PIECE: Final = wire.FRAGMENT_OVERHEAD - 4  # where a FRAGMENT's piece starts


class Flight:
    """One datagram in flight: what it carried, and its delivery-rate stamps
    (congestion/rate.py, written as it goes out)."""

    __slots__ = (
        "app_limited", "data", "delivered", "delivered_time", "end", "first", "first_sent",
        "last", "offset", "pn", "retx", "sent", "size",
    )  # fmt: skip

    def __init__(
        self,
        pn: int,
        first: int,
        last: int,
        size: int,
        sent: float,
        data: bytes,
        offset: int = 0,
        end: int = 0,
    ) -> None:
        self.pn = pn
        """Its packet number (the last transmission's)."""
        self.first = first
        """The first seq of the batch it carried (or carried a piece of)."""
        self.last = last
        """The last seq of that batch."""
        self.size = size
        """Bytes of the datagram."""
        self.sent = sent
        """When it was (last) sent."""
        self.data = data
        """The datagram as sent."""
        self.offset = offset
        """A piece: where its bytes start in the batch."""
        self.end = end
        """A piece: where its bytes end in the batch; 0 for a whole batch (DATA)."""
        self.retx = False
        """A retransmission (recovery.py)."""
        self.delivered = 0
        self.delivered_time = 0.0
        self.first_sent = 0.0
        self.app_limited = False


class FlightMap(Protocol):
    """Flights by packet number, in the order they went in (ascending): a dict,
    or where the compiled core is in use the ledger's ring (`_speedups.Flights`:
    these methods, its views lists)."""

    def __len__(self) -> int: ...
    def __getitem__(self, pn: int) -> Flight: ...
    def __setitem__(self, pn: int, f: Flight) -> None: ...
    def __delitem__(self, pn: int) -> None: ...
    def get(self, pn: int) -> Flight | None: ...
    def values(self) -> Reversible[Flight]: ...
    def items(self) -> Iterable[tuple[int, Flight]]: ...
    def clear(self) -> None: ...


Stamps = tuple[int, float, float, bool]
"""A flight's delivery-rate stamps: delivered, delivered_time, first_sent, app_limited."""


class Packer:
    """Cuts a sender's records into batches and batches into datagrams."""

    def __init__(self, size: int) -> None:
        self.conn_id = 0
        self.producer_id = 0
        self.epoch = 0
        self.next_seq = 1
        """The first seq in no batch yet."""
        self.batches = 0
        """Batches built."""
        self.pieces = 0
        """FRAGMENT datagrams sent as first transmissions."""
        self.payload = 0
        """Bytes of records put in batches, each record once (a new session packs
        again what the listener had not received: not counted again)."""
        self._counted = 0  # the last seq whose bytes are in `payload`
        self._guess = 16  # records per batch last time: where fitting starts looking
        # the open batch: its bytes, seqs and how much of it is sent
        self._batch: bytes | None = None
        self._first = 0
        self._last = 0
        self._at = 0
        self.size = size

    # ------------------------------------------------------------ session
    @property
    def size(self) -> int:
        """Largest datagram to make (the path's, from pmtu.py, or datagram_size)."""
        return self._size

    @size.setter
    def size(self, size: int) -> None:
        if size < 128:
            raise ValueError("a datagram of fewer than 128 bytes cannot carry a batch")
        self._size = size
        self._data_room = size - wire.DATA_OVERHEAD - wire.BATCH_HEADER
        self._chunk = size - wire.FRAGMENT_OVERHEAD
        pieces = (BATCH_LIMIT + wire.BATCH_HEADER) // self._chunk
        room = pieces * self._chunk - wire.BATCH_HEADER
        self._batch_room = min(BATCH_LIMIT, max(room, self._data_room))

    def start(self, conn_id: int, producer_id: int, epoch: int, next_seq: int) -> None:
        """A session opens: batches start again at `next_seq` (an open batch is
        forgotten: everything above the listener's `received` is packed anew)."""
        self.conn_id = conn_id
        self.producer_id = producer_id
        self.epoch = epoch
        self.next_seq = next_seq
        self._batch = None

    @property
    def open(self) -> bool:
        """Whether a batch has pieces not yet sent."""
        return self._batch is not None

    # ------------------------------------------------------------ packing
    def fill(
        self,
        recs: Sequence[bytes],
        lens: array[int],
        base: int,
        pushed: int,
        pn: int,
        now: float,
        count: int,
        room: int,
        out: list[bytes],
        flights: FlightMap,
        stamps: Stamps | None = None,
    ) -> tuple[int, int]:
        """First transmissions: up to `count` datagrams appended to `out` (and
        their flights to `flights`, by packet number), each one sent while the
        bytes so far are under `room`.  `recs[i]` is seq `base + i`, `lens` its
        lengths clamped to 65,535, `pushed` the last seq there is.  Packet
        numbers follow `pn`.  Returns (the last packet number used, bytes).
        With `stamps` (delivered, delivered_time, first_sent, app_limited), each
        flight gets those delivery-rate stamps as it is made (`flights` is then
        the ledger's own: InFlight.stamps).

        The link's hot path, with its state in locals.  Fitting starts from the
        last batch's count: the join it needs anyway gives the byte total, so
        in the steady state it costs one look at the next length."""
        if stamps is not None:  # the compiled core's way; made here as a twin of it
            new: dict[int, Flight] = {}
            pn, used = self.fill(recs, lens, base, pushed, pn, now, count, room, out, new)
            for key, f in new.items():
                f.delivered, f.delivered_time, f.first_sent, f.app_limited = stamps
                flights[key] = f
            return pn, used
        used = 0
        sent = 0
        size = self._size
        while sent < count and used < room:
            batch = self._batch
            if batch is None:
                if self.next_seq > pushed:
                    break
                pn, nbytes, made = self._pack_batch(recs, lens, base, pushed, pn, now, out, flights)
                used += nbytes
                sent += made
                continue
            # pieces of the open batch: as many as count and room allow
            chunk = self._chunk
            at = self._at
            n = min(count - sent, -(-(room - used) // size))
            end = min(at + n * chunk, len(batch))
            datagrams = wire.encode_pieces(
                self.conn_id, pn + 1, self.epoch, self._first, batch, at, end, chunk
            )
            first, last = self._first, self._last
            for data in datagrams:
                pn += 1
                stop = min(at + chunk, end)
                flights[pn] = Flight(pn, first, last, len(data), now, data, at, stop)
                used += len(data)
                at = stop
            out.extend(datagrams)
            sent += len(datagrams)
            self.pieces += len(datagrams)
            self._at = at
            if at >= len(batch):
                self._batch = None
        return pn, used

    def _pack_batch(
        self,
        recs: Sequence[bytes],
        lens: array[int],
        base: int,
        pushed: int,
        pn: int,
        now: float,
        out: list[bytes],
        flights: FlightMap,
    ) -> tuple[int, int, int]:
        """The next batch: one DATA datagram if it fits one (returns its packet
        number, bytes and 1), else opened for fill() to send in pieces (0, 0)."""
        seq = self.next_seq
        i = seq - base
        avail = pushed - seq + 1
        limit = self._batch_room
        n = self._guess if self._guess < avail else avail
        payload = b"".join(recs[i : i + n])
        total = len(payload) + 2 * n
        if total <= limit:
            m = n
            while m < avail:
                more = lens[i + m] + 2
                if total + more > limit:
                    break
                total += more
                m += 1
            if m > n:
                n = m
                payload = b"".join(recs[i : i + n])
        else:
            while n > 1 and total > limit:
                n //= 2
                total = sum(lens[i : i + n]) + 2 * n  # exact once it fits (see BATCH_LIMIT)
            if total <= limit:
                while n < avail and total + lens[i + n] + 2 <= limit:
                    total += lens[i + n] + 2
                    n += 1
                payload = b"".join(recs[i : i + n])
            else:
                payload = recs[i]  # one record larger than a batch of many
        self._guess = max(n, 1)
        last = seq + n - 1
        self.next_seq = last + 1
        self.batches += 1
        if seq > self._counted:
            self.payload += len(payload)
        elif last > self._counted:  # packed again after a new session, in part
            self.payload += sum(map(len, recs[i + self._counted + 1 - seq : i + n]))
        self._counted = max(self._counted, last)
        producer, epoch = self.producer_id, self.epoch
        if total <= self._data_room:
            pn += 1
            data = wire.encode_data_batch(
                self.conn_id, pn, producer, epoch, seq, recs[i : i + n], lens[i : i + n],
                0, payload,
            )  # fmt: skip
            flights[pn] = Flight(pn, seq, last, len(data), now, data)
            out.append(data)
            return pn, len(data), 1
        if len(payload) > wire.MAX_SMALL_RECORD:
            batch = wire.encode_large_batch(producer, epoch, seq, payload)
        else:
            table = lens[i : i + n]
            if not wire.LITTLE_ENDIAN:  # pragma: no cover - the table is little-endian
                table.byteswap()
            batch = wire.encode_batch_of(producer, epoch, seq, n, table, payload)
        self._batch = batch
        self._first, self._last, self._at = seq, last, 0
        return pn, 0, 0

    def resend(self, f: Flight, pn: int, now: float) -> tuple[int, list[Flight]]:
        """The datagram of a lost flight again, under packet numbers after `pn`:
        the same bytes (only the packet number and trailer change) while it fits
        the path; cut into smaller pieces of the same batch if the path's size
        has shrunk below it.  Returns (the last packet number used, the flights
        sent, whose datagrams are their `data`)."""
        if f.size <= self._size:
            pn += 1
            f.data = wire.reseal(f.data, pn)
            f.pn = pn
            f.sent = now
            return pn, [f]
        data = memoryview(f.data)
        if f.end:  # the piece's own bytes: what follows the fragment head
            total = int.from_bytes(data[_TOTAL : _TOTAL + 4], "little")
            piece = data[_PIECE : _PIECE + f.end - f.offset]
            start, end = f.offset, f.end
        else:  # a whole batch: it follows the DATA datagram's 16-byte head
            total = int.from_bytes(data[_LENGTH : _LENGTH + 4], "little")
            piece = data[_BATCH : _BATCH + total]
            start, end = 0, total
        chunk = self._chunk
        datagrams = wire.encode_pieces(
            self.conn_id, pn + 1, self.epoch, f.first, piece, start, end, chunk,
            total, start,
        )  # fmt: skip
        flights = []
        for out in datagrams:
            pn += 1
            stop = min(start + chunk, end)
            flights.append(Flight(pn, f.first, f.last, len(out), now, out, start, stop))
            start = stop
        return pn, flights


PureFlight = Flight
PurePacker = Packer
if _core is not None:
    Flight = _core.Flight  # type: ignore[misc]
    Packer = _core.Packer  # type: ignore[misc]
