"""The torture path and outages in virtual time: what the TUN emulator showed.

Why it exists: `purelink bench paths --torture` (10 % loss, 5 % duplicates,
+-20 ms jitter on 25 ms each way, a 1.5 s blackout every 6 s, 50 Mbit/s with
a 256 KB queue) once stored 7,616 of 30,000 records in 180 s, while the same
scenario through the sans-IO core finished in 28 s of virtual time.  Three
gaps between the simulation and the path, each pinned here:

* FakeNet drew jitter one way only (delay to delay + jitter), so the
  smallest RTT was the propagation delay; a real path (and the emulator,
  and netem) spreads the delay both ways, so min_rtt is the luckiest round
  trip, 10 ms where most take 50.  BBR's model built on it spiralled down
  (cwnd 2 x bw x min_rtt, below what Little's law needs at btl_bw);
  `symmetric=True` reproduces it, and the runs below must finish in time;
* the link thread stamped every answer of a drain with the time the drain
  began: on a busy machine that gave RTT samples below the path's
  propagation delay (a unit test of the driver, with a fake clock);
* after a blackout, the link must be back at 90 % of the bottleneck within
  2 RTTs plus the probe interval, at every seed.
"""

from __future__ import annotations

import math
import random

import pytest

import purelink.link.thread as link_module
from purelink.link.thread import LinkThread
from purelink.testing.fakes import FakeNet, NetConfig
from purelink.testing.sim import SimLink, Simulation

RATE = 50e6 / 8
"""The paths' bottleneck, bytes/s."""
RTT = 0.05
TORTURE = NetConfig(
    loss=0.10,
    duplicate=0.05,
    delay=RTT / 2,
    jitter=0.020,
    symmetric=True,
    rate=RATE,
    queue=256 << 10,
)


def mixed_records(count: int, seed: int, largest: int = 20 * 1024) -> list[bytes]:
    """`count` distinct records of 0 B to `largest`, sizes log-uniform (the
    torture benchmark's mix, bench/paths/peers.py)."""
    rng = random.Random(seed)
    filler = rng.randbytes(largest)
    out = []
    for i in range(count):
        size = min(largest, int(math.exp(rng.random() * math.log(largest + 1))) - 1)
        out.append((i.to_bytes(8, "big") + filler)[:size])
    return out


def torture(records: list[bytes], seed: int, limit: float) -> tuple[Simulation, SimLink, float]:
    """Ship `records` through the torture path, blackouts 1.5 s dark every 6 s
    from 1 s in; returns the simulation, the link and the virtual seconds taken."""
    net = FakeNet(seed, TORTURE, TORTURE)
    sim = Simulation(net)
    link = sim.add_link("torture", records)
    start = sim.clock.now
    dark = start + 1.0
    while not sim.all_done() and sim.clock.now - start < limit:
        if sim.clock.now >= dark:
            net.blackout_until = dark + 1.5
            dark += 6.0
        if not sim.step():
            break
    return sim, link, sim.clock.now - start


@pytest.mark.parametrize("seed", [1, 2])
def test_torture_path_stores_mixed_records_exactly_once_in_time(seed: int) -> None:
    """5,000 mixed records (0 B to 20 KB, 10 MB) through the torture path,
    one blackout included: stored exactly once, in order, at 0.8 MB/s at
    least (the spiralling model stored 2,714 of them in 60 s)."""
    records = mixed_records(5000, seed=14)
    total = sum(map(len, records))
    sim, link, took = torture(records, seed, limit=60.0)
    assert link.done, f"{link.told} of {len(records)} told stored in {took:.1f} s"
    stored = [payload for _, _, _, payload in sim.store.records("torture")]
    assert stored == records
    assert total / took >= 0.8e6, f"{total / took / 1e3:,.0f} KB/s"


def test_symmetric_jitter_spreads_the_delay_both_ways() -> None:
    """The smallest one-way delay is delay - jitter, the mean is the delay."""
    net = FakeNet(3, NetConfig(delay=0.025, jitter=0.020, symmetric=True))
    for i in range(2000):
        net.send(i.to_bytes(2, "big"), ("a", 1), "b", 0.0, up=True)
    due = [item.due for item in net._queue]
    assert 0.005 <= min(due) < 0.0055
    assert 0.0445 < max(due) <= 0.045
    assert sum(due) / len(due) == pytest.approx(0.025, abs=0.001)


