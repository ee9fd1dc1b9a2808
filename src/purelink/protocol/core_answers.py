"""The listener core's answers: what became durable, and the ACKs that say so.

Why it exists: when to answer -- once per session per drain, once more when a
sync lands, held a moment for a sync in flight -- is a pacing policy of its
own, fed by the durability reports of the driver (`written`, `synced`).

Answers.  One ACK per session per drain (the driver calls
`datagrams_to_send` once per drain), not one per datagram, and one more when
a sync makes records durable.  A PROBE is answered at the next call too.
To a proven peer (a TCP connection: nothing is lost on the way, so an ACK
there only tells progress) an ACK that would say "received" ahead of
"stored" is held while the sync in flight catches up, for at most
`ack_hold` seconds (`timeout()` tells the driver when): the sync's ACK then
says both, and a short link gets one answer to its data instead of two.  The
held time goes out as `ack_delay`, as QUIC's delayed ACKs do, so the link's
RTT samples leave it out; `ack_hold` stays well under the link's smallest
RTO, so no probe is ever sent for it.

Durability.  The batches the driver takes (`take_writes`) are remembered per
stream with the producer and last seq of each (`_write_owners`); `written`
moves them to the stream's queue of writes waiting for a sync, at the log
position their last one ended at; `synced` raises each producer's `stored`
as the sync passes those positions, asks for its ACK, and accepts the new
sessions that waited for their producer's records to be durable.

No room.  When the store has no room for a stream (`write_full`: a full disk,
or below its min-free mark) the writes taken for it are not stored: each of
its producers goes back to what the store holds (`received` = its last seq
written there; what was held out of order is dropped), its session ends with
REFUSE(disk_full), and new HELLOs for the stream are refused so until
`stream_resumed`.  The links wait and ask again; their next session resends
everything after the `stored` its ACCEPT says, so nothing is lost and
nothing is stored twice.
"""

from __future__ import annotations

from collections import deque

from . import wire
from .core_parts import Address
from .core_sessions import CoreSessions
from .core_state import Session, SessionState

__all__ = ["CoreAnswers"]


