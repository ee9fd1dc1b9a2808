"""The encrypted layer's adversarial review: each finding pinned by a test.

Why a file of its own: these are attacks on the layer (protocol/secure_core.py,
secure_sender.py, channel.py, tail_seal.py, keys.py) by someone who holds a
key or has recorded traffic, each one a test that failed before its fix.
Sans-IO, fake clock, no sockets, like tests/sim/test_secure_sim.py.
"""

from __future__ import annotations

from purelink._crc32c import crc32c
from purelink.errors import ProtocolError
from purelink.protocol import wire
from purelink.protocol.keys import Key, KeyTable
from purelink.protocol.secure_core import SecureCore
from purelink.protocol.secure_sender import SecureSender
from purelink.protocol.sender import SenderConfig, SenderState
from purelink.testing.fakes import MemoryStore

SECRET = b"s" * 32
OTHER = b"o" * 32
KEYS = KeyTable([Key("", SECRET), Key("orders-writer", OTHER, write=("orders*",), read=())])
TCP = ("tcp", 1)


def _open(
    core: SecureCore, sender: SecureSender, addr: tuple[str, int], now: float, proven: bool
) -> None:
    """Run the handshake between the two until the sender is open (or nothing moves)."""
    sender.connect(now)
    for _ in range(4):
        for d in sender.datagrams_to_send(now):
            core.receive_datagram(d, addr, now, proven=proven)
        for answer, _ in core.datagrams_to_send(now):
            sender.receive_datagram(answer, now)
        if sender.state == SenderState.OPEN:
            return


def _victim(core: SecureCore, now: float) -> SecureSender:
    """The producer "app" of stream "payments", open on its own connection."""
    victim = SecureSender(SenderConfig("payments", producer="app"), SECRET)
    _open(core, victim, ("tcp", 9), now, proven=True)
    assert victim.state == SenderState.OPEN
    return victim


def test_a_hello_sealed_inside_a_session_cannot_reach_a_stream_the_key_may_not_write() -> None:
    """A key that may write only orders* opens a session on "orders", then seals a
    HELLO for "payments" (inner conn id set to its session's, so the layer's one
    check passes) under its session keys.  It must not reach the core: it would
    create the stream and fence the producer writing there."""
    core = SecureCore(MemoryStore(), None, KEYS, lambda: 1.7e9)
    _victim(core, 1.0)
    epochs = core.stats.fenced
    attacker = SecureSender(SenderConfig("orders"), OTHER, "orders-writer")
    _open(core, attacker, TCP, 1.0, proven=True)
    assert attacker.state == SenderState.OPEN and attacker.channel is not None
    channel = attacker.channel
    for epoch in (0, 1, 2, 1 << 20):
        hello = wire.Hello(7 + epoch, "payments", "app", 0, 1200, b"", epoch)
        forged = bytearray(wire.encode_hello(hello))
        forged[4:8] = channel.conn_id.to_bytes(4, "little")
        body = bytes(forged[:-4])
        plain = body + crc32c(body).to_bytes(4, "little")
        core.receive_datagram(channel.seal(plain, 2.0), TCP, 2.0, proven=True)
        core.datagrams_to_send(2.0)
    assert core.links == 2  # the victim's and the attacker's own, nothing more
    assert core.stats.fenced == epochs
    assert core.stats.dropped.get("forbidden", 0) + core.stats.dropped.get("malformed", 0) == 4


def test_an_init_recorded_on_tcp_cannot_fence_the_live_session_later() -> None:
    """A TCP connection proves its address, so without a cookie nothing bound an
    INIT to its connection or its time but a memory of 10 minutes (and at most
    `hello_memory` INITs): whoever recorded one could play it on a new
    connection later, from anywhere, and fence the live session each time."""
    core = SecureCore(MemoryStore(), None, KEYS, lambda: 1.7e9)
    sender = SecureSender(SenderConfig("orders", producer="app"), SECRET)
    recorded: list[bytes] = []
    sender.connect(1.0)
    for _ in range(4):
        for d in sender.datagrams_to_send(1.0):
            recorded.append(d)
            core.receive_datagram(d, TCP, 1.0, proven=True)
        for answer, _ in core.datagrams_to_send(1.0):
            sender.receive_datagram(answer, 1.0)
    assert sender.state == SenderState.OPEN and core.links == 1
    for n, later in enumerate((2.0, 700.0, 5000.0)):
        for init in recorded:
            core.receive_datagram(init, ("tcp", 100 + n), later, proven=True)
            for answer, _ in core.datagrams_to_send(later):
                assert answer[3] != 0x22  # no RESP: no session for the replay
    assert core.links == 1 and core.stats.fenced == 0


