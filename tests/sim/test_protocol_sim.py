"""The sender and the listener core together, on virtual time, through a bad network.

No sockets, no sleeps: `purelink.testing.Simulation` jumps from event to
event.  Every test checks the same thing in the end: each link's records are
in the store exactly once, byte for byte, in seq order.
"""

from __future__ import annotations

import random

import pytest

from helpers.shipping import report
from helpers.sim import NEXT_BATCH, assert_exactly_once, records_for
from purelink.protocol import events, wire
from purelink.protocol.listener_core import CoreConfig
from purelink.protocol.sender import SenderState
from purelink.testing import FakeNet, NetConfig, Simulation

"""The batch a producer needs next may always be put together, beyond its reorder
budget (else held data could never drain): at most this many bytes of records."""


def bad_net(seed: int, loss: float = 0.1) -> FakeNet:
    cfg = NetConfig(loss=loss, duplicate=0.05, delay=0.001, jitter=0.02)
    return FakeNet(seed, cfg)


def run_seed(seed: int) -> None:
    rng = random.Random(seed)
    loss = rng.choice((0.0, 0.1, 0.3))
    down_loss = min(loss * rng.choice((1, 2)), 0.5)  # answers lost more often, sometimes
    net = FakeNet(
        seed,
        NetConfig(loss=loss, duplicate=0.05, delay=0.001, jitter=rng.choice((0.0, 0.02))),
        NetConfig(loss=down_loss, duplicate=0.05, delay=0.001, jitter=0.02),
    )
    sim = Simulation(net, sync_interval=rng.choice((0.0, 0.002, 0.01)))
    links = []
    for k in range(rng.randrange(1, 4)):
        recs = records_for(rng, rng.randrange(1, 400), large=True)
        producer = f"p{k}" if rng.random() < 0.5 else ""
        link = sim.add_link(
            "s",
            recs,
            producer=producer,
            push_every=rng.choice((0, 7, 50)),
            datagram_size=rng.choice((200, 1400)),
        )
        links.append((link, recs))
    restart_at = sim.clock.now + rng.uniform(0.0, 0.5) if rng.random() < 0.3 else None
    if restart_at is not None:
        sim.run(lambda: sim.clock.now >= restart_at or sim.all_done(), max_time=60)
        sim.restart_listener(crash=True)
    assert sim.run(sim.all_done, max_time=600), f"seed {seed}: not done in 600 s virtual"
    for link, _ in links:
        assert link.sender.state == SenderState.OPEN, link.events[-3:]
    assert_exactly_once(sim, "s", links)
    # an idle link arms no timer
    for link, _ in links:
        assert link.sender.get_timer() is None
    records = sum(len(recs) for _, recs in links)
    figures = {"records": records, "datagrams": net.sent, "lost": net.dropped}
    figures.update(duplicated=net.duplicated, restarts=sim.restarts)
    report("test_protocol_sim", {"seed": seed, **figures})  # figures for docs/reliability.md


@pytest.mark.parametrize("seed", range(60))
def test_seeds(seed: int) -> None:
    run_seed(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(60, 1200))
def test_seeds_slow(seed: int) -> None:
    run_seed(seed)


def test_clean_network_in_order_no_retransmits() -> None:
    sim = Simulation(FakeNet(1))
    recs = records_for(random.Random(1), 2000)
    link = sim.add_link("s", recs)
    assert sim.run(sim.all_done, max_time=10)
    assert link.sender.stats.retransmits == 0
    assert_exactly_once(sim, "s", [(link, recs)])
    assert isinstance(link.events[0], events.Connected)
    assert link.told == len(recs)


