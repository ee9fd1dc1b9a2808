"""The key exchange that opens an encrypted link: two messages, sans-IO.

Why it exists: with a secret, every datagram is encrypted (docs/security.md)
under session keys that come from an ephemeral X25519 exchange
mixed with the pre-shared key, so that someone who later steals the key
still cannot read recorded traffic (forward secrecy).  This module is that
exchange and nothing else: bytes and keys in, bytes and keys out, no
sockets and no clock.  `channel.py` uses the keys it yields; `secure_core.py`
and `secure_sender.py` put it on the wire.

The pattern is the shape of Noise's NNpsk0 (the Noise Protocol Framework,
revision 34, section 9; WireGuard's IKpsk2 is its authenticated cousin),
written out here with X25519, HMAC-SHA-256 as HKDF and AES-256-GCM:

    INIT   -> psk, e         (+ the link's HELLO, encrypted)
    RESP   <- e, ee          (+ the listener's ACCEPT, encrypted)

Symmetric state, as in Noise section 5.2: `h` (a hash of everything said so
far) and `ck` (the chaining key).  Both start at SHA-256 of PROTOCOL; then

    mix_hash(prologue)                  prologue = the 4-byte header + key id
    mix_key_and_hash(psk)               the pre-shared key, first ("psk0")
    mix_hash(e_i); mix_key(e_i)         the link's ephemeral public key
    c1 = AEAD(k, 0, HELLO, ad=h); mix_hash(c1)
    --- INIT = header, key id, e_i, c1
    mix_hash(e_r); mix_key(e_r)         the listener's ephemeral
    mix_key(X25519(e, e'))              "ee": what gives forward secrecy
    c2 = AEAD(k, n, ACCEPT, ad=h || header)
    --- RESP = header, conn id, n, e_r, c2
    (k_link, k_listener) = HKDF(ck, "", 2): one traffic secret per direction

Where it differs from Noise, and why: RESP carries an explicit 64-bit
counter `n` as its AEAD nonce, because the listener answers a retransmitted
INIT with the same ephemeral but a fresh ACCEPT (its `stored` may have
moved), and one key must never seal two plaintexts under one nonce.  A
listener's answer that opens no session (a RETRY with a cookie, a REFUSE)
goes back as REPLY, sealed under a key derived from the INIT alone
(HKDF(ck, "reply")) with a random 96-bit nonce: the listener keeps no state
for an address before it has proven itself (docs/wire.md section 5).

What the exchange proves: a valid INIT could only be made by a holder of
the key (its AEAD is keyed by the psk); a valid RESP only by a holder of the
key that also saw this INIT; the traffic secrets depend on both ephemerals,
which are thrown away when the session ends.  The HELLO inside INIT is
protected by the psk only: a stolen key reveals stream and producer names of
recorded handshakes, never a record.  An INIT can be replayed; the listener
core's replay rules for HELLO apply to the HELLO inside it, and a replayed
INIT cannot learn or change anything without the ephemeral private key.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from dataclasses import dataclass
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import ProtocolError
from .wire import DATAGRAM_VERSION as VERSION  # the layer shares "PL" and the version

__all__ = [
    "HEADER",
    "INIT",
    "KEYREFUSE",
    "MAGIC",
    "PROTOCOL",
    "REPLY",
    "RESP",
    "SEALED",
    "STALE",
    "Initiator",
    "ResponderHello",
    "Session",
    "decode_keyrefuse",
    "decode_stale",
    "encode_keyrefuse",
    "encode_stale",
    "hkdf",
    "init_key_id",
    "init_ref",
    "open_init",
]

PROTOCOL: Final = b"purelink-NNpsk0-25519-AESGCM-SHA256-v1"
MAGIC: Final = b"PL"
# datagram types of the encrypted layer (the plaintext protocol's are 1..9)
INIT: Final = 0x21
RESP: Final = 0x22
REPLY: Final = 0x23
KEYREFUSE: Final = 0x24
STALE: Final = 0x25
SEALED: Final = 0x26  # 0x26 | key phase (0x27 = phase 1)
_HDR = struct.Struct("<2sBB")
HEADER: Final = _HDR.size
_RESP_HEAD = struct.Struct("<2sBBIQ")  # header, conn id, counter
_KEYLEN: Final = 32
_TAG: Final = 16
_REF: Final = 16
_KEYREFUSE = struct.Struct(f"<2sBB{_REF}sB")
MAX_KEY_ID: Final = 64


def hkdf(chaining_key: bytes, ikm: bytes, n: int) -> list[bytes]:
    """HKDF with HMAC-SHA-256 as Noise uses it (section 4.3): n outputs of 32 bytes."""
    temp = hmac.digest(chaining_key, ikm, "sha256")
    out: list[bytes] = []
    prev = b""
    for i in range(1, n + 1):
        prev = hmac.digest(temp, prev + bytes((i,)), "sha256")
        out.append(prev)
    return out


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _nonce(n: int) -> bytes:
    return b"\0\0\0\0" + n.to_bytes(8, "little")


class _Symmetric:
    """Noise's SymmetricState: h, ck and the current key."""

    __slots__ = ("ck", "h", "k")

    def __init__(self, prologue: bytes) -> None:
        self.h = _sha(PROTOCOL)
        self.ck = self.h
        self.k = b""
        self.mix_hash(prologue)

    def mix_hash(self, data: bytes) -> None:
        self.h = _sha(self.h + data)

    def mix_key(self, ikm: bytes) -> None:
        self.ck, self.k = hkdf(self.ck, ikm, 2)

    def mix_key_and_hash(self, ikm: bytes) -> None:
        self.ck, temp, self.k = hkdf(self.ck, ikm, 3)
        self.mix_hash(temp)


