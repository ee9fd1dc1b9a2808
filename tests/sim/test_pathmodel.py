"""The one path model (purelink.testing.pathmodel) on a hand-stepped clock.

Why it exists: FakeNet, the loopback proxy and the TUN path emulator all
take their physics from `PathModel`, so its figures are what every test and
benchmark of a bad path is worth -- when a packet comes out, what the
bottleneck's queue admits, how often it loses or duplicates, when it is
dark, what it does over the MTU, in which order, with which draws.  These
tests give explicit times and seeded RNGs: no sockets, no devices, no
sleeps.  The router's own part (ICMP, fragments, its heap) is
bench/tests/test_pathemu_model.py.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import replace
from typing import Any

import pytest

from purelink.testing import FakeNet, NetConfig, PathModel, seeded_rng

PACKET = b"p" * 100


def model(seed: int = 3, **kw: Any) -> PathModel:
    return PathModel(NetConfig(**{"delay": 0.0, **kw}), seeded_rng(seed, "up"))


def times(out: list[tuple[float, bytes]]) -> list[float]:
    return [round(at, 9) for at, _ in out]


# ------------------------------------------------------------ each impairment


def test_a_packet_comes_out_after_the_delay() -> None:
    m = model(delay=0.025)
    [(at, packet)] = m.arrive(PACKET, 1.0)
    assert at == pytest.approx(1.025) and packet == PACKET
    st = m.stats
    assert (st.packets, st.bytes) == (1, 100)


def test_the_bottleneck_serialises_at_its_rate_and_its_queue_drops_the_tail() -> None:
    # 125,000 B/s: a 1,250-byte packet takes 10 ms; the queue holds 4 of them
    m = model(rate=125_000.0, queue=5000)
    out = [c for _ in range(10) for c in m.arrive(b"q" * 1250, 0.0)]
    assert m.stats.queue_drops == 6
    assert times(out) == [0.01, 0.02, 0.03, 0.04]
    # 20 ms later two have left: there is room for exactly two more
    m2 = model(rate=125_000.0, queue=5000)
    for _ in range(4):
        m2.arrive(b"q" * 1250, 0.0)
    for _ in range(3):
        m2.arrive(b"q" * 1250, 0.02)
    assert m2.stats.queue_drops == 1
    assert m2.stats.max_backlog == 5000


def test_a_bottleneck_without_a_queue_limit_delays_but_never_drops() -> None:
    m = model(rate=1e6, queue=None, delay=0.01)
    out = [c for _ in range(100) for c in m.arrive(b"z" * 1000, 0.0)]
    assert len(out) == 100 and m.stats.queue_drops == 0
    assert out[-1][0] == pytest.approx(0.01 + 100 * 0.001)


def test_an_idle_bottleneck_starts_a_packet_at_once() -> None:
    m = model(rate=1e6, delay=0.0)
    m.arrive(b"a" * 1000, 0.0)
    [(at, _)] = m.arrive(b"b" * 1000, 5.0)  # long after the first left
    assert at == pytest.approx(5.001)


@pytest.mark.parametrize("loss", [0.001, 0.01, 0.05, 0.10])
def test_random_loss_happens_at_its_rate(loss: float) -> None:
    m = model(loss=loss)
    n = 200_000
    out = sum(len(m.arrive(b"l", i * 1e-6)) for i in range(n))
    lost = m.stats.lost
    sigma = (n * loss * (1 - loss)) ** 0.5
    assert abs(lost - n * loss) < 5 * sigma
    assert out == n - lost


def test_duplicates_are_extra_copies_at_their_rate() -> None:
    m = model(duplicate=0.05)
    n = 50_000
    out = [pkt for i in range(n) for _, pkt in m.arrive(i.to_bytes(4, "big"), 0.0)]
    dup = m.stats.duplicated
    assert abs(dup - 0.05 * n) < 5 * (n * 0.05 * 0.95) ** 0.5
    assert len(out) == n + dup
    assert len(set(out)) == n


def run_jitter(m: PathModel, n: int = 5000) -> tuple[list[float], list[int]]:
    """n packets 0.2 ms apart (closer than the jitter): their delays and the
    order they come out in."""
    out = []
    for i in range(n):
        sent = i * 0.0002
        out += [(at, at - sent, i) for at, _ in m.arrive(i.to_bytes(4, "big"), sent)]
    out.sort()
    return [d for _, d, _ in out], [i for _, _, i in out]


def test_symmetric_jitter_spreads_the_delay_both_ways_and_reorders() -> None:
    delays, order = run_jitter(model(delay=0.025, jitter=0.002, symmetric=True))
    assert min(delays) >= 0.023 - 1e-9 and max(delays) <= 0.027 + 1e-9
    assert max(delays) - min(delays) > 0.0035  # the band is used, not one value
    assert sum(delays) / len(delays) == pytest.approx(0.025, abs=0.0001)
    assert sum(1 for a, b in itertools.pairwise(order) if b < a) > 500


def test_symmetric_jitter_wider_than_the_delay_never_goes_below_zero() -> None:
    delays, _ = run_jitter(model(delay=0.025, jitter=0.020, symmetric=True), n=2000)
    assert 0.005 - 1e-9 <= min(delays) < 0.0055
    assert 0.0445 < max(delays) <= 0.045 + 1e-9
    assert sum(delays) / len(delays) == pytest.approx(0.025, abs=0.001)
    clamped, _ = run_jitter(model(delay=0.001, jitter=0.005, symmetric=True), n=2000)
    assert min(clamped) == pytest.approx(0.0, abs=1e-9) and max(clamped) <= 0.006 + 1e-9


def test_one_way_jitter_adds_to_the_delay_and_reorders() -> None:
    delays, order = run_jitter(model(delay=0.025, jitter=0.002))
    assert min(delays) >= 0.025 - 1e-9 and max(delays) <= 0.027 + 1e-9
    assert max(delays) - min(delays) > 0.0018
    assert sum(1 for a, b in itertools.pairwise(order) if b < a) > 500


def test_without_jitter_nothing_reorders() -> None:
    m = model(delay=0.025, rate=50e6 / 8, queue=None)
    out = [c for i in range(2000) for c in m.arrive(i.to_bytes(4, "big") * 300, i * 0.0001)]
    order = [int.from_bytes(pkt[:4], "big") for _, pkt in sorted(out)]
    assert order == list(range(2000))


def test_blackouts_drop_everything_while_dark_and_nothing_otherwise() -> None:
    m = model(blackout_every=6.0, blackout_for=1.5, blackout_first=1.0)
    m.reset(100.0)  # the schedule counts from the reset
    for k in range(1400):  # 14 s
        t = 100.0 + k * 0.01
        rel = t - 100.0
        dark = (1.0 <= rel < 2.5) or (7.0 <= rel < 8.5) or (13.0 <= rel < 14.5)
        assert (m.arrive(b"b", t) == []) == dark, rel
        assert m.dark(t) == dark
    assert m.stats.blackout_drops == 150 + 150 + 100
    assert [m.blackouts(100.0 + t) for t in (0.5, 1.0, 6.9, 7.0, 13.5)] == [0, 1, 1, 2, 3]


def test_a_one_off_blackout_lasts_until_dark_until() -> None:
    m = model(delay=0.01)
    m.dark_until = 5.0
    assert m.arrive(PACKET, 4.999) == [] and m.stats.blackout_drops == 1
    assert len(m.arrive(PACKET, 5.0)) == 1
    assert m.blackouts(10.0) == 0  # not a scheduled one


def test_over_the_mtu_a_packet_is_dropped_or_goes_on_in_the_hooks_pieces() -> None:
    m = model(mtu=1000)
    assert len(m.arrive(b"x" * 1000, 0.0)) == 1
    assert m.arrive(b"x" * 1001, 0.0) == []
    assert (m.stats.mtu_drops, m.stats.fragmented) == (1, 0)
    seen: list[tuple[int, int]] = []

    def halve(packet: bytes, mtu: int) -> list[bytes]:
        seen.append((len(packet), mtu))
        half = len(packet) // 2
        return [packet[:half], packet[half:]]

    m.oversize = halve
    out = m.arrive(b"y" * 1600, 0.0)
    assert [len(p) for _, p in out] == [800, 800] and seen == [(1600, 1000)]
    assert (m.stats.mtu_drops, m.stats.fragmented) == (1, 1)
    m.oversize = lambda packet, mtu: []  # a router that only answers (ICMP) drops it
    assert m.arrive(b"z" * 1600, 0.0) == [] and m.stats.mtu_drops == 2


# ------------------------------------------------------------------ order


def test_a_blackout_comes_before_the_mtu() -> None:
    m = model(mtu=100, blackout_every=2.0, blackout_for=1.0)
    m.oversize = lambda packet, mtu: pytest.fail("the hook is not asked in the dark")
    assert m.arrive(b"x" * 500, 0.5) == []
    assert (m.stats.blackout_drops, m.stats.mtu_drops) == (1, 0)


def test_packets_dropped_before_the_loss_draw_draw_nothing() -> None:
    """Blackout and MTU drops come before any draw; a lost packet draws no
    duplication and no jitter: what is left of the RNG is the same as if
    those packets never came."""
    cfg = {"loss": 0.5, "duplicate": 0.5, "jitter": 0.01, "mtu": 200}
    quiet = model(**cfg)
    busy = model(**cfg)
    busy.dark_until = 1.0
    for _ in range(10):
        busy.arrive(PACKET, 0.5)  # dark
        busy.arrive(b"x" * 300, 2.0)  # too big
    assert busy.rng.getstate() == quiet.rng.getstate()
    lossy = model(loss=1.0, duplicate=0.5, jitter=0.01)
    for _ in range(10):
        lossy.arrive(PACKET, 0.0)
    assert lossy.stats.lost == 10
    assert lossy.rng.getstate() == _after_draws(3, 10)


def _after_draws(seed: int, n: int) -> object:
    rng = seeded_rng(seed, "up")
    for _ in range(n):
        rng.random()
    return rng.getstate()


def test_an_impairment_that_is_off_draws_nothing() -> None:
    m = model(delay=0.01, rate=1e6, mtu=1500)
    for i in range(100):
        m.arrive(PACKET, i * 0.001)
    assert m.rng.getstate() == _after_draws(3, 0)


def test_both_copies_of_a_duplicate_go_through_the_bottleneck_after_the_loss_draw() -> None:
    # a queue with room for one packet: the second copy finds it full
    m = model(duplicate=1.0, rate=1000.0, queue=150)
    out = m.arrive(PACKET, 0.0)
    assert len(out) == 1 and (m.stats.duplicated, m.stats.queue_drops) == (1, 1)
    # with room for both, the copy leaves one serialisation time after the original
    m2 = model(duplicate=1.0, rate=1000.0, queue=400, delay=0.5)
    assert times(m2.arrive(PACKET, 0.0)) == [0.6, 0.7]


def test_jitter_is_drawn_after_the_bottleneck() -> None:
    """Each copy's delay is drawn on its own, on top of when it left the link."""
    m = model(duplicate=1.0, rate=1000.0, queue=None, delay=0.5, jitter=0.01)
    (a, _), (b, _) = m.arrive(PACKET, 0.0)
    assert 0.6 <= a <= 0.61 and 0.7 <= b <= 0.71 and round(a - 0.6, 9) != round(b - 0.7, 9)


