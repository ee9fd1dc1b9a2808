"""The listener's protocol core, stepped by hand: handshake, cookies,
anti-amplification, sessions, bad input.  No sockets, no clock."""

from __future__ import annotations

import pytest
from crc32c import crc32c

from purelink.protocol import wire
from purelink.protocol.core_state import MOVES, SessionState
from purelink.protocol.listener_core import CoreConfig, ListenerCore, named_producer_id
from purelink.testing import MemoryStore

ADDR = ("127.0.0.1", 5000)
OTHER = ("127.0.0.1", 5001)
ANON = (1 << 63) | 12345


def hello(cookie: bytes = b"", nonce: int = 7, producer: str = "", stream: str = "s") -> bytes:
    pid = 0 if producer else ANON
    return wire.encode_hello(wire.Hello(nonce, stream, producer, pid, 1400, cookie))


def handshake(
    core: ListenerCore,
    now: float = 100.0,
    others: list[tuple[wire.Message, tuple[str, int]]] | None = None,
    **kw: object,
) -> wire.Accept:
    """A HELLO, its RETRY, the HELLO with the cookie, its ACCEPT (returned); what
    else the last step sent goes to `others`."""
    if others is None:
        others = []
    core.receive_datagram(hello(**kw), ADDR, now)  # type: ignore[arg-type]
    ((retry_bytes, _),) = core.datagrams_to_send(now)
    retry = wire.decode_datagram(retry_bytes)
    assert isinstance(retry, wire.Retry)
    core.receive_datagram(hello(cookie=retry.cookie, **kw), ADDR, now)  # type: ignore[arg-type]
    out = [(wire.decode_datagram(data), addr) for data, addr in core.datagrams_to_send(now)]
    (accept,) = [m for m, addr in out if isinstance(m, wire.Accept) and addr == ADDR]
    assert isinstance(accept, wire.Accept)
    others.extend(out)
    return accept


@pytest.fixture
def core() -> ListenerCore:
    return ListenerCore(MemoryStore())


def test_hello_without_cookie_gets_a_small_retry_and_no_state(core: ListenerCore) -> None:
    h = hello()
    core.receive_datagram(h, ADDR, 100.0)
    out = core.datagrams_to_send(100.0)
    assert len(out) == 1
    data, addr = out[0]
    assert addr == ADDR
    assert len(data) <= 3 * len(h)  # anti-amplification, byte for byte
    assert isinstance(wire.decode_datagram(data), wire.Retry)
    assert core.links == 0
    assert core.stats.retries == 1


def test_cookie_is_bound_to_the_address_and_expires(core: ListenerCore) -> None:
    core.receive_datagram(hello(), ADDR, 100.0)
    retry = wire.decode_datagram(core.datagrams_to_send(100.0)[0][0])
    assert isinstance(retry, wire.Retry)
    # replayed from another address: not accepted
    core.receive_datagram(hello(cookie=retry.cookie), OTHER, 100.0)
    out = core.datagrams_to_send(100.0)
    assert isinstance(wire.decode_datagram(out[0][0]), wire.Retry)
    assert core.links == 0
    # too late
    core.receive_datagram(hello(cookie=retry.cookie), ADDR, 100.0 + 31)
    out = core.datagrams_to_send(131.0)
    assert isinstance(wire.decode_datagram(out[0][0]), wire.Retry)
    assert core.stats.dropped["bad_cookie"] == 2
    assert core.links == 0


def test_handshake_and_a_retransmitted_hello(core: ListenerCore) -> None:
    accept = handshake(core)
    assert accept.stored == 0 and accept.epoch == 1
    # the same HELLO again (our ACCEPT was lost): the same session, not a new epoch
    core.receive_datagram(hello(cookie=b"x" * 20), ADDR, 100.0)
    again = wire.decode_datagram(core.datagrams_to_send(100.0)[0][0])
    assert again == accept
    assert core.links == 1


