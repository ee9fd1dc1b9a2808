"""Security of the sans-IO core (docs/security.md): no sockets, no clock.

Why it exists: what keeps a listener safe on a network is decided in
`protocol/` -- the cookie, the 3x rule,
the handshake rate limit, the names rule, the limits and their counters --
so it is tested here, by hand and with Hypothesis, where every step can be
asserted.  The same properties over real sockets (a listener flooded with
100,000 hostile datagrams while a link ships) are in test_security_live.py.

Wire decoders are fuzzed in test_wire_fuzz.py; test_security_fuzz.py adds
what was not covered there: the store's decoders, and the two state machines
fed hostile input as a whole, with the invariants that must hold across many
datagrams (exactly-once, memory, amplification).
"""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from helpers.secure import ADDR, ANON, OTHER, answers, data, handshake, hello
from helpers.wire import FAST
from purelink.errors import Error
from purelink.protocol import wire
from purelink.protocol.listener_core import CoreConfig, ListenerCore
from purelink.protocol.names import NAME_RE, is_valid_name, validate_stream_name
from purelink.protocol.ratelimit import TokenBuckets
from purelink.store import STREAM_NAME_RE
from purelink.testing import MemoryStore


class SpyStore(MemoryStore):
    """A MemoryStore that remembers every call the core makes to it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []

    def producer_state(self, stream: str, pid: int) -> tuple[int, int]:
        self.calls.append(("producer_state", stream))
        return super().producer_state(stream, pid)

    def new_epoch(self, stream: str, pid: int, durable: bool, owner: int = 0) -> int:
        self.calls.append(("new_epoch", stream))
        return super().new_epoch(stream, pid, durable, owner)


# ------------------------------------------------------------- names (1-200 of [A-Za-z0-9._-])
BAD_NAMES = [
    "", ".", "..", ".hidden", "..x", "a/b", "/abs", "../x", "x/..", "a\\b", "x" * 201,
    "é", "a b", "a\n", "a\r", "\0", "a\0b", "a\t", "\uff41", "a:b", "*", "~", "a%2fb",
]  # fmt: skip
GOOD_NAMES = ["a", "x" * 200, "A.b-c_9", "-x", "_", "a..b", "x.", "orders.v2", "0"]
ALPHABET = set(string.ascii_letters + string.digits + "._-")


def by_the_spec(name: str) -> bool:
    """The naming rule (1-200 of [A-Za-z0-9._-], no leading dot) spelled out without the regex."""
    return 1 <= len(name) <= 200 and not name.startswith(".") and set(name) <= ALPHABET


def test_one_rule_for_every_validator() -> None:
    assert STREAM_NAME_RE is NAME_RE  # the store uses the protocol's rule, not a copy


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names_are_refused_everywhere(name: str) -> None:
    assert not by_the_spec(name)
    assert not is_valid_name(name)
    with pytest.raises(ValueError, match="bad stream name"):
        validate_stream_name(name)
    with pytest.raises(ValueError):
        MemoryStore().producer_state(name, ANON)


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_good_names_are_accepted_everywhere(name: str) -> None:
    assert by_the_spec(name) and is_valid_name(name)
    assert validate_stream_name(name) == name


@FAST
@given(st.one_of(st.text(max_size=210), st.text(alphabet="._-/aZ9\\\n", max_size=12)))
def test_the_rule_is_the_spec_and_never_leaves_its_folder(name: str) -> None:
    assert is_valid_name(name) == by_the_spec(name)
    if is_valid_name(name):
        base = Path("/srv/data/streams")
        assert (base / name).resolve().parent == base  # no path trick gets out
        assert name not in (".", "..") and "/" not in name and not name.startswith(".")


@pytest.mark.parametrize("name", [n for n in BAD_NAMES if len(n.encode()) <= 255])
def test_core_refuses_bad_stream_names_before_touching_the_store(name: str) -> None:
    store = SpyStore()
    core = ListenerCore(store)
    core.receive_datagram(hello(stream=name), ADDR, 100.0)
    ((retry, _),) = answers(core)
    assert isinstance(retry, wire.Retry)
    core.receive_datagram(hello(cookie=retry.cookie, stream=name), ADDR, 100.0)
    ((refuse, _),) = answers(core)
    assert isinstance(refuse, wire.Refuse) and refuse.reason == wire.RefuseReason.BAD_STREAM
    assert core.stats.dropped == {"bad_stream": 1}
    assert store.calls == [] and core.links == 0


def test_bad_producer_names_are_refused() -> None:
    core = ListenerCore(SpyStore())
    for i, name in enumerate(["a/b", "..", ".x", "a b"]):
        msg = wire.Hello(i, "s", name, 0, 1400, b"")
        core.receive_datagram(wire.encode_hello(msg), ADDR, 100.0)
        ((retry, _),) = answers(core)
        assert isinstance(retry, wire.Retry)
        msg = wire.Hello(i, "s", name, 0, 1400, retry.cookie)
        core.receive_datagram(wire.encode_hello(msg), ADDR, 100.0)
        ((refuse, _),) = answers(core)
        assert isinstance(refuse, wire.Refuse) and refuse.reason == wire.RefuseReason.BAD_PRODUCER
    assert core.stats.dropped == {"bad_request": 4}


# ------------------------------------ the old MAC flag reaches nothing
def flagged(accept: wire.Accept | None = None) -> list[bytes]:
    """Datagrams whose type has the high bit set (the MAC-only mode's flag,
    which no link sends any more): each must be dropped as unauthenticated."""
    conn, epoch, pid = (accept.conn_id, accept.epoch, accept.producer) if accept else (9, 1, ANON)
    batch = wire.encode_batch(pid, epoch, 1, [b"forged"])
    plain = [
        hello(),
        wire.encode_data(conn, 1, batch),
        wire.encode_close(conn, epoch),
        wire.encode_probe(conn, 1, epoch),
        wire.encode_fragment(conn, 2, epoch, 1, 10_000_000, 0, b"x" * 100),
    ]
    out = []
    for datagram in plain:
        body = bytearray(datagram[:-4])
        body[3] |= 0x80
        sealed = bytes(body) + crc32c(bytes(body)).to_bytes(4, "little")
        out += [sealed, sealed + bytes(16)]  # bare, and with the 16 bytes a MAC took
    return out


def test_the_old_mac_flag_reaches_no_state_store_or_limiter() -> None:
    store = SpyStore()
    core = ListenerCore(store, CoreConfig(handshake_burst=2, handshake_rate=1e-9))
    bad = flagged()
    for datagram in bad:
        core.receive_datagram(datagram, ADDR, 100.0)
    assert core.stats.dropped == {"unauthenticated": len(bad)}
    assert core.stats.datagrams == len(bad)
    assert core.datagrams_to_send(100.0) == []
    assert store.calls == [] and core.links == 0 and list(core.producers()) == []
    assert core.memory == 0 and core.take_writes() == {}
    # the rate limiter was not touched either: the two tokens of a handshake are there
    accept = handshake(core)
    calls = len(store.calls)
    more = flagged(accept)
    for datagram in more:
        core.receive_datagram(datagram, ADDR, 100.0)
    assert core.stats.dropped == {"unauthenticated": len(bad) + len(more)}
    assert core.take_writes() == {} and core.datagrams_to_send(100.0) == []
    assert core.links == 1 and len(store.calls) == calls and core.memory == 0


# ------------------------------------------------ handshake rate limit
def test_token_bucket_burst_refill_and_independence() -> None:
    tb = TokenBuckets(rate=10.0, burst=3.0, max_sources=100)
    assert [tb.allow("a", 0.0) for _ in range(4)] == [True, True, True, False]
    assert tb.allow("b", 0.0)  # another source has its own bucket
    assert not tb.allow("a", 0.05)  # half a token
    assert tb.allow("a", 0.1)  # one token after 0.1 s at 10/s
    assert tb.tokens("a", 10.0) == 3.0  # never more than the burst
    assert not tb.allow("a", 0.1)
    assert not tb.allow("a", 0.0)  # a clock stepping back refills nothing...
    assert not tb.allow("a", 0.15)  # ...and does not move the refill's start back
    stats = tb.statistics()
    assert (stats.allowed, stats.refused, stats.sources) == (5, 5, 2)


def test_token_bucket_table_is_bounded_and_forgets_the_least_recent() -> None:
    tb = TokenBuckets(rate=1.0, burst=1.0, max_sources=3)
    for src in "abc":
        assert tb.allow(src, 0.0)
    assert not tb.allow("a", 0.0)  # "a" is now the most recent
    assert tb.allow("d", 0.0)  # room made by forgetting "b", the least recent
    assert tb.statistics().sources == 3 and tb.statistics().evicted == 1
    assert tb.allow("b", 0.0)  # forgotten: a full bucket again (generous, never stricter)
    assert not tb.allow("a", 0.0) or tb.statistics().evicted == 2
    for i in range(10_000):
        tb.allow(i, 1.0)
    assert tb.statistics().sources == 3


@pytest.mark.parametrize(("rate", "burst", "n"), [(0.0, 1.0, 1), (1.0, 0.5, 1), (1.0, 1.0, 0)])
def test_token_bucket_arguments(rate: float, burst: float, n: int) -> None:
    with pytest.raises(ValueError):
        TokenBuckets(rate, burst, n)


def test_handshakes_are_rate_limited_per_source_ip() -> None:
    core = ListenerCore(MemoryStore(), CoreConfig(handshake_rate=2.0, handshake_burst=4.0))
    port_a, port_b = ("127.0.0.9", 1), ("127.0.0.9", 2)  # one IP, two ports: one bucket
    for i in range(3):
        core.receive_datagram(hello(nonce=i), port_a, 100.0)
        core.receive_datagram(hello(nonce=i), port_b, 100.0)
    assert core.stats.dropped == {"handshake_rate_limited": 2}
    assert core.stats.retries == 4
    assert len(core.datagrams_to_send(100.0)) == 4  # nothing at all for the refused ones
    handshake(core, ADDR)  # another IP is not limited
    core.receive_datagram(hello(nonce=9), port_a, 100.4)
    assert core.stats.dropped == {"handshake_rate_limited": 3}
    core.receive_datagram(hello(nonce=9), port_a, 100.5)  # one token back after 0.5 s
    assert core.stats.dropped == {"handshake_rate_limited": 3}
    assert len(core.datagrams_to_send(100.5)) == 1


def test_handshake_rate_limit_off_and_bounded_table() -> None:
    off = ListenerCore(MemoryStore(), CoreConfig(handshake_rate=0))
    for i in range(5000):
        off.receive_datagram(hello(nonce=i), ADDR, 100.0)
    assert off.stats.retries == 5000 and off.stats.dropped == {}
    small = ListenerCore(MemoryStore(), CoreConfig(handshake_sources=16))
    for i in range(1000):
        small.receive_datagram(hello(), (f"10.0.{i // 250}.{i % 250}", 1), 100.0)
    assert small.stats.retries == 1000
    assert small._limiter is not None and small._limiter.statistics().sources == 16


# ------------------------------------------------ limits and their counters
class LimitedStore(MemoryStore):
    """Opens at most `streams` streams, like DataDir(max_streams=...); can fail epochs."""

    def __init__(self, streams: int, epochs_fail: bool = False) -> None:
        super().__init__()
        self.streams = streams
        self.epochs_fail = epochs_fail

    def producer_state(self, stream: str, pid: int) -> tuple[int, int]:
        if stream not in self.batches and len(self.batches) >= self.streams:
            raise Error(f"stream limit reached ({self.streams} streams)")
        return super().producer_state(stream, pid)

    def new_epoch(self, stream: str, pid: int, durable: bool, owner: int = 0) -> int:
        if self.epochs_fail:
            raise Error("cannot record an epoch: disk full")
        return super().new_epoch(stream, pid, durable, owner)


def refused(core: ListenerCore, addr: tuple[str, int], nonce: int, stream: str = "s") -> int:
    kw = {"nonce": nonce, "stream": stream, "pid": ANON + nonce}
    core.receive_datagram(hello(**kw), addr, 100.0)  # type: ignore[arg-type]
    ((retry, _),) = answers(core)
    assert isinstance(retry, wire.Retry)
    core.receive_datagram(hello(cookie=retry.cookie, **kw), addr, 100.0)  # type: ignore[arg-type]
    ((refuse, _),) = answers(core)
    assert isinstance(refuse, wire.Refuse)
    return refuse.reason


def test_link_stream_and_store_limits_are_refused_and_counted() -> None:
    core = ListenerCore(LimitedStore(streams=1), CoreConfig(max_links=2))
    handshake(core, ADDR, stream="s")
    assert refused(core, OTHER, 1, stream="t") == wire.RefuseReason.MAX_STREAMS
    assert core.stats.dropped == {"stream_limit": 1}
    handshake(core, OTHER, nonce=2, stream="s", pid=ANON + 2)
    assert refused(core, ("127.0.0.3", 1), 3) == wire.RefuseReason.MAX_LINKS
    assert core.stats.dropped == {"stream_limit": 1, "link_limit": 1}
    failing = ListenerCore(LimitedStore(streams=9, epochs_fail=True))
    assert refused(failing, ADDR, 1) == wire.RefuseReason.STORE_ERROR
    assert failing.stats.dropped == {"store_error": 1} and failing.links == 0


def frag(a: wire.Accept, pn: int, seq: int, total: int, offset: int, chunk: bytes) -> bytes:
    return wire.encode_fragment(a.conn_id, pn, a.epoch, seq, total, offset, chunk)


def test_reorder_memory_per_link_is_bounded_and_counted() -> None:
    core = ListenerCore(MemoryStore(), CoreConfig(max_reorder=1000))
    a = handshake(core)
    for i in range(40):  # seq 1 never comes: everything is out of order
        core.receive_datagram(data(a, i + 1, 2 + i, [bytes(100)]), ADDR, 100.0)
    (p,) = core.producers()
    assert p.held_bytes <= 1000 and core.memory == p.memory
    assert core.stats.dropped["reorder_full"] == 40 - core.stats.held
    core.receive_datagram(frag(a, 99, 50, 5000, 0, bytes(1000)), ADDR, 100.0)
    assert core.stats.dropped["reorder_full"] == 41 - core.stats.held


def piece(a: wire.Accept, pn: int, batch: bytes, offset: int, size: int) -> bytes:
    """FRAGMENT: bytes [offset, offset + size) of `batch`."""
    seq = wire.decode_batch_header(batch).first_seq
    chunk = batch[offset : offset + size]
    return wire.encode_fragment(a.conn_id, pn, a.epoch, seq, len(batch), offset, chunk)


def test_total_memory_is_bounded_counted_and_a_running_total() -> None:
    core = ListenerCore(MemoryStore(), CoreConfig(max_memory=20_000, max_record=64_000))
    links = [handshake(core, ("127.0.0.1", 7000 + i), nonce=i, pid=ANON + i) for i in range(4)]
    seconds = [wire.encode_batch(a.producer, a.epoch, 2, [bytes(6000 - 46)]) for a in links]
    for i, a in enumerate(links):  # out of order: seq 2, held
        core.receive_datagram(piece(a, 1, seconds[i], 0, 1000), ("127.0.0.1", 7000 + i), 100.0)
    assert core.memory == sum(p.memory for p in core.producers()) <= 20_000 + 6000
    assert core.stats.dropped.get("memory_limit", 0) == 1  # the fourth one had no room
    # the next batch of a producer that holds data always gets through, so memory drains
    a = links[0]
    first = wire.encode_batch(a.producer, a.epoch, 1, [bytes(3000 - 46)])
    core.receive_datagram(piece(a, 2, first, 0, 3000), ("127.0.0.1", 7000), 100.0)
    assert core.memory == sum(p.memory for p in core.producers())
    for off in range(1000, 6000, 1000):
        core.receive_datagram(piece(a, 3 + off, seconds[0], off, 1000), ("127.0.0.1", 7000), 100.0)
    assert core.memory == sum(p.memory for p in core.producers()) == 12_000
    assert [h.first_seq for _, h in core.take_writes()["s"]] == [1, 2]


def test_in_order_data_is_never_refused_for_memory() -> None:
    core = ListenerCore(MemoryStore(), CoreConfig(max_memory=300))
    a = handshake(core)
    for seq in range(2, 9):
        core.receive_datagram(data(a, seq, seq, [bytes(60)]), ADDR, 100.0)
    assert core.memory > 300 or core.stats.dropped.get("memory_limit")
    core.receive_datagram(data(a, 99, 1, [b"the gap"]), ADDR, 100.0)
    assert [h.first_seq for _, h in core.take_writes().get("s", [])][:1] == [1]


def test_max_record_holds_for_records_in_a_normal_batch() -> None:
    core = ListenerCore(MemoryStore(), CoreConfig(max_record=100))
    a = handshake(core)
    core.receive_datagram(data(a, 1, 1, [bytes(1000)]), ADDR, 100.0)
    assert core.take_writes().get("s", []) == []
    assert core.stats.dropped == {"too_large": 1}


def test_skipped_partial_records_are_freed() -> None:
    core = ListenerCore(MemoryStore(), CoreConfig(max_record=100_000, max_memory=1 << 20))
    a = handshake(core)
    for seq in range(1, 6):
        core.receive_datagram(frag(a, 2 * seq, seq, 100_000, 0, bytes(1000)), ADDR, 100.0)
        core.receive_datagram(data(a, 2 * seq + 1, seq, [b"small"]), ADDR, 100.0)
    assert core.memory == 0


# ------------------------------------------------ amplification, byte for byte
def smallest_datagrams() -> list[bytes]:
    """The smallest datagram of each kind that gets an answer from an unproven address."""
    return [
        wire.encode_hello(wire.Hello(1, "", "", ANON, 1400, b"")),
        wire.encode_hello(wire.Hello(2, "", "", ANON, 1400, b"x")),  # a bad cookie
        wire.encode_probe(77, 1, 1),
        wire.encode_close(77, 1),
        wire.encode_fragment(77, 1, 1, 1, 44, 0, b"x"),
        wire.encode_data(77, 1, wire.encode_batch(ANON, 1, 1, [b""])),
    ]


def test_never_more_than_three_times_the_bytes_to_an_unproven_address() -> None:
    core = ListenerCore(MemoryStore())
    for data_ in smallest_datagrams():
        core.receive_datagram(data_, OTHER, 100.0)
        out = core.datagrams_to_send(100.0)
        assert len(out) == 1, wire.decode_datagram(data_)
        sent, addr = out[0]
        assert addr == OTHER
        assert len(sent) <= 3 * len(data_), (len(sent), len(data_))
    # a fenced session's refusal goes through the same gate
    named = ListenerCore(MemoryStore())
    old = handshake(named, ADDR, producer="p")
    handshake(named, ADDR, nonce=8, producer="p")
    probe = wire.encode_probe(old.conn_id, 1, old.epoch)
    named.receive_datagram(probe, ADDR, 100.0)
    ((sent, _),) = named.datagrams_to_send(100.0)
    assert len(sent) <= 3 * len(probe)


def test_an_answer_too_big_for_the_rule_is_not_sent() -> None:
    core = ListenerCore(MemoryStore())
    tiny = wire.encode_close(77, 1)  # 16 bytes: a REFUSE (25) would be fine...
    core._send_unproven(b"x" * (3 * len(tiny) + 1), OTHER, len(tiny))  # ...this is not
    assert core.datagrams_to_send(100.0) == []
    assert core.stats.dropped == {"amplification_limit": 1}


# ------------------------------------------------ replayed handshakes
@pytest.mark.parametrize("producer", ["p", ""])
@pytest.mark.parametrize("ending", ["close", "fenced"])
def test_a_replayed_hello_cannot_fence_the_live_session(producer: str, ending: str) -> None:
    """An on-path attacker records a link's HELLO (cookie and all) and plays
    it again from the same address after that session ended, while the cookie
    is still fresh: it must not open a session that fences the live one."""
    core = ListenerCore(MemoryStore())
    core.receive_datagram(hello(nonce=1, producer=producer), ADDR, 100.0)
    ((retry, _),) = answers(core)
    assert isinstance(retry, wire.Retry)
    recorded = hello(cookie=retry.cookie, nonce=1, producer=producer)
    core.receive_datagram(recorded, ADDR, 100.0)
    ((first, _),) = answers(core)
    assert isinstance(first, wire.Accept)
    if ending == "close":
        core.receive_datagram(wire.encode_close(first.conn_id, first.epoch), ADDR, 100.5)
        live = handshake(core, ADDR, now=101.0, nonce=2, producer=producer)
    else:  # a newer session fenced the first
        live = handshake(core, ADDR, now=101.0, nonce=2, producer=producer)
    fenced = core.stats.fenced
    core.receive_datagram(recorded, ADDR, 110.0)  # within the cookie's 30 s
    assert core.datagrams_to_send(110.0) == []
    assert core.stats.dropped.get("replayed_hello") == 1
    assert core.stats.fenced == fenced and core.links == 1
    probe = wire.encode_probe(live.conn_id, 1, live.epoch)
    core.receive_datagram(probe, ADDR, 110.0)
    ((ack, _),) = answers(core, 110.0)
    assert isinstance(ack, wire.Ack)  # the live session is still the live session
    # once the cookie has expired, the replay is only a HELLO with a stale cookie
    core.receive_datagram(recorded, ADDR, 140.0)
    ((again, _),) = answers(core, 140.0)
    assert isinstance(again, wire.Retry) and core.stats.dropped["bad_cookie"] == 1
