"""Path MTU discovery (protocol/pmtu.py, RFC 8899) in virtual time.

Two levels: the state machine alone, driven by a tiny path that drops every
datagram above its MTU and answers the rest one RTT later; and whole links
(Sender + ListenerCore) through a FakeNet path with an MTU, where every
record must be stored exactly once without the link stalling.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from helpers.shipping import report
from helpers.sim import assert_exactly_once, records_for
from purelink.protocol import pmtu, wire
from purelink.protocol.pmtu import BASE, PathMtu, PmtuState
from purelink.protocol.sender import Sender, SenderState
from purelink.testing import FakeNet, NetConfig, Simulation

RTT = 0.05
RTO = 0.2


@dataclass
class Path:
    """Drops datagrams above `mtu`; answers a probe that passes one RTT later."""

    mtu: int
    answers: list[tuple[float, int, int]] = field(default_factory=list)
    probed: list[int] = field(default_factory=list)


def drive(pm: PathMtu, path: Path, now: float, until: float) -> float:
    """Run the probing of `pm` over `path` from `now` to `until` (virtual time);
    returns the time it last acted."""
    pn = 1000
    pm.start(now)
    while now < until:
        size = pm.next_probe(now)
        if size is not None:
            pn += 1
            path.probed.append(size)
            pm.probe_sent(pn, size, now, RTO)
            if size <= path.mtu:
                path.answers.append((now + RTT, pn, size))
            continue
        due = [t for t in (pm.get_timer(), *(a[0] for a in path.answers)) if t is not None]
        if not due:
            return now
        if min(due) > until:
            return now  # idle until after `until`: the time it last acted
        now = max(now, min(due))
        for answer in [a for a in path.answers if a[0] <= now]:
            path.answers.remove(answer)
            pm.on_probe_acked(answer[1], answer[2], now)
        pm.handle_timer(now)
    return now


def test_a_path_that_carries_the_maximum_takes_one_probe() -> None:
    pm = PathMtu(1400)
    assert pm.size == BASE  # until confirmed, data goes at the base size
    path = Path(mtu=1500)
    drive(pm, path, 0.0, 10.0)
    assert (pm.size, pm.state, path.probed) == (1400, PmtuState.COMPLETE, [1400])
    assert pm.get_timer() is None  # at the maximum: nothing to probe again


@pytest.mark.parametrize(
    "mtu",
    [1392, 1372, 1232, 1300, 1201],  # WireGuard over IPv4 / IPv6, IPv6 minimum, others
)
def test_the_search_finds_the_path_mtu_within_a_step(mtu: int) -> None:
    pm = PathMtu(1400)
    path = Path(mtu=mtu)
    end = drive(pm, path, 0.0, 60.0)
    assert pm.state == PmtuState.COMPLETE
    assert mtu - pmtu.STEP < pm.size <= mtu
    assert pm.size == max((s for s in path.probed if s <= mtu), default=BASE)
    # never a size above one that failed MAX_PROBES times, and a bounded search
    assert len(path.probed) <= 3 * 8, path.probed
    assert end < 10.0


def test_a_path_below_the_base_keeps_the_base() -> None:
    pm = PathMtu(1400)
    drive(pm, Path(mtu=1100), 0.0, 60.0)
    assert (pm.size, pm.state) == (BASE, PmtuState.COMPLETE)


def test_datagram_size_at_or_below_the_base_is_never_probed() -> None:
    pm = PathMtu(1000)
    path = Path(mtu=1500)
    drive(pm, path, 0.0, 10.0)
    assert (pm.size, pm.state, path.probed) == (1000, PmtuState.COMPLETE, [])


def test_a_lost_probe_is_retried_before_the_size_is_given_up() -> None:
    pm = PathMtu(1400)
    pm.start(0.0)
    assert pm.next_probe(0.0) == 1400
    pm.probe_sent(1, 1400, 0.0, RTO)
    assert pm.next_probe(0.0) is None  # one at a time
    assert pm.get_timer() == RTO
    pm.handle_timer(RTO)  # lost once: the same size again
    assert pm.next_probe(RTO) == 1400
    pm.probe_sent(2, 1400, RTO, RTO)
    pm.on_probe_acked(2, 1400, RTO + RTT)
    assert (pm.size, pm.state) == (1400, PmtuState.COMPLETE)


def test_late_short_or_foreign_answers_are_ignored() -> None:
    pm = PathMtu(1400)
    pm.start(0.0)
    size = pm.next_probe(0.0)
    assert size == 1400
    pm.probe_sent(7, size, 0.0, RTO)
    pm.on_probe_acked(6, 1400, 0.01)  # another packet number
    pm.on_probe_acked(7, 1300, 0.01)  # the listener saw fewer bytes than were sent
    assert pm.size == BASE
    pm.on_probe_acked(7, 1400, 0.02)
    assert pm.size == 1400


def test_emsgsize_fails_the_size_at_once() -> None:
    pm = PathMtu(1400)
    path = Path(mtu=1500)
    pm.start(0.0)
    pm.on_send_error(1400, 0.0)  # the kernel: the interface's MTU is below 1,400
    drive(pm, path, 0.0, 30.0)
    assert pm.size < 1400 and pm.size >= 1400 - pmtu.STEP
    assert 1400 not in path.probed
    pm.on_send_error(1000, 30.0)  # at or below the base: nothing to fall back to
    assert pm.size >= 1400 - pmtu.STEP


def test_emsgsize_of_the_size_in_use_drops_it() -> None:
    pm = PathMtu(1400)
    drive(pm, Path(mtu=1500), 0.0, 10.0)
    assert pm.size == 1400
    pm.on_send_error(1400, 10.0)
    assert pm.size == BASE  # nothing under 1,400 was confirmed
    drive(pm, Path(mtu=1500), 10.0, 30.0)
    assert 1400 - pmtu.STEP <= pm.size < 1400


@dataclass
class Sent:
    size: int
    sent: float


def test_a_black_hole_drops_to_the_base_and_searches_again() -> None:
    """The path shrinks under the size in use: every large datagram is lost,
    small ones and the answers still pass.  After BLACK_HOLE_ROUNDS rounds
    the size is the base, and a new search finds the new MTU."""
    pm = PathMtu(1400)
    now = drive(pm, Path(mtu=1500), 0.0, 5.0)
    assert pm.size == 1400
    t = now + 1.0
    for _ in range(pmtu.BLACK_HOLE_ROUNDS - 1):
        pm.on_acked([Sent(300, t - 0.01)], t)  # a short datagram got through
        for k in range(10):
            pm.on_lost(1400, t - 0.1 + k * 0.001, t, RTO)
        assert pm.size == 1400
        t += RTO
    pm.on_acked([], t)  # an answer (to a probe) came
    pm.on_lost(1400, t - 0.05, t, RTO)
    assert (pm.size, pm.black_holes) == (BASE, 1)
    path = Path(mtu=1300)
    drive(pm, path, t, t + 30.0)
    assert 1300 - pmtu.STEP < pm.size <= 1300
    assert path.probed[0] == 1400  # the search starts from the top again


def test_an_outage_is_not_a_black_hole() -> None:
    """Nothing passes for a while (whatever its size); when it ends, one answer
    reveals every loss at once, and the resends are delivered."""
    pm = PathMtu(1400)
    now = drive(pm, Path(mtu=1500), 0.0, 5.0)
    sent = [now + 0.001 * k for k in range(200)]  # sent during a 1.5 s outage
    t = now + 1.5
    for _ in range(5):  # timer-declared losses during the outage: no answer since
        for s in sent[:20]:
            pm.on_lost(1400, s, t, RTO)
        t += RTO
    pm.on_acked([], t)  # the outage ends: an answer
    for s in sent:
        pm.on_lost(1400, s, t, RTO)
    pm.on_acked([Sent(1400, t + 0.001)], t + RTT)  # the resends get through
    for s in sent:
        pm.on_lost(1400, s, t + 2 * RTO, RTO)  # old losses, reported late
    assert (pm.size, pm.black_holes) == (1400, 0)


def test_random_loss_of_every_size_is_not_a_black_hole() -> None:
    pm = PathMtu(1400)
    now = drive(pm, Path(mtu=1500), 0.0, 5.0)
    rng = random.Random(5)
    for i in range(20_000):  # 20 s at 1 ms per datagram, 5 % lost
        sent = now + i * 0.001
        if rng.random() < 0.05:
            pm.on_lost(1400, sent, sent + RTT * 1.25, RTO)
        else:
            pm.on_acked([Sent(1400, sent)], sent + RTT)
    assert (pm.size, pm.black_holes) == (1400, 0)


def test_a_search_below_the_maximum_probes_again_later() -> None:
    pm = PathMtu(1400)
    path = Path(mtu=1300)
    now = drive(pm, path, 0.0, 30.0)
    assert pm.size <= 1300 and pm.state == PmtuState.COMPLETE
    timer = pm.get_timer()
    assert timer is not None and timer - now <= pmtu.RAISE_INTERVAL
    path.mtu = 1500  # the path grew (a route change)
    drive(pm, path, now, timer - 1.0)
    assert pm.size <= 1300  # not before the raise timer
    drive(pm, path, timer - 1.0, timer + 10.0)
    assert pm.size == 1400


# ------------------------------------------------------------- whole links


class CheckedNet(FakeNet):
    """A FakeNet that also counts the datagrams too large for the path that were
    not probes (a link that finds its path MTU sends none once it has found it)."""

    too_big_data = 0

    def send(self, data: bytes, source: tuple[str, int], dest: str, now: float, up: bool) -> None:
        mtu = (self.up if up else self.down).mtu
        if mtu is not None and len(data) > mtu and data[3] != wire.MsgType.PROBE:
            self.too_big_data += 1
        super().send(data, source, dest, now, up)


def run_link(
    mtu: int | None, recs: list[bytes], seed: int, loss: float = 0.0
) -> tuple[Simulation, float]:
    up = NetConfig(loss=loss, delay=0.01, mtu=mtu)
    sim = Simulation(CheckedNet(seed, up, NetConfig(loss=loss, delay=0.01)))
    link = sim.add_link("s", recs, pmtu=True, push_every=200)
    start = sim.clock.now
    assert sim.run(sim.all_done, max_time=120), f"mtu {mtu}: not done"
    assert_exactly_once(sim, "s", [(link, recs)])
    return sim, sim.clock.now - start


@pytest.mark.parametrize("mtu", [1392, 1372, 1232])  # WireGuard (IPv4, IPv6), IPv6 minimum
def test_a_link_on_a_small_path_neither_fragments_nor_stalls(mtu: int) -> None:
    """A transfer that starts at once goes as fast as on a path that carries the
    maximum (data goes at the base size while the search runs); the search
    ends at the path's size, and what is sent then goes in datagrams of that
    size.  No datagram of data is ever too large for the path: only probes."""
    recs = [i.to_bytes(4, "little") + bytes(996) for i in range(6000)]
    sim, took = run_link(mtu, recs[:3000], seed=1)
    _, free = run_link(None, recs[:3000], seed=1)
    assert took <= free * 1.5, (took, free)
    link = next(iter(sim.links.values()))
    sender = link.sender
    pm = sender._pmtu
    assert pm is not None
    assert sim.run(lambda: pm.state == PmtuState.COMPLETE, max_time=30)
    assert mtu - pmtu.STEP < sender.datagram_size <= mtu
    sent = sender.stats.datagrams
    link.todo = recs[3000:]
    assert sim.run(sim.all_done, max_time=60)
    assert_exactly_once(sim, "s", [(link, recs)])
    assert 0 < sim.net.too_big < pm.probes
    assert isinstance(sim.net, CheckedNet) and sim.net.too_big_data == 0  # probes only
    chunk = sender.datagram_size - wire.FRAGMENT_OVERHEAD  # batch bytes per datagram
    assert sender.stats.datagrams - sent < 3000 * 1002 / chunk + 30


def test_a_link_whose_path_shrinks_finds_the_black_hole() -> None:
    """Mid-transfer the path drops to MTU 1,300 (a tunnel comes up): large
    datagrams vanish, the link falls back to the base size, resends what was
    lost in pieces that pass, searches again, and stores everything once."""
    recs = records_for(random.Random(8), 6000)
    net = FakeNet(8, NetConfig(delay=0.01), NetConfig(delay=0.01))
    sim = Simulation(net)
    link = sim.add_link("s", recs, pmtu=True, push_every=50)
    sim.run(lambda: link.sender.stored >= 1500, max_time=60)
    sender = link.sender
    assert sender.datagram_size == 1400
    net.up = NetConfig(delay=0.01, mtu=1300)
    assert sim.run(sim.all_done, max_time=120)
    assert_exactly_once(sim, "s", [(link, recs)])
    assert sender._pmtu is not None and sender._pmtu.black_holes >= 1
    # a paced link may finish before the search does: it goes on while idle
    assert sim.run(lambda: sender._pmtu.state == PmtuState.COMPLETE, max_time=60)
    assert 1300 - pmtu.STEP < sender.datagram_size <= 1300


@pytest.mark.parametrize("seed", range(20))
def test_lossy_small_paths_store_everything_once(seed: int) -> None:
    rng = random.Random(seed)
    recs = records_for(rng, 800, large=True)
    mtu = rng.choice((1232, 1300, 1372, 1392, None))
    sim, _ = run_link(mtu, recs, seed, loss=rng.choice((0.0, 0.05, 0.2)))
    assert isinstance(sim.net, CheckedNet) and sim.net.too_big_data == 0


def test_probes_are_padded_probe_datagrams() -> None:
    probe = wire.encode_probe(5, 9, 2, 1300)
    assert len(probe) == 1300
    msg = wire.decode_datagram(probe)
    assert msg == wire.Probe(5, 9, 2, 1300 - wire.PROBE_SIZE)


def run_mtu_seed(seed: int) -> None:
    """A bad network whose path MTU may be small and may shrink mid-transfer;
    1 or 2 links find it while they ship; every record stored once."""
    rng = random.Random(seed)
    loss = rng.choice((0.0, 0.05, 0.2))
    mtu = rng.choice((1232, 1300, 1372, 1392, None))
    up = NetConfig(loss=loss, duplicate=0.05, delay=0.005, jitter=rng.choice((0.0, 0.01)), mtu=mtu)
    net = CheckedNet(seed, up, NetConfig(loss=loss, duplicate=0.05, delay=0.005, jitter=0.01))
    sim = Simulation(net, sync_interval=rng.choice((0.0, 0.002)))
    links = []
    for k in range(rng.randrange(1, 3)):
        recs = records_for(rng, rng.randrange(1, 600), large=True)
        link = sim.add_link(
            "s", recs, producer=f"p{k}" if rng.random() < 0.5 else "", pmtu=True, push_every=40
        )
        links.append((link, recs))
    if rng.random() < 0.3:  # the path shrinks (a tunnel comes up)
        until = sim.clock.now + rng.uniform(0.05, 1.0)
        sim.run(lambda: sim.clock.now >= until, max_time=5)
        net.up = NetConfig(loss=loss, delay=0.005, mtu=rng.choice((1232, 1300)))
    if rng.random() < 0.2:
        sim.restart_listener(crash=True)
    assert sim.run(sim.all_done, max_time=600), f"seed {seed}: not done"
    assert_exactly_once(sim, "s", links)


@pytest.mark.parametrize("seed", range(30))
def test_mtu_seeds(seed: int) -> None:
    run_mtu_seed(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(30, 330))
def test_mtu_seeds_slow(seed: int) -> None:
    run_mtu_seed(seed)


class IcmpNet(CheckedNet):
    """A CheckedNet whose router answers a datagram too big for the path with an
    ICMP "too big", as a real router does: the kernel reports it on the link's
    socket (without the size) a round trip after it was sent (`reports`,
    handed to the links by `ship_through_mtu`); `icmp=False`: filtered."""

    def __init__(self, seed: int, up: NetConfig, down: NetConfig, icmp: bool) -> None:
        super().__init__(seed, up, down)
        self.icmp = icmp
        self.reports: list[float] = []

    def send(self, data: bytes, source: tuple[str, int], dest: str, now: float, up: bool) -> None:
        mtu = (self.up if up else self.down).mtu
        if self.icmp and up and mtu is not None and len(data) > mtu:
            self.reports.append(now + 2 * self.up.delay)
        super().send(data, source, dest, now, up)


@dataclass
class MtuRun:
    took: float
    """Seconds from the session's start until every record was stored."""
    settled: float
    """Seconds from the session's start until the search was complete."""
    sender: Sender