# ----------------------------------------------- directions and determinism


def test_the_same_seed_gives_the_same_decisions_and_another_seed_others() -> None:
    def run(seed: int) -> list[float]:
        m = model(seed, delay=0.02, jitter=0.005, loss=0.1, duplicate=0.1, rate=1e5)
        return [at for i in range(1000) for at, _ in m.arrive(i.to_bytes(2, "big"), i * 0.001)]

    assert run(1) == run(1)
    assert run(1) != run(2)


def test_the_directions_of_a_fakenet_do_not_move_each_others_draws() -> None:
    """Answers going down, however many, leave the up direction's faults as
    they were: each direction has its own RNG and its own bottleneck."""
    bad = NetConfig(loss=0.2, duplicate=0.1, delay=0.01, jitter=0.005, rate=1e6)

    def up_faults(answers: int) -> list[tuple[str, bytes, tuple[str, int]]]:
        net = FakeNet(7, bad, bad)
        for i in range(500):
            net.send(i.to_bytes(2, "big"), ("link", 1), "listener", i * 0.001, up=True)
            for _ in range(answers):
                net.send(b"ack", ("listener", 0), "link:1", i * 0.001, up=False)
        return [d for d in net.deliver(100.0) if d[0] == "listener"]

    assert up_faults(0) == up_faults(3)
    assert seeded_rng(7, "up").random() != seeded_rng(7, "down").random()