class CoreAnswers(CoreSessions):
    """Durability in, answers out."""

    def write_full(self, stream: str, ticket: int | None = None) -> None:
        """The store has no room for the writes taken for `stream`: see "No room"
        in the module header.  `ticket`: the store did write a part of them, up
        to there (they become durable with it, and count as received).
        Refusals go out at the next datagrams_to_send."""
        self._write_owners.pop(stream, None)
        self._writes.pop(stream, None)
        self._full.add(stream)
        for (name, pid), producer in list(self._producers.items()):
            if name != stream:
                continue
            _, written = self.store.producer_state(stream, pid)
            if ticket is not None and written > producer.stored:
                self._pending_sync.setdefault(stream, deque()).append(
                    (ticket, [(producer, written)])
                )
            producer.received = max(written, producer.stored)
            producer.reset_volatile()
            self._account(producer)
        self._end_sessions(stream, wire.RefuseReason.DISK_FULL)

    def stream_failed(self, stream: str, final: bool) -> None:
        """The store failed on `stream` for good: nothing more is written there,
        and its sessions end with REFUSE(stream_failed) -- their links wait for
        a restart of the listener, which recovers the stream from its files.
        `final` (a failed sync): nothing written and not yet durable ever will
        be, so nothing more is told stored and the sessions end now; else (a
        failed write) what was written before it may still become durable, and
        the sessions end once it has, told so first."""
        self._write_owners.pop(stream, None)
        self._writes.pop(stream, None)
        self._failed_streams.add(stream)
        if final:
            self._pending_sync.pop(stream, None)
        if not self._pending_sync.get(stream):
            self._end_sessions(stream, wire.RefuseReason.STREAM_FAILED)

    def _end_sessions(self, stream: str, reason: int) -> None:
        """End every session of `stream`, each told why (a refusal for now), an
        open one told first what is stored (its last ACK)."""
        for (name, _), producer in list(self._producers.items()):
            conn = producer.conn
            if name != stream or not isinstance(conn, Session):
                continue
            if conn.state is SessionState.WAITING:  # never accepted: answer its HELLO
                refuse = wire.Refuse(0, conn.nonce, 0, reason)
            elif conn.state is SessionState.OPEN:
                self._out.append((self._encode_ack(conn, 0), conn.addr))
                refuse = wire.Refuse(conn.conn_id, 0, conn.epoch, reason)
            else:
                continue
            # refused for now, not ended for good: its link sends the same HELLO
            # again (a waiting one keeps its nonce), which must not read as a replay
            conn.replay_until = None
            self._move(conn, SessionState.CLOSED)
            self._out.append((wire.encode_refuse(refuse), conn.addr))
            self._drop(wire.RefuseReason.NAMES[reason])

    def stream_resumed(self, stream: str) -> None:
        """The store has room for `stream` again: its links may come back."""
        self._full.discard(stream)

    @property
    def full_streams(self) -> frozenset[str]:
        """Streams the store has no room for (their links are refused for now)."""
        return frozenset(self._full)

    def written(self, stream: str, last_position: int) -> None:
        """The writes taken for `stream` are in the log, up to `last_position`."""
        owners = self._write_owners.pop(stream, None)
        if owners:
            self._pending_sync.setdefault(stream, deque()).append((last_position, owners))

    def synced(self, stream: str, position: int) -> None:
        """Everything of `stream` up to `position` is durable."""
        queue = self._pending_sync.get(stream)
        while queue and queue[0][0] <= position:
            _, owners = queue.popleft()
            for producer, last_seq in owners:
                if last_seq > producer.stored:
                    producer.stored = last_seq
                    conn = producer.conn
                    if isinstance(conn, Session) and conn.state is SessionState.OPEN:
                        self._want_ack(conn)
                    elif producer in self._closed_unsynced:
                        self._forget_closed(producer)
        if self._failed_streams and stream in self._failed_streams and not queue:
            self._end_sessions(stream, wire.RefuseReason.STREAM_FAILED)  # told, then ended
        waiting = self._accept_waiting.pop(stream, None)
        if waiting:
            still = []
            for conn in waiting:
                if conn.producer.stored >= conn.producer.received:
                    self._accept(conn)
                else:
                    still.append(conn)
            if still:
                self._accept_waiting[stream] = still

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Address]]:
        """Answers to send now: at most one ACK per session with news (one to a
        proven peer may be held for a sync in flight: see the module header)."""
        out, self._out = self._out, []
        self._hold_until = None
        if self._ack_due:
            hold = self.config.ack_hold
            held: set[int] = set()
            hold_until: float | None = None
            sent = 0
            for conn_id in self._ack_due:
                conn = self._conns.get(conn_id)
                if conn is None or conn.state is not SessionState.OPEN:
                    continue
                p = conn.producer
                if conn.proven and p.stored < p.received and hold > 0:
                    until = now + hold if conn.hold_until is None else conn.hold_until
                    if now < until:  # the sync's ACK will say "received" and "stored"
                        conn.hold_until = until
                        held.add(conn_id)
                        if hold_until is None or until < hold_until:
                            hold_until = until
                        continue
                conn.hold_until = None
                conn.ack_due = False
                sent += 1
                delay = int((now - conn.ack_delay_from) * 1e6) if conn.largest_pn else 0
                out.append((self._encode_ack(conn, delay), conn.addr))
            self.stats.acks += sent
            self._ack_due = held
            self._hold_until = hold_until
        return out

    def _encode_ack(self, conn: Session, delay: int) -> bytes:
        """The ACK that says where `conn`'s producer stands (and what it saw)."""
        p = conn.producer
        if not p.held and not p.partials and not conn.duplicates:
            # nothing held, nothing seen twice (a short link's ACKs): the bytes of
            # wire.encode_ack(wire.Ack(...)) with no ranges, without the Ack
            largest, conn.largest_pn = conn.largest_pn, 0
            return wire.plain_ack_datagram(
                conn.conn_id, conn.epoch, p.stored, p.received, p.window, largest, max(delay, 0)
            )
        ack = wire.Ack(
            conn.conn_id,
            conn.epoch,
            p.stored,
            p.received,
            p.window,
            conn.largest_pn,
            max(delay, 0),
            p.ranges(),
            p.fragment_spans(),
            tuple(conn.duplicates),
        )
        conn.largest_pn = 0
        if conn.duplicates:
            conn.duplicates.clear()
        return wire.encode_ack(ack)

    def timeout(self, now: float) -> float:
        """Seconds until a held ACK is due (the driver calls `datagrams_to_send`
        then); -1 when none is held, so an idle listener keeps no timer."""
        if self._hold_until is None:
            return -1.0
        return max(self._hold_until - now, 0.0)