def test_data_in_order_is_written_and_acked_once_per_drain(core: ListenerCore) -> None:
    a = handshake(core)
    for i in range(3):
        batch = wire.encode_batch(a.producer, a.epoch, 1 + 2 * i, [b"a", b"b"])
        core.receive_datagram(wire.encode_data(a.conn_id, i + 1, batch), ADDR, 100.0)
    writes = core.take_writes()
    assert [h.first_seq for _, h in writes["s"]] == [1, 3, 5]
    out = core.datagrams_to_send(100.001)
    assert len(out) == 1  # one answer for the whole drain
    ack = wire.decode_datagram(out[0][0])
    assert isinstance(ack, wire.Ack)
    assert (ack.received, ack.stored, ack.largest_pn) == (6, 0, 3)
    core.written("s", 6)
    core.synced("s", 6)
    ack = wire.decode_datagram(core.datagrams_to_send(100.002)[0][0])
    assert isinstance(ack, wire.Ack)
    assert ack.stored == 6


def test_out_of_order_is_held_then_released_and_duplicates_dropped(core: ListenerCore) -> None:
    a = handshake(core)
    b1 = wire.encode_batch(a.producer, a.epoch, 1, [b"1"])
    b2 = wire.encode_batch(a.producer, a.epoch, 2, [b"2"])
    core.receive_datagram(wire.encode_data(a.conn_id, 1, b2), ADDR, 100.0)
    assert core.take_writes() == {"s": []}
    ack = wire.decode_datagram(core.datagrams_to_send(100.0)[0][0])
    assert isinstance(ack, wire.Ack)
    assert ack.received == 0 and ack.ranges == ((2, 2),)
    core.receive_datagram(wire.encode_data(a.conn_id, 2, b1), ADDR, 100.0)
    core.receive_datagram(wire.encode_data(a.conn_id, 3, b1), ADDR, 100.0)
    writes = core.take_writes()["s"]
    assert [h.first_seq for _, h in writes] == [1, 2]
    assert core.stats.duplicates == 1


def test_unknown_session_gets_a_small_refusal(core: ListenerCore) -> None:
    batch = wire.encode_batch(ANON, 1, 1, [b"x"])
    data = wire.encode_data(999, 1, batch)
    core.receive_datagram(data, ADDR, 100.0)
    ((out, _),) = core.datagrams_to_send(100.0)
    refuse = wire.decode_datagram(out)
    assert isinstance(refuse, wire.Refuse) and refuse.reason == wire.RefuseReason.UNKNOWN
    assert len(out) <= 3 * len(data)
    assert core.stats.dropped == {"unknown_conn": 1}


def test_datagram_of_a_session_from_another_address_is_dropped(core: ListenerCore) -> None:
    a = handshake(core)
    batch = wire.encode_batch(a.producer, a.epoch, 1, [b"x"])
    core.receive_datagram(wire.encode_data(a.conn_id, 1, batch), OTHER, 100.0)
    assert core.stats.dropped == {"wrong_address": 1}
    assert core.take_writes() == {}


def test_new_session_fences_the_old(core: ListenerCore) -> None:
    old = handshake(core, producer="api-1")
    assert old.producer == named_producer_id("api-1")
    told: list[tuple[wire.Message, tuple[str, int]]] = []
    new = handshake(core, producer="api-1", nonce=8, others=told)
    assert new.epoch == old.epoch + 1
    # the old session is told at once, at its address, before it sends anything
    (refused,) = [(m, a) for m, a in told if isinstance(m, wire.Refuse)]
    assert refused == (wire.Refuse(old.conn_id, 0, old.epoch, wire.RefuseReason.FENCED), ADDR)
    batch = wire.encode_batch(old.producer, old.epoch, 1, [b"late"])
    core.receive_datagram(wire.encode_data(old.conn_id, 5, batch), ADDR, 100.0)
    ((out, _),) = core.datagrams_to_send(100.0)
    refuse = wire.decode_datagram(out)
    assert isinstance(refuse, wire.Refuse) and refuse.reason == wire.RefuseReason.FENCED
    assert core.stats.dropped["stale_epoch"] == 1
    assert core.take_writes() == {}


