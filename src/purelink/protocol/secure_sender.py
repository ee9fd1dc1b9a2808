"""The link's state machine with a key: every datagram sealed on the way out
and opened on the way in, the plaintext protocol unchanged in between.

Why it exists: as secure_core.py on the listener's side, encryption is a
layer under the protocol.  `SecureSender` is a Sender whose
`datagrams_to_send` seals and whose `receive_datagram` opens; the link's
driver (link.py) does not change.  The Sender inside sees a datagram size
32 bytes smaller (channel.OVERHEAD), so its packing and the pieces of its
batches come out exactly at `datagram_size` once sealed (and its path MTU
search works in those smaller sizes: link.py adds the 32 back where it reports).

The handshake: each HELLO the Sender makes goes out as an INIT
(handshake.Initiator).  A HELLO sent again unchanged goes out as the very
same INIT bytes (a retransmission); a HELLO that changed (a cookie came)
gets a new INIT with a new ephemeral, since an INIT's key seals one
plaintext only.  A RESP to the current INIT makes the session's channel and
hands the ACCEPT inside to the Sender; a REPLY hands in its RETRY or
REFUSE.  A KEYREFUSE (unknown key id, wrong secret, expired key) is not
authenticated (the listener could not open the INIT): it ends a link's
first connect with that reason (purelink.ConnectError), but is ignored, and
counted, on a reconnect, so that a forger on the path cannot end a running
link; a running link whose key is revoked is told so sealed, by its
session.  A STALE for the current session (the listener forgot it) starts a
new handshake at once.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import ProtocolError
from . import wire
from .channel import OVERHEAD, Channel, RekeyPolicy
from .handshake import (
    KEYREFUSE,
    REPLY,
    RESP,
    SEALED,
    STALE,
    Initiator,
    decode_keyrefuse,
    decode_stale,
)
from .sender import Sender, SenderConfig, SenderState

__all__ = ["MIN_DATAGRAM", "SecureSender"]

MIN_DATAGRAM = 128 + OVERHEAD
_HELLO = wire.MsgType.HELLO
_KEY_REASONS = frozenset(
    {wire.RefuseReason.UNKNOWN_KEY, wire.RefuseReason.BAD_SECRET, wire.RefuseReason.EXPIRED_KEY}
)


class SecureSender(Sender):
    """A Sender behind the encrypted layer (see the module header)."""

    def __init__(
        self,
        config: SenderConfig,
        secret: bytes,
        key_id: str = "",
        policy: RekeyPolicy | None = None,
    ) -> None:
        if config.datagram_size < MIN_DATAGRAM:
            raise ValueError(f"with a secret, datagram_size must be at least {MIN_DATAGRAM}")
        super().__init__(replace(config, datagram_size=config.datagram_size - OVERHEAD))
        self._psk = secret
        self._key_id = key_id
        self._policy = policy or RekeyPolicy()
        self._init: Initiator | None = None
        self._init_plain = b""
        self.channel: Channel | None = None
        """The current session's keys (None until a RESP came)."""
        self.key_refusals = 0
        """KEYREFUSEs ignored because they came on a reconnect."""
        Initiator(key_id, secret, b"")  # checks the key id now, not at the first send

    def connect(self, now: float) -> None:
        super().connect(now)
        self._init = None
        self.channel = None

    # ---------------------------------------------------------- outgoing
    def datagrams_to_send(self, now: float) -> list[bytes]:
        out = super().datagrams_to_send(now)
        if not out:
            return out
        if out[0][3] != _HELLO:
            channel = self.channel
            if channel is None:  # pragma: no cover - only HELLOs go out before a RESP
                return []
            seal = channel.seal
            return [seal(d, now) for d in out]
        sealed = []
        for d in out:
            if d[3] == _HELLO:
                if self._init is None or d != self._init_plain:
                    self._init = Initiator(self._key_id, self._psk, d)
                    self._init_plain = d
                sealed.append(self._init.message)
            elif self.channel is not None:
                sealed.append(self.channel.seal(d, now))
        return sealed

    # ---------------------------------------------------------- incoming
    def receive_datagram(self, data: bytes | memoryview, now: float) -> None:
        kind = data[3] if len(data) >= 4 else -1
        try:
            if kind & ~1 == SEALED:
                channel = self.channel
                if channel is None:
                    raise ProtocolError("unknown_conn", "no session")
                super().receive_datagram(channel.open(data, now), now)
            elif kind == RESP:
                init = self._init
                if init is None or self.state != SenderState.CONNECTING:
                    raise ProtocolError("unexpected", "resp")
                conn_id, plain, session = init.open_resp(data)
                if plain[4:8] != conn_id.to_bytes(4, "little"):
                    raise ProtocolError("malformed", "resp for another session")
                channel = Channel(conn_id, session.send, session.receive, now, self._policy)
                self.channel = channel
                super().receive_datagram(plain, now)
                if self.state != SenderState.OPEN:
                    self.channel = None  # the ACCEPT was not taken
                else:  # the ephemeral is done with: forward secrecy within the session
                    self._init = None
            elif kind == REPLY:
                init = self._init
                if init is None:
                    raise ProtocolError("unexpected", "reply")
                super().receive_datagram(init.open_reply(data), now)
            elif kind == KEYREFUSE:
                self._on_keyrefuse(data, now)
            elif kind == STALE:
                if self.state == SenderState.OPEN and decode_stale(data) == self.conn_id:
                    self.reset_session(now, "unknown")
                else:
                    raise ProtocolError("unexpected", "stale")
            else:
                raise ProtocolError("unauthenticated", "not sealed")
        except ProtocolError:
            self.stats.dropped += 1

    def _on_keyrefuse(self, data: bytes | memoryview, now: float) -> None:
        ref, reason = decode_keyrefuse(data)
        init = self._init
        if init is None or ref != init.ref or self.state != SenderState.CONNECTING:
            raise ProtocolError("unexpected", "keyrefuse")
        if reason not in _KEY_REASONS:
            raise ProtocolError("malformed", "keyrefuse reason")
        if self._connected_once:
            self.key_refusals += 1
            return
        refuse = wire.Refuse(0, self._nonce, 0, reason)
        super().receive_datagram(wire.encode_refuse(refuse), now)
