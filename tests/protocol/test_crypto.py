"""The encrypted layer's pieces alone: the handshake (handshake.py) and a
session's channel (channel.py), sans-IO -- bytes in, bytes out.

What must hold: both sides derive the same keys, and only they; every
flipped bit of every handshake message and sealed datagram is refused; a
replayed or reflected datagram is refused; key updates happen without a
datagram lost, with reordering across them; the decoders raise
ProtocolError and nothing else on any input (Hypothesis).
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from purelink.errors import ProtocolError
from purelink.protocol import handshake, wire
from purelink.protocol.channel import OVERHEAD, WINDOW, Channel, RekeyPolicy, sealed_conn_id

PSK = b"k" * 32
HELLO = wire.encode_hello(wire.Hello(7, "orders", "", (1 << 63) | 5, 1368, b""))
ACCEPT = wire.encode_accept(wire.Accept(99, 7, 5, 1, 0, 0, 1 << 20, 1 << 24))


def exchange(key_id: str = "app") -> tuple[handshake.Initiator, handshake.ResponderHello, bytes]:
    """A whole exchange: (initiator, responder, the RESP)."""
    init = handshake.Initiator(key_id, PSK, HELLO)
    responder, e_i = handshake.open_init(init.message, PSK)
    responder.accept(e_i)
    return init, responder, responder.seal_resp(99, 1, ACCEPT)


def pair(policy: RekeyPolicy | None = None) -> tuple[Channel, Channel]:
    """(the link's channel, the listener's) of one exchange."""
    init, responder, resp = exchange()
    conn_id, _, mine = init.open_resp(resp)
    assert responder.session is not None
    theirs = responder.session
    return (
        Channel(conn_id, mine.send, mine.receive, 0.0, policy),
        Channel(conn_id, theirs.send, theirs.receive, 0.0, policy),
    )


def flips(data: bytes) -> list[bytes]:
    """`data` with each of its bits flipped, one at a time."""
    out = []
    for i in range(len(data)):
        for bit in range(8):
            b = bytearray(data)
            b[i] ^= 1 << bit
            out.append(bytes(b))
    return out


# ------------------------------------------------------------------ handshake
def test_both_sides_derive_the_same_keys_and_the_plaintexts_arrive() -> None:
    init, responder, resp = exchange()
    assert responder.hello == HELLO
    assert handshake.init_key_id(init.message) == "app"
    conn_id, plain, session = init.open_resp(resp)
    assert (conn_id, plain) == (99, ACCEPT)
    assert responder.session == handshake.Session(session.receive, session.send)
    assert session.send != session.receive  # one key per direction


def test_no_plaintext_in_the_handshake_bytes() -> None:
    init, _, resp = exchange()
    for needle in (b"orders", HELLO[8:20], ACCEPT[8:20]):
        assert needle not in init.message
        assert needle not in resp


def test_every_exchange_has_fresh_keys() -> None:
    """Ephemeral keys: the same psk and HELLO never give the same session twice."""
    a, b = pair(), pair()
    assert a[0].seal(b"x", 1.0) != b[0].seal(b"x", 1.0)
    with pytest.raises(ProtocolError):
        b[1].open(a[0].seal(b"y", 1.0), 1.0)


def test_a_wrong_secret_does_not_open_the_init() -> None:
    init = handshake.Initiator("app", PSK, HELLO)
    with pytest.raises(ProtocolError) as info:
        handshake.open_init(init.message, b"w" * 32)
    assert info.value.reason == "unauthenticated"


def test_the_key_id_is_bound() -> None:
    """An INIT whose key id is swapped for another does not open (the id is in the prologue)."""
    init = handshake.Initiator("app", PSK, HELLO)
    forged = init.message.replace(b"\x03app", b"\x03apq", 1)
    assert handshake.init_key_id(forged) == "apq"
    with pytest.raises(ProtocolError):
        handshake.open_init(forged, PSK)


def test_every_flipped_bit_of_an_init_is_refused() -> None:
    init = handshake.Initiator("app", PSK, HELLO)
    for bad in flips(init.message):
        with pytest.raises(ProtocolError):
            handshake.open_init(bad, PSK)


def test_every_flipped_bit_of_a_resp_and_a_reply_is_refused() -> None:
    init, responder, resp = exchange()
    for bad in flips(resp):
        with pytest.raises(ProtocolError):
            init.open_resp(bad)
    reply = responder.seal_reply(b"retry bytes")
    assert init.open_reply(reply) == b"retry bytes"
    for bad in flips(reply):
        with pytest.raises(ProtocolError):
            init.open_reply(bad)


def test_a_resp_to_another_init_is_refused() -> None:
    other, _, _ = exchange()
    _, _, resp = exchange()
    with pytest.raises(ProtocolError):
        other.open_resp(resp)


def test_a_resent_resp_gives_the_same_session_under_a_new_counter() -> None:
    init, responder, first = exchange()
    again = responder.seal_resp(99, 2, ACCEPT)
    assert again != first
    assert init.open_resp(first)[2] == init.open_resp(again)[2]


def test_truncated_handshake_messages_are_protocol_errors() -> None:
    init, _, resp = exchange()
    for n in range(len(init.message)):
        with pytest.raises(ProtocolError):
            handshake.open_init(init.message[:n], PSK)
    for n in range(len(resp)):
        with pytest.raises(ProtocolError):
            init.open_resp(resp[:n])


def test_a_key_id_longer_than_64_bytes_is_refused() -> None:
    with pytest.raises(ValueError, match="at most 64"):
        handshake.Initiator("x" * 65, PSK, HELLO)


def test_keyrefuse_and_stale_round_trip_and_refuse_junk() -> None:
    ref = handshake.init_ref(b"init")
    assert handshake.decode_keyrefuse(handshake.encode_keyrefuse(ref, 8)) == (ref, 8)
    assert handshake.decode_stale(handshake.encode_stale(77)) == 77
    for junk in (b"", b"PL\x01\x24", handshake.encode_stale(1)):
        with pytest.raises(ProtocolError):
            handshake.decode_keyrefuse(junk)
    with pytest.raises(ProtocolError):
        handshake.decode_stale(handshake.encode_keyrefuse(ref, 8))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_handshake_decoders_raise_only_protocol_errors(data: bytes) -> None:
    init, _, _ = exchange()
    for decode in (
        lambda d: handshake.open_init(d, PSK),
        init.open_resp,
        init.open_reply,
        handshake.init_key_id,
        handshake.decode_keyrefuse,
        handshake.decode_stale,
    ):
        with contextlib.suppress(ProtocolError):
            decode(data)


# -------------------------------------------------------------------- channel
def test_sealed_datagrams_open_on_the_other_side_only() -> None:
    link, listener = pair()
    for i in range(100):
        data = link.seal(b"record %d" % i, 1.0)
        assert len(data) == len(b"record %d" % i) + OVERHEAD
        assert sealed_conn_id(data) == 99
        assert listener.open(data, 1.0) == b"record %d" % i
    answer = listener.seal(b"ack", 1.0)
    assert link.open(answer, 1.0) == b"ack"


def test_a_reflected_datagram_is_refused() -> None:
    """Sent back at its sender, a datagram does not open: each direction has its own key."""
    link, listener = pair()
    mine = link.seal(b"data", 1.0)
    with pytest.raises(ProtocolError) as info:
        link.open(mine, 1.0)
    assert info.value.reason == "unauthenticated"
    theirs = listener.seal(b"ack", 1.0)
    with pytest.raises(ProtocolError):
        listener.open(theirs, 1.0)


def test_every_flipped_bit_of_a_sealed_datagram_is_refused() -> None:
    link, listener = pair()
    data = link.seal(b"\0" * 40 + b"payload", 1.0)
    for bad in flips(data):
        with pytest.raises(ProtocolError):
            listener.open(bad, 1.0)
    assert listener.open(data, 1.0).endswith(b"payload")  # none of them moved the window


def test_replays_are_refused_and_reordering_within_the_window_is_not() -> None:
    link, listener = pair()
    sent = [link.seal(b"%d" % i, 1.0) for i in range(WINDOW + 10)]
    order = list(reversed(sent[:50])) + sent[50:]
    for data in order:
        listener.open(data, 1.0)
    for data in (sent[0], sent[49], sent[-1], sent[WINDOW]):
        with pytest.raises(ProtocolError) as info:
            listener.open(data, 1.0)
        assert info.value.reason == "replayed"


def test_a_datagram_older_than_the_window_is_refused() -> None:
    link, listener = pair()
    first = link.seal(b"old", 1.0)
    later = [link.seal(b"x", 1.0) for _ in range(WINDOW)]
    listener.open(later[-1], 1.0)
    with pytest.raises(ProtocolError) as info:
        listener.open(first, 1.0)
    assert info.value.reason == "replayed"
    assert listener.open(later[1], 1.0) == b"x"  # still inside: opens


def test_key_update_after_a_packet_bound_with_reordering_across_it() -> None:
    link, listener = pair(RekeyPolicy(rekey_packets=10, overlap=5.0))
    sent = [link.seal(b"%d" % i, 1.0) for i in range(35)]
    assert link.stats.send_updates == 3
    # deliver each run of 10 with its last two swapped across the next update
    order = sent[:8] + sent[10:12] + sent[8:10] + sent[12:]
    got = [listener.open(d, 1.5) for d in order]
    assert sorted(got, key=int) == [b"%d" % i for i in range(35)]
    assert listener.stats.receive_updates == 3


def test_key_update_after_time_and_bytes() -> None:
    link, listener = pair(RekeyPolicy(rekey_after=10.0, rekey_bytes=1000))
    listener.open(link.seal(b"a", 1.0), 1.0)
    listener.open(link.seal(b"b", 11.0), 11.0)  # 10 s later: a new key
    assert link.stats.send_updates == 1
    for _ in range(3):
        listener.open(link.seal(b"z" * 400, 11.0), 11.0)
    listener.open(link.seal(b"c", 11.0), 11.0)  # past 1,000 bytes
    assert link.stats.send_updates == 2
    assert listener.stats.receive_updates == 2


def test_the_previous_key_is_forgotten_after_the_overlap() -> None:
    link, listener = pair(RekeyPolicy(rekey_packets=2, overlap=1.0))
    a, b, c = link.seal(b"a", 0.0), link.seal(b"b", 0.0), link.seal(b"c", 0.0)
    listener.open(a, 0.0)
    listener.open(c, 0.0)  # c is under the next key: the listener follows
    with pytest.raises(ProtocolError):
        listener.open(b, 2.0)  # b is of the previous key, 2 s later: gone
    assert listener.open(link.seal(b"d", 2.0), 2.0) == b"d"


def test_a_datagram_for_another_session_is_refused() -> None:
    link, _ = pair()
    _, other = pair()
    other.conn_id = 100
    with pytest.raises(ProtocolError) as info:
        other.open(link.seal(b"x", 1.0), 1.0)
    assert info.value.reason == "unknown_conn"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_channel_open_raises_only_protocol_errors(data: bytes) -> None:
    _, listener = pair()
    with pytest.raises(ProtocolError):
        listener.open(data, 1.0)
