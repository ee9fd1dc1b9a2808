"""Sessions at scale, in the simulation: application restarts, fencing,
listener crashes and blackouts, all in one seeded run.

Why it exists: test_protocol_sim.py runs 1,200 seeds of loss, duplicates,
jitter, large records and a listener restart, and checks named-producer
resume and fencing once each, by hand.  Here every seed mixes them at random
moments on a bad network (asymmetric loss included): the application behind
the named producer "app" restarts (its old link simply vanishes) or a second
instance starts while the first still runs (the first must end Fenced, and
nothing it sends after that may be stored), the listener crashes (losing
what it had not synced) or stays down for 25 s (past a link's 20 s silence
timeout), and the network blacks out for 1.5 s.  At every
crash, and at the end, nothing any link was told stored may be missing; at
the end each producer's records are in the store once, in seq order.

Also: a seed is the same run every time (so a failing seed is a regression
test), and each defect a seed found is pinned by a deterministic test at the end.
"""

from __future__ import annotations

import contextlib
import random

import pytest

from helpers.shipping import report
from helpers.sim import NEXT_BATCH
from purelink.errors import ProtocolError
from purelink.protocol import wire
from purelink.protocol.listener_core import CoreConfig, named_producer_id
from purelink.protocol.sender import SenderState
from purelink.testing import FakeNet, NetConfig, SimLink, Simulation

LATE = b"late:"
"""Records a fenced instance pushes after it was replaced: never stored."""
GHOST = (
    "FIXED: a link whose reconnect was granted a new epoch it never heard of (ACCEPT "
    "lost, then a listener restart) asked back in with its older epoch and was refused "
    "as fenced by its own unanswered handshake; the epochs file now records which link "
    "instance each epoch went to (seed 62 found it)"
)


def records_for(rng: random.Random, n: int, tag: bytes) -> list[bytes]:
    out = []
    for i in range(n):
        size = rng.choice((0, 8, 61, 300, 1300))
        if rng.random() < 0.02:
            size = rng.randrange(1400, 12_000)  # split across datagrams
        out.append(tag + i.to_bytes(4, "little") + rng.randbytes(size))
    return out


def seqs_of(sim: Simulation, pid: int) -> list[tuple[int, bytes]]:
    """(seq, payload) of a producer's records in the store, in position order."""
    return [(seq, rec) for _, p, seq, rec in sim.store.records("s") if p == pid]


def assert_nothing_told_is_missing(sim: Simulation, links: list[SimLink]) -> None:
    for link in links:
        pid = link.sender.producer_id
        if not pid or not link.told:
            continue
        stored = [seq for seq, _ in seqs_of(sim, pid)]
        assert stored == list(range(1, len(stored) + 1))
        assert len(stored) >= link.told, f"{link.name}: told {link.told}, {len(stored)} kept"


def in_state(link: SimLink, state: str) -> bool:
    return link.sender.state == state


def new_instance(sim: Simulation, app: list[bytes], *, abandon: SimLink | None) -> SimLink:
    """The application behind "app" starts again: a new link learns where the
    producer's stored records end and pushes the rest from there."""
    if abandon is not None:
        del sim.links[abandon.addr]  # the old process is gone: its datagrams with it
    link = sim.add_link("s", [], producer="app")
    assert sim.run(lambda: link.sender.state != SenderState.CONNECTING, max_time=120)
    assert link.sender.state == SenderState.OPEN, link.events[-3:]
    assert link.sender.stored == link.sender.pushed
    link.todo = app[link.sender.stored :]
    return link