def test_ended_sessions_are_remembered_only_up_to_the_configured_numbers() -> None:
    """A producer fenced again and again (or a flood of links) must not grow
    the core: it remembers the newest `fenced_memory` ended sessions, to
    tell their late datagrams FENCED, and the newest `hello_memory` HELLOs
    spent; older ones are forgotten, their late datagrams UNKNOWN."""
    core = ListenerCore(MemoryStore(), CoreConfig(fenced_memory=3, hello_memory=2))
    sessions = [handshake(core, producer="api-1", nonce=n) for n in range(1, 8)]
    assert len(core._gone) == 3 and len(core._spent) == 2
    core.datagrams_to_send(100.0)  # (the REFUSEs that told each fenced session)

    def late(a: wire.Accept) -> wire.RefuseReason:
        batch = wire.encode_batch(a.producer, a.epoch, 1, [b"late"])
        core.receive_datagram(wire.encode_data(a.conn_id, 9, batch), ADDR, 100.0)
        ((out, _),) = core.datagrams_to_send(100.0)
        refuse = wire.decode_datagram(out)
        assert isinstance(refuse, wire.Refuse)
        return refuse.reason

    assert late(sessions[-2]) == wire.RefuseReason.FENCED  # among the newest three ended
    assert late(sessions[0]) == wire.RefuseReason.UNKNOWN  # forgotten
    assert core.stats.dropped == {"stale_epoch": 1, "unknown_conn": 1}
    assert core.take_writes() == {}


def test_bad_stream_and_bad_producer_are_refused(core: ListenerCore) -> None:
    bad_stream, bad_producer = wire.RefuseReason.BAD_STREAM, wire.RefuseReason.BAD_PRODUCER
    for kw, reason in (
        ({"stream": "../x"}, bad_stream),
        ({"stream": ".hidden"}, bad_stream),
        ({"producer": "a/b"}, bad_producer),
    ):
        core.receive_datagram(hello(**kw), ADDR, 100.0)  # type: ignore[arg-type]
        retry = wire.decode_datagram(core.datagrams_to_send(100.0)[0][0])
        assert isinstance(retry, wire.Retry)
        core.receive_datagram(hello(cookie=retry.cookie, **kw), ADDR, 100.0)  # type: ignore[arg-type]
        refuse = wire.decode_datagram(core.datagrams_to_send(100.0)[0][0])
        assert isinstance(refuse, wire.Refuse)
        assert refuse.reason == reason
    assert core.links == 0


def test_a_refusal_names_what_was_wrong(core: ListenerCore) -> None:
    """Each refusal of a HELLO says which rule or limit it broke, so a link can
    tell its user ("max_links", not "limit"); the counters keep their names."""
    small = wire.encode_hello(wire.Hello(3, "s", "", ANON, 100, b""))
    core.receive_datagram(small, ADDR, 100.0)
    retry = wire.decode_datagram(core.datagrams_to_send(100.0)[0][0])
    assert isinstance(retry, wire.Retry)
    core.receive_datagram(
        wire.encode_hello(wire.Hello(3, "s", "", ANON, 100, retry.cookie)), ADDR, 100.0
    )
    refuse = wire.decode_datagram(core.datagrams_to_send(100.0)[0][0])
    assert isinstance(refuse, wire.Refuse)
    assert refuse.reason == wire.RefuseReason.BAD_DATAGRAM_SIZE
    assert wire.RefuseReason.NAMES[refuse.reason] == "bad_datagram_size"
    assert core.stats.dropped == {"bad_request": 1}


