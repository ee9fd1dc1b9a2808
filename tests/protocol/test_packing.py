"""Packing (protocol/packing.py) and putting pieces back together (receiver.Partial).

What must hold: wire bytes / payload bytes at most 1.05 for 1,000-byte
records and at most 1.10 for mixes of sizes; datagrams full (all of a run of
pieces the same size, as GSO wants, nothing padded); a resend at a smaller
path size carries the same bytes in smaller pieces; and the listener's
reassembly gets the batch back whatever the order and the duplicates.
"""

from __future__ import annotations

import itertools
import math
import random
from array import array
from collections.abc import Callable

import pytest

from helpers.sim import assert_exactly_once
from purelink.protocol import wire
from purelink.protocol.listener_core import CoreConfig
from purelink.protocol.packing import BATCH_LIMIT, Flight, Packer
from purelink.protocol.receiver import Partial
from purelink.testing import FakeNet, Simulation


def mix(name: str, rng: random.Random, n: int) -> list[bytes]:
    """n records of one of the size mixes the ratio is measured over."""
    sizes: dict[str, Callable[[], int]] = {
        "1000": lambda: 1000,
        "61": lambda: 61,
        "uniform 0-20K": lambda: rng.randrange(0, 20_001),
        "log-uniform 1-20K": lambda: int(math.exp(rng.uniform(0, math.log(20_000)))),
        "200-2K": lambda: rng.randrange(200, 2_001),
        "bimodal 10/10K": lambda: rng.choice((10, 10_000)),
        "0-20K with 1 % of 100K-1M": lambda: (
            rng.randrange(100_000, 1_000_001) if rng.random() < 0.01 else rng.randrange(0, 20_001)
        ),
    }
    size = sizes[name]
    return [rng.randbytes(size()) for _ in range(n)]


MIXES = [
    "1000",
    "61",
    "uniform 0-20K",
    "log-uniform 1-20K",
    "200-2K",
    "bimodal 10/10K",
    "0-20K with 1 % of 100K-1M",
]


def pack_all(
    records: list[bytes], size: int = 1400, count: int = 64
) -> tuple[list[bytes], dict[int, Flight], Packer]:
    """Every record packed at once: the datagrams of first transmissions."""
    packer = Packer(size)
    packer.start(7, 5, 1, 1)
    lens = array("H", (min(len(r), 0xFFFF) for r in records))
    out: list[bytes] = []
    flights: dict[int, Flight] = {}
    pn = 0
    while packer.open or packer.next_seq <= len(records):
        pn, _ = packer.fill(records, lens, 1, len(records), pn, 0.0, count, 1 << 30, out, flights)
    return out, flights, packer


def test_1000_byte_records_cost_at_most_5_percent() -> None:
    records = mix("1000", random.Random(1), 20_000)
    out, _, packer = pack_all(records)
    ratio = sum(map(len, out)) / packer.payload
    assert packer.payload == 20_000_000
    assert ratio <= 1.05, ratio
    # and it is what the format says: 40 bytes a datagram, 44 a
    # batch, 2 a record; only the last piece of each batch is short
    per_datagram = wire.FRAGMENT_OVERHEAD
    expected = 20_000 * 1002 + packer.batches * wire.BATCH_HEADER + len(out) * per_datagram
    assert sum(map(len, out)) == expected
    assert len(out) <= math.ceil((20_000 * 1002 + packer.batches * 44) / (1400 - per_datagram)) + (
        packer.batches  # at most one short piece a batch
    )


@pytest.mark.parametrize("name", MIXES)
def test_every_mix_costs_at_most_10_percent(name: str) -> None:
    rng = random.Random(len(name))
    records = mix(name, rng, 3000 if "1M" not in name else 1500)
    out, _, packer = pack_all(records)
    ratio = sum(map(len, out)) / packer.payload
    assert ratio <= 1.10, (name, ratio)
    if name != "61":  # 2 bytes of length per 61-byte record are 3.3 % on their own
        assert ratio <= 1.05, (name, ratio)


def test_tiny_records_cost_their_length_field() -> None:
    """The one floor of the format: 2 bytes of length table per record."""
    records = [b"x" * 10] * 20_000
    out, _, packer = pack_all(records)
    ratio = sum(map(len, out)) / packer.payload
    assert 1.2 < ratio < 1.25  # 12 / 10, plus 3 % of datagram and batch headers


