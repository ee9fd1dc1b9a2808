"""Encrypted links end to end in memory: SecureSender and SecureCore on a
seeded bad network under a fake clock (testing/sim.py), no sockets.

What must hold: every record arrives once and exactly through loss,
duplicates, reordering and key updates; no record's bytes are ever on the
wire; replayed, flipped and reflected datagrams are dropped and counted while
the link stays exact; wrong key id, wrong secret, expired key and a stream
the key may not write are refused at the handshake with their reason and
store nothing; a reload ends the sessions of a removed key and keeps the
others; a listener that forgot a session makes the link reconnect at once.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from purelink.protocol import wire
from purelink.protocol.channel import RekeyPolicy
from purelink.protocol.events import Failed
from purelink.protocol.keys import Key, KeyTable
from purelink.protocol.secure_core import SecureCore
from purelink.protocol.secure_sender import SecureSender
from purelink.protocol.sender import SenderConfig, SenderState
from purelink.testing import FakeNet, NetConfig, Simulation
from purelink.testing.fakes import MemoryStore

SECRET = b"s" * 32
OTHER = b"o" * 32
KEYS = KeyTable(
    [
        Key("", SECRET),
        Key("orders-writer", OTHER, write=("orders*",), read=()),
        Key("old", SECRET, expires=1.0e9),
    ]
)


class Tap(FakeNet):
    """A FakeNet that keeps every datagram put on it."""

    def __init__(self, seed: int, **kw: NetConfig) -> None:
        super().__init__(seed, **kw)
        self.seen: list[bytes] = []

    def send(self, data: bytes, source: tuple[str, int], dest: str, now: float, up: bool) -> None:
        self.seen.append(data)
        super().send(data, source, dest, now, up)


def records(n: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        size = rng.choice((0, 20, 61, 700, 1300, 5000))
        out.append(b"SECRET-RECORD-%06d:" % i + rng.randbytes(size))
    return out


def stored(sim: Simulation, stream: str) -> list[bytes]:
    return [r[3] for r in sim.store.records(stream)]


@pytest.mark.parametrize("seed", range(6))
def test_an_encrypted_link_is_exact_on_a_bad_network(seed: int) -> None:
    bad = NetConfig(loss=0.05, duplicate=0.05, jitter=0.002)
    net = Tap(seed, up=bad, down=bad)
    sim = Simulation(net, keys=KEYS, rekey=RekeyPolicy(rekey_packets=64))
    recs = records(2000, seed)
    link = sim.add_link("orders", recs, secret=SECRET, push_every=50)
    assert sim.run(sim.all_done, max_time=600)
    assert stored(sim, "orders") == recs
    assert isinstance(link.sender, SecureSender)
    channel = link.sender.channel
    assert channel is not None and channel.stats.send_updates > 5  # keys moved, none lost
    for data in net.seen:
        assert b"SECRET-RECORD" not in data
        assert b"orders" not in data


def test_replayed_datagrams_are_dropped_and_counted() -> None:
    net = Tap(1)
    sim = Simulation(net, keys=KEYS)
    recs = records(300)
    sim.add_link("orders", recs, secret=SECRET, push_every=30)
    assert sim.run(sim.all_done)
    core = sim.core
    assert core is not None
    sealed = [d for d in net.seen if d[3] & ~1 == 0x26]  # both directions
    up = sealed[: len(sealed) // 2]
    for data in up:
        core.receive_datagram(data, ("10.0.0.1", 40001), sim.clock.now)
    dropped = core.stats.dropped
    assert dropped.get("replayed", 0) + dropped.get("unauthenticated", 0) == len(up)
    assert dropped.get("replayed", 0) > 0
    assert stored(sim, "orders") == recs


def test_flipped_bits_are_dropped_and_the_link_stays_exact() -> None:
    net = Tap(2)
    sim = Simulation(net, keys=KEYS)
    recs = records(400)
    link = sim.add_link("orders", recs, secret=SECRET, push_every=40)
    rng = random.Random(5)
    real_send = net.send
    flipped = 0

    def corrupting(data: bytes, source: tuple[str, int], dest: str, now: float, up: bool) -> None:
        nonlocal flipped
        if rng.random() < 0.2:
            b = bytearray(data)
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            data = bytes(b)
            flipped += 1
        real_send(data, source, dest, now, up)

    net.send = corrupting  # type: ignore[method-assign]
    assert sim.run(sim.all_done, max_time=600)
    assert stored(sim, "orders") == recs
    core = sim.core
    assert core is not None
    assert flipped > 20
    drops = sum(core.stats.dropped.values()) + link.sender.stats.dropped
    assert drops >= flipped * 0.9  # each flip dropped (a few hit a datagram already lost)


def test_reflected_datagrams_are_dropped() -> None:
    net = Tap(3)
    sim = Simulation(net, keys=KEYS)
    link = sim.add_link("orders", records(50), secret=SECRET)
    assert sim.run(sim.all_done)
    core = sim.core
    assert core is not None
    ups = [d for d in net.seen if d[3] & ~1 == 0x26][:5]
    before = link.sender.stats.dropped
    for d in ups:
        link.sender.receive_datagram(d, sim.clock.now)  # the link's own datagram, back
    assert link.sender.stats.dropped == before + len(ups)
    assert link.sender.state == SenderState.OPEN


def test_plaintext_is_refused_by_a_listener_with_keys() -> None:
    core = SecureCore(MemoryStore(), None, KEYS, lambda: 1.7e9)
    hello = wire.encode_hello(wire.Hello(1, "orders", "", (1 << 63) | 1, 1368, b""))
    core.receive_datagram(hello, ("10.0.0.1", 1), 1.0)
    assert core.stats.dropped == {"unauthenticated": 1}
    assert core.datagrams_to_send(1.0) == []


def _refused(key_id: str, secret: bytes, stream: str = "orders") -> tuple[Simulation, str]:
    sim = Simulation(Tap(4), keys=KEYS)
    link = sim.add_link(stream, records(5), secret=secret, key_id=key_id)
    sim.run(lambda: link.sender.state == SenderState.FAILED, max_time=30)
    failed = [e for e in link.events if isinstance(e, Failed)]
    assert failed, link.events
    assert not sim.store.records(stream)
    assert failed[0].permanent  # a key refused is refused again: not to be retried
    return sim, failed[0].message


@pytest.mark.parametrize(
    ("key_id", "secret", "stream", "reason", "counter"),
    [
        ("nobody", SECRET, "orders", "unknown key id", "unknown_key"),
        ("", OTHER, "orders", "wrong secret", "bad_secret"),
        ("old", SECRET, "orders", "expired key", "expired_key"),
        ("orders-writer", OTHER, "payments", "forbidden", "forbidden"),
    ],
)
def test_the_handshake_refuses_with_a_reason(
    key_id: str, secret: bytes, stream: str, reason: str, counter: str
) -> None:
    sim, message = _refused(key_id, secret, stream)
    assert reason in message
    assert sim.core is not None
    assert sim.core.stats.dropped.get(counter) == 1
    assert sim.core.links == 0


def test_a_key_writes_only_its_streams() -> None:
    sim = Simulation(Tap(5), keys=KEYS)
    ok = sim.add_link("orders-eu", records(20), secret=OTHER, key_id="orders-writer")
    assert sim.run(sim.all_done)
    assert ok.sender.state == SenderState.OPEN
    assert len(stored(sim, "orders-eu")) == 20


def test_a_reload_ends_the_sessions_of_a_removed_key_only() -> None:
    sim = Simulation(Tap(6), keys=KEYS)
    gone = sim.add_link("orders", records(10), secret=OTHER, key_id="orders-writer")
    kept = sim.add_link("orders", records(10, 1), secret=SECRET)
    assert sim.run(sim.all_done)
    core = sim.core
    assert isinstance(core, SecureCore)
    ended = core.set_keys(KeyTable([Key("", b"n" * 32)]), sim.clock.now)  # "" changed secret
    assert ended == 1
    gone.todo = records(3, 9)  # (the simulation only steps while something happens)
    sim.run(lambda: gone.sender.state == SenderState.FAILED, max_time=5)
    assert any(isinstance(e, Failed) and "key revoked" in e.message for e in gone.events)
    kept.todo = records(10, 2)
    assert sim.run(lambda: kept.sender.stored == 20, max_time=10)  # its session runs on
    assert core.stats.dropped.get("key_revoked") == 1
    # a new handshake with the old secret is refused
    _, message = _refused_on(sim, "", SECRET)
    assert "wrong secret" in message


def _refused_on(sim: Simulation, key_id: str, secret: bytes) -> tuple[Simulation, str]:
    link = sim.add_link("orders", records(1), secret=secret, key_id=key_id)
    sim.run(lambda: link.sender.state == SenderState.FAILED, max_time=30)
    failed = [e for e in link.events if isinstance(e, Failed)]
    assert failed
    return sim, failed[0].message


def test_a_forgotten_session_reconnects_at_once() -> None:
    """A listener restart forgets every channel: its STALE makes the link reconnect
    long before the 20 s of silence, and nothing is lost or doubled."""
    sim = Simulation(Tap(7), keys=KEYS)
    recs = records(600)
    link = sim.add_link("orders", recs[:300], secret=SECRET)
    assert sim.run(sim.all_done)
    start = sim.clock.now
    sim.restart_listener(crash=False)
    link.todo = recs[300:]
    assert sim.run(sim.all_done, max_time=60)
    assert sim.clock.now - start < 2.0
    assert stored(sim, "orders") == recs
    assert link.sender.stats.reconnects == 1


def test_a_keyrefuse_on_a_reconnect_is_ignored() -> None:
    """Unauthenticated, a KEYREFUSE must not end a running link: after a restart
    with a table that lacks its key, the link keeps trying (and counts)."""
    sim = Simulation(Tap(8), keys=KEYS)
    link = sim.add_link("orders", records(10), secret=OTHER, key_id="orders-writer")
    assert sim.run(sim.all_done)
    sim.keys = KeyTable([Key("", SECRET)])
    sim.restart_listener(crash=False)
    link.todo = records(5, 3)
    sim.run(lambda: False, max_time=5)
    sender = link.sender
    assert isinstance(sender, SecureSender)
    assert sender.state == SenderState.CONNECTING
    assert sender.key_refusals > 0


def test_answers_to_unproven_addresses_stay_within_3x() -> None:
    core = SecureCore(MemoryStore(), None, KEYS, lambda: 1.7e9)
    for key_id, secret in (("", SECRET), ("nobody", SECRET), ("", OTHER), ("old", SECRET)):
        sender = SecureSender(SenderConfig("orders", datagram_size=160), secret, key_id)
        sender.connect(1.0)
        (init,) = sender.datagrams_to_send(1.0)
        core.receive_datagram(init, ("10.0.0.9", 9), 1.0)
        (answer,) = core.datagrams_to_send(1.0)
        assert len(answer[0]) <= 3 * len(init)


def _init_of(secret: bytes = SECRET, key_id: str = "") -> bytes:
    sender = SecureSender(SenderConfig("orders"), secret, key_id)
    sender.connect(1.0)
    (init,) = sender.datagrams_to_send(1.0)
    return init


def test_every_truncation_of_an_init_is_dropped_and_keeps_nothing() -> None:
    """Byte by byte: no prefix of a real INIT opens, answers more than 3x, or leaves state."""
    core = SecureCore(MemoryStore(), None, KEYS, lambda: 1.7e9)
    init = _init_of()
    for n in range(len(init)):
        core.receive_datagram(init[:n], ("10.0.0.9", 9), 1.0)
        for answer, _ in core.datagrams_to_send(1.0):
            assert len(answer) <= 3 * max(n, 1)
    assert sum(core.stats.dropped.values()) == len(init)
    assert core.links == 0 and core.stats.retries == 0
    core.receive_datagram(init + b"junk", ("10.0.0.9", 9), 1.0)  # trailing junk: no tag
    assert core.stats.dropped.get("bad_secret") is not None and core.stats.retries == 0


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x04]), st.binary(max_size=300))
def test_junk_is_dropped_by_both_sides_and_never_raises(kind: int, body: bytes) -> None:
    data = b"PL\x01" + bytes((kind,)) + body
    core = SecureCore(MemoryStore(), None, KEYS, lambda: 1.7e9)
    core.receive_datagram(data, ("10.0.0.9", 9), 1.0)
    for answer, _ in core.datagrams_to_send(1.0):
        assert len(answer) <= 3 * len(data)
    assert core.links == 0 and sum(core.stats.dropped.values()) == 1
    sender = SecureSender(SenderConfig("orders"), SECRET)
    sender.connect(1.0)
    sender.datagrams_to_send(1.0)
    sender.receive_datagram(data, 1.0)
    assert sender.state == SenderState.CONNECTING and sender.stats.dropped == 1


def test_an_init_replayed_from_another_address_is_refused() -> None:
    """Over TCP no cookie binds a HELLO to its address: a recorded INIT played on
    another connection must not open a session that fences the live one."""
    core = SecureCore(MemoryStore(), None, KEYS, lambda: 1.7e9)
    sender = SecureSender(SenderConfig("orders", producer="app"), SECRET)
    sender.connect(1.0)
    for _ in range(2):  # the INIT, a RETRY (a cookie over TCP too), the INIT with it
        (init,) = sender.datagrams_to_send(1.0)
        core.receive_datagram(init, ("tcp", 1), 1.0, proven=True)
        for answer, _ in core.datagrams_to_send(1.0):
            sender.receive_datagram(answer, 1.0)
    assert sender.state == SenderState.OPEN and core.links == 1
    core.receive_datagram(init, ("tcp", 2), 2.0, proven=True)  # the replay
    assert core.datagrams_to_send(2.0) == []
    assert core.stats.dropped == {"replayed_init": 1}
    assert core.links == 1 and core.stats.fenced == 0
    core.receive_datagram(init, ("tcp", 1), 2.0, proven=True)  # a retransmission passes:
    (resp,) = core.datagrams_to_send(2.0)  # the same session's RESP again
    assert resp[1] == ("tcp", 1) and resp[0][3] == 0x22
    assert core.stats.dropped == {"replayed_init": 1}


def test_inits_are_rate_limited_per_source_before_they_are_opened() -> None:
    from purelink.protocol.core_parts import CoreConfig  # noqa: PLC0415

    config = CoreConfig(handshake_rate=0.001, handshake_burst=3)
    core = SecureCore(MemoryStore(), config, KEYS, lambda: 1.7e9)
    for _ in range(10):
        core.receive_datagram(_init_of(OTHER, "nobody"), ("10.0.0.9", 9), 1.0)
    assert core.stats.dropped == {"unknown_key": 3, "handshake_rate_limited": 7}
    assert len(core.datagrams_to_send(1.0)) == 3  # three KEYREFUSEs, no more
    core.receive_datagram(_init_of(), ("10.0.0.10", 9), 1.0)  # another source gets in
    assert core.stats.retries == 1


def test_a_resent_hello_is_the_same_init_and_a_changed_one_a_new_ephemeral() -> None:
    """An INIT's key seals one plaintext: a retransmission resends the very bytes,
    a HELLO that now carries a cookie gets a fresh INIT (a new ephemeral)."""
    core = SecureCore(MemoryStore(), None, KEYS, lambda: 1.7e9)
    sender = SecureSender(SenderConfig("orders"), SECRET)
    sender.connect(1.0)
    (first,) = sender.datagrams_to_send(1.0)
    sender.handle_timer(1.2)
    (again,) = sender.datagrams_to_send(1.2)  # no answer: the HELLO again
    assert again == first
    core.receive_datagram(again, ("10.0.0.9", 9), 1.2)
    (retry,) = core.datagrams_to_send(1.2)  # a REPLY carrying a RETRY
    assert retry[0][3] == 0x23
    sender.receive_datagram(retry[0], 1.2)
    (with_cookie,) = sender.datagrams_to_send(1.2)
    assert with_cookie != first and with_cookie[5:37] != first[5:37]  # a new ephemeral
    core.receive_datagram(with_cookie, ("10.0.0.9", 9), 1.2)
    (resp,) = core.datagrams_to_send(1.2)
    sender.receive_datagram(resp[0], 1.2)
    assert sender.state == SenderState.OPEN and core.links == 1