def test_link_limit(core: ListenerCore) -> None:
    limited = ListenerCore(MemoryStore(), CoreConfig(max_links=1))
    handshake(limited)
    limited.receive_datagram(hello(nonce=9), OTHER, 100.0)
    retry = wire.decode_datagram(limited.datagrams_to_send(100.0)[0][0])
    assert isinstance(retry, wire.Retry)
    limited.receive_datagram(hello(nonce=9, cookie=retry.cookie), OTHER, 100.0)
    refuse = wire.decode_datagram(limited.datagrams_to_send(100.0)[0][0])
    assert isinstance(refuse, wire.Refuse) and refuse.reason == wire.RefuseReason.MAX_LINKS


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "truncated"),
        (b"XX" + bytes(20), "bad_magic"),
        (b"PL\x09" + bytes(20), "bad_version"),
        (hello()[:-1] + b"\x00", "bad_checksum"),
        (hello()[:-5] + hello()[-4:], "bad_checksum"),
    ],
)
def test_garbage_is_dropped_by_reason(core: ListenerCore, data: bytes, reason: str) -> None:
    core.receive_datagram(data, ADDR, 100.0)
    assert core.stats.dropped == {reason: 1}
    assert core.datagrams_to_send(100.0) == []


def test_answers_from_a_link_are_refused_as_wrong_direction(core: ListenerCore) -> None:
    ack = wire.Ack(1, 1, 0, 0, 0, 0, 0, (), ())
    core.receive_datagram(wire.encode_ack(ack), ADDR, 100.0)
    assert core.stats.dropped == {"wrong_direction": 1}


def test_oversized_large_record_is_dropped(core: ListenerCore) -> None:
    """A batch in pieces is refused at its first piece when it is longer than any
    batch may be, and once it is whole when one of its records is over max_record."""
    small = ListenerCore(MemoryStore(), CoreConfig(max_record=1000))
    a = handshake(small)
    huge = wire.encode_fragment(a.conn_id, 1, a.epoch, 1, (1 << 20) + 45, 0, b"x" * 1000)
    small.receive_datagram(huge, ADDR, 100.0)
    assert small.stats.dropped == {"too_large": 1}
    batch = wire.encode_batch(a.producer, a.epoch, 1, [b"y" * 5000])
    pieces = wire.encode_pieces(a.conn_id, 2, a.epoch, 1, batch, 0, len(batch), 1000)
    for piece in pieces:
        small.receive_datagram(piece, ADDR, 100.0)
    assert small.stats.dropped == {"too_large": 2}
    assert not any(small.take_writes().values())


def test_a_session_fenced_while_waiting_for_a_sync_is_never_accepted(core: ListenerCore) -> None:
    a = handshake(core, producer="p")
    batch = wire.encode_batch(a.producer, a.epoch, 1, [b"x"])
    core.receive_datagram(wire.encode_data(a.conn_id, 1, batch), ADDR, 100.0)
    core.written("s", 1)  # written, not yet synced: a new session has to wait
    core.datagrams_to_send(100.0)
    accepts = []
    for nonce in (20, 21):  # two new sessions in a row; the first is fenced by the second
        core.receive_datagram(hello(producer="p", nonce=nonce), ADDR, 100.0)
        retry = wire.decode_datagram(core.datagrams_to_send(100.0)[0][0])
        assert isinstance(retry, wire.Retry)
        core.receive_datagram(hello(producer="p", nonce=nonce, cookie=retry.cookie), ADDR, 100.0)
        out = [wire.decode_datagram(d) for d, _ in core.datagrams_to_send(100.0)]
        if nonce == 20:  # waiting for the sync; the old session is told it is fenced
            assert out == [wire.Refuse(a.conn_id, 0, a.epoch, wire.RefuseReason.FENCED)]
        else:  # so is the waiting session 20, at its HELLO's nonce
            assert out == [wire.Refuse(0, 20, 0, wire.RefuseReason.FENCED)]
    core.synced("s", 1)
    for data, _ in core.datagrams_to_send(100.0):
        msg = wire.decode_datagram(data)
        if isinstance(msg, wire.Accept):
            accepts.append(msg.nonce)
    assert accepts == [21]