def ship_through_mtu(mtu: int | None, seed: int, *, icmp: bool, loss: float = 0.0) -> MtuRun:
    """8 MB of 1,000-B records through 50 Mbit/s, 50 ms, a 256 KB queue and MTU `mtu`."""
    up = NetConfig(loss=loss, delay=0.025, rate=50e6 / 8, mtu=mtu)
    net = IcmpNet(seed, up, NetConfig(loss=loss, delay=0.025, mtu=mtu), icmp)
    sim = Simulation(net)
    recs = [i.to_bytes(4, "little") + bytes(996) for i in range(8000)]
    link = sim.add_link("s", recs, pmtu=True, anonymous_id=(1 << 63) | (seed + 1))
    sender = link.sender
    assert sim.run(lambda: sender.state == SenderState.OPEN, max_time=10)
    start = sim.clock.now
    settled = -1.0

    def done() -> bool:
        nonlocal settled
        now = sim.clock.now
        while net.reports and net.reports[0] <= now:
            net.reports.pop(0)
            sender.on_path_too_big(now)
        pm = sender._pmtu
        if settled < 0 and pm is not None and pm.state == PmtuState.COMPLETE:
            settled = now - start
        return sim.all_done() and settled >= 0

    assert sim.run(done, max_time=60)
    assert_exactly_once(sim, "s", [(link, recs)])
    assert net.too_big_data == 0  # probes only
    return MtuRun(sim.clock.now - start, settled, sender)


