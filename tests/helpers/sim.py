"""What the simulation tests share: records to ship and the exactly-once check."""

from __future__ import annotations

import random

from purelink.protocol import wire
from purelink.testing import SimLink, Simulation

NEXT_BATCH = 0xFFFF + 2 + wire.BATCH_HEADER


def records_for(rng: random.Random, n: int, *, large: bool = False) -> list[bytes]:
    out = []
    for i in range(n):
        size = rng.choice((0, 1, 8, 61, 200, 1000, 1300))
        if large and rng.random() < 0.02:
            size = rng.randrange(1400, 20_000)
        out.append(i.to_bytes(4, "little") + rng.randbytes(size))
    return out


def assert_exactly_once(sim: Simulation, stream: str, links: list[tuple[SimLink, list[bytes]]]):
    rows = sim.store.records(stream)
    positions = [pos for pos, _, _, _ in rows]
    assert positions == list(range(1, len(rows) + 1)), "positions are contiguous from 1"
    by_pid: dict[int, list[tuple[int, bytes]]] = {}
    for _, pid, seq, payload in rows:
        by_pid.setdefault(pid, []).append((seq, payload))
    for link, expected in links:
        got = by_pid.get(link.sender.producer_id, [])
        seqs = [s for s, _ in got]
        assert seqs == list(range(1, len(got) + 1)), "a link's records are in seq order, once"
        assert [p for _, p in got] == expected[: len(got)]
        assert len(got) == len(expected), f"{link.name}: {len(got)} of {len(expected)} stored"