def run_seed(seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    loss = rng.choice((0.0, 0.05, 0.2))
    up = NetConfig(loss=loss, duplicate=0.05, delay=0.001, jitter=rng.choice((0.0, 0.02)))
    down = NetConfig(loss=min(loss * rng.choice((1, 2)), 0.4), duplicate=0.05, delay=0.001)
    net = FakeNet(seed, up, down)
    sim = Simulation(net, sync_interval=rng.choice((0.0, 0.002, 0.01)))
    app = records_for(rng, rng.randrange(50, 400), b"app:")
    anon_records = records_for(rng, rng.randrange(1, 200), b"anon:")
    push_every = rng.choice((3, 20))
    current = sim.add_link("s", list(app), producer="app", push_every=push_every)
    anon = sim.add_link("s", anon_records, push_every=push_every)
    everyone = [current, anon]
    fenced: list[SimLink] = []
    events = sorted(rng.uniform(0.0, 1.5) for _ in range(rng.randrange(1, 4)))
    kinds = [rng.choice(("restart", "second", "crash", "outage", "blackout")) for _ in events]
    t0 = sim.clock.now
    for at, kind in zip(events, kinds, strict=True):
        sim.run(lambda: sim.clock.now >= t0 + at or sim.all_done(), max_time=60)  # noqa: B023
        if kind == "restart":
            current = new_instance(sim, app, abandon=current)
        elif kind == "second":  # a second instance starts while the first still runs
            old = current
            assert sim.run(lambda: in_state(old, SenderState.OPEN), max_time=120)  # noqa: B023
            current = new_instance(sim, app, abandon=None)
            old.todo = old.todo + [LATE + b"%d" % i for i in range(5)]
            # the first finds out when it next sends (after a listener restart too:
            # see test_a_superseded_instance_never_takes_over_after_a_listener_restart)
            fenced_in_time = sim.run(
                lambda: in_state(old, SenderState.FENCED),  # noqa: B023
                max_time=120,
            )
            assert fenced_in_time, (seed, old.events[-3:])
            fenced.append(old)
        elif kind == "crash":
            sim.restart_listener(crash=True)
            assert_nothing_told_is_missing(sim, everyone)
        elif kind == "outage":  # down for longer than a link's silence timeout
            sim.stop_listener()
            assert_nothing_told_is_missing(sim, everyone)
            back = sim.clock.now + 25.0
            sim.run(lambda: sim.clock.now >= back, max_time=30)  # noqa: B023
            assert sim.clock.now >= back or sim.all_done()  # idle links do not move time
            sim.clock.now = max(sim.clock.now, back)
            sim.restart_listener(crash=False)
        else:
            net.blackout_until = sim.clock.now + 1.5
        everyone.append(current)
    assert sim.run(sim.all_done, max_time=900), f"seed {seed}: not done"
    assert_nothing_told_is_missing(sim, everyone)
    for link in fenced:
        assert link.sender.state == SenderState.FENCED, (seed, link.events[-3:])
    for link in (current, anon):
        assert link.sender.state == SenderState.OPEN, (seed, link.events[-3:])
    app_rows = seqs_of(sim, named_producer_id("app"))
    assert [s for s, _ in app_rows] == list(range(1, len(app) + 1)), f"seed {seed}"
    assert [r for _, r in app_rows] == app, f"seed {seed}: byte-exact"
    anon_rows = seqs_of(sim, anon.sender.producer_id)
    assert [r for _, r in anon_rows] == anon_records
    assert [s for s, _ in anon_rows] == list(range(1, len(anon_records) + 1))
    positions = [p for p, _, _, _ in sim.store.records("s")]
    assert positions == list(range(1, len(positions) + 1))
    assert not any(r.startswith(LATE) for _, _, _, r in sim.store.records("s"))
    assert list(sim.store.batches) == ["s"]
    return {
        "records": len(app) + len(anon_records),
        "datagrams": net.sent,
        "lost": net.dropped,
        "duplicated": net.duplicated,
        "restarts": kinds.count("restart"),
        "second_instances": kinds.count("second"),
        "crashes": kinds.count("crash"),
        "outages": kinds.count("outage"),
        "blackouts": kinds.count("blackout"),
    }


KNOWN: dict[int, str] = {}
"""Seeds that fail for a reported defect: each XPASSes (and fails) once it is fixed."""


def seeds(numbers: range) -> list[object]:
    out: list[object] = []
    for n in numbers:
        known = KNOWN.get(n)
        mark = pytest.mark.xfail(strict=True, reason=known) if known else ()
        out.append(pytest.param(n, marks=mark))
    return out


@pytest.mark.parametrize("seed", seeds(range(100)))
def test_seeds(seed: int) -> None:
    report("test_sim_sessions", {"seed": seed, **run_seed(seed)})


@pytest.mark.slow
@pytest.mark.parametrize("seed", seeds(range(100, 1100)))
def test_seeds_slow(seed: int) -> None:
    report("test_sim_sessions", {"seed": seed, **run_seed(seed)})


def test_a_seed_is_the_same_run_every_time() -> None:
    """Three links, loss, duplicates, jitter: the same seed twice gives the same
    datagrams dropped, the same steps and the same end time."""

    def once() -> tuple[int, int, int, float, list[bytes]]:
        rng = random.Random(21)
        net = FakeNet(21, NetConfig(loss=0.1, duplicate=0.05, delay=0.001, jitter=0.02))
        sim = Simulation(net)
        for k in range(3):
            sim.add_link("s", records_for(rng, 200, b"%d:" % k), push_every=7)
        assert sim.run(sim.all_done, max_time=600)
        return (
            net.sent,
            net.dropped,
            sim.steps,
            sim.clock.now,
            [r for *_, r in sim.store.records("s")],
        )

    assert once() == once()


def test_stale_window_in_a_reordered_answer_never_overflows_the_buffer() -> None:
    """Answers overtake each other (down jitter) and carry older, larger
    windows; the listener's reorder memory stays within its bound anyway."""
    bound = 4 * 1400
    net = FakeNet(31, NetConfig(delay=0.001, jitter=0.05), NetConfig(delay=0.001, jitter=0.05))
    sim = Simulation(net, core_config=CoreConfig(max_reorder=bound))
    rng = random.Random(31)  # no record larger than a datagram: those have their own rule
    recs = [b"w:%d:" % i + rng.randbytes(rng.choice((0, 61, 300, 1300))) for i in range(1500)]
    link = sim.add_link("s", recs)
    peak = 0

    def done() -> bool:
        nonlocal peak
        assert sim.core is not None
        peak = max(peak, sim.core.memory)
        return sim.all_done()

    assert sim.run(done, max_time=900)
    assert peak <= bound + NEXT_BATCH  # the next batch may always be put together
    assert [r for _, _, _, r in sim.store.records("s")] == recs
    assert link.sender.state == SenderState.OPEN


def test_a_superseded_instance_never_takes_over_after_a_listener_restart() -> None:
    """Found by this file (seed 7 and others): when a HELLO carried no epoch, an
    instance that a newer one had superseded came back after a listener restart
    as a new session, fenced the newer one, and was told "stored" for seqs that
    held the newer instance's records.  HELLO now carries the link's epoch."""
    sim = Simulation(FakeNet(41), sync_interval=0.0)
    sent_a = [b"a%d" % i for i in range(100)]
    a = sim.add_link("s", list(sent_a), producer="app")
    assert sim.run(sim.all_done, max_time=60)
    # a second instance takes over; the first is idle, and the listener tells it
    b = new_instance(sim, [], abandon=None)
    b.todo = [b"b%d" % i for i in range(10)]
    assert sim.run(sim.all_done, max_time=60)
    assert a.sender.state == SenderState.FENCED and b.told == 110
    sim.restart_listener(crash=False)
    late = [b"a-late%d" % i for i in range(50)]
    sent_a += late
    a.todo = list(late)
    sim.run(lambda: a.sender.state != SenderState.OPEN or sim.all_done(), max_time=120)
    sim.run(sim.all_done, max_time=120)
    stored = {seq: r for _, p, seq, r in sim.store.records("s") if p == named_producer_id("app")}
    # guarantee 1: every record the first instance was told stored is in the stream
    missing = [seq for seq in range(1, a.told + 1) if stored.get(seq) != sent_a[seq - 1]]
    assert missing == [], f"told stored, not in the stream: seqs {missing[:3]}...{missing[-1:]}"
    # guarantee 5: the newer session fences the older instance, not the other way round
    assert a.sender.state == SenderState.FENCED
    b.todo = [b"b-more"]
    assert sim.run(sim.all_done, max_time=60)
    assert b.sender.state == SenderState.OPEN


class AcceptsLost(FakeNet):
    """A FakeNet that can lose every ACCEPT (and only those) for a while."""

    lose_accepts = False

    def send(self, data: bytes, source: tuple[str, int], dest: str, now: float, up: bool) -> None:
        if not up and self.lose_accepts:
            with contextlib.suppress(ProtocolError):
                if isinstance(wire.decode_datagram(data), wire.Accept):
                    self.sent += 1
                    self.dropped += 1
                    return
        super().send(data, source, dest, now, up)


def test_a_link_is_not_fenced_by_its_own_unanswered_handshake() -> None:
    """The listener restarts while a link reconnects; the new listener grants
    the link's HELLO a new epoch (durably, for a named producer) but its ACCEPT
    is lost, and the listener restarts again.  The link asks back in with the
    epoch it had: nobody else took the producer over, so it must not be fenced
    by the session it never heard of."""
    net = AcceptsLost(43, NetConfig(delay=0.001))
    sim = Simulation(net, sync_interval=0.0)
    recs = [b"r%d" % i for i in range(300)]
    link = sim.add_link("s", recs, producer="app", push_every=5)
    assert sim.run(lambda: link.told >= 50, max_time=60)
    sim.restart_listener(crash=True)
    net.lose_accepts = True
    core = sim.core
    assert core is not None
    assert sim.run(lambda: core.stats.accepts >= 1, max_time=60)  # granted, never heard
    sim.restart_listener(crash=True)
    net.lose_accepts = False
    assert sim.run(sim.all_done, max_time=120)
    assert link.sender.state == SenderState.OPEN, link.events[-3:]
    assert [r for *_, r in sim.store.records("s")] == recs