def test_a_session_that_expires_while_waiting_for_a_sync_is_never_accepted() -> None:
    core = ListenerCore(MemoryStore(), CoreConfig(idle_timeout=60.0))
    a = handshake(core, producer="p")
    batch = wire.encode_batch(a.producer, a.epoch, 1, [b"x"])
    core.receive_datagram(wire.encode_data(a.conn_id, 1, batch), ADDR, 100.0)
    core.take_writes()
    core.written("s", 1)  # written, not yet synced: the new session waits
    core.datagrams_to_send(100.0)
    core.receive_datagram(hello(producer="p", nonce=20), ADDR, 100.0)
    retry = wire.decode_datagram(core.datagrams_to_send(100.0)[0][0])
    assert isinstance(retry, wire.Retry)
    core.receive_datagram(hello(producer="p", nonce=20, cookie=retry.cookie), ADDR, 100.0)
    core.datagrams_to_send(100.0)
    assert core.links == 1  # the waiting one
    # long after, another HELLO sweeps it: it expires while still waiting
    core.receive_datagram(hello(nonce=50), OTHER, 300.0)
    retry = wire.decode_datagram(core.datagrams_to_send(300.0)[0][0])
    assert isinstance(retry, wire.Retry)
    core.receive_datagram(hello(nonce=50, cookie=retry.cookie), OTHER, 300.0)
    core.datagrams_to_send(300.0)
    assert core.links == 1 and core.stats.dropped["session_expired"] == 1  # the new one
    core.synced("s", 1)
    out = [wire.decode_datagram(d) for d, _ in core.datagrams_to_send(300.0)]
    assert not any(isinstance(m, wire.Accept) for m in out)


def test_a_session_moves_only_as_the_table_says(core: ListenerCore) -> None:
    """The listener core's one setter refuses any move outside MOVES: a bug in
    the core raises, it never passes silently."""
    a = handshake(core)
    conn = core._conns[a.conn_id]
    assert conn.state is SessionState.OPEN
    assert (SessionState.OPEN, SessionState.WAITING) not in MOVES
    with pytest.raises(AssertionError, match="OPEN -> WAITING"):
        core._move(conn, SessionState.WAITING)
    core.receive_datagram(wire.encode_close(a.conn_id, a.epoch), ADDR, 100.0)
    assert conn.state is SessionState.CLOSED and core.links == 0
    for state in SessionState:  # an ended session never moves again
        with pytest.raises(AssertionError, match="illegal session move"):
            core._move(conn, state)


def test_packet_numbers_are_per_session(core: ListenerCore) -> None:
    old = handshake(core, producer="p")
    core.receive_datagram(hello(producer="p", nonce=8), ADDR, 100.0)
    retry = wire.decode_datagram(core.datagrams_to_send(100.0)[0][0])
    assert isinstance(retry, wire.Retry)
    batch = wire.encode_batch(old.producer, old.epoch, 1, [b"x"])
    # in one drain: the old session's datagram, then the new session's HELLO
    core.receive_datagram(wire.encode_data(old.conn_id, 5000, batch), ADDR, 100.0)
    core.receive_datagram(hello(producer="p", nonce=8, cookie=retry.cookie), ADDR, 100.0)
    core.take_writes()
    core.written("s", 1)
    core.synced("s", 1)  # the new session waited for the old one's record to be durable
    out = [wire.decode_datagram(d) for d, _ in core.datagrams_to_send(100.0)]
    new = next(m for m in out if isinstance(m, wire.Accept))
    batch = wire.encode_batch(new.producer, new.epoch, 2, [b"y"])
    core.receive_datagram(wire.encode_data(new.conn_id, 1, batch), ADDR, 100.0)
    acks = [wire.decode_datagram(d) for d, _ in core.datagrams_to_send(100.0)]
    mine = [a for a in acks if isinstance(a, wire.Ack) and a.conn_id == new.conn_id]
    assert [a.largest_pn for a in mine] == [1]


