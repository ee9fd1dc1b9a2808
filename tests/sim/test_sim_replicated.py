"""Exactly once through a replicated store's delayed, failing and lost
acknowledgements, in virtual time, at many seeds.

Why it exists: a store like JetStream says "durable" long after the append,
sometimes only after a publish failed and went again, sometimes never for a
batch it does hold (the answer was lost, the writer finds it later); and a
listener that dies with batches in flight leaves some of them stored.  The
simulation drives its core through the same storage driver as the listener
(storage.py) over `ReplicatedBackend` (testing/backends.py): every record
must be stored once, in order, and no link told "stored" before its records
are in the store.
"""

from __future__ import annotations

import random

import pytest

from helpers.sim import assert_exactly_once, records_for
from purelink.protocol.sender import SenderState
from purelink.testing.backends import Replication
from purelink.testing.fakes import FakeNet, NetConfig
from purelink.testing.sim import SimLink, Simulation


def stored_prefix(sim: Simulation, link: SimLink) -> int:
    """How many of the link's records, from seq 1 on, the store holds."""
    seqs = {seq for _, pid, seq, _ in sim.store.records("s") if pid == link.sender.producer_id}
    n = 0
    while n + 1 in seqs:
        n += 1
    return n


def run_seed(seed: int) -> Simulation:
    rng = random.Random(seed)
    loss = rng.choice((0.0, 0.05, 0.2))
    net = FakeNet(seed, NetConfig(loss=loss, duplicate=0.05, delay=0.001, jitter=0.01))
    replication = Replication(
        seed=seed,
        delay=(0.001, rng.choice((0.005, 0.05, 0.3))),
        fail=rng.choice((0.0, 0.1, 0.3)),
        lose_ack=rng.choice((0.0, 0.1, 0.3)),
    )
    sim = Simulation(net, replication=replication)
    links = []
    for k in range(rng.randrange(1, 4)):
        recs = records_for(rng, rng.randrange(1, 300))
        link = sim.add_link(
            "s",
            recs,
            producer=f"p{k}" if rng.random() < 0.5 else "",
            push_every=rng.choice((0, 5, 40)),
        )
        links.append((link, recs))
    steps = 0

    def done_and_never_told_early() -> bool:
        nonlocal steps
        steps += 1
        if steps % 20 == 0:
            for link, _ in links:
                assert link.sender.stored <= stored_prefix(sim, link), f"seed {seed}: told early"
        return sim.all_done()

    if rng.random() < 0.4:  # the listener dies with batches in flight
        crash_at = sim.clock.now + rng.uniform(0.01, 0.5)
        sim.run(lambda: sim.clock.now >= crash_at or sim.all_done(), max_time=60)
        sim.restart_listener(crash=True)
    assert sim.run(done_and_never_told_early, max_time=600), f"seed {seed}: not done"
    for link, _ in links:
        assert link.sender.state == SenderState.OPEN, link.events[-3:]
        assert link.sender.stored == stored_prefix(sim, link)
    assert_exactly_once(sim, "s", links)
    return sim


@pytest.mark.parametrize("seed", range(40))
def test_seeds(seed: int) -> None:
    run_seed(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40, 600))
def test_seeds_slow(seed: int) -> None:
    run_seed(seed)


def test_the_store_did_fail_and_lose_answers() -> None:
    """The seeds above are not all easy: publishes failed, answers were lost,
    listeners died with batches in flight."""
    failures = lost = restarts = 0
    for seed in range(20):
        sim = run_seed(seed)
        backend = sim.backend
        failures += getattr(backend, "failures", 0)
        lost += getattr(backend, "lost_acks", 0)
        restarts += sim.restarts
    assert failures > 0 and lost > 0 and restarts > 0


def test_a_lost_answer_holds_back_the_tickets_behind_it() -> None:
    """Stored in order, told in order: a batch whose answer is lost is told
    only when the writer finds it, and nothing after it is told before."""
    sim = Simulation(FakeNet(1), replication=Replication(seed=3, fail=0.0, lose_ack=1.0))
    link = sim.add_link("s", [b"r%d" % i for i in range(50)], push_every=5)
    told_at: list[tuple[float, int]] = []

    def done() -> bool:
        if not told_at or told_at[-1][1] != link.told:
            told_at.append((sim.clock.now, link.told))
        return sim.all_done()

    assert sim.run(done, max_time=60)
    assert [n for _, n in told_at] == sorted({n for _, n in told_at})
    # every answer was lost: nothing was told before the writer looked again
    first_told = next(t for t, n in told_at if n > 0)
    assert first_told >= Replication().look_again
    assert link.told == 50


def test_a_store_that_cannot_write_stops_the_stream_and_tells_nothing_more() -> None:
    """The driver's write failure (storage.py): the stream is written no more, its
    later batches are counted, and no link is told a record the store lacks."""
    sim = Simulation(FakeNet(2), replication=Replication(seed=2, fail=0.0, lose_ack=0.0))
    link = sim.add_link("s", [b"r%d" % i for i in range(400)], push_every=20)
    real_append = sim.backend.append
    appends = 0

    def failing_append(stream: str, writes):  # the fourth append on meets a dead disk
        nonlocal appends
        appends += 1
        if appends >= 4:
            raise OSError("disk gone")
        return real_append(stream, writes)

    sim.backend.append = failing_append  # type: ignore[method-assign]
    sim.run(lambda: False, max_time=5)
    assert "s" in sim.backend.failed
    assert sim.driver is not None and sim.driver.store_errors > 0
    stored = stored_prefix(sim, link)
    assert 0 < stored < 400
    assert link.sender.stored == stored  # told everything stored before the failure, no more