@pytest.mark.parametrize("seed", range(2))  # clean and 0.1 % loss; more seeds: _slow
def test_an_ipv4_path_of_mtu_1280_costs_no_rate_and_settles_fast(seed: int) -> None:
    """An IPv4 path of MTU 1,280 (1,252 B of UDP payload) at 50 Mbit/s and 50 ms,
    clean or at 0.1 % loss: the router's "too big" reports fail each probe at
    once, so the search ends within a few round trips (7 probes); probes are
    never flights, so none of them is taken for a congestion loss; and the
    transfer takes no longer than on a path that carries 1,400 B (5 % more at
    most: its datagrams are 11 % smaller, with the same 40 B of header).
    With the reports filtered the search waits out its probes' timeouts,
    and the transfer still goes at the rate (data goes at 1,200 B meanwhile)."""
    loss = 0.001 * (seed % 2)
    free = ship_through_mtu(None, seed, icmp=True, loss=loss)
    small = ship_through_mtu(1252, seed, icmp=True, loss=loss)
    silent = ship_through_mtu(1252, seed, icmp=False, loss=loss)
    report(
        "test_an_ipv4_path_of_mtu_1280",
        {"seed": seed, "loss": loss, "free": free.took, "small": small.took,
         "silent": silent.took, "settled": small.settled, "settled_silent": silent.settled},
    )  # fmt: skip
    for run in (small, silent):
        sender = run.sender
        assert 1252 - pmtu.STEP < sender.datagram_size <= 1252
        assert sender.cc.losses == sender.stats.lost  # data flights only, never a probe
        assert run.took <= 1.05 * free.took, (run.took, free.took)
    pm = small.sender._pmtu
    assert pm is not None and pm.too_big >= 4  # 1,400, 1,300, 1,275, ... failed at once
    assert small.settled <= 10 * 0.05, small.settled


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2, 10))
def test_an_ipv4_path_of_mtu_1280_costs_no_rate_and_settles_fast_slow(seed: int) -> None:
    test_an_ipv4_path_of_mtu_1280_costs_no_rate_and_settles_fast(seed)