def test_nonzero_padding_is_dropped(core: ListenerCore) -> None:
    a = handshake(core)
    batch = wire.encode_batch(a.producer, a.epoch, 1, [b"x"])
    padded = bytearray(wire.encode_data(a.conn_id, 1, batch, 200))
    padded[150] = 1  # in the padding; re-seal so only the padding is wrong
    body = bytes(padded[:-4])
    data = body + crc32c(body).to_bytes(4, "little")
    core.receive_datagram(data, ADDR, 100.0)
    assert core.stats.dropped == {"malformed": 1}
    assert core.take_writes() == {}


def test_idle_sessions_expire_lazily_and_the_link_resumes() -> None:
    store = MemoryStore()
    core = ListenerCore(store, CoreConfig(idle_timeout=60.0, max_links=2))
    a = handshake(core, now=100.0)
    batch = wire.encode_batch(a.producer, a.epoch, 1, [b"x"])
    core.receive_datagram(wire.encode_data(a.conn_id, 1, batch), ADDR, 100.0)
    store.append("s", core.take_writes()["s"])
    core.written("s", 1)
    core.synced("s", 1)
    core.datagrams_to_send(100.0)
    assert core.links == 1
    # much later, another link's (proven) HELLO: the idle session is swept
    core.receive_datagram(hello(nonce=50), OTHER, 200.0)
    retry = wire.decode_datagram(core.datagrams_to_send(200.0)[0][0])
    assert isinstance(retry, wire.Retry)
    core.receive_datagram(hello(nonce=50, cookie=retry.cookie), OTHER, 200.0)
    core.datagrams_to_send(200.0)
    assert core.links == 1  # only the new one
    assert core.stats.dropped["session_expired"] == 1
    # the old link comes back: REFUSE(unknown), then a new session that resumes at seq 1
    batch = wire.encode_batch(a.producer, a.epoch, 2, [b"y"])
    core.receive_datagram(wire.encode_data(a.conn_id, 2, batch), ADDR, 201.0)
    out = [wire.decode_datagram(d) for d, _ in core.datagrams_to_send(201.0)]
    assert any(isinstance(m, wire.Refuse) and m.reason == wire.RefuseReason.UNKNOWN for m in out)
    again = handshake(core, now=201.0, nonce=99)
    assert again.stored == 1 and again.epoch > a.epoch


def _ship_one(core: ListenerCore, store: MemoryStore, now: float, **kw: object) -> wire.Accept:
    """A session that sends one record, which is written and synced."""
    a = handshake(core, now=now, **kw)
    batch = wire.encode_batch(a.producer, a.epoch, a.stored + 1, [b"x"])
    core.receive_datagram(wire.encode_data(a.conn_id, 1, batch), ADDR, now)
    last = store.append("s", core.take_writes()["s"])
    core.written("s", last)
    core.synced("s", store.sync("s"))
    core.datagrams_to_send(now)
    return a


