"""The listener core's sessions: looked up, accepted, fenced, closed, expired.

Why it exists: every other part of the core (the handshake, batch intake,
answers) finds a session, starts one or ends one through the methods here,
so the rules of a session's life are written in one place: `_move` is the
only setter of a session's state (the table of legal moves and what each
state means for the collections: core_state.py).

Sessions and epochs.  A session is (conn_id, address, producer, epoch).  A
new session of a producer takes a higher epoch (durably, before it is
answered, for a named producer) and fences the old one: the old session
gets REFUSE(fenced) at once, and so does each of its later datagrams.  A
new session is only accepted once its producer's written records are
durable, so the ACCEPT's `stored` is exactly where a restarted application
resumes.

A shared store (several listeners on one JetStream cluster) may move a
producer on behind this listener's back: `_refresh` reads its state again at
each of its new sessions, and `fence_producer` ends a session here that a
newer one elsewhere replaced.

An anonymous producer is dropped from memory when its session ends with
everything stored (its state is in the store), and the store forgets it too
when its link said CLOSE or it never had a record stored.  After a CLOSE
that leaves a proven peer (a TCP connection) no session, `finished(addr)`
says so once: its connection may go.
"""

from __future__ import annotations

import os
import struct
from typing import Final

from ..errors import Error
from . import wire
from .core_parts import Address
from .core_state import MOVES, CoreState, Session, SessionState
from .receiver import Producer

__all__ = ["CoreSessions"]

# the states as module globals, for the per-datagram lookup (`_session`) and the
# per-link moves: on CPython 3.11 `SessionState.OPEN` costs ~65 ns more than `_OPEN`
# (core_state.py, whose table is built once, spells them out)
_NEW: Final = SessionState.NEW
_WAITING: Final = SessionState.WAITING
_OPEN: Final = SessionState.OPEN
_FENCED: Final = SessionState.FENCED
_CLOSED: Final = SessionState.CLOSED
_RANDOM_AHEAD: Final = 1024  # bytes of os.urandom read at once: 256 conn ids
_U32: Final = struct.Struct("<I")


