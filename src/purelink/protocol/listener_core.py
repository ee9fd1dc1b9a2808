"""The listener's protocol core: every datagram from every address, no I/O.

The driver (listener.py) feeds it datagrams with their source address and
the time, then asks for what to write (`take_writes`), tells it what was
written and what became durable (`written`, `synced`), and sends what it
returns (`datagrams_to_send`).  The store is reached through the small
`ProducerTable` protocol so that tests can pass a dict-backed fake.

`ListenerCore` is one object, put together from parts that each own one
concern and share one set of fields:

  core_state.py      the fields, the drop counters, the memory total; a
                     session's states and the table of their legal moves
  core_sessions.py   sessions and epochs: the one setter of a session's state,
                     lookup, accept, fence, close, expiry; the refresh of a
                     producer from a shared store
  core_handshake.py  HELLO -> RETRY / ACCEPT / REFUSE: cookies, replays, limits
  core_intake.py     DATA and FRAGMENT -> batches in order, held or duplicate;
                     the in-order fast paths
  core_answers.py    written / synced -> stored; one ACK per session per drain,
                     held a moment for a sync in flight
  core_parts.py      configuration, counters, the ProducerTable, the cookies

Each part is a class over `CoreState` (the handshake, intake and answers over
`CoreSessions`, since all three find or end sessions), and `ListenerCore`
inherits them all: still one object, so the per-datagram path pays plain
attribute lookups, no hop between objects.  This file holds the entry point,
`receive_datagram`, which sends each datagram to a fast path or to the part
that handles its kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ProtocolError
from . import wire
from .core_answers import CoreAnswers
from .core_handshake import CoreHandshake
from .core_intake import DATA_FAST, INTAKE, CoreIntake
from .core_parts import Address, CoreConfig, ProducerTable, named_producer_id

if TYPE_CHECKING:
    from .._speedups import Intake

__all__ = ["CoreConfig", "ListenerCore", "ProducerTable", "named_producer_id"]


class ListenerCore(CoreHandshake, CoreIntake, CoreAnswers):
    """Protocol state of a listener across all of its links."""

    intake: Intake | None = INTAKE
    """The compiled fast intake, or None for the Python fast paths (the tests set
    it to None on one core to compare the two)."""

    def receive_datagram(
        self, data: bytes | memoryview, addr: Address, now: float, proven: bool = False
    ) -> None:
        """Take one datagram.  Never raises: bad input is dropped and counted.
        `proven`: the transport proved `addr` itself (a TCP connection), so a
        HELLO from it needs no cookie round trip; call `disconnected(addr)`
        when that connection closes."""
        stats = self.stats
        stats.datagrams += 1
        size = len(data)
        stats.bytes += size
        intake = self.intake
        if size > DATA_FAST.size and intake is not None:
            if intake.take(self, data, addr, now):  # the compiled core's fast paths
                return
        elif size > DATA_FAST.size and wire.LITTLE_ENDIAN:
            kind = data[3]
            if kind == wire.MsgType.FRAGMENT:
                if self._fast_piece(data, addr, now):
                    return
            elif kind == wire.MsgType.DATA and self._fast_data(data, addr, now):
                return
        try:
            msg = wire.decode_datagram(data)
        except ProtocolError as exc:
            self._drop(exc.reason)
            return
        # most DATA and FRAGMENTs were taken by a fast path above: a HELLO and a
        # CLOSE (every link's, two of a short link's three messages) are asked first
        if isinstance(msg, wire.Hello):
            self._on_hello(msg, addr, now, size, proven)
        elif isinstance(msg, wire.Close):
            self._on_close(msg, addr, size)
        elif isinstance(msg, wire.Data):
            self._on_data(msg, addr, now, size)
        elif isinstance(msg, wire.Fragment):
            self._on_fragment(msg, addr, now, size)
        elif isinstance(msg, wire.Probe):
            self._on_probe(msg, addr, now, size)
        else:
            self._drop("wrong_direction")

    def _on_probe(self, msg: wire.Probe, addr: Address, now: float, size: int) -> None:
        """A loss probe asks for an ACK; a padded one (a path MTU probe) for an
        MTU_ACK that says it came, and how large."""
        conn = self._session(msg.conn_id, msg.epoch, addr, size)
        if conn is None:
            return
        if msg.padding:
            conn.last_seen = now
            self.stats.mtu_probes += 1
            answer = wire.MtuAck(conn.conn_id, conn.epoch, msg.pn, min(size, 0xFFFF))
            self._out.append((wire.encode_mtu_ack(answer), conn.addr))
        else:
            self._note_pn(conn, msg.pn, now)

    def _on_close(self, msg: wire.Close, addr: Address, size: int) -> None:
        """The link is closed for good: its session ends, and a proven peer left
        with no session is `finished`."""
        conn = self._session(msg.conn_id, msg.epoch, addr, size)
        if conn is not None:
            self._close(conn, said_close=True)
            if conn.proven and not self.has_session(addr):
                self._finished.add(addr)