def test_the_store_forgets_an_anonymous_producer_whose_link_said_close() -> None:
    """One short-lived anonymous link after another must not leave one producer
    entry each in the store for ever: after a CLOSE with everything stored, the
    core tells the store to let it go.  Not so for a named producer, nor for an
    anonymous one that closes with records unstored or whose session only expired
    (that link may come back and must find its state)."""
    store = MemoryStore()
    core = ListenerCore(store, CoreConfig(idle_timeout=60.0))
    a = _ship_one(core, store, 100.0)
    core.receive_datagram(wire.encode_close(a.conn_id, a.epoch), ADDR, 100.0)
    assert store.forgotten == {("s", a.producer)}
    assert core.stats.forgotten == 1
    assert store.producer_state("s", a.producer) == (0, 0)
    assert [p for _, p, _, _ in store.records("s")] == [a.producer]  # its record stays

    named = _ship_one(core, store, 101.0, nonce=8, producer="api")
    core.receive_datagram(wire.encode_close(named.conn_id, named.epoch), ADDR, 101.0)
    assert ("s", named.producer) not in store.forgotten

    # an anonymous link that closes before its record is stored keeps its state
    other = (1 << 63) | 777
    hello2 = wire.Hello(9, "s", "", other, 1400, b"")
    core.receive_datagram(wire.encode_hello(hello2), ADDR, 102.0)
    retry = wire.decode_datagram(core.datagrams_to_send(102.0)[0][0])
    assert isinstance(retry, wire.Retry)
    hello2 = wire.Hello(9, "s", "", other, 1400, retry.cookie)
    core.receive_datagram(wire.encode_hello(hello2), ADDR, 102.0)
    b = wire.decode_datagram(core.datagrams_to_send(102.0)[0][0])
    assert isinstance(b, wire.Accept)
    batch = wire.encode_batch(b.producer, b.epoch, 1, [b"y"])
    core.receive_datagram(wire.encode_data(b.conn_id, 1, batch), ADDR, 102.0)
    store.append("s", core.take_writes()["s"])
    core.receive_datagram(wire.encode_close(b.conn_id, b.epoch), ADDR, 102.0)
    assert ("s", other) not in store.forgotten
    assert core.stats.forgotten == 1


def test_an_expired_anonymous_session_is_not_forgotten_by_the_store() -> None:
    store = MemoryStore()
    core = ListenerCore(store, CoreConfig(idle_timeout=60.0))
    a = _ship_one(core, store, 100.0)
    # much later another link's (proven) HELLO sweeps the idle session away
    core.receive_datagram(hello(nonce=50), OTHER, 200.0)
    retry = wire.decode_datagram(core.datagrams_to_send(200.0)[0][0])
    assert isinstance(retry, wire.Retry)
    core.receive_datagram(hello(nonce=50, cookie=retry.cookie), OTHER, 200.0)
    assert core.stats.dropped["session_expired"] == 1
    assert not store.forgotten
    assert store.producer_state("s", a.producer)[1] == 1  # the link can still resume


def test_an_anonymous_producer_that_never_stored_is_forgotten_however_it_ends() -> None:
    """A flood of HELLOs under fresh anonymous ids, each session ended without a
    CLOSE and without a record (TCP connections dropped, UDP sessions expired),
    must not leave one producer entry each in the store: there is nothing to
    deduplicate against.  A producer with a record stored keeps its entry."""
    store = MemoryStore()
    core = ListenerCore(store, CoreConfig(idle_timeout=60.0))
    pids = [(1 << 63) | (1000 + i) for i in range(100)]
    for i, pid in enumerate(pids):  # over TCP: proven, no cookie; then the connection drops
        peer = ("tcp:127.0.0.1", 40_000 + i)
        core.receive_datagram(
            wire.encode_hello(wire.Hello(i + 1, "s", "", pid, 1400, b"")), peer, 100.0, True
        )
        accept = wire.decode_datagram(core.datagrams_to_send(100.0)[0][0])
        assert isinstance(accept, wire.Accept) and accept.producer == pid
        core.disconnected(peer)
    assert store.forgotten == {("s", pid) for pid in pids}
    assert core.stats.forgotten == 100
    assert not list(core.producers())
    assert all(store.producer_state("s", pid) == (0, 0) for pid in pids)

    # over UDP, sessions that only expired: forgotten too if they stored nothing
    kept = _ship_one(core, store, 100.0)  # stores seq 1
    other = (1 << 63) | 4242
    core.receive_datagram(
        wire.encode_hello(wire.Hello(60, "s", "", other, 1400, b"")), OTHER, 100.0
    )
    retry = wire.decode_datagram(core.datagrams_to_send(100.0)[0][0])
    assert isinstance(retry, wire.Retry)
    core.receive_datagram(
        wire.encode_hello(wire.Hello(60, "s", "", other, 1400, retry.cookie)), OTHER, 100.0
    )
    assert isinstance(wire.decode_datagram(core.datagrams_to_send(100.0)[0][0]), wire.Accept)
    # much later a HELLO sweeps both idle sessions away
    third = ("127.0.0.1", 5002)
    core.receive_datagram(hello(nonce=70), third, 300.0)
    retry = wire.decode_datagram(core.datagrams_to_send(300.0)[0][0])
    assert isinstance(retry, wire.Retry)
    core.receive_datagram(hello(nonce=70, cookie=retry.cookie), third, 300.0)
    assert core.stats.dropped["session_expired"] == 2
    assert ("s", other) in store.forgotten  # never stored a record
    assert ("s", kept.producer) not in store.forgotten  # stored seq 1: may come back
    assert store.producer_state("s", kept.producer)[1] == 1