def test_pieces_fill_their_datagrams_and_nothing_is_padded() -> None:
    """Every datagram is a whole batch (DATA) or a piece (FRAGMENT); every
    piece but a batch's last is exactly the datagram size; DATA carries no
    padding; the pieces of a batch are its bytes, in order."""
    records = mix("uniform 0-20K", random.Random(3), 2000)
    out, flights, packer = pack_all(records, size=1400)
    assert packer.pieces == len(out) > 0
    batches: dict[int, list[wire.Fragment]] = {}
    for data in out:
        msg = wire.decode_datagram(data)
        assert isinstance(msg, wire.Fragment)
        batches.setdefault(msg.seq, []).append(msg)
    assert len(batches) == packer.batches
    seq = 1
    for first, pieces in sorted(batches.items()):
        assert first == seq
        batch = b"".join(bytes(p.chunk) for p in pieces)
        assert [p.offset for p in pieces] == [1360 * k for k in range(len(pieces))]
        header = wire.verify_batch(batch)
        assert header.length <= BATCH_LIMIT + wire.BATCH_HEADER or header.flags & wire.FLAG_LARGE
        assert wire.batch_records(batch, header) == records[first - 1 : header.last_seq]
        sizes = {len(wire.encode_fragment(7, 1, 1, 1, 1 << 20, 0, p.chunk)) for p in pieces[:-1]}
        assert sizes <= {1400}
        seq = header.last_seq + 1
    assert seq == len(records) + 1
    for f in flights.values():  # each remembers what it carried
        assert f.end and f.size == len(f.data)


def test_a_batch_that_fits_one_datagram_is_one_data_datagram() -> None:
    records = [b"a" * 100, b"b" * 200, b""]
    out, flights, _ = pack_all(records)
    (data,) = out
    msg = wire.decode_datagram(data)
    assert isinstance(msg, wire.Data)
    assert wire.batch_records(msg.batch, wire.verify_batch(msg.batch)) == records
    assert len(data) == wire.DATA_OVERHEAD + wire.BATCH_HEADER + 6 + 300  # no padding
    (f,) = flights.values()
    assert (f.first, f.last, f.end) == (1, 3, 0)


def test_fill_sends_only_what_count_and_room_allow_and_goes_on_later() -> None:
    records = [bytes(1000)] * 200
    lens = array("H", [1000] * 200)
    packer = Packer(1400)
    packer.start(1, 2, 3, 1)
    out: list[bytes] = []
    flights: dict[int, Flight] = {}
    pn, used = packer.fill(records, lens, 1, 200, 0, 0.0, 5, 1 << 30, out, flights)
    assert (pn, len(out), used) == (5, 5, 5 * 1400)
    assert packer.open
    pn, used = packer.fill(records, lens, 1, 200, pn, 0.0, 64, 2 * 1400 + 1, out, flights)
    assert (pn, len(out)) == (8, 8)  # sent while the bytes so far were under room
    offsets = [wire.decode_datagram(d).offset for d in out]  # type: ignore[union-attr]
    assert offsets == [1360 * k for k in range(8)]


def test_a_resend_after_the_path_shrank_carries_the_same_bytes_in_smaller_pieces() -> None:
    records = [bytes([i]) * 1000 for i in range(60)]
    out, flights, packer = pack_all(records, size=1400)
    piece = flights[3]
    whole = wire.decode_datagram(piece.data)
    assert isinstance(whole, wire.Fragment)
    # same size: the same bytes under a new packet number
    pn, (again,) = packer.resend(piece, 100, 1.0)
    assert pn == 101 and again is piece and again.pn == 101
    assert wire.reseal(again.data, 3) == out[2]
    # the path shrank to 1,200 bytes: the piece goes as two smaller ones
    packer.size = 1200
    pn, smaller = packer.resend(piece, pn, 2.0)
    assert [f.pn for f in smaller] == [102, 103]
    assert all(f.size <= 1200 for f in smaller)
    chunks = [wire.decode_datagram(f.data) for f in smaller]
    got = b"".join(bytes(c.chunk) for c in chunks)  # type: ignore[union-attr]
    assert got == bytes(whole.chunk)
    assert [(f.offset, f.end) for f in smaller] == [
        (whole.offset, whole.offset + 1160),
        (whole.offset + 1160, whole.offset + 1360),
    ]
    # a whole DATA batch that no longer fits goes in pieces of the same batch
    small = [b"q" * 1200]
    (data,), data_flights, packer = pack_all(small, size=1400)
    packer.size = 1200
    _, cut = packer.resend(next(iter(data_flights.values())), 0, 0.0)
    pieces = [wire.decode_datagram(f.data) for f in cut]
    batch = b"".join(bytes(p.chunk) for p in pieces)  # type: ignore[union-attr]
    assert batch == bytes(wire.decode_datagram(data).batch)  # type: ignore[union-attr]
    assert all(f.size <= 1200 and f.end for f in cut)