class CoreSessions(CoreState):
    """Finding, accepting and ending the sessions of a listener core."""

    def finished(self, addr: Address) -> bool:
        """Whether the proven peer `addr` said CLOSE for its last open session since
        this was last asked: its connection carries nothing more and may close."""
        finished = self._finished
        if finished and addr in finished:
            finished.discard(addr)
            return True
        return False

    def closing(self, addr: Address) -> bool:
        """Whether `finished(addr)` would say True now (it does not consume it):
        a reader of a connection whose peer's EOF is queued need not read on to
        it, since the connection closes anyway."""
        return addr in self._finished

    def has_session(self, addr: Address) -> bool:
        """Whether the proven peer `addr` has a session open (accepted, or waiting
        for its ACCEPT): its connection then owes nothing while it is idle."""
        ids = self._by_peer.get(addr)
        if not ids:
            return False
        conns = self._conns
        for conn_id in ids:
            if conn_id in conns:
                return True
        del self._by_peer[addr]  # every one of them ended: nothing to keep
        return False

    def disconnected(self, addr: Address) -> None:
        """The connection of a proven peer closed: its sessions end (as an expiry
        ends one: the store keeps an anonymous producer's state, since its link
        may come back on a new connection; only a CLOSE lets it go, or the end
        of a session in which the producer never had a record stored)."""
        self._finished.discard(addr)
        for conn_id in self._by_peer.pop(addr, ()):
            conn = self._conns.get(conn_id)
            if conn is not None and conn.addr == addr:
                self._close(conn)  # one still WAITING is never accepted now

    def fence_producer(self, stream: str, pid: int) -> None:
        """A newer session of this producer lives elsewhere (a shared store said
        so): end its session here as fenced and forget the producer, so that a
        later session of it reads its state from the store afresh."""
        producer = self._producers.pop((stream, pid), None)
        if producer is None:
            return
        self._memory -= self._holding.pop(producer, 0)
        self._closed_unsynced.discard(producer)
        conn = producer.conn
        producer.conn = None
        if isinstance(conn, Session):
            self._fence(conn)

    # ------------------------------------------------------------ state
    def _move(self, conn: Session, state: SessionState) -> None:
        """The one setter of a session's state: refuses a move not in `MOVES` (a
        bug here, never a peer's doing) and keeps the collections that index
        sessions in step with the new state (core_state.py's table)."""
        old = conn.state
        if (old, state) not in MOVES:
            raise AssertionError(f"listener core: illegal session move {old.name} -> {state.name}")
        conn.state = state
        if old is _NEW:
            self._register(conn)
        elif old is _WAITING:
            self._unwait(conn)
        if state is _WAITING:
            self._accept_waiting.setdefault(conn.producer.stream, []).append(conn)
        elif state is _FENCED or state is _CLOSED:
            self._forget(conn)

    def _register(self, conn: Session) -> None:
        """A new session goes live: findable by conn id, by HELLO, by producer and,
        for a proven peer, by its connection."""
        conn_id, addr = conn.conn_id, conn.addr
        self._conns[conn_id] = conn
        conn.producer.conn = conn
        self._hellos[(addr, conn.nonce)] = conn_id
        if conn.proven:
            self._by_peer.setdefault(addr, []).append(conn_id)
            self._finished.discard(addr)  # a new session: the connection carries it

    def _unwait(self, conn: Session) -> None:
        """A WAITING session leaves its stream's list of sessions to accept."""
        stream = conn.producer.stream
        waiting = self._accept_waiting.get(stream)
        if waiting is None:
            return  # synced() took the whole list
        waiting.remove(conn)
        if not waiting:
            del self._accept_waiting[stream]

    def _forget(self, conn: Session) -> None:
        """An ended session leaves the live collections; it is remembered a while in
        `_gone` (to answer its late datagrams) and its HELLO in `_spent`."""
        self._conns.pop(conn.conn_id, None)
        self._hellos.pop((conn.addr, conn.nonce), None)
        if conn.replay_until is not None:
            spent = self._spent
            spent[(conn.addr, conn.nonce)] = conn.replay_until
            if len(spent) > self.config.hello_memory:
                del spent[next(iter(spent))]
        conn.ack_due = False
        self._ack_due.discard(conn.conn_id)
        if conn.producer.conn is conn:
            conn.producer.conn = None
        self._gone[conn.conn_id] = conn
        while len(self._gone) > self.config.fenced_memory:
            del self._gone[next(iter(self._gone))]

    # ---------------------------------------------------------- lookups
    def _session(self, conn_id: int, epoch: int, addr: Address, size: int) -> Session | None:
        conn = self._conns.get(conn_id)
        if conn is None:
            gone = self._gone.get(conn_id)
            if gone is not None and gone.addr == addr and gone.state is _FENCED:
                self._drop("stale_epoch")
                refuse = wire.Refuse(conn_id, 0, gone.epoch, wire.RefuseReason.FENCED)
                self._send_unproven(wire.encode_refuse(refuse), addr, size)
                return None
            self._drop("unknown_conn")
            refuse = wire.Refuse(conn_id, 0, epoch, wire.RefuseReason.UNKNOWN)
            self._send_unproven(wire.encode_refuse(refuse), addr, size)
            return None
        if conn.addr != addr:
            self._drop("wrong_address")
            return None
        if epoch != conn.epoch:
            self._drop("stale_epoch")
            return None
        if conn.state is not _OPEN:
            self._drop("not_accepted")
            return None
        return conn

    def _accept(self, conn: Session) -> None:
        """A NEW or WAITING session opens: its ACCEPT goes out."""
        self._move(conn, _OPEN)
        self.stats.accepts += 1
        self._send_accept(conn)

    def _send_accept(self, conn: Session) -> None:
        p = conn.producer
        # the bytes of wire.encode_accept(wire.Accept(...)), without the Accept
        accept = wire.accept_datagram(
            conn.conn_id,
            conn.nonce,
            p.pid,
            conn.epoch,
            p.stored,
            p.received,
            p.window,
            p.max_record,
        )
        self._out.append((accept, conn.addr))

    def _new_conn_id(self) -> int:
        """A random conn id, not 0 and not in use.  The operating system's random
        bytes are read `_RANDOM_AHEAD` at a time (the same bytes, one getrandom
        call per 256 sessions instead of one per session: a short TCP link costs
        a dozen system calls in all)."""
        while True:
            at = self._random_at
            if at >= len(self._random):
                self._random, at = os.urandom(_RANDOM_AHEAD), 0
            self._random_at = at + 4
            conn_id: int
            (conn_id,) = _U32.unpack_from(self._random, at)
            if conn_id and conn_id not in self._conns and conn_id not in self._gone:
                return conn_id

    def _expire_idle(self, now: float) -> None:
        """Forget sessions that sent nothing for idle_timeout (no timer: called from
        the HELLO path, at most every idle_timeout / 4, or when sessions run out)."""
        limit = now - self.config.idle_timeout
        self._next_sweep = now + self.config.idle_timeout / 4
        for conn in [c for c in self._conns.values() if c.last_seen < limit]:
            self._drop("session_expired")  # counted, and not junk (core_state._NOT_JUNK)
            self._close(conn)

    def _forget_closed(self, p: Producer) -> None:
        """An anonymous producer whose link said CLOSE before its records were
        durable: once they are (and no new session took it), forget it."""
        if p.stored < p.received:
            return
        self._closed_unsynced.discard(p)
        if p.conn is None:
            self._producers.pop((p.stream, p.pid), None)
            self._memory -= self._holding.pop(p, 0)
            self.store.forget(p.stream, p.pid)
            self.stats.forgotten += 1

    def _refresh(self, producer: Producer) -> Producer | None:
        """A shared store (several listeners on one cluster) may have moved a
        producer on behind this listener's back, through another listener: if it
        did, the producer here is stale, so its session here is fenced and the
        producer forgotten (None: the caller reads it afresh)."""
        try:
            epoch, last_seq = self.store.producer_state(producer.stream, producer.pid)
        except (Error, OSError, ValueError):
            return producer  # the HELLO's own read below says what is wrong
        if epoch <= producer.epoch and last_seq <= producer.stored:
            return producer
        self.fence_producer(producer.stream, producer.pid)
        return None

    def _fence(self, conn: Session) -> None:
        """A newer session of its producer replaces `conn`: tell it at once (its
        address was proven by its handshake), so that its application learns it
        now, not at its next datagram (which would get the same REFUSE)."""
        self.stats.fenced += 1
        if conn.state is _WAITING:  # never accepted: the REFUSE answers its HELLO
            refuse = wire.Refuse(0, conn.nonce, 0, wire.RefuseReason.FENCED)
        else:
            refuse = wire.Refuse(conn.conn_id, 0, conn.epoch, wire.RefuseReason.FENCED)
        self._move(conn, _FENCED)
        self._out.append((wire.encode_refuse(refuse), conn.addr))

    def _close(self, conn: Session, said_close: bool = False) -> None:
        """End a session: it said CLOSE, it expired, its connection closed or its
        key was revoked."""
        p = conn.producer
        current = p.conn is conn
        self._move(conn, _CLOSED)
        if current:
            if p.pid >> 63 and p.stored >= p.received:
                # an anonymous producer is not needed in memory between sessions: a
                # link that comes back (after an expiry, or on a new connection)
                # finds its state in the store
                self._producers.pop((p.stream, p.pid), None)
                self._memory -= self._holding.pop(p, 0)
                if said_close or not p.stored:
                    # a link says CLOSE once, when it is closed for good, and its
                    # anonymous id dies with it: the store may forget the producer
                    # (it would otherwise keep one entry per short-lived link).
                    # So may it one that never stored a record, however its session
                    # ended: there is nothing to deduplicate against, and a link that
                    # comes back starts again from seq 1 as it would anyway.  (A flood
                    # of HELLOs that never send data, each under a new anonymous id,
                    # would otherwise grow the stream's producer table without bound.)
                    self.store.forget(p.stream, p.pid)
                    self.stats.forgotten += 1
            elif p.pid >> 63 and said_close:
                # closed with records written but not yet durable (a close() that
                # timed out): let it go when the sync that covers them lands
                self._closed_unsynced.add(p)