def _prologue(key_id: bytes) -> bytes:
    return _HDR.pack(MAGIC, VERSION, INIT) + bytes((len(key_id),)) + key_id


def _start(key_id: bytes, psk: bytes, e_pub: bytes) -> _Symmetric:
    sym = _Symmetric(_prologue(key_id))
    sym.mix_key_and_hash(psk)
    sym.mix_hash(e_pub)
    sym.mix_key(e_pub)
    return sym


@dataclass(frozen=True, slots=True)
class Session:
    """What a finished exchange yields: one traffic secret per direction."""

    send: bytes
    """This side's sending secret (32 bytes)."""
    receive: bytes
    """The peer's sending secret (32 bytes)."""


def _check_key_id(key_id: str) -> bytes:
    raw = key_id.encode("utf-8")
    if len(raw) > MAX_KEY_ID:
        raise ValueError(f"a key id is at most {MAX_KEY_ID} bytes, not {len(raw)}")
    return raw


class Initiator:
    """The link's side of one exchange: `init(hello)` makes the INIT, then
    `open_reply` / `open_resp` take the answers.  One Initiator per INIT
    plaintext: a HELLO that changes (a cookie came) needs a new one, since the
    INIT's key seals exactly one plaintext."""

    __slots__ = ("_e", "_key", "_sym", "key_id", "message", "ref")

    def __init__(self, key_id: str, psk: bytes, hello: bytes) -> None:
        self.key_id = key_id
        raw = _check_key_id(key_id)
        self._e = X25519PrivateKey.generate()
        e_pub = self._e.public_key().public_bytes_raw()
        sym = _start(raw, psk, e_pub)
        c1 = AESGCM(sym.k).encrypt(_nonce(0), hello, sym.h)
        sym.mix_hash(c1)
        self._sym = sym
        self.message = b"".join((_prologue(raw), e_pub, c1))
        """The INIT datagram (send it again as is to retransmit)."""
        self.ref = init_ref(self.message)
        """What a KEYREFUSE to this INIT echoes."""
        self._key = hkdf(sym.ck, b"purelink reply", 1)[0]

    def open_reply(self, data: bytes | memoryview) -> bytes:
        """The plaintext of a REPLY to this INIT; ProtocolError if it is not one."""
        return open_reply(self._key, self._sym.h, data)

    def open_resp(self, data: bytes | memoryview) -> tuple[int, bytes, Session]:
        """(conn id, the ACCEPT's plaintext, the session) of a RESP to this INIT."""
        data = bytes(data)
        if len(data) < _RESP_HEAD.size + _KEYLEN + _TAG:
            raise ProtocolError("truncated", "resp")
        magic, version, kind, conn_id, counter = _RESP_HEAD.unpack_from(data)
        if magic != MAGIC or version != VERSION or kind != RESP:
            raise ProtocolError("malformed", "not a resp")
        at = _RESP_HEAD.size
        e_r = data[at : at + _KEYLEN]
        sym = _Symmetric.__new__(_Symmetric)
        sym.h, sym.ck, sym.k = self._sym.h, self._sym.ck, self._sym.k
        sym.mix_hash(e_r)
        sym.mix_key(e_r)
        try:
            shared = self._e.exchange(X25519PublicKey.from_public_bytes(e_r))
        except ValueError:  # a low-order point: no shared secret
            raise ProtocolError("unauthenticated", "bad ephemeral") from None
        sym.mix_key(shared)
        try:
            plain = AESGCM(sym.k).decrypt(
                _nonce(counter), data[at + _KEYLEN :], sym.h + data[: _RESP_HEAD.size]
            )
        except InvalidTag:
            raise ProtocolError("unauthenticated", "resp") from None
        mine, theirs = hkdf(sym.ck, b"", 2)
        return conn_id, plain, Session(mine, theirs)


