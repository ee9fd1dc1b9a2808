"""The listener core's handshake: a HELLO in, a RETRY, ACCEPT or REFUSE out.

Why it exists: the one path that creates state for an address, and so the
one that must hold against floods, replays and spoofed sources, reads best
on its own.

Handshake (QUIC Retry style).  A HELLO without a valid cookie gets a RETRY
with a cookie that binds the source address and a time (keyed BLAKE2b under
a per-process key) and expires after `cookie_lifetime`.  Only a HELLO that
echoes a valid cookie creates state.  Until an address has proven itself,
no answer larger than 3x the datagram that caused it is sent
(anti-amplification).  A retransmitted HELLO (same address and nonce) gets
the same ACCEPT, never a second session, and once that session has ended a
replay of its HELLO is dropped for as long as its cookie is fresh (a replay
could otherwise open a session that fences the live one).  HELLOs are
rate-limited per source IP by a token bucket in a bounded table
(ratelimit.py), before any of this.  Names are checked by the one rule of
names.py before the store is touched.  A HELLO that passes takes a new epoch
of its producer and fences the producer's older session (core_sessions.py).
"""

from __future__ import annotations

from ..errors import Error
from . import wire
from .core_parts import COOKIE_SIZE, Address, cookie_time, named_producer_id
from .core_sessions import CoreSessions
from .core_state import Session, SessionState
from .names import is_valid_name
from .receiver import Producer

__all__ = ["CoreHandshake"]


