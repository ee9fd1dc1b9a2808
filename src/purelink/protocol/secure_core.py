"""The listener's protocol core with keys: every datagram opened before the
core sees it and sealed after it speaks.

Why it exists: encryption is a layer *under* the plaintext protocol, not a
change to it, so the listener core (listener_core.py), its fast DATA path,
its cookies, its 3x rule and its replay rules work on the same datagrams as
without a secret.  `SecureCore` is a ListenerCore whose `receive_datagram`
opens and whose `datagrams_to_send` seals; the drivers (listener.py,
listener/tcp.py) do not change.

What comes in (types of handshake.py):

* INIT: the key id it names is looked up (unknown -> KEYREFUSE "unknown key
  id"; expired -> "expired key"), the INIT opened with its secret (a wrong
  one -> "wrong secret"), the HELLO inside checked against the key's write
  globs (no -> REPLY(REFUSE forbidden)) and handed to the core.  INITs are
  rate-limited per source IP (the core's HELLO bucket settings) before any
  of this, since opening one costs the listener some 20 us.  If the core
  now has a session for that HELLO, the responder half of the exchange runs
  and the session's channel is kept under its conn id; if not (a RETRY, a
  REFUSE), the INIT's state is kept only until this drain's answers are
  sealed.  So the rule "no state before the address proved itself" holds
  for the keys too.
* SEALED: opened by the channel of its conn id (which checks the replay
  window and the address), then handed to the core; its inner conn id must
  be the channel's, and it must not be a HELLO (a HELLO inside a session
  would skip the key's write check).  No channel: the listener answers
  STALE, so a link whose session the listener forgot (a restart) reconnects
  at once.
* anything else (a plaintext datagram): dropped, `unauthenticated`.

What goes out: ACCEPT as a RESP (the session's ephemeral; a new counter
each time), RETRY and a HELLO's REFUSE as a REPLY, the rest SEALED by the
session's channel.  A channel outlives its session in a bounded memory of
ended ones (the core's `fenced_memory`), so a fenced session's datagrams
still get their REFUSE(fenced), sealed.

Replayed INITs.  Over UDP a HELLO's cookie binds it to its address and
its time.  A TCP connection proves its address itself, and the plaintext
core takes a HELLO from it without a cookie; but an INIT recorded on the
path and played on a new connection, at any time later, would then open a
session (which the attacker cannot use: it lacks the ephemeral private key)
that fences the live one.  So with keys a HELLO over TCP needs a cookie
too: this layer answers an INIT without a fresh cookie for its connection
with a RETRY (one more round trip per TCP connect), and a replay on another
connection, or after 30 s, opens nothing.  Besides, the ephemerals of INITs
that opened on a proven peer are remembered for INIT_MEMORY seconds (at
most `hello_memory` of them, oldest first out), and the same INIT on
another connection is dropped (`replayed_init`) before it is looked at
further.  A link's own retransmission comes on its own connection and passes.

Sizes: an INIT is its HELLO plus 53 bytes (and the key id); the answers to
an address not yet proven are REPLYs, their plaintext plus 32, a KEYREFUSE
(21) or a STALE (8), so the core's 3x rule on the plaintexts still holds on
the wire.  A RESP (the ACCEPT plus 64) goes only to a proven address.

Keys change with `set_keys(table)` (SIGHUP): new INITs use the new table
at once; a session whose key is gone, expired, or no longer allows its
stream is ended, told so with a sealed REFUSE(key revoked); sessions of a
key that is still there (even with a new secret) run on until they end.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ProtocolError
from . import wire
from .channel import OVERHEAD, Channel, RekeyPolicy
from .core_parts import Address, CoreConfig, ProducerTable
from .core_state import Session
from .handshake import (
    INIT,
    SEALED,
    ResponderHello,
    encode_keyrefuse,
    encode_stale,
    init_key_id,
    init_ref,
    open_init,
)
from .keys import Key, KeyTable
from .listener_core import ListenerCore
from .ratelimit import TokenBuckets

__all__ = ["INIT_MEMORY", "SecureCore"]

INIT_MEMORY = 600.0
"""Seconds an INIT's ephemeral is remembered against replays from other addresses."""

_CONN = struct.Struct("<I")
_RETRY = wire.MsgType.RETRY
_ACCEPT = wire.MsgType.ACCEPT
_REFUSE = wire.MsgType.REFUSE
_HELLO = wire.MsgType.HELLO


@dataclass(slots=True)
class _Secure:
    """A session's keys and what they were granted by."""

    channel: Channel
    hs: ResponderHello | None  # kept to answer a resent INIT, until the link speaks sealed
    key_id: str
    stream: str
    addr: Address
    counter: int = 0  # RESPs sent


