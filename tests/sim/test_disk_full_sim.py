"""A full disk in virtual time: the stream stops, its links wait, and it goes on by itself.

Why it exists: a write that fails for want of room is not a failed disk
(listener/storage.py): nothing was told stored, the log is cut back to its
last whole batch, and once there is room the stream must go on -- without a
restart, exactly once, with the links told why they wait.
"""

from __future__ import annotations

import random

import pytest

from helpers.sim import assert_exactly_once, records_for
from purelink.listener.storage import MinFree
from purelink.protocol import events
from purelink.protocol.sender import SenderState
from purelink.testing import FakeNet, NetConfig, Simulation


def _net(seed: int) -> FakeNet:
    return FakeNet(seed, NetConfig(delay=0.01, loss=0.01), NetConfig(delay=0.01, loss=0.01))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_full_disk_holds_the_links_and_the_stream_goes_on_once_there_is_room(
    seed: int,
) -> None:
    rng = random.Random(seed)
    sim = Simulation(_net(seed), disk=1 << 30, min_free=MinFree(bytes=0))
    sim.backend.free = 150_000  # type: ignore[union-attr]
    ra, rb = records_for(rng, 1500), records_for(rng, 1500)
    a = sim.add_link("s", ra, producer="a")
    b = sim.add_link("s", rb)
    assert sim.driver is not None and sim.core is not None
    assert sim.run(lambda: "s" in sim.core.full_streams, max_time=60)
    stored = len(sim.store.records("s"))
    sim.run(lambda: False, max_time=3)  # 3 s with no room
    assert len(sim.store.records("s")) == stored  # nothing more went in
    for link in (a, b):
        assert link.sender.state == SenderState.CONNECTING  # waiting, not failed
        assert link.sender.stats.disk_full > 0
        held = [e for e in link.events if isinstance(e, events.Held)]
        assert [e.reason for e in held] == ["disk_full"]  # said once
        assert link.told <= stored
    assert sim.core.stats.dropped.get("disk_full", 0) > 0
    sim.backend.free += 10_000_000  # type: ignore[union-attr]  # the operator made room
    assert sim.run(sim.all_done, max_time=120)
    assert "s" not in sim.core.full_streams
    assert_exactly_once(sim, "s", [(a, ra), (b, rb)])
    assert a.told == len(ra) and b.told == len(rb)


def test_below_the_min_free_mark_the_stream_stops_before_the_disk_is_full() -> None:
    rng = random.Random(7)
    sim = Simulation(_net(7), disk=100_000_000, min_free=MinFree(fraction=0.8))
    sim.backend.free = 81_000_000  # type: ignore[union-attr]  # 1 MB above the mark
    records = records_for(rng, 5000)
    link = sim.add_link("s", records)
    assert sim.driver is not None and sim.core is not None
    assert sim.run(lambda: "s" in sim.core.full_streams, max_time=60)
    assert sim.driver.no_room["s"].why == "min_free"
    # stopped at the mark, before a drain that would pass it: long before the disk is full
    assert 80_000_000 <= sim.backend.free < 80_500_000  # type: ignore[union-attr]
    sim.run(lambda: False, max_time=2)
    assert link.sender.state == SenderState.CONNECTING
    sim.min_free = MinFree()  # (a restart with a lower mark would do the same)
    sim.driver.min_free = MinFree()
    assert sim.run(sim.all_done, max_time=120)
    assert_exactly_once(sim, "s", [(link, records)])


def test_an_other_stream_is_not_held_by_a_full_one() -> None:
    """The simulated disk holds every stream, so a stream on another disk is
    modelled by room that comes back: here, both stop and both go on."""
    rng = random.Random(9)
    sim = Simulation(_net(9), disk=1 << 30, min_free=MinFree())
    sim.backend.free = 60_000  # type: ignore[union-attr]
    ra, rb = records_for(rng, 600), records_for(rng, 600)
    a = sim.add_link("x", ra)
    b = sim.add_link("y", rb)
    assert sim.core is not None
    assert sim.run(lambda: bool(sim.core.full_streams), max_time=60)
    sim.backend.free += 10_000_000  # type: ignore[union-attr]
    assert sim.run(sim.all_done, max_time=120)
    assert_exactly_once(sim, "x", [(a, ra)])
    assert_exactly_once(sim, "y", [(b, rb)])


def test_a_failed_sync_stops_its_stream_until_a_restart_and_loses_nothing() -> None:
    """fsyncgate: a sync that failed may have lost the dirty pages, so nothing
    written since the last good sync is told stored; the stream's links wait
    (told why), other streams go on, and a restart recovers it."""
    rng = random.Random(5)
    sim = Simulation(_net(5), sync_interval=0.01)
    ra, rb = records_for(rng, 3000), records_for(rng, 3000)
    a = sim.add_link("s", ra, producer="a")
    b = sim.add_link("t", rb)
    assert sim.core is not None
    assert sim.run(lambda: a.told > 300, max_time=60)
    sim.backend.failing.add("s")  # type: ignore[union-attr]  # the next sync of "s": EIO
    assert sim.run(lambda: any(isinstance(e, events.Held) for e in a.events), max_time=30)
    told = a.told
    assert sim.run(lambda: b.done, max_time=120)  # the other stream is not held
    assert a.told == told  # nothing more of "s" was told stored
    assert a.sender.state == SenderState.CONNECTING
    held = [e.reason for e in a.events if isinstance(e, events.Held)]
    assert held == ["stream_failed"]
    assert a.sender.stats.stream_failed > 0
    sim.backend.failing.clear()  # type: ignore[union-attr]
    sim.restart_listener(crash=True)  # the restart: what the failed sync held is gone
    assert sim.run(sim.all_done, max_time=120)
    assert_exactly_once(sim, "s", [(a, ra)])
    assert_exactly_once(sim, "t", [(b, rb)])


def test_a_full_disk_with_keys_holds_and_resumes_the_encrypted_links() -> None:
    """The same with every datagram sealed (SecureCore): the refusals reach the
    links through the handshake's sealing, and nothing is lost or repeated."""
    from purelink.protocol.keys import Key, KeyTable  # noqa: PLC0415 - needs cryptography

    rng = random.Random(11)
    secret = b"k" * 32
    sim = Simulation(_net(11), keys=KeyTable([Key("", secret)]), disk=1 << 30, min_free=MinFree())
    sim.backend.free = 120_000  # type: ignore[union-attr]
    ra, rb = records_for(rng, 1200), records_for(rng, 1200)
    a = sim.add_link("s", ra, producer="a", secret=secret)
    b = sim.add_link("s", rb, secret=secret)
    assert sim.core is not None
    assert sim.run(lambda: "s" in sim.core.full_streams, max_time=60)
    assert sim.run(
        lambda: all(any(isinstance(e, events.Held) for e in x.events) for x in (a, b)),
        max_time=30,
    )
    sim.backend.free += 10_000_000  # type: ignore[union-attr]
    assert sim.run(sim.all_done, max_time=120)
    assert_exactly_once(sim, "s", [(a, ra), (b, rb)])