def init_ref(message: bytes | memoryview) -> bytes:
    """The 16 bytes that name an INIT in a KEYREFUSE: unguessable without seeing it."""
    return _sha(bytes(message))[:_REF]


def init_key_id(data: bytes | memoryview) -> str:
    """The key id an INIT names (before anything is checked); ProtocolError if it
    is not an INIT at all."""
    view = memoryview(data)
    if len(view) < HEADER + 1:
        raise ProtocolError("truncated", "init")
    n = view[HEADER]
    if len(view) < HEADER + 1 + n + _KEYLEN + _TAG:
        raise ProtocolError("truncated", "init")
    try:
        return str(view[HEADER + 1 : HEADER + 1 + n], "utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("malformed", "key id is not UTF-8") from None


class ResponderHello:
    """The listener's side of one exchange, after an INIT opened: `hello` is its
    plaintext; `seal_reply` answers without a session, `accept` makes the
    session (the listener's ephemeral) and `seal_resp` answers with it."""

    __slots__ = ("_e", "_h", "_key", "_sym", "e_pub", "hello", "session")

    def __init__(self, sym: _Symmetric, hello: bytes) -> None:
        self._sym = sym
        self.hello = hello
        self._key = hkdf(sym.ck, b"purelink reply", 1)[0]
        self._h = sym.h  # the hash a REPLY is bound to: the INIT's, before accept()
        self._e: X25519PrivateKey | None = None
        self.e_pub = b""
        self.session: Session | None = None

    def seal_reply(self, plaintext: bytes) -> bytes:
        """A REPLY: `plaintext` sealed under the INIT's reply key, random nonce."""
        head = _HDR.pack(MAGIC, VERSION, REPLY)
        nonce = os.urandom(12)
        sealed = AESGCM(self._key).encrypt(nonce, plaintext, self._h + head)
        return b"".join((head, nonce, sealed))

    def accept(self, e_i: bytes) -> Session:
        """Do the "e, ee" half (once; again returns the same session)."""
        if self.session is not None:
            return self.session
        self._e = X25519PrivateKey.generate()
        self.e_pub = self._e.public_key().public_bytes_raw()
        sym = self._sym
        sym.mix_hash(self.e_pub)
        sym.mix_key(self.e_pub)
        try:
            shared = self._e.exchange(X25519PublicKey.from_public_bytes(e_i))
        except ValueError:
            raise ProtocolError("unauthenticated", "bad ephemeral") from None
        sym.mix_key(shared)
        theirs, mine = hkdf(sym.ck, b"", 2)
        self._e = None  # the ephemeral is done with: forward secrecy
        sym.ck = b""  # and so is the chaining key: only k (RESPs) is kept
        self.session = Session(mine, theirs)
        return self.session

    def seal_resp(self, conn_id: int, counter: int, plaintext: bytes) -> bytes:
        """A RESP carrying `plaintext` (an ACCEPT); `counter` new for every RESP."""
        if self.session is None:
            raise ValueError("accept() first")
        head = _RESP_HEAD.pack(MAGIC, VERSION, RESP, conn_id, counter)
        sym = self._sym
        sealed = AESGCM(sym.k).encrypt(_nonce(counter), plaintext, sym.h + head)
        return b"".join((head, self.e_pub, sealed))


def open_reply(key: bytes, h: bytes, data: bytes | memoryview) -> bytes:
    """Open a REPLY sealed under `key` with handshake hash `h`."""
    data = bytes(data)
    if len(data) < HEADER + 12 + _TAG:
        raise ProtocolError("truncated", "reply")
    if data[:2] != MAGIC or data[2] != VERSION or data[3] != REPLY:
        raise ProtocolError("malformed", "not a reply")
    try:
        return AESGCM(key).decrypt(data[HEADER : HEADER + 12], data[HEADER + 12 :], h + data[:4])
    except InvalidTag:
        raise ProtocolError("unauthenticated", "reply") from None


def open_init(data: bytes | memoryview, psk: bytes) -> tuple[ResponderHello, bytes]:
    """Open an INIT under `psk`: (the responder's state, the link's ephemeral).
    ProtocolError: truncated, malformed (not an INIT), unauthenticated (a wrong key)."""
    data = bytes(data)
    if data[:2] != MAGIC or len(data) < HEADER or data[2] != VERSION or data[3] != INIT:
        raise ProtocolError("malformed", "not an init")
    key_id = init_key_id(data)
    raw = key_id.encode("utf-8")
    at = HEADER + 1 + len(raw)
    e_i = data[at : at + _KEYLEN]
    sym = _start(raw, psk, e_i)
    c1 = data[at + _KEYLEN :]
    try:
        hello = AESGCM(sym.k).decrypt(_nonce(0), c1, sym.h)
    except InvalidTag:
        raise ProtocolError("unauthenticated", "init") from None
    sym.mix_hash(c1)
    return ResponderHello(sym, hello), e_i


def encode_keyrefuse(ref: bytes, reason: int) -> bytes:
    """KEYREFUSE: header, the INIT's ref (16 bytes), u8 reason (a RefuseReason:
    UNKNOWN_KEY, BAD_SECRET or EXPIRED_KEY)."""
    return _KEYREFUSE.pack(MAGIC, VERSION, KEYREFUSE, ref, reason)


def decode_keyrefuse(data: bytes | memoryview) -> tuple[bytes, int]:
    """(ref, reason) of a KEYREFUSE; ProtocolError if it is not one."""
    if len(data) != _KEYREFUSE.size:
        raise ProtocolError("malformed", "keyrefuse")
    magic, version, kind, ref, reason = _KEYREFUSE.unpack_from(data)
    if magic != MAGIC or version != VERSION or kind != KEYREFUSE:
        raise ProtocolError("malformed", "not a keyrefuse")
    return bytes(ref), int(reason)


_STALE = struct.Struct("<2sBBI")


def encode_stale(conn_id: int) -> bytes:
    """STALE: header, u32 conn id -- "no such session here" (unauthenticated: the
    listener has no keys for it; a link only reconnects on it, never fails)."""
    return _STALE.pack(MAGIC, VERSION, STALE, conn_id)


def decode_stale(data: bytes | memoryview) -> int:
    """The conn id of a STALE; ProtocolError if it is not one."""
    if len(data) != _STALE.size:
        raise ProtocolError("malformed", "stale")
    magic, version, kind, conn_id = _STALE.unpack_from(data)
    if magic != MAGIC or version != VERSION or kind != STALE:
        raise ProtocolError("malformed", "not a stale")
    return int(conn_id)