# ------------------------------------------------------------------ outages


def back_after_blackout(seed: int, loss: float) -> tuple[float, float]:
    """Ship at full rate, black the path out for 1.5 s, and measure from the
    blackout's end to the end of the first 50 ms in which the listener got at
    least 90 % of the bottleneck's payload rate.  Returns (that time, the
    interval the link's probes had backed off to: 0.25 s on this path)."""
    up = NetConfig(loss=loss, delay=RTT / 2, rate=RATE, queue=256 << 10)
    down = NetConfig(loss=loss, delay=RTT / 2)
    net = FakeNet(seed, up, down)
    sim = Simulation(net)
    record = 1000
    link = sim.add_link("outage", [b"r" * record] * 60_000)
    s = link.sender
    sim.run(lambda: sim.clock.now >= 1000.0 + 3.0, max_time=4.0)
    assert s.stored_bytes > 0.8 * RATE * 2.0 * 0.93, "not at full rate before the outage"
    end = sim.clock.now + 1.5
    net.blackout_until = end
    sim.run(lambda: sim.clock.now >= end, max_time=2.0)
    probe = s.rtt.pto  # the interval the probes backed off to
    assert probe <= s.config.max_probe_interval
    # payload per wire byte of 1,000-B records (headers, the batch's length table)
    share = s.payload_bytes / max(s.stats.bytes - s.stats.retransmit_bytes, 1)
    assert sim.core is not None
    written = sim.store.written
    pid = s.producer_id
    last, t, step = written.get(pid, 0), end, 0.05
    while t < end + 3.0:
        t += step
        sim.run(lambda t=t: sim.clock.now >= t, max_time=1.0)  # type: ignore[misc]
        now = written.get(pid, 0)
        if (now - last) / step >= 0.9 * RATE * share * (1 - loss):
            return t - end, probe
        last = now
    return float("inf"), probe


@pytest.mark.parametrize("seed", range(1, 3))
@pytest.mark.parametrize("loss", [0.0, 0.01])
def test_full_rate_again_within_two_rtts_and_the_probe_interval(seed: int, loss: float) -> None:
    took, probe = back_after_blackout(seed, loss)
    assert probe == pytest.approx(0.25)
    assert took <= 2 * RTT + probe + 0.05, f"{took:.2f} s after the blackout"


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 11))
@pytest.mark.parametrize("loss", [0.0, 0.01])
def test_full_rate_again_within_two_rtts_and_the_probe_interval_slow(
    seed: int, loss: float
) -> None:
    test_full_rate_again_within_two_rtts_and_the_probe_interval(seed, loss)


# -------------------------------------------------------- the link thread


class _Transport:
    """Hands the thread three answers, the clock moving 4 ms while each is read."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.broken = False
        self.refused = False
        self.path_too_big = 0

    def receive(self, handle: object) -> None:
        for i in range(3):
            self.clock[0] += 0.004
            handle(bytes([i]))  # type: ignore[operator]


class _Sender:
    def __init__(self) -> None:
        self.stamps: list[float] = []

    def receive_datagram(self, data: bytes, now: float) -> None:
        self.stamps.append(now)


def test_each_answer_is_stamped_when_it_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Answers read one after another in a drain that takes 12 ms are not all
    stamped with its start: an answer stamped before it was read makes an RTT
    sample shorter than the path (the min_rtt BBR builds its model on)."""
    clock = [100.0]
    monkeypatch.setattr(link_module.time, "monotonic", lambda: clock[0])
    thread = object.__new__(LinkThread)
    sender = _Sender()
    thread._sender = sender  # type: ignore[assignment]
    thread._transport = _Transport(clock)  # type: ignore[assignment]
    thread._heard = 0.0
    after = thread._receive(100.0)
    assert sender.stamps == pytest.approx([100.004, 100.008, 100.012])
    assert after == pytest.approx(100.012)
    assert thread._heard == pytest.approx(100.012)