def test_a_fakenet_direction_without_its_own_config_is_like_up_but_separate() -> None:
    net = FakeNet(1, NetConfig(delay=0.01, rate=1e4, queue=None))
    assert net.down == net.up and net.down_path is not net.up_path
    net.send(b"u" * 100, ("a", 1), "b", 0.0, up=True)
    net.send(b"d" * 100, ("b", 0), "a:1", 0.0, up=False)  # not behind the up packet
    assert [round(net.next_due() or 0, 6)] == [0.02]
    assert len(net.deliver(0.02)) == 2


def test_a_config_replaced_mid_run_keeps_the_backlog_and_the_rng() -> None:
    m = model(rate=1000.0, queue=None)
    m.arrive(PACKET, 0.0)  # the link is busy until 0.1
    m.config = replace(m.config, delay=1.0)
    assert times(m.arrive(PACKET, 0.0)) == [1.2]


# ------------------------------------------------------------------ FakeNet


def test_fakenet_counts_each_fate_and_a_subclass_may_add_to_its_counters() -> None:
    net = FakeNet(5, NetConfig(loss=0.3, duplicate=0.2, rate=1e4, queue=500, mtu=300))
    for i in range(400):
        net.send(b"x" * (400 if i % 10 == 0 else 100), ("a", 1), "b", i * 0.005, up=True)
    net.blackout_until = 3.0
    for _ in range(20):
        net.send(PACKET, ("a", 1), "b", 2.5, up=True)
    up = net.up_path.stats
    assert net.sent == 420 and net.too_big == up.mtu_drops == 40
    assert net.overflowed == up.queue_drops > 0
    assert net.dropped == up.lost + up.queue_drops + up.blackout_drops
    assert up.blackout_drops == 20 and net.duplicated == up.duplicated > 0
    delivered = len(net.deliver(1e9))
    assert delivered == 420 - 40 - net.dropped + net.duplicated
    net.sent += 1
    net.dropped += 2
    assert (net.sent, net.dropped) == (421, up.lost + up.queue_drops + up.blackout_drops + 2)


