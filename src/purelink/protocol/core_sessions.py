"""The listener core's sessions: looked up, accepted, fenced, closed, expired.

Why it exists: every other part of the core (the handshake, batch intake,
answers) finds a session, starts one or ends one through the methods here,
so the rules of a session's life are written in one place.

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

from ..errors import Error
from . import wire
from .core_parts import Address
from .core_state import CoreState, _Conn
from .receiver import Producer

__all__ = ["CoreSessions"]


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
            if conn is None or conn.addr != addr:
                continue
            stream = conn.producer.stream
            waiting = self._accept_waiting.get(stream)
            if waiting and conn in waiting:  # never to be accepted now
                waiting.remove(conn)
                if not waiting:
                    del self._accept_waiting[stream]
            self._close(conn)

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
        if isinstance(conn, _Conn):
            self._fence(conn)

    def _session(self, conn_id: int, epoch: int, addr: Address, size: int) -> _Conn | None:
        conn = self._conns.get(conn_id)
        if conn is None:
            gone = self._gone.get(conn_id)
            if gone is not None and gone.addr == addr and gone.fenced:
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
        if not conn.accepted:
            self._drop("not_accepted")
            return None
        return conn

    def _accept(self, conn: _Conn) -> None:
        conn.accepted = True
        self.stats.accepts += 1
        self._send_accept(conn)

    def _send_accept(self, conn: _Conn) -> None:
        p = conn.producer
        accept = wire.Accept(
            conn.conn_id,
            conn.nonce,
            p.pid,
            conn.epoch,
            p.stored,
            p.received,
            p.window,
            p.max_record,
        )
        self._out.append((wire.encode_accept(accept), conn.addr))

    def _new_conn_id(self) -> int:
        while True:
            conn_id = int.from_bytes(os.urandom(4), "little")
            if conn_id and conn_id not in self._conns and conn_id not in self._gone:
                return conn_id

    def _forget(self, conn: _Conn) -> None:
        self._conns.pop(conn.conn_id, None)
        self._hellos.pop((conn.addr, conn.nonce), None)
        if conn.replay_until:
            spent = self._spent
            spent[(conn.addr, conn.nonce)] = conn.replay_until
            if len(spent) > self.config.hello_memory:
                del spent[next(iter(spent))]
        self._ack_due.discard(conn.conn_id)
        self._gone[conn.conn_id] = conn
        while len(self._gone) > self.config.fenced_memory:
            del self._gone[next(iter(self._gone))]

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

    def _fence(self, conn: _Conn) -> None:
        """A newer session of its producer replaces `conn`: tell it at once (its
        address was proven by its handshake), so that its application learns it
        now, not at its next datagram (which would get the same REFUSE)."""
        self.stats.fenced += 1
        conn.fenced = True
        waiting = self._accept_waiting.get(conn.producer.stream)
        if waiting and conn in waiting:
            waiting.remove(conn)  # never accept a session that is already fenced
            refuse = wire.Refuse(0, conn.nonce, 0, wire.RefuseReason.FENCED)  # its HELLO's
        else:
            refuse = wire.Refuse(conn.conn_id, 0, conn.epoch, wire.RefuseReason.FENCED)
        self._out.append((wire.encode_refuse(refuse), conn.addr))
        self._forget(conn)

    def _close(self, conn: _Conn, said_close: bool = False) -> None:
        """End a session: it said CLOSE, it expired, or its connection closed."""
        self._forget(conn)
        p = conn.producer
        if p.conn is conn:
            p.conn = None
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
