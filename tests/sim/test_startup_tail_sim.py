"""Start-up and tail of a transfer in virtual time: what a short transfer pays.

A transfer of a few MB spends a good part of its time in BBR's STARTUP (the
rate doubling per round trip until the bottleneck is full) and in its last
round trips (the last flight, a loss in it, the "stored" answer).  These
tests pin down what each costs through a FakeNet bottleneck with a
drop-tail queue: STARTUP's pacing never falls under the initial window per
round trip; random loss does not end it before the pipe is full; a lost
tail is probed for before two round trips when nothing more is queued.
"""

from __future__ import annotations

import pytest

from helpers.shipping import report
from purelink.protocol.congestion import RateSample
from purelink.protocol.congestion.bbr import STARTUP_PACING_GAIN, Bbr
from purelink.testing import FakeNet, NetConfig, SimLink, Simulation

RECORD = 1000
D = 1400


def path(
    mbit: float, rtt: float, queue: int, loss: float = 0.0, seed: int = 1, jitter: float = 0.0
) -> Simulation:
    rate = mbit * 1e6 / 8
    up = NetConfig(loss=loss, delay=rtt / 2, jitter=jitter, rate=rate, queue=queue)
    down = NetConfig(loss=loss, delay=rtt / 2, jitter=jitter)
    return Simulation(FakeNet(seed, up, down), sync_interval=0.002)


def start(sim: Simulation, mb: float, seed: int = 1) -> SimLink:
    count = int(mb * 1e6) // RECORD
    return sim.add_link("s", [b"r" * RECORD] * count, anonymous_id=(1 << 63) | seed)


def test_startup_pacing_never_falls_under_the_initial_window_per_rtt() -> None:
    """The first answers measure a datagram or two, not the path: a delivery
    rate taken from them would pace the second round trip at a trickle."""
    cc = Bbr(D)
    floor = STARTUP_PACING_GAIN * cc.initial_cwnd / 0.05
    tiny = RateSample(
        delivery_rate=20_000.0, delivered=D, interval=0.07, rtt=0.05, newly_acked=D,
        prior_in_flight=cc.initial_cwnd, in_flight=cc.initial_cwnd - D, total_delivered=D,
    )  # fmt: skip
    cc.on_ack(tiny, 1.0)
    assert cc.btl_bw == pytest.approx(20_000.0)
    assert cc.pacing_rate >= floor * 0.99


def drop_last_first_transmission(link: SimLink) -> list[float]:
    """The network loses the datagram that carries the transfer's last bytes
    the first time they go out; returns [when it was sent] once it was."""
    s = link.sender
    send = s.datagrams_to_send
    when: list[float] = []

    def datagrams_to_send(now: float) -> list[bytes]:
        out = send(now)
        if out and not when and not link.todo and not s._waiting and s.stats.retransmits == 0:
            when.append(now)
            out = out[:-1]  # sent as far as the sender knows; gone on the way
        return out

    s.datagrams_to_send = datagrams_to_send  # type: ignore[method-assign]
    return when


@pytest.mark.parametrize(("rtt", "jitter"), [(0.05, 0.0), (0.1, 0.0), (0.05, 0.002), (0.02, 0.0)])
def test_a_lost_tail_is_probed_for_within_little_more_than_a_round_trip(
    rtt: float, jitter: float
) -> None:
    """With nothing more to send, nothing later can show the last datagram
    lost: the probe is its only repair.  It is due srtt + 4 rttvar (+ the
    listener's answer time) after the last send (RFC 9002's probe timeout),
    not two srtt after the last answer, which came a round trip after it
    (three round trips in all)."""
    sim = path(50, rtt, 256 << 10, jitter=jitter)
    link = start(sim, 0.2)
    s = link.sender
    lost_at = drop_last_first_transmission(link)
    sim.run(lambda: s.stats.probes > 0 or link.done, max_time=10)
    assert lost_at, "the tail never went out"
    assert s.stats.probes == 1
    waited = sim.clock.now - lost_at[0]
    srtt = s.rtt.srtt
    sim.run(lambda: link.done, max_time=10)
    done = sim.clock.now - lost_at[0]
    report(
        "tail_probe",
        {"rtt": rtt, "jitter": jitter, "probe_after_rtts": round(waited / srtt, 2),
         "stored_after_rtts": round(done / srtt, 2)},
    )  # fmt: skip
    assert waited <= 2 * srtt
    assert done <= 3.2 * srtt


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_random_loss_does_not_end_startup_before_the_pipe_is_full(seed: int) -> None:
    """5 % random loss is above the 2 % of the exit on loss, but it comes with
    a growing bandwidth estimate (and is the path's own loss rate, measured in
    the rounds before): STARTUP still leaves with the bottleneck's rate."""
    sim = path(50, 0.05, 256 << 10, loss=0.05, seed=seed)
    s = start(sim, 10, seed).sender
    sim.run(lambda: s.cc.state != Bbr.STARTUP, max_time=20)
    assert s.cc.state != Bbr.STARTUP
    assert s.cc.btl_bw >= 0.9 * 50e6 / 8