def test_small_records_before_a_large_one_share_a_batch() -> None:
    """Packing shrinks a batch by the records' real lengths (the length table
    clamps at 65,535): an empty and a 3-byte record ahead of a 250 kB one go
    in one DATA batch, the large one is a large batch of its own in pieces,
    and the last record one more DATA batch."""
    recs = [b"", b"abc", bytes(250_000), b"z" * 61]
    sim = Simulation(FakeNet(3))
    link = sim.add_link("mixed", recs)
    assert sim.run(sim.all_done, max_time=60)
    assert_exactly_once(sim, "mixed", [(link, recs)])
    stats = link.sender.stats
    pieces = -(-(250_000 + wire.BATCH_HEADER) // (1400 - wire.FRAGMENT_OVERHEAD))
    assert (stats.batches, stats.fragments) == (3, pieces)


def test_records_larger_than_a_datagram_are_split_and_rejoined() -> None:
    rng = random.Random(7)
    recs = [rng.randbytes(n) for n in (1401, 5000, 70_000, 0, 3, 250_000)]
    sim = Simulation(bad_net(7, loss=0.2))
    link = sim.add_link("big", recs)
    assert sim.run(sim.all_done, max_time=600)
    assert link.sender.stats.fragments > 100
    assert_exactly_once(sim, "big", [(link, recs)])


def test_listener_restart_keeps_everything_and_dedups() -> None:
    rng = random.Random(3)
    recs = records_for(rng, 3000)
    sim = Simulation(bad_net(3), sync_interval=0.005)
    link = sim.add_link("s", recs, push_every=10)
    sim.run(lambda: link.told > 500, max_time=60)
    sim.restart_listener(crash=True)
    sim.run(lambda: link.told > 1500, max_time=60)
    sim.restart_listener(crash=True)
    assert sim.run(sim.all_done, max_time=600)
    assert link.sender.stats.reconnects >= 2
    assert any(isinstance(e, events.Reconnecting) for e in link.events)
    assert_exactly_once(sim, "s", [(link, recs)])


def test_outage_longer_than_many_rtos() -> None:
    recs = records_for(random.Random(4), 1000)
    sim = Simulation(FakeNet(4), sync_interval=0.002)
    link = sim.add_link("s", recs, push_every=5)
    sim.run(lambda: link.told > 100, max_time=60)
    sim.stop_listener()
    down_until = sim.clock.now + 30.0
    assert sim.run(lambda: sim.clock.now >= down_until, max_time=40)
    assert not link.done
    sim.restart_listener(crash=False)
    assert sim.run(sim.all_done, max_time=120)
    assert_exactly_once(sim, "s", [(link, recs)])


def test_blackouts() -> None:
    recs = records_for(random.Random(5), 3000)
    net = bad_net(5, loss=0.05)
    sim = Simulation(net)
    link = sim.add_link("s", recs, push_every=3)
    t0 = sim.clock.now
    for k in range(1, 6):
        sim.run(lambda k=k: sim.clock.now >= t0 + 3 * k or sim.all_done(), max_time=10)
        net.blackout_until = sim.clock.now + 1.5
    assert sim.run(sim.all_done, max_time=600)
    assert_exactly_once(sim, "s", [(link, recs)])


def test_named_producer_resumes_at_its_last_stored_seq() -> None:
    sim = Simulation(bad_net(6))
    first = [b"a%d" % i for i in range(100)]
    a = sim.add_link("s", first, producer="api-1")
    assert sim.run(sim.all_done, max_time=60)
    a.sender.close()
    # the application restarts: a new link with the same producer name
    second = [b"b%d" % i for i in range(50)]
    b = sim.add_link("s", [], producer="api-1")
    assert sim.run(lambda: b.sender.state == SenderState.OPEN, max_time=60)
    assert b.sender.stored == b.sender.pushed == 100
    b.todo = second
    assert sim.run(sim.all_done, max_time=60)
    rows = sim.store.records("s")
    assert [r[3] for r in rows] == first + second
    assert [r[2] for r in rows] == list(range(1, 151))


def test_new_session_fences_the_old_one() -> None:
    sim = Simulation(FakeNet(8))
    old = sim.add_link("s", [b"x"] * 10, producer="api-1")
    assert sim.run(sim.all_done, max_time=60)
    new = sim.add_link("s", [], producer="api-1")
    assert sim.run(lambda: new.sender.state == SenderState.OPEN, max_time=60)
    assert new.sender.epoch > old.sender.epoch
    old.todo = [b"late"]
    assert sim.run(lambda: old.sender.state == SenderState.FENCED, max_time=60)
    assert any(isinstance(e, events.Fenced) for e in old.events)
    assert b"late" not in [r[3] for r in sim.store.records("s")]


def test_two_anonymous_links_on_one_stream() -> None:
    sim = Simulation(bad_net(9))
    ra = [b"a%d" % i for i in range(500)]
    rb = [b"b%d" % i for i in range(500)]
    a = sim.add_link("s", ra, push_every=10)
    b = sim.add_link("s", rb, push_every=10)
    assert sim.run(sim.all_done, max_time=120)
    assert a.sender.producer_id != b.sender.producer_id
    assert_exactly_once(sim, "s", [(a, ra), (b, rb)])


def test_listener_that_lost_told_records_fails_the_link_loudly() -> None:
    sim = Simulation(FakeNet(10), sync_interval=0.0)
    link = sim.add_link("s", [b"r%d" % i + bytes(100) for i in range(1000)], producer="p")
    assert sim.run(sim.all_done, max_time=60)
    assert link.told == 1000
    # the store is replaced by an older copy: its last batch is gone
    assert len(sim.store.batches["s"]) > 1
    sim.store.batches["s"] = sim.store.batches["s"][:-1]
    sim.store.synced["s"] = sim.store.last("s")
    assert sim.store.last("s") < 1000
    sim.restart_listener(crash=False)
    link.todo = [b"more"]
    assert sim.run(lambda: link.sender.state == SenderState.FAILED, max_time=120)
    failed = [e for e in link.events if isinstance(e, events.Failed)]
    assert failed and failed[0].kind == "lost"


def test_bad_stream_name_is_refused() -> None:
    sim = Simulation(FakeNet(11))
    link = sim.add_link("../etc", [b"x"])
    assert sim.run(lambda: link.sender.state == SenderState.FAILED, max_time=30)
    assert sim.store.batches == {}
    failed = [e for e in link.events if isinstance(e, events.Failed)]
    assert failed[0].permanent  # the same name is refused again: no use retrying


def test_a_refusal_at_a_limit_may_heal_and_is_not_permanent() -> None:
    sim = Simulation(FakeNet(12), core_config=CoreConfig(max_links=1))
    first = sim.add_link("s", [b"x"])
    assert sim.run(lambda: first.sender.state == SenderState.OPEN, max_time=30)
    second = sim.add_link("s", [b"y"])
    assert sim.run(lambda: second.sender.state == SenderState.FAILED, max_time=30)
    failed = [e for e in second.events if isinstance(e, events.Failed)]
    assert "max_links" in failed[0].message
    assert not failed[0].permanent  # a link may close: trying again can work


def test_reorder_buffer_is_bounded() -> None:
    cfg = CoreConfig(max_reorder=8 * 1400)
    net = FakeNet(12, NetConfig(delay=0.001, jitter=0.05))  # heavy reordering
    sim = Simulation(net, core_config=cfg)
    recs = records_for(random.Random(12), 3000)
    link = sim.add_link("s", recs)
    peak = 0

    def done() -> bool:
        nonlocal peak
        assert sim.core is not None
        peak = max(peak, sim.core.memory)
        return sim.all_done()

    assert sim.run(done, max_time=600)
    assert peak <= 8 * 1400 + NEXT_BATCH
    assert_exactly_once(sim, "s", [(link, recs)])


def test_a_fenced_session_stays_fenced_across_a_listener_restart() -> None:
    """Regression: a named producer's old session, fenced while idle, used to
    reconnect after a listener restart with a new epoch and fence the newer
    instance, which then told its application that the old one's records were
    stored under its seqs.  HELLO now carries the previous epoch."""
    sim = Simulation(FakeNet(13), sync_interval=0.0)
    old = sim.add_link("s", [b"old-%d" % i for i in range(5)], producer="p")
    assert sim.run(sim.all_done, max_time=60)
    new = sim.add_link("s", [], producer="p")
    assert sim.run(lambda: new.sender.state == SenderState.OPEN, max_time=60)
    new.todo = [b"new-%d" % i for i in range(3)]
    assert sim.run(lambda: new.told == 8, max_time=60)
    sim.restart_listener(crash=False)
    old.todo = [b"old-late"]  # the old session wakes up, gets REFUSE(unknown), reconnects
    assert sim.run(lambda: old.sender.state == SenderState.FENCED, max_time=120)
    payloads = [r[3] for r in sim.store.records("s")]
    assert payloads == [b"old-%d" % i for i in range(5)] + [b"new-%d" % i for i in range(3)]
    new.todo = [b"new-3"]
    assert sim.run(lambda: new.told == 9, max_time=120)
    assert new.sender.state == SenderState.OPEN