def test_a_receiver_follows_two_key_updates_when_every_datagram_of_the_first_was_lost() -> None:
    """A quiet direction moves its key on time at its next datagram; if the one
    datagram under a key is lost, the next comes two keys on with the old phase
    bit.  The receiver tried only its current key and dropped every later
    datagram of the session as unauthenticated: a dead session."""
    from purelink.protocol.channel import Channel  # noqa: PLC0415

    a = Channel(5, b"a" * 32, b"b" * 32, 0.0)
    b = Channel(5, b"b" * 32, b"a" * 32, 0.0)
    assert b.open(a.seal(b"first", 0.0), 0.0) == b"first"
    a.seal(b"lost", 121.0)  # the next key, phase 1: never arrives
    for i, t in enumerate((242.0, 243.0, 244.0)):
        assert b.open(a.seal(b"later %d" % i, t), t) == b"later %d" % i
    assert b.stats.receive_updates == 2
    forged = bytearray(a.seal(b"x", 245.0))
    forged[-1] ^= 1
    try:
        b.open(bytes(forged), 245.0)
        raise AssertionError("a forgery opened")
    except ProtocolError as exc:
        assert exc.reason == "unauthenticated"
    assert b.stats.receive_updates == 2


def test_a_plaintext_reply_to_a_sealed_subscription_carries_no_record() -> None:
    """Before the RESP a subscriber takes a plaintext refusal (no keys yet).  It
    took any plaintext: whoever answers its connection, with no key at all,
    could send an END and then batches of its own, and they were returned as
    the stream's records (or an END alone: "the stream ends here")."""
    from purelink.protocol.tail import (  # noqa: PLC0415
        END,
        ERROR,
        TailDecoder,
        encode_control,
    )
    from purelink.protocol.tail_seal import SealedReader, encode_sealed_request  # noqa: PLC0415

    forged = bytearray(wire.encode_batch(5, 1, 1, [b"FORGED-RECORD"]))
    forged[0:8] = (1).to_bytes(8, "little")  # the position a store stamps
    for reply in (encode_control(END) + bytes(forged), encode_control(END)):
        for cut in (len(reply), 10, 20):  # whole, or in pieces
            reader = SealedReader(encode_sealed_request("s", 1, False, "", SECRET)[1], lambda: 0.0)
            decoder = TailDecoder(1)
            got: list[tuple[int, bytes]] = []
            try:
                for at in range(0, len(reply), cut):
                    got += decoder.feed(reader.feed(reply[at : at + cut]))
            except ProtocolError:
                pass
            assert got == [] and not decoder.ended
    refusal = encode_control(ERROR, "wrong secret for key ''")  # a refusal still reads as one
    reader = SealedReader(encode_sealed_request("s", 1, False, "", SECRET)[1], lambda: 0.0)
    decoder = TailDecoder(1)
    try:
        decoder.feed(reader.feed(refusal[:7]) + reader.feed(refusal[7:]))
        raise AssertionError("no refusal")
    except ProtocolError as exc:
        assert "wrong secret" in str(exc)


def test_a_link_forgets_its_ephemeral_once_its_session_is_open() -> None:
    """Key updates are there so that keys taken from a live process do not open
    the session's earlier traffic; a link that kept its INIT's ephemeral
    private key could, with the recorded RESP, derive the session's first keys.
    So could a subscriber."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey  # noqa: PLC0415

    from purelink.protocol.tail_seal import (  # noqa: PLC0415
        SealedReader,
        encode_sealed_request,
        open_sealed_request,
        respond,
    )

    def privates(obj: object, depth: int = 0) -> int:
        if isinstance(obj, X25519PrivateKey):
            return 1
        if depth > 3:
            return 0
        slots = [s for c in type(obj).__mro__ for s in getattr(c, "__slots__", ())]
        values = [getattr(obj, s, None) for s in slots]
        values += list(getattr(obj, "__dict__", {}).values())
        return sum(privates(v, depth + 1) for v in values if v is not None)

    core = SecureCore(MemoryStore(), None, KEYS, lambda: 1.7e9)
    sender = SecureSender(SenderConfig("orders"), SECRET)
    _open(core, sender, ("10.0.0.9", 9), 1.0, proven=False)
    assert sender.state == SenderState.OPEN and privates(sender) == 0
    request, init = encode_sealed_request("s", 1, False, "", SECRET)
    _, hs, e_i, _ = open_sealed_request(request, KEYS, 1.7e9)
    resp, _ = respond(hs, e_i, 1.0)
    reader = SealedReader(init, lambda: 1.0)
    reader.feed(resp)
    assert reader.channel is not None and privates(reader) == 0
