"""Hostile input as a whole, with Hypothesis: the state machines and the store's decoders.

Why it exists: test_wire_fuzz.py proves that every wire decoder returns a
value or raises `ProtocolError`.  What a listener and a link promise under
attack is more than that, and only shows across many datagrams: that
nothing raises out of `ListenerCore.receive_datagram` or
`Sender.receive_datagram`, that every datagram is counted, that a producer's
seqs are written once each and in order, that the memory limits and the
running memory total hold, that an address not yet proven never gets more
than 3x the bytes it sent, and that `stored` never moves the wrong way.  The
store's own decoders (segment scan, epochs file, summaries, segment names)
must take any bytes a damaged or hostile directory holds.

Runs fast by default; HYPOTHESIS_PROFILE=wire-long raises the example counts
(the whole-machine tests get a quarter of them: each example is many datagrams).
"""

from __future__ import annotations

import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.secure import ADDR, ANON, OTHER, Pair, handshake
from helpers.wire import FAST, datagrams, mutated
from purelink.protocol import wire
from purelink.protocol.listener_core import CoreConfig, ListenerCore
from purelink.store import format as fmt
from purelink.testing import MemoryStore

MACHINE = settings(FAST, max_examples=max(FAST.max_examples // 4, 10))
"""Whole state machines fed many datagrams per example: fewer examples."""


# ------------------------------------------------ hostile input, as a whole
@st.composite
def hostile(draw: st.DrawFn, a: wire.Accept) -> bytes:
    """One datagram a malicious client (holding the key, if any) or a random
    source could send: aimed at the live session, mutated, or garbage."""
    kind = draw(st.sampled_from(["data", "data", "frag", "frag", "probe", "close", "any", "bad"]))
    pn = draw(st.integers(1, 1 << 20))
    if kind == "data":
        first = draw(st.integers(1, 30))
        recs = draw(st.lists(st.binary(max_size=300), min_size=1, max_size=4))
        epoch = draw(st.sampled_from([a.epoch, a.epoch, a.epoch + 1]))
        producer = draw(st.sampled_from([a.producer, a.producer, ANON + 1]))
        batch = wire.encode_batch(producer, epoch, first, recs)
        return wire.encode_data(a.conn_id, pn, batch)
    if kind == "frag":
        seq = draw(st.integers(1, 30))
        total = draw(st.sampled_from([44, 1500, 4000, 60_000, 200_000]))
        chunk = draw(st.binary(min_size=1, max_size=min(total, 1200)))
        offset = draw(st.integers(0, total - len(chunk)))
        return wire.encode_fragment(a.conn_id, pn, a.epoch, seq, total, offset, chunk)
    if kind == "probe":
        return wire.encode_probe(a.conn_id, pn, a.epoch)
    if kind == "close":
        return wire.encode_close(a.conn_id, draw(st.sampled_from([a.epoch, a.epoch + 1])))
    if kind == "any":
        return draw(datagrams())[0]
    return draw(mutated())[1]


@MACHINE
@given(st.data())
def test_core_survives_hostile_clients_and_keeps_its_promises(
    data_: st.DataObject,
) -> None:
    """Whatever a client sends: nothing raises; every datagram is counted; what
    is written for the producer is contiguous in seq, each seq once; memory
    is bounded and its running total exact; an unproven address never gets
    more than 3x what it sent."""
    cfg = CoreConfig(max_reorder=20_000, max_memory=50_000, max_record=100_000)
    store = MemoryStore()
    core = ListenerCore(store, cfg)
    a = handshake(core)
    received = 0  # the producer's last seq written
    to_other = from_other = 0
    for i in range(data_.draw(st.integers(1, 60))):
        datagram = data_.draw(hostile(a))
        addr = data_.draw(st.sampled_from([ADDR, ADDR, ADDR, OTHER]))
        core.receive_datagram(datagram, addr, 100.0 + i * 0.01)
        if addr == OTHER:
            from_other += len(datagram)
        assert core.stats.datagrams == 2 + i + 1
        for _, writes in core.take_writes().items():
            for batch, header in writes:
                assert header.first_seq == received + 1, "contiguous, never twice"
                received = header.last_seq
                wire.verify_batch(batch)
        for stream in list(store.batches):
            core.synced(stream, store.sync(stream))
        for sent, to in core.datagrams_to_send(100.0 + i * 0.01):
            if to == OTHER:
                to_other += len(sent)
        held = [p.memory for p in core.producers()]
        assert core.memory == sum(held), "the running total is exact"
        # and the batch a producer needs next, which may always be put together
        assert core.memory <= cfg.max_memory + max(cfg.max_record, 0xFFFF + 2) + wire.BATCH_HEADER
        assert all(p.held_bytes <= cfg.max_reorder for p in core.producers())
        assert to_other <= 3 * from_other


@MACHINE
@given(st.data())
def test_sender_survives_any_answer(data_: st.DataObject) -> None:
    """A sender fed arbitrary and mutated answers never raises, and its stored
    seq never passes what it pushed nor goes backwards."""
    pair = Pair()
    pair.settle()
    s = pair.sender
    s.push([b"x%d" % i for i in range(20)])
    pair.step()
    last = s.stored
    for _ in range(data_.draw(st.integers(1, 30))):
        if data_.draw(st.booleans()):
            answer = data_.draw(mutated())[1]
        else:
            answer = data_.draw(datagrams())[0]
        s.receive_datagram(answer, pair.now)
        s.datagrams_to_send(pair.now)
        assert last <= s.stored <= s.pushed
        last = s.stored


# ------------------------------------------------ the store's decoders
@FAST
@given(st.binary(max_size=200))
def test_epochs_decoder_takes_any_bytes(raw: bytes) -> None:
    epochs, valid, records, owners = fmt.decode_epochs(raw)
    assert valid == records * fmt.EPOCH_RECORD <= len(raw)
    assert fmt.decode_epochs(raw[:valid]) == (epochs, valid, records, owners)


@FAST
@given(st.binary(max_size=200), st.data())
def test_summary_decoder_takes_any_bytes(raw: bytes, data_: st.DataObject) -> None:
    assert fmt.decode_summary(raw) is None or len(raw) >= 36
    good = fmt.encode_summary(1, 100, 5, [(ANON, 1, 4)])
    assert fmt.decode_summary(good) == fmt.Summary(1, 100, 5, ((ANON, 1, 4),))
    at = data_.draw(st.integers(0, len(good) - 1))
    bad = bytearray(good)
    bad[at] ^= 1 << data_.draw(st.integers(0, 7))
    assert fmt.decode_summary(bytes(bad)) is None  # every one-bit error is caught


@FAST
@given(st.text(max_size=30))
def test_segment_name_decoder_takes_any_text(name: str) -> None:
    base = fmt.parse_segment_name(name)
    assert base is None or (base >= 1 and fmt.segment_name(base) == name)


@FAST
@given(st.lists(st.one_of(st.binary(max_size=120), st.just(b"")), max_size=6), st.data())
def test_segment_scanner_takes_any_file(chunks: list[bytes], data_: st.DataObject) -> None:
    """A hostile or damaged segment file: the scan yields only verified batches
    with contiguous positions and stops with a reason; it never raises."""
    good = []
    position = 1
    for i in range(data_.draw(st.integers(0, 3))):
        batch = wire.encode_batch(ANON, 1, 1 + i, [b"r%d" % i])
        good.append(wire.position_bytes(position) + batch[8:])
        position += 1
    raw = b"".join(good) + b"".join(chunks)
    with tempfile.TemporaryFile() as f:
        f.write(raw)
        f.flush()
        state = fmt.ScanState(0, 1)
        seen = [h for _, _, h in fmt.scan_batches(f.fileno(), state, len(raw))]
        assert [h.position for h in seen] == list(range(1, len(seen) + 1))
        assert len(seen) >= len(good)
        assert state.offset <= len(raw)
        assert state.problem in (None, fmt.INCOMPLETE, fmt.CORRUPT)
        assert (state.problem is None) == (state.offset == len(raw))
        fmt.has_valid_successor(f.fileno(), state.offset, len(raw), state.position)