def test_fakenet_blackout_schedules_start_at_the_first_datagram_or_the_epoch() -> None:
    cfg = NetConfig(delay=0.0, blackout_every=10.0, blackout_for=1.0, blackout_first=2.0)
    net = FakeNet(1, cfg)
    net.send(b"first", ("a", 1), "b", 1000.0, up=True)
    for t, dark in [(1001.9, False), (1002.0, True), (1002.99, True), (1003.0, False)]:
        assert net.up_path.dark(t) == net.down_path.dark(t) == dark, t
    fixed = FakeNet(1, cfg, epoch=0.0)
    fixed.send(b"x", ("a", 1), "b", 1000.0, up=True)
    assert fixed.up_path.dark(1002.5) and not fixed.up_path.dark(1003.5)


def test_fakenet_blackout_until_darkens_both_directions() -> None:
    net = FakeNet(1)
    net.blackout_until = 10.0
    assert net.blackout_until == 10.0
    net.send(b"u", ("a", 1), "b", 9.0, up=True)
    net.send(b"d", ("b", 0), "a:1", 9.0, up=False)
    net.send(b"u", ("a", 1), "b", 10.0, up=True)
    assert [data for _, data, _ in net.deliver(20.0)] == [b"u"] and net.dropped == 2


# ------------------------------------------------------------- bad configs


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({"loss": 1.5}, "loss must be a probability"),
        ({"duplicate": -0.1}, "duplicate must be a probability"),
        ({"loss": float("nan")}, "loss must be a probability"),
        ({"delay": -1.0}, "delay must be a finite number"),
        ({"jitter": float("inf")}, "jitter must be a finite number"),
        ({"rate": -5.0}, "rate must be a finite number"),
        ({"queue": 0}, "queue must be a positive number of bytes"),
        ({"mtu": -1}, "mtu must be a positive number of bytes"),
        ({"mtu": 1.5}, "mtu must be a positive number of bytes"),
        ({"blackout_every": 1.0, "blackout_for": 1.0}, "blackout_for must be above 0"),
        ({"blackout_every": 1.0}, "blackout_for must be above 0"),
        ({"blackout_for": 1.0}, "need a blackout_every"),
        ({"blackout_first": 2.0}, "need a blackout_every"),
    ],
)
def test_impossible_configs_are_refused_with_what_is_wrong(bad: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        NetConfig(**bad)


def test_a_seeded_rng_is_the_same_on_every_call() -> None:
    assert seeded_rng(4, "up").random() == seeded_rng(4, "up").random()
    assert isinstance(seeded_rng("x", "down"), random.Random)