def test_a_forgotten_link_that_comes_back_starts_again_from_seq_1() -> None:
    store = MemoryStore()
    core = ListenerCore(store)
    pid = (1 << 63) | 99
    peer = ("tcp:127.0.0.1", 40_001)
    core.receive_datagram(
        wire.encode_hello(wire.Hello(1, "s", "", pid, 1400, b"")), peer, 1.0, True
    )
    first = wire.decode_datagram(core.datagrams_to_send(1.0)[0][0])
    assert isinstance(first, wire.Accept)
    core.disconnected(peer)  # the connection broke before any record went out
    assert ("s", pid) in store.forgotten
    again_peer = ("tcp:127.0.0.1", 40_002)
    back = wire.Hello(2, "s", "", pid, 1400, b"", epoch=first.epoch)
    core.receive_datagram(wire.encode_hello(back), again_peer, 2.0, True)
    accept = wire.decode_datagram(core.datagrams_to_send(2.0)[0][0])
    assert isinstance(accept, wire.Accept)
    assert (accept.stored, accept.received) == (0, 0)
    batch = wire.encode_batch(pid, accept.epoch, 1, [b"a", b"b"])
    core.receive_datagram(wire.encode_data(accept.conn_id, 1, batch), again_peer, 2.0)
    last = store.append("s", core.take_writes()["s"])
    core.written("s", last)
    core.synced("s", store.sync("s"))
    assert [r for _, p, _, r in store.records("s") if p == pid] == [b"a", b"b"]
    assert ("s", pid) not in store.forgotten  # known again once it wrote


def test_a_close_before_the_sync_forgets_the_producer_once_synced() -> None:
    """close(timeout) gave up with a record written but not durable: the CLOSE
    comes first, the sync later; the producer is let go when the sync lands."""
    store = MemoryStore()
    core = ListenerCore(store)
    a = handshake(core, now=100.0)
    batch = wire.encode_batch(a.producer, a.epoch, 1, [b"x"])
    core.receive_datagram(wire.encode_data(a.conn_id, 1, batch), ADDR, 100.0)
    last = store.append("s", core.take_writes()["s"])
    core.written("s", last)
    core.receive_datagram(wire.encode_close(a.conn_id, a.epoch), ADDR, 100.0)
    assert not store.forgotten and core.stats.forgotten == 0  # not durable yet
    core.synced("s", store.sync("s"))
    assert store.forgotten == {("s", a.producer)}
    assert core.stats.forgotten == 1
    assert not list(core.producers())


def test_a_session_keeps_no_dict(core: ListenerCore) -> None:
    """One Session is made per short link: slots, no __dict__ beside it."""
    handshake(core)
    (session,) = core._conns.values()
    assert not hasattr(session, "__dict__")
    assert hash(session.state) == object.__hash__(session.state)  # hashed in C, by identity