class CoreHandshake(CoreSessions):
    """The HELLO path of a listener core."""

    def _refuse_hello(
        self, hello: wire.Hello, addr: Address, size: int, reason: int, counter: str = ""
    ) -> None:
        self._drop(counter or wire.RefuseReason.NAMES.get(reason, "refused"))
        refuse = wire.Refuse(0, hello.nonce, 0, reason)
        self._send_unproven(wire.encode_refuse(refuse), addr, size)

    def _on_hello(
        self, hello: wire.Hello, addr: Address, now: float, size: int, proven: bool = False
    ) -> None:
        """A HELLO, step by step: admitted (rate, retransmission, cookie, replay),
        its request valid (sizes, names), room for a session, its producer
        loaded, a new epoch taken, and the session opened (or left waiting)."""
        if not self._admit_hello(hello, addr, now, size, proven):
            return
        pid = self._requested_producer(hello, addr, size)
        if pid is None:
            return
        if self._full and hello.stream in self._full:  # no room: come back later
            self._refuse_hello(hello, addr, size, wire.RefuseReason.DISK_FULL, "disk_full")
            return
        if self._failed_streams and hello.stream in self._failed_streams:  # until a restart
            self._refuse_hello(hello, addr, size, wire.RefuseReason.STREAM_FAILED, "stream_failed")
            return
        if now >= self._next_sweep or len(self._conns) >= self.config.max_links:
            self._expire_idle(now)
        if len(self._conns) >= self.config.max_links:
            self._refuse_hello(hello, addr, size, wire.RefuseReason.MAX_LINKS, "link_limit")
            return
        producer = self._load_producer(hello, addr, size, pid)
        if producer is None:
            return
        epoch = self._new_epoch(hello, addr, size, producer)
        if epoch:
            self._open_session(hello, addr, now, producer, epoch, proven)

    def _admit_hello(
        self, hello: wire.Hello, addr: Address, now: float, size: int, proven: bool
    ) -> bool:
        """Whether a HELLO goes on to make a session: within the source's rate, not
        a retransmission (answered with the same ACCEPT), its address proven (by
        its transport, or else by a fresh cookie: a RETRY asks for one), and not
        the replay of a HELLO whose session ended."""
        limiter = self._limiter
        if limiter is not None and not limiter.allow(addr[0], now):
            self._drop("handshake_rate_limited")
            return False
        known = self._hellos.get((addr, hello.nonce))
        if known is not None:
            conn = self._conns.get(known)
            if conn is not None and conn.state is SessionState.OPEN:
                self._send_accept(conn)
            return False
        if not proven and not self._cookies.check(hello.cookie, addr, now):
            if hello.cookie:
                self._drop("bad_cookie")
            self.stats.retries += 1
            retry = wire.Retry(hello.nonce, self._cookies.make(addr, int(now)))
            self._send_unproven(wire.encode_retry(retry), addr, size)
            return False
        # the address is proven from here on
        spent = self._spent
        if spent:
            while spent and next(iter(spent.values())) < now:  # oldest first
                del spent[next(iter(spent))]
            if (addr, hello.nonce) in spent:
                # the HELLO of a session that ended, played again while its cookie
                # is fresh: an on-path replay (a link never reuses a nonce)
                self._drop("replayed_hello")
                return False
        return True

    def _requested_producer(self, hello: wire.Hello, addr: Address, size: int) -> int | None:
        """The producer id a HELLO asks for (a named producer's, derived from its
        name; an anonymous one's, top bit set), once its datagram size and its
        names pass the one rule of names.py; None: refused."""
        reason = 0
        if hello.max_datagram < 128:
            reason, counter = wire.RefuseReason.BAD_DATAGRAM_SIZE, "bad_request"
        elif hello.producer and not is_valid_name(hello.producer):
            reason, counter = wire.RefuseReason.BAD_PRODUCER, "bad_request"
        elif not hello.producer and not hello.producer_id >> 63:
            reason, counter = wire.RefuseReason.BAD_REQUEST, ""
        elif not is_valid_name(hello.stream):  # checked here, before the store sees it
            reason, counter = wire.RefuseReason.BAD_STREAM, ""
        if reason:
            self._refuse_hello(hello, addr, size, reason, counter)
            return None
        return named_producer_id(hello.producer) if hello.producer else hello.producer_id

    def _load_producer(
        self, hello: wire.Hello, addr: Address, size: int, pid: int
    ) -> Producer | None:
        """The producer in memory (read again from a shared store), or read from the
        store; None: the store could not say (refused, with why)."""
        stream = hello.stream
        producer = self._producers.get((stream, pid))
        if producer is not None and self._shared:
            producer = self._refresh(producer)
        if producer is not None:
            return producer
        try:
            epoch, last_seq = self.store.producer_state(stream, pid)
            producer = Producer(
                stream,
                pid,
                epoch,
                last_seq,
                max_reorder=self.config.max_reorder,
                max_record=self.config.max_record,
            )
            # an anonymous producer's id is its link instance's: every epoch of it
            # went to that link, whatever the store remembers (a segment's summary
            # keeps an epoch handed out but never heard of, and no owner)
            producer.owner = self.store.epoch_owner(stream, pid) or (pid if pid >> 63 else 0)
        except ValueError:
            self._refuse_hello(hello, addr, size, wire.RefuseReason.BAD_STREAM)
            return None
        except Error:  # the store may not open another stream (max_streams)
            self._refuse_hello(hello, addr, size, wire.RefuseReason.MAX_STREAMS, "stream_limit")
            return None
        except OSError:  # the store could not open the stream (no descriptors, a disk error)
            self._refuse_hello(hello, addr, size, wire.RefuseReason.STORE_ERROR, "store_error")
            return None
        return producer

    def _new_epoch(self, hello: wire.Hello, addr: Address, size: int, producer: Producer) -> int:
        """The new session's epoch, durable in the store (for a named producer)
        before anything answers it; 0: refused (a fenced session asking back in,
        or a store that could not keep the epoch)."""
        instance = hello.producer_id  # the link instance (an anonymous producer's id)
        if (
            hello.epoch
            and hello.epoch < producer.epoch
            and (not instance or instance != producer.owner)
        ):
            # a session older than the newest one of this producer asks back in: it
            # was fenced (perhaps before this listener restarted), so it stays fenced.
            # Unless the newest epoch went to this very link and its ACCEPT was lost.
            self._refuse_hello(hello, addr, size, wire.RefuseReason.FENCED, "stale_epoch")
            return 0
        try:
            epoch = self.store.new_epoch(
                producer.stream, producer.pid, bool(hello.producer), instance
            )
        except (Error, OSError):  # the epoch is not durable: refuse, never accept
            self._refuse_hello(hello, addr, size, wire.RefuseReason.STORE_ERROR, "store_error")
            return 0
        self._producers[(producer.stream, producer.pid)] = producer
        return max(epoch, producer.epoch + 1)

    def _open_session(
        self,
        hello: wire.Hello,
        addr: Address,
        now: float,
        producer: Producer,
        epoch: int,
        proven: bool,
    ) -> None:
        """The new session replaces the producer's old one (fenced), and opens at
        once if the producer's written records are durable, else waits for that."""
        old = producer.conn
        if isinstance(old, Session):
            self._fence(old)
        producer.epoch = epoch
        producer.owner = hello.producer_id
        if producer.partials:  # a new session cuts its records into batches of its own
            producer.reset_partials()
            self._account(producer)
        if hello.producer:
            # another instance of a named producer may hold other records under
            # the same seqs: what the old session left half-sent is not trusted
            producer.reset_volatile()
            self._account(producer)
        replay_until = None
        if len(hello.cookie) == COOKIE_SIZE:
            replay_until = cookie_time(hello.cookie) + self.config.cookie_lifetime + 1
        conn = Session(
            self._new_conn_id(), addr, producer, epoch, hello.nonce, now, replay_until, proven
        )
        if producer.stored >= producer.received:
            self._accept(conn)
        else:
            self._move(conn, SessionState.WAITING)