class SecureCore(ListenerCore):
    """A ListenerCore behind the encrypted layer (see the module header)."""

    def __init__(
        self,
        store: ProducerTable,
        config: CoreConfig | None,
        keys: KeyTable,
        wall: Callable[[], float],
        policy: RekeyPolicy | None = None,
    ) -> None:
        super().__init__(store, config)
        self.keys = keys
        """The key table new handshakes are checked against (swap with set_keys)."""
        self._wall = wall  # Unix time, for key expiry (the driver passes time.time)
        self._policy = policy or RekeyPolicy()
        self._channels: dict[int, _Secure] = {}
        self._ended: dict[int, _Secure] = {}  # channels of ended sessions, oldest first
        self._pending: dict[tuple[Address, int], ResponderHello] = {}  # this drain's INITs
        self._extra: list[tuple[bytes, Address]] = []  # answers made here, not by the core
        # ephemerals of INITs that opened -> (their address, remembered until): an INIT
        # played again from another address is refused (see the module header)
        self._inits: dict[bytes, tuple[Address, float]] = {}
        cfg = self.config
        self._init_limiter = (
            TokenBuckets(cfg.handshake_rate, cfg.handshake_burst, cfg.handshake_sources)
            if cfg.handshake_rate > 0
            else None
        )

    # ------------------------------------------------------------ inputs
    def receive_datagram(
        self, data: bytes | memoryview, addr: Address, now: float, proven: bool = False
    ) -> None:
        kind = data[3] if len(data) >= 4 else -1
        if kind & ~1 == SEALED:
            self._on_sealed(data, addr, now, proven)
        elif kind == INIT:
            self._on_init(data, addr, now, proven)
        else:
            self._outer_drop(data, "unauthenticated")

    def _outer_drop(self, data: bytes | memoryview, reason: str) -> None:
        self.stats.datagrams += 1
        self.stats.bytes += len(data)
        self._drop(reason)

    def _on_sealed(self, data: bytes | memoryview, addr: Address, now: float, proven: bool) -> None:
        if len(data) < OVERHEAD:
            self._outer_drop(data, "truncated")
            return
        (conn_id,) = _CONN.unpack_from(data, 4)
        sec = self._channels.get(conn_id) or self._ended.get(conn_id)
        if sec is None:
            self._outer_drop(data, "unknown_conn")
            self._extra_unproven(encode_stale(conn_id), addr, len(data))
            return
        if sec.addr != addr:
            self._outer_drop(data, "wrong_address")
            return
        try:
            plain = sec.channel.open(data, now)
        except ProtocolError as exc:
            self._outer_drop(data, exc.reason)
            return
        if len(plain) < 8 or _CONN.unpack_from(plain, 4)[0] != conn_id or plain[3] == _HELLO:
            # a session's keys speak for it only, and a HELLO comes only in an INIT,
            # where its stream is checked against the key (else: any stream, fenced)
            self._outer_drop(data, "malformed")
            return
        if sec.hs is not None:
            sec.hs = None  # the link has the session keys: no RESP is needed again
        super().receive_datagram(plain, addr, now, proven)

    def _on_init(self, data: bytes | memoryview, addr: Address, now: float, proven: bool) -> None:
        opened = self._open_init(data, addr, now)
        if opened is None:
            return
        key_id, key, hs, e_i = opened
        if proven:  # (over UDP the HELLO's cookie binds it to its address)
            seen = self._inits.get(e_i)
            if seen is not None and seen[0] != addr and now < seen[1]:
                self._outer_drop(data, "replayed_init")
                return
            if seen is None:
                self._remember_init(e_i, addr, now)
        hello = self._init_hello(data, addr, key, hs)
        if hello is None:
            return
        if proven and not self._cookies.check(hello.cookie, addr, now):
            # over TCP too a cookie must tie the INIT to this connection and to the
            # last 30 s: a recorded INIT played on a new connection later would open
            # a session (useless without the ephemeral) that fences the live one
            if hello.cookie:
                self._outer_drop(data, "bad_cookie")
            else:  # counted as the core counts the HELLO it answers with a RETRY
                self.stats.datagrams += 1
                self.stats.bytes += len(data)
            self.stats.retries += 1
            retry = wire.Retry(hello.nonce, self._cookies.make(addr, int(now)))
            self._extra.append((hs.seal_reply(wire.encode_retry(retry)), addr))
            return
        self._pending[(addr, hello.nonce)] = hs
        super().receive_datagram(hs.hello, addr, now, proven)
        conn_id = self._hellos.get((addr, hello.nonce))
        if conn_id is not None and conn_id not in self._channels:
            session = hs.accept(e_i)  # the core keeps state now: so may the keys
            channel = Channel(conn_id, session.send, session.receive, now, self._policy)
            self._channels[conn_id] = _Secure(channel, hs, key_id, hello.stream, addr)

    def _open_init(
        self, data: bytes | memoryview, addr: Address, now: float
    ) -> tuple[str, Key, ResponderHello, bytes] | None:
        """An INIT within its source's rate, of a key id that is known and not
        expired, opened with that key's secret: (key id, key, the responder's
        state, the link's ephemeral); None: dropped, or refused with a KEYREFUSE."""
        limiter = self._init_limiter  # before any work: opening an INIT costs ~20 us
        if limiter is not None and not limiter.allow(addr[0], now):
            self._outer_drop(data, "handshake_rate_limited")
            return None
        try:
            key_id = init_key_id(data)
        except ProtocolError as exc:
            self._outer_drop(data, exc.reason)
            return None
        key = self.keys.get(key_id)
        if key is None:
            self._key_refused(data, addr, wire.RefuseReason.UNKNOWN_KEY, "unknown_key")
            return None
        if key.expired(self._wall()):
            self._key_refused(data, addr, wire.RefuseReason.EXPIRED_KEY, "expired_key")
            return None
        try:
            hs, e_i = open_init(data, key.secret)
        except ProtocolError as exc:
            if exc.reason == "unauthenticated":
                self._key_refused(data, addr, wire.RefuseReason.BAD_SECRET, "bad_secret")
            else:
                self._outer_drop(data, exc.reason)
            return None
        return key_id, key, hs, e_i

    def _init_hello(
        self, data: bytes | memoryview, addr: Address, key: Key, hs: ResponderHello
    ) -> wire.Hello | None:
        """The HELLO inside an opened INIT, if it is one and its stream is one the
        key may write (else REPLY(REFUSE forbidden)); None: dropped or refused."""
        try:
            hello = wire.decode_datagram(hs.hello)
        except ProtocolError as exc:
            self._outer_drop(data, exc.reason)
            return None
        if not isinstance(hello, wire.Hello):
            self._outer_drop(data, "malformed")
            return None
        if not key.may_write(hello.stream):
            self._outer_drop(data, "forbidden")
            refuse = wire.Refuse(0, hello.nonce, 0, wire.RefuseReason.FORBIDDEN)
            self._extra_unproven(hs.seal_reply(wire.encode_refuse(refuse)), addr, len(data))
            return None
        return hello

    def _remember_init(self, e_i: bytes, addr: Address, now: float) -> None:
        inits = self._inits
        inits[e_i] = (addr, now + INIT_MEMORY)
        while inits:
            oldest = next(iter(inits))
            if len(inits) <= self.config.hello_memory and inits[oldest][1] > now:
                break
            del inits[oldest]

    def _key_refused(self, data: bytes | memoryview, addr: Address, reason: int, name: str) -> None:
        self._outer_drop(data, name)
        self._extra_unproven(encode_keyrefuse(init_ref(data), reason), addr, len(data))

    def _extra_unproven(self, answer: bytes, addr: Address, received: int) -> None:
        if len(answer) > 3 * received:
            self._drop("amplification_limit")
            return
        self._extra.append((answer, addr))

    # ----------------------------------------------------------- outputs
    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Address]]:
        out = self._extra
        self._extra = []
        channels = self._channels
        for plain, addr in super().datagrams_to_send(now):
            kind = plain[3]
            conn_id = int.from_bytes(plain[4:8], "little")
            sec = channels.get(conn_id) or self._ended.get(conn_id)
            if kind == _RETRY or (kind == _REFUSE and not conn_id):
                hs = self._pending.get((addr, int.from_bytes(plain[8:16], "little")))
                if hs is None:
                    self._drop("no_handshake")
                    continue
                out.append((hs.seal_reply(plain), addr))
            elif kind == _ACCEPT:
                if sec is None or sec.hs is None:
                    self._drop("no_handshake")
                    continue
                sec.counter += 1
                out.append((sec.hs.seal_resp(conn_id, sec.counter, plain), addr))
            elif sec is not None:
                out.append((sec.channel.seal(plain, now), addr))
            else:
                self._drop("no_channel")
        self._pending.clear()
        return out

    # -------------------------------------------------------------- keys
    def set_keys(self, keys: KeyTable, now: float) -> int:
        """Use `keys` from now on; end the sessions it no longer allows (see the
        module header).  Returns how many were ended."""
        self.keys = keys
        wall = self._wall()
        ended = 0
        for conn_id, sec in list(self._channels.items()):
            key = keys.get(sec.key_id)
            if key is not None and key.may_write(sec.stream) and not key.expired(wall):
                continue
            conn = self._conns.get(conn_id)
            if conn is None:
                continue
            refuse = wire.Refuse(conn_id, 0, conn.epoch, wire.RefuseReason.REVOKED)
            self._extra.append((sec.channel.seal(wire.encode_refuse(refuse), now), sec.addr))
            self._close(conn)  # one still WAITING is never accepted now
            self._drop("key_revoked")
            ended += 1
        return ended

    def _forget(self, conn: Session) -> None:
        super()._forget(conn)
        sec = self._channels.pop(conn.conn_id, None)
        if sec is not None:
            ended = self._ended
            ended[conn.conn_id] = sec
            while len(ended) > self.config.fenced_memory:
                del ended[next(iter(ended))]
