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
        limiter = self._limiter
        if limiter is not None and not limiter.allow(addr[0], now):
            self._drop("handshake_rate_limited")
            return
        known = self._hellos.get((addr, hello.nonce))
        if known is not None:
            conn = self._conns.get(known)
            if conn is not None and conn.state is SessionState.OPEN:
                self._send_accept(conn)
            return
        if not proven and not self._cookies.check(hello.cookie, addr, now):
            if hello.cookie:
                self._drop("bad_cookie")
            self.stats.retries += 1
            retry = wire.Retry(hello.nonce, self._cookies.make(addr, int(now)))
            self._send_unproven(wire.encode_retry(retry), addr, size)
            return
        # the address is proven from here on
        spent = self._spent
        if spent:
            while spent and next(iter(spent.values())) < now:  # oldest first
                del spent[next(iter(spent))]
            if (addr, hello.nonce) in spent:
                # the HELLO of a session that ended, played again while its cookie
                # is fresh: an on-path replay (a link never reuses a nonce)
                self._drop("replayed_hello")
                return
        if hello.max_datagram < 128:
            self._refuse_hello(
                hello, addr, size, wire.RefuseReason.BAD_DATAGRAM_SIZE, "bad_request"
            )
            return
        if hello.producer:
            if not is_valid_name(hello.producer):
                self._refuse_hello(hello, addr, size, wire.RefuseReason.BAD_PRODUCER, "bad_request")
                return
            pid = named_producer_id(hello.producer)
        else:
            pid = hello.producer_id
            if not pid >> 63:
                self._refuse_hello(hello, addr, size, wire.RefuseReason.BAD_REQUEST)
                return
        stream = hello.stream
        if not is_valid_name(stream):  # checked here, before the store sees it
            self._refuse_hello(hello, addr, size, wire.RefuseReason.BAD_STREAM)
            return
        if now >= self._next_sweep or len(self._conns) >= self.config.max_links:
            self._expire_idle(now)
        if len(self._conns) >= self.config.max_links:
            self._refuse_hello(hello, addr, size, wire.RefuseReason.MAX_LINKS, "link_limit")
            return
        key = (stream, pid)
        producer = self._producers.get(key)
        if producer is not None and self._shared:
            producer = self._refresh(producer)
        try:
            if producer is None:
                epoch, last_seq = self.store.producer_state(stream, pid)
                producer = Producer(
                    stream,
                    pid,
                    epoch,
                    last_seq,
                    max_reorder=self.config.max_reorder,
                    max_record=self.config.max_record,
                )
                producer.owner = self.store.epoch_owner(stream, pid)
        except ValueError:
            self._refuse_hello(hello, addr, size, wire.RefuseReason.BAD_STREAM)
            return
        except Error:  # the store may not open another stream (max_streams)
            self._refuse_hello(hello, addr, size, wire.RefuseReason.MAX_STREAMS, "stream_limit")
            return
        except OSError:  # the store could not open the stream (no descriptors, a disk error)
            self._refuse_hello(hello, addr, size, wire.RefuseReason.STORE_ERROR, "store_error")
            return
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
            return
        try:
            epoch = self.store.new_epoch(stream, pid, bool(hello.producer), instance)
        except (Error, OSError):  # the epoch is not durable: refuse, never accept
            self._refuse_hello(hello, addr, size, wire.RefuseReason.STORE_ERROR, "store_error")
            return
        self._producers[key] = producer
        epoch = max(epoch, producer.epoch + 1)
        old = producer.conn
        if isinstance(old, Session):
            self._fence(old)
        producer.epoch = epoch
        producer.owner = instance
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