@pytest.mark.parametrize("seed", range(30))
def test_pieces_in_any_order_with_duplicates_make_the_batch(seed: int) -> None:
    rng = random.Random(seed)
    batch = rng.randbytes(rng.randrange(44, 20_000))
    cuts = sorted(
        {0, len(batch), *(rng.randrange(1, len(batch)) for _ in range(rng.randrange(0, 30)))}
    )
    pieces = list(itertools.pairwise(cuts))
    pieces += rng.sample(pieces, len(pieces) // 3)  # duplicates
    # overlapping pieces, as a resend cut at another size makes
    pieces += [(a, min(b + 7, len(batch))) for a, b in rng.sample(pieces, len(pieces) // 4)]
    rng.shuffle(pieces)
    part = Partial(len(batch), False, 1)
    for n, (a, b) in enumerate(pieces):
        part.add(a, memoryview(batch)[a:b])
        spans = part.spans
        assert all(x < y for x, y in spans) and all(
            spans[i][1] < spans[i + 1][0] for i in range(len(spans) - 1)
        ), "sorted, merged, disjoint"
        if n < len(pieces) - 1:
            assert part.complete == (spans == [(0, len(batch))])
    assert part.complete
    assert bytes(part.buf) == batch


def test_a_duplicate_piece_says_so() -> None:
    part = Partial(100, False, 1)
    data = memoryview(bytes(range(100)))
    assert part.add(0, data[:40])
    assert not part.add(0, data[:40])
    assert not part.add(10, data[10:30])
    assert part.add(30, data[30:60])  # partly new
    assert part.spans == [(0, 60)]


@pytest.mark.parametrize("name", MIXES)
def test_a_link_measures_its_own_ratio(name: str) -> None:
    """The sender's payload and wire byte counters, over a clean fake network,
    give the ratio link.stats() reports; every record is stored once."""
    records = mix(name, random.Random(11), 1500 if "1M" not in name else 500)
    sim = Simulation(FakeNet(11))
    link = sim.add_link("s", records, push_every=300)
    assert sim.run(sim.all_done, max_time=120)
    assert_exactly_once(sim, "s", [(link, records)])
    sender = link.sender
    assert sender.payload_bytes == sum(map(len, records))
    ratio = sender.stats.bytes / sender.payload_bytes
    assert ratio <= 1.10, (name, ratio)


def test_payload_counts_each_record_once_across_reconnects() -> None:
    """A listener restart makes the link pack again what was not received:
    those bytes go on the wire twice, but count once as payload."""
    records = mix("uniform 0-20K", random.Random(4), 400)
    sim = Simulation(FakeNet(4))
    link = sim.add_link("s", records, push_every=20)
    assert sim.run(lambda: link.sender.stored >= 100, max_time=60)
    sim.restart_listener(crash=True)
    assert sim.run(sim.all_done, max_time=120)
    assert_exactly_once(sim, "s", [(link, records)])
    assert link.sender.stats.reconnects >= 1
    assert link.sender.payload_bytes == sum(map(len, records))


@pytest.mark.parametrize("size", [65_534, 65_535, 65_536])
def test_a_record_just_under_64_kib_is_stored_with_max_record_just_above_it(size: int) -> None:
    """The largest batch of the small kind (one record of 65,535 bytes and its
    length: 65,581 bytes) and the smallest large one pass a listener whose
    max_record is no larger than they need."""
    records = [b"a", bytes(size), b"b"]
    sim = Simulation(FakeNet(2), core_config=CoreConfig(max_record=65_536))
    link = sim.add_link("s", records)
    assert sim.run(sim.all_done, max_time=30)
    assert_exactly_once(sim, "s", [(link, records)])
