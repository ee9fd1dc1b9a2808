"""The window policies, the pacer, RACK and the ledger, stepped by hand.

Congestion controllers are fed `RateSample`s as the sender would; the
sender-level tests drive a real `Sender` with hand-made ACKs.  No network,
no clock but the numbers given.
"""

from __future__ import annotations

import weakref

import pytest

from purelink.protocol import wire
from purelink.protocol.congestion import Bbr, Cubic, NewReno, RateSample, create
from purelink.protocol.congestion.bbr import (
    FLOOR_SHARE,
    MIN_RTT_WINDOW,
    PROBE_RTT_LATE,
    QUEUE_SHARE,
    ROOM_GAIN,
)
from purelink.protocol.congestion.crosstraffic import CrossTraffic
from purelink.protocol.congestion.overflows import OVERFLOWS, SHALLOW_SHARE
from purelink.protocol.listener_core import ListenerCore
from purelink.protocol.recovery import REORDER_RESET, Rack, RttEstimator
from purelink.protocol.sender import Sender, SenderConfig, SenderState
from purelink.protocol.window import Pacer
from purelink.testing import MemoryStore

D = 1000


# ----------------------------------------------------------------- pacer
def test_pacer_releases_one_quantum_then_waits_for_the_next() -> None:
    p = Pacer(D)
    p.set_rate(1e6)  # 1 MB/s: 1 ms is 1,000 B, below the 2-datagram floor
    assert p.quantum == 2 * D and p.depth == 10 * D  # 10 ms of the rate > 4 quanta
    assert p.allowance(10.0) == 10 * D  # the first burst goes at once
    p.spend(10 * D + 500)  # the last datagram may overdraw
    assert p.allowance(10.0) < 0
    assert p.next_time() == pytest.approx(10.0 + (2 * D + 500) / 1e6)
    assert p.allowance(10.0025) == pytest.approx(2000.0)
    assert p.allowance(11.0) == 10 * D  # a long sleep earns no more than the depth
    p.set_rate(1e9)
    assert p.quantum == 64 << 10  # capped: one GSO call's worth
    p.set_rate(0.0)
    assert not p.rate


# --------------------------------------------------------------- NewReno
def ack(nbytes: int, last_sent: float, **kw: float) -> RateSample:
    return RateSample(newly_acked=nbytes, last_sent=last_sent, **kw)  # type: ignore[arg-type]


def test_newreno_halves_once_per_round_and_grows_only_on_later_sends() -> None:
    cc = NewReno(D, initial_datagrams=10)
    cc.on_ack(ack(D, 1.0), 1.05)
    assert cc.cwnd == 11 * D  # slow start
    cc.on_lost(1.0, D, 2.0)
    cc.on_lost(1.5, D, 2.01)  # sent before the reduction: the same round
    assert cc.cwnd == 5 * D + D // 2 and cc.losses == 2
    # datagrams sent before the reduction grow nothing, whenever they are acked
    # (the check is on their send time, not the time of the answer)
    cc.on_ack(ack(4 * D, 1.9), 2.05)
    assert cc.cwnd == 5 * D + D // 2
    cc.on_ack(ack(D, 2.02), 2.1)
    assert cc.cwnd > 5 * D + D // 2  # congestion avoidance after recovery
    cc.on_timeout(3.0)
    assert cc.cwnd == cc.minimum


def test_newreno_undoes_a_reduction_once_all_its_losses_prove_spurious() -> None:
    cc = NewReno(D, initial_datagrams=20)
    cc.on_lost(1.0, D, 2.0)
    cc.on_lost(1.1, D, 2.0)
    assert cc.cwnd == 10 * D
    cc.on_spurious(1.0, 2.1)
    assert cc.cwnd == 10 * D  # one of the two still stands
    cc.on_spurious(1.1, 2.1)
    assert cc.cwnd == 20 * D and cc.undos == 1
    assert cc.ssthresh == 1 << 62


# ------------------------------------------------------------------- BBR
# bytes fed to each controller so far (weak: an id() would be reused by a
# later test's controller once this one is freed, and start it mid-stream)
DELIVERED: weakref.WeakKeyDictionary[Bbr, int] = weakref.WeakKeyDictionary()


def feed_bbr(
    cc: Bbr, rate: float, rtt: float, rounds: int, now: float, in_flight: int = 0
) -> float:
    """Answers of a path that delivers `rate` B/s with `rtt`, one round per rtt
    (with `in_flight` bytes in flight; default one bdp)."""
    in_flight = in_flight or int(rate * rtt)
    delivered = DELIVERED.get(cc, 0)
    for _ in range(rounds):
        for _ in range(4):
            now += rtt / 4
            acked = int(rate * rtt / 4)
            prior = delivered
            delivered += acked
            cc.on_ack(
                RateSample(
                    delivery_rate=rate, delivered=acked, interval=rtt, rtt=rtt,
                    prior_delivered=prior - int(rate * rtt) + acked, newly_acked=acked,
                    last_sent=now - rtt, prior_in_flight=in_flight,
                    in_flight=in_flight, total_delivered=delivered,
                ),
                now,
            )  # fmt: skip
    DELIVERED[cc] = delivered
    return now


def until_model(cc: Bbr, now: float, rtt: float, flight: int) -> float:
    """Rounds of a path of `rtt` (a queue of others above the 50 ms one the
    model measured) at most 40, until the verdict is "model"."""
    for _ in range(40):
        now = feed_bbr(cc, 5e6, rtt, 1, now, in_flight=flight)
        if cc.cross_traffic == CrossTraffic.MODEL:
            break
    return now


def probing(kind: str) -> tuple[Bbr, float, int]:
    """A Bbr in PROBE_BW on a path of 5 MB/s and 50 ms, its verdict `kind`
    ("model": after a queue of others of 50 ms stood): it, the time, the bdp."""
    cc = Bbr(D, seed=1)
    now = feed_bbr(cc, 5e6, 0.05, 12, 100.0)
    flight = int(5e6 * 0.05)
    if kind == CrossTraffic.MODEL:
        now = until_model(cc, now, 0.1, flight)
    return cc, now, flight


def test_bbr_finds_the_bottleneck_drains_and_paces_at_it() -> None:
    cc = Bbr(D, seed=1)
    assert cc.mode == Bbr.STARTUP
    now = feed_bbr(cc, 5e6, 0.05, 12, 100.0)
    assert cc.filled and cc.mode == Bbr.PROBE_BW
    assert cc.btl_bw == 5e6 and cc.min_rtt == 0.05
    assert 0.7 * 5e6 <= cc.pacing_rate <= 1.25 * 5e6
    assert 2 * cc.bdp <= cc.cwnd <= 3 * cc.bdp + 3 * max(2 * D, cc.pacing_rate / 1000)
    # random loss does not move the model
    for _ in range(20):
        cc.on_lost(now - 0.05, D, now)
    feed_bbr(cc, 5e6, 0.05, 2, now)
    assert cc.btl_bw == 5e6


def test_bbr_puts_its_probe_rtt_off_while_another_flow_s_is_watched_for() -> None:
    """While the judgement watches for another flow's ProbeRTT (crosstraffic.py's
    dip), ours comes PROBE_RTT_LATE later, and the judgement learns when it ended."""
    cc = Bbr(D)
    now = feed_bbr(cc, 5e6, 0.05, 12, 100.0)
    refreshed = now  # the last answer at min_rtt
    cc.cross.watching = lambda now: True  # type: ignore[method-assign]
    ended: list[float] = []
    cc.cross.probed = ended.append  # type: ignore[method-assign]
    now = feed_bbr(cc, 5e6, 0.06, 4, refreshed + MIN_RTT_WINDOW + 0.5)
    assert cc.mode == Bbr.PROBE_BW
    now = feed_bbr(cc, 5e6, 0.06, 1, refreshed + MIN_RTT_WINDOW + PROBE_RTT_LATE - 0.1)
    assert cc.mode == Bbr.PROBE_BW  # (its last answer just before the late window ends)
    now = feed_bbr(cc, 5e6, 0.06, 4, refreshed + MIN_RTT_WINDOW + PROBE_RTT_LATE + 0.1)
    assert cc.mode == Bbr.PROBE_RTT and not ended
    now = feed_bbr(cc, 5e6, 0.05, 8, now, in_flight=cc.minimum)
    assert cc.mode == Bbr.PROBE_BW
    assert len(ended) == 1 and refreshed + MIN_RTT_WINDOW + PROBE_RTT_LATE < ended[0] <= now


def test_bbr_keeps_its_model_through_an_outage_and_restores_its_window() -> None:
    cc = Bbr(D)
    now = feed_bbr(cc, 5e6, 0.05, 12, 100.0)
    cwnd, bw = cc.cwnd, cc.btl_bw
    cc.on_timeout(now + 0.2)
    cc.on_timeout(now + 0.6)
    assert cc.cwnd == cc.minimum
    assert cc.btl_bw == bw and cc.pacing_rate > 0
    cc.on_ack(RateSample(newly_acked=D, rtt=0.05, total_delivered=10**9), now + 1.6)
    assert cc.cwnd >= cwnd


def test_bbr_probes_rtt_when_min_rtt_is_stale() -> None:
    cc = Bbr(D)
    now = feed_bbr(cc, 5e6, 0.05, 12, 100.0)
    now = feed_bbr(cc, 5e6, 0.06, 4, now + 10.5)  # queueing: min_rtt not refreshed
    assert cc.mode == Bbr.PROBE_RTT and cc.cwnd <= max(cc.bdp / 2, cc.minimum)
    now = feed_bbr(cc, 5e6, 0.05, 8, now, in_flight=cc.minimum)  # the queue drained
    assert cc.mode == Bbr.PROBE_BW


def test_bbr_has_no_inflight_bound_until_a_queue_overflows_and_none_after_its_undo() -> None:
    """inflight_hi is None ("no bound"), not a huge number, until a round
    trip with a standing queue loses more than 2 %; a spurious loss that
    takes the round under the threshold undoes it back to None."""
    cc = Bbr(D, seed=1)
    assert cc.inflight_hi is None
    now = feed_bbr(cc, 5e6, 0.05, 12, 100.0)
    assert cc.mode == Bbr.PROBE_BW and cc.inflight_hi is None
    for _ in range(10):  # 10 KB of 62 KB in one round with a standing queue (RTT 1.6x)
        cc.on_lost(now - 0.08, D, now)
    now = feed_bbr(cc, 5e6, 0.08, 2, now)
    assert cc.inflight_hi is not None and cc.inflight_hi >= cc.bdp
    for _ in range(10):
        cc.on_spurious(now - 0.08, now)
    assert cc.inflight_hi is None and cc.undos == 1


def test_bbr_beside_a_model_based_flow_bounds_its_flight_no_lower_than_carries_its_rate() -> None:
    """An overflow with a queue standing (RTT 100 ms on a 50 ms path) bounds
    the flight: alone or beside purelink links ("none") down to what carries
    btl_bw for a min RTT (bdp / 0.85); beside a flow that keeps that queue
    whatever we do ("model": every round trip of ours lasts 100 ms), only
    down to what carries it for the round trip that queue makes -- a bound
    of one bdp would carry half the rate, and the next rounds' lower
    btl_bw would lower the bound again."""
    bounds = {}
    for kind in (CrossTraffic.NONE, CrossTraffic.MODEL):
        cc = Bbr(D, seed=1)
        now = feed_bbr(cc, 5e6, 0.05, 12, 100.0)
        assert cc.mode == Bbr.PROBE_BW and cc.cross_traffic == CrossTraffic.NONE
        if kind == CrossTraffic.MODEL:
            # a queue of others (50 ms) stands round after round: the verdict
            now = until_model(cc, now, 0.1, int(5e6 * 0.05))
            assert cc.cross_traffic == CrossTraffic.MODEL
        assert cc.btl_bw == 5e6
        for _ in range(30):  # 30 KB of 250 KB lost in a round with the queue standing
            cc.on_lost(now - 0.1, D, now)
        now = feed_bbr(cc, 5e6, 0.1, 2, now, in_flight=int(5e6 * 0.05))
        assert cc.inflight_hi is not None
        bounds[kind] = cc.inflight_hi
    carried = 5e6 * 0.05 / 0.85
    assert carried <= bounds[CrossTraffic.NONE] < 1.2 * carried
    assert bounds[CrossTraffic.MODEL] >= int(5e6 * 0.1 / 0.85)  # twice the bdp / 0.85


def test_bbr_on_a_shallow_buffer_bounds_its_flight_to_carry_its_rate_and_share() -> None:
    """Overflows with a queue standing under "none": once two of them have
    shown a buffer under SHALLOW min RTTs (15 ms of queue on a 50 ms path),
    the bound goes no lower than what carries btl_bw at the round trip that
    queue makes, up to the bdp and FLOOR_SHARE of our share of the queue (a
    model-based flow's queue there is too short for the verdict, and a
    bound of one bdp carries only min RTT / RTT of the rate); after the
    first overflow, on a deep buffer (60 ms of queue), and without the
    judgement, the bdp."""

    def bounds(rate: float, rtt: float, shared: bool = True) -> list[int]:
        cc = Bbr(D, seed=1, shared=shared)
        now = feed_bbr(cc, rate, 0.05, 12, 100.0)
        flight = int(rate * 0.05)
        now = feed_bbr(cc, rate, rtt, 2, now, in_flight=flight)
        seen = []
        for _ in range(3):
            for _ in range(max(2, flight // D // 8)):  # an eighth of the flight: an overflow
                cc.on_lost(now - rtt, D, now)
            now = feed_bbr(cc, rate, rtt, 1, now, in_flight=flight)
            assert cc.cross_traffic == CrossTraffic.NONE and cc.inflight_hi is not None
            seen.append(cc.inflight_hi)
        return seen

    bdp, share = 5e6 * 0.05, FLOOR_SHARE * QUEUE_SHARE * D
    first, *shallow = bounds(5e6, 0.065)
    assert first == int(bdp / 0.85)
    assert shallow == [int((bdp + share) / 0.85)] * 2  # 15 ms x 5 MB/s: more than that
    assert bounds(5e6, 0.11) == [int(bdp / 0.85)] * 3  # a deep buffer
    assert bounds(5e6, 0.065, shared=False) == [int(bdp / 0.85)] * 3
    slow = bounds(3e5, 0.065)  # 15 ms x 0.3 MB/s: less than that
    assert slow[1:] == [int(3e5 * 0.065 / 0.85)] * 2


def test_bbr_holding_more_than_its_share_of_a_standing_queue_takes_its_rate() -> None:
    """A queue stood all round long (RTT 80 ms on a 50 ms path): a flow whose
    bytes in it (btl_bw x 30 ms) are more than QUEUE_SHARE datagrams takes the
    rate it got as its bandwidth (the max filter would keep 5 MB/s for ten
    rounds) and keeps one bdp and its share in flight; a flow with a few
    datagrams in it keeps its max filter.  (The cooperative rule alone, as
    "bbr-cooperative" keeps it: the default judges such a queue too, and keeps
    its filter while it does; tests/protocol/test_crosstraffic.py.)"""
    big = Bbr(D, seed=1, shared=False)
    now = feed_bbr(big, 5e6, 0.05, 12, 100.0)
    assert big.mode == Bbr.PROBE_BW
    feed_bbr(big, 3e6, 0.08, 3, now, in_flight=int(3e6 * 0.08))
    assert big.btl_bw == 3e6
    assert big.cwnd <= big.bdp + QUEUE_SHARE * D
    small = Bbr(D, seed=1, shared=False)
    now = feed_bbr(small, 2e5, 0.05, 12, 100.0)
    feed_bbr(small, 1.5e5, 0.08, 3, now, in_flight=int(1.5e5 * 0.08))
    assert small.btl_bw == 2e5


def answer(cc: Bbr, now: float, rtt: float, delivered: int) -> None:
    """One answer for D bytes of a datagram sent after every earlier answer."""
    cc.on_ack(
        RateSample(
            delivery_rate=1e6, delivered=D, interval=0.05, rtt=rtt, prior_delivered=delivered,
            newly_acked=D, last_sent=now - rtt, prior_in_flight=20 * D, in_flight=20 * D,
            total_delivered=delivered + D,
        ),
        now,
    )  # fmt: skip


def test_bbr_learns_the_jitter_from_its_first_samples() -> None:
    """RTTs of 10 and 50 ms in turn: the mean difference is 40 ms after three
    differences already (from 0 with RFC 3550's 1/16 it would be 7 ms)."""
    cc = Bbr(D)
    for i in range(4):
        answer(cc, 1.0 + i * 0.005, 0.01 if i % 2 else 0.05, i * D)
    assert cc.jitter == pytest.approx(0.04)


def test_bbr_round_trip_lasts_at_least_the_typical_rtt() -> None:
    """Delay that varies both ways: every answer is for a datagram sent after
    the one before (as the luckiest of many is), yet a round trip of the
    model lasts at least min_rtt + 2 x jitter, the RTT most datagrams take."""
    cc = Bbr(D)
    delivered, now = 0, 1.0
    for i in range(200):  # 1 s of answers every 5 ms, RTTs 10 and 50 ms in turn
        now += 0.005
        answer(cc, now, 0.01 if i % 2 else 0.05, delivered)
        delivered += D
    assert cc.typical_rtt == pytest.approx(0.09, rel=0.1)
    assert 8 <= cc.round_count <= 1.0 / 0.08


def test_bbr_learns_the_path_loss_rate_only_where_it_builds_no_queue() -> None:
    """Startup's own overflow is not the path's loss rate (counted, it hid
    every later overflow from the loss bound for seconds)."""
    cc = Bbr(D)
    now = 100.0
    for r in range(3):
        for _ in range(5):
            cc.on_lost(now - 0.05, D, now)
        now = feed_bbr(cc, 2e5 * 2**r, 0.05, 1, now)
    assert cc.mode == Bbr.STARTUP and cc.base_loss == 0.0
    now = feed_bbr(cc, 5e6, 0.05, 12, now)
    assert cc.mode == Bbr.PROBE_BW
    for _ in range(8):  # a whole probing cycle: its cruise rounds count
        for _ in range(5):
            cc.on_lost(now - 0.05, D, now)
        now = feed_bbr(cc, 5e6, 0.05, 1, now, in_flight=int(1.3 * cc.bdp))
    assert 0.01 < cc.base_loss < 0.1


def test_create_by_name() -> None:
    judging, cooperative = create("bbr", D), create("bbr-cooperative", D)
    assert isinstance(judging, Bbr) and judging.shared and judging.name == "bbr"
    assert isinstance(cooperative, Bbr) and not cooperative.shared
    assert cooperative.name == "bbr-cooperative"
    old = create("bbr-shared", D)  # the judging BBR's name before it was the default
    assert isinstance(old, Bbr) and old.shared and old.name == "bbr"
    assert isinstance(create("cubic", D), Cubic)
    assert isinstance(create("newreno", D), NewReno)
    names = "one of bbr, bbr-cooperative, cubic, newreno, not 'vegas'"
    with pytest.raises(ValueError, match=names):
        create("vegas", D)


# --------------------------------------------------------- RTT and RACK
def test_rtt_estimator_follows_rfc6298_and_caps_the_probe_backoff() -> None:
    rtt = RttEstimator()
    rtt.on_sample(0.1)
    assert (rtt.srtt, rtt.rttvar, rtt.min_rtt) == (0.1, 0.05, 0.1)
    rtt.on_sample(0.2)
    assert rtt.srtt == pytest.approx(0.1125) and rtt.rttvar == pytest.approx(0.0625)
    assert rtt.pto == pytest.approx(0.225)
    for _ in range(10):
        rtt.backoff()
    assert rtt.rto == 1.0  # the RTO backs off to 1 s at most
    assert rtt.pto == pytest.approx(0.25)  # probes to max(0.25 s, their own timeout)
    rtt.reset_backoff()
    assert rtt.pto == pytest.approx(0.225)


@pytest.mark.parametrize(("srtt", "ceiling"), [(0.01, 0.25), (0.05, 0.25), (0.2, 0.4), (0.6, 1.0)])
def test_probe_backoff_stops_where_an_outage_would_cost_a_second(
    srtt: float, ceiling: float
) -> None:
    """After an outage the path comes back at any moment: unanswered probes back
    off to max(0.25 s, the un-backed-off PTO), never past 1 s."""
    rtt = RttEstimator()
    rtt.on_sample(srtt)
    pto = rtt.pto
    seen = []
    for _ in range(12):
        rtt.backoff()
        seen.append(rtt.pto)
    assert seen == sorted(seen) and seen[0] == pytest.approx(min(2 * pto, ceiling))
    assert seen[-1] == pytest.approx(ceiling)


def test_rack_window_widens_on_spurious_losses_and_falls_back() -> None:
    rtt = RttEstimator()
    rtt.on_sample(0.04)
    rack = Rack()
    assert rack.reo_wnd(rtt) == pytest.approx(0.01)
    rack.on_spurious(1.0, rtt)
    rack.on_spurious(1.01, rtt)  # the same round trip: once
    assert rack.mult == 2
    rack.on_spurious(1.1, rtt)
    rack.on_spurious(1.2, rtt)
    assert rack.mult == 4 and rack.reo_wnd(rtt) == pytest.approx(0.04)
    rack.on_spurious(1.3, rtt)
    assert rack.reo_wnd(rtt) == pytest.approx(0.04)  # never above srtt
    for i in range(REORDER_RESET - 1):
        rack.on_recovery(1.3 + i, 1.4 + i)
    assert rack.mult == 4
    rack.on_recovery(1.3 + REORDER_RESET, 1.4 + REORDER_RESET)
    assert rack.mult == 1


def test_rack_counts_one_recovery_per_episode_not_per_answer() -> None:
    """Many answers of one round trip that each declare losses are one
    recovery: on a lossy path the widened window must not fall back within
    a round trip (RFC 8985's 16 recoveries are episodes, as TCP's)."""
    rtt = RttEstimator()
    rtt.on_sample(0.04)
    rack = Rack()
    rack.on_spurious(1.0, rtt)
    assert rack.mult == 2
    for i in range(4 * REORDER_RESET):  # losses of datagrams sent before the episode began
        rack.on_recovery(1.0 + i * 0.0001, 1.05 + i * 0.0001)
    assert rack.mult == 2
    for i in range(REORDER_RESET):  # each a loss of a datagram sent after the last began
        rack.on_recovery(1.1 + i * 0.1, 1.15 + i * 0.1)
    assert rack.mult == 1


# ---------------------------------------------- the sender and the listener
ADDR = ("10.0.0.1", 4000)


def open_pair(congestion: str = "bbr", cc: Bbr | None = None) -> tuple[Sender, ListenerCore, float]:
    sender = Sender(SenderConfig(stream="s", congestion=congestion), cc=cc)
    core = ListenerCore(MemoryStore())
    now = 100.0
    sender.connect(now)
    for _ in range(2):
        for data in sender.datagrams_to_send(now):
            core.receive_datagram(data, ADDR, now)
        for data, _ in core.datagrams_to_send(now):
            sender.receive_datagram(data, now)
    assert sender.state == SenderState.OPEN
    return sender, core, now


def roundtrip(sender: Sender, core: ListenerCore, now: float, rtt: float) -> list[bytes]:
    out = sender.datagrams_to_send(now)
    for data in out:
        core.receive_datagram(data, ADDR, now + rtt / 2)
    core.take_writes()
    for data, _ in core.datagrams_to_send(now + rtt / 2):
        sender.receive_datagram(data, now + rtt)
    return out


def test_an_idle_link_arms_no_timer_and_a_paced_one_only_with_work() -> None:
    sender, core, now = open_pair()
    assert sender.get_timer() is None
    sender.push([b"x" * 1000] * 2000)
    for i in range(20):
        roundtrip(sender, core, now + i * 0.01, 0.01)
    assert sender.pacer.rate > 0  # BBR paces once it has an RTT
    now += 0.2
    burst = []
    while out := sender.datagrams_to_send(now):
        burst += out
    # the bucket's depth, the last datagram overdrawing it: not 64
    assert 0 < sum(map(len, burst)) <= sender.pacer.depth + 1400
    timer = sender.get_timer()
    assert timer is not None and timer > now  # the next send time
    assert timer == pytest.approx(
        now + (sender.pacer.quantum - sender.pacer.tokens) / sender.pacer.rate
    )


def test_the_listener_reports_a_retransmission_it_got_twice_as_spurious() -> None:
    sender, core, now = open_pair()
    sender.push([b"a" * 100, b"b" * 100])
    (first,) = sender.datagrams_to_send(now)
    core.receive_datagram(first, ADDR, now)  # the original arrives...
    core.take_writes()
    core.datagrams_to_send(now)  # ...and its answer is lost
    # much later, the sender's loss detection has resent it (by hand here)
    flight = sender.flight
    (f,) = flight.flights.values()
    flight.remove(f)
    flight.lost.append(f)
    (again,) = sender.datagrams_to_send(now + 0.5)
    core.receive_datagram(again, ADDR, now + 0.5)
    ((answer, _),) = core.datagrams_to_send(now + 0.5)
    decoded = wire.decode_datagram(answer)
    assert isinstance(decoded, wire.Ack) and decoded.duplicates == (2,)
    sender.receive_datagram(answer, now + 0.51)
    assert sender.stats.spurious == 1 and sender.stats.retransmits == 1


def test_repairs_are_bounded_by_the_cwnd_not_the_listeners_window() -> None:
    """A listener whose reorder buffer is full behind two holes says its window
    is one datagram: both repairs go out at once (each fills a hole, so it
    frees the buffer), and no new data does."""
    sender, core, now = open_pair(cc=Bbr(1400, initial_datagrams=64))
    sender.push([bytes(1000)] * 200)
    now += 0.01
    for i, data in enumerate(sender.datagrams_to_send(now)):
        if i not in (0, 3):
            core.receive_datagram(data, ADDR, now + 0.025)
    core.take_writes()
    for data, _ in core.datagrams_to_send(now + 0.025):
        sender.receive_datagram(data, now + 0.05)
    sender.handle_timer(now + 0.2)
    assert len(sender.flight.lost) == 2 and sender.in_flight == 0
    sender._peer_window = sender.config.datagram_size  # the listener's buffer is full
    sent = sender.datagrams_to_send(now + 0.2)
    assert len(sent) == 2 and sender.stats.retransmits == 2 and not sender.flight.lost


def step(sender: Sender, core: ListenerCore, now: float, rtt: float) -> float:
    """The sender's due datagrams to the listener, its answers back: `rtt` later."""
    for data in sender.datagrams_to_send(now):
        core.receive_datagram(data, ADDR, now + rtt / 2)
    answers = core.datagrams_to_send(now + rtt / 2)
    for data, _ in answers:
        sender.receive_datagram(data, now + rtt)
    return now + rtt


def test_the_handshake_round_trip_seeds_bbrs_min_rtt_unless_a_hello_was_resent() -> None:
    """HELLO -> RETRY takes 30 ms, the next HELLO -> ACCEPT 40 ms: min_rtt is
    30 ms before any data (a flow that starts beside another then does not
    take the other's startup queue for the path's delay).  A resent HELLO is
    not timed (Karn): its answer may be the first one's."""
    sender = Sender(SenderConfig(stream="s"))
    core = ListenerCore(MemoryStore())
    sender.connect(100.0)
    now = step(sender, core, 100.0, 0.03)
    assert sender.cc.min_rtt == pytest.approx(0.03)
    step(sender, core, now, 0.04)
    assert sender.state == SenderState.OPEN and sender.cc.min_rtt == pytest.approx(0.03)

    resent = Sender(SenderConfig(stream="s"))
    resent.connect(100.0)
    assert resent.datagrams_to_send(100.0)  # lost
    now = step(resent, core, 100.0 + resent.config.handshake_rto, 0.03)
    assert resent.cc.min_rtt == 0.0
    step(resent, core, now, 0.04)
    assert resent.state == SenderState.OPEN and resent.cc.min_rtt == pytest.approx(0.04)
    assert resent.rtt.samples == 0  # an ACCEPT's delay holds the listener's store work


def test_a_retry_seeds_the_rtt_estimator_and_starts_the_hello_backoff_over() -> None:
    """A timed RETRY (50 ms) is the RTT estimator's first sample (RFC 9002 6.3).
    At the handshake's first RETRY the HELLO's backoff starts where it would
    after a first exchange that lost nothing (2 x handshake_rto), however many
    HELLOs the first exchange took; a later RETRY (a duplicate) sends the HELLO
    again at once and keeps the backoff."""
    core = ListenerCore(MemoryStore())
    sender = Sender(SenderConfig(stream="s"))
    sender.connect(100.0)
    now = step(sender, core, 100.0, 0.05)
    assert (sender.rtt.samples, sender.rtt.srtt) == (1, pytest.approx(0.05))
    assert sender.datagrams_to_send(now)  # the HELLO with the cookie, lost
    assert sender.get_timer() == pytest.approx(now + 0.2)

    slow = Sender(SenderConfig(stream="s", handshake_rto=0.1))
    slow.connect(100.0)
    now = 100.0
    for _ in range(3):  # lost: resent after 0.1, 0.2 and 0.4 s (the next after 0.8)
        assert slow.datagrams_to_send(now)
        now = slow.get_timer()
    assert now == pytest.approx(100.7)
    now = step(slow, core, now, 0.03)
    assert slow.rtt.samples == 0  # Karn: its answer may be to any of the four
    assert slow.datagrams_to_send(now)  # lost again
    assert slow.get_timer() == pytest.approx(now + 0.2)  # not after 1 s
    now = slow.get_timer()
    assert slow.datagrams_to_send(now)  # lost: due again after 0.4 s, the next after 0.8
    retry = wire.encode_retry(wire.Retry(slow._nonce, slow._cookie))
    slow.receive_datagram(retry, now + 0.01)  # a duplicate of the RETRY
    assert slow.datagrams_to_send(now + 0.01)  # the HELLO again at once ...
    assert slow.get_timer() == pytest.approx(now + 0.01 + 0.8)  # ... the backoff kept


def test_bbr_beside_a_model_based_flow_answers_a_loss_as_bbr_v1_does() -> None:
    """Beside a flow that keeps a queue and does not yield ("model": Linux's
    BBR v1) a loss is answered as that flow answers it (tcp_bbr.c): the cwnd
    falls to the flight less what was lost and for the episode's first round
    grows only with what is answered (packet conservation); once a datagram
    sent after that round is answered the cwnd of before comes back.  Alone
    or beside purelink links ("none") a loss moves no cwnd: the model keeps it."""
    for kind in (CrossTraffic.NONE, CrossTraffic.MODEL):
        cc, now, flight = probing(kind)
        assert cc.cross_traffic == kind and cc.mode == Bbr.PROBE_BW
        before = cc.cwnd
        assert before > flight + 2 * D
        for _ in range(2):  # found lost a moment after the last answer
            cc.on_lost(now - 0.1, D, now + 0.001)
        if kind == CrossTraffic.NONE:
            assert cc.cwnd == before
            continue
        assert cc.cwnd == flight - 2 * D
        # answers of datagrams sent before the loss: no more than the flight and
        # what they answer (small answers, so that regrowth cannot pass for the restore)
        now = feed_bbr(cc, 1e5, 0.1, 1, now, in_flight=flight - 2 * D)
        assert cc.cwnd <= flight - 2 * D + int(1e5 * 0.1 / 4)
        now = feed_bbr(cc, 1e5, 0.1, 2, now, in_flight=flight)
        assert cc.cwnd >= 0.9 * before  # at most the target the model now allows


def test_bbr_beside_a_model_based_flow_on_a_calm_shallow_buffer_keeps_its_part_of_it() -> None:
    """Under "model", on a buffer shallower than the bdp of queue a
    model-based flow keeps, whose overflows have stopped (overflows.py's
    shallow_part: the other flow is not keeping 2 bdp in it), the cwnd is
    one bdp and half of the buffer; while it still overflows, and on a
    buffer of a bdp, the cwnd keeps its 2 bdp.  And an empty queue there is
    no other flow's ProbeRTT to probe the room of (ROOM_GAIN)."""
    cwnds, rooms = {}, {}
    for depth in (0.01, 0.05):  # 10 ms of buffer on a 50 ms path; 50 ms: one bdp
        cc = Bbr(D, seed=1)
        now = feed_bbr(cc, 5e6, 0.05, 12, 100.0)
        flight = int(5e6 * 0.05)
        now = until_model(cc, now, 0.05 + depth, flight)  # a queue of others stands
        assert cc.cross_traffic == CrossTraffic.MODEL
        for _ in range(2):  # two overflows: the buffer is known
            for _ in range(10):
                cc.on_lost(now - 0.05, D, now)
            now = feed_bbr(cc, 5e6, 0.05 + depth, 1, now, in_flight=flight)
        now = feed_bbr(cc, 5e6, 0.05 + depth, 2, now, in_flight=flight)  # the episode ends
        assert cc.cwnd >= 2 * 5e6 * 0.05  # still overflowing lately: 2 bdp
        now = feed_bbr(cc, 5e6, 0.05 + depth, OVERFLOWS, now, in_flight=flight)  # calm
        assert cc.cross_traffic == CrossTraffic.MODEL and cc.mode == Bbr.PROBE_BW
        cwnds[depth] = cc.cwnd
        gains = []
        for _ in range(4):  # the queue empties
            now = feed_bbr(cc, 5e6, 0.05, 1, now, in_flight=int(cc.pacing_gain * flight))
            gains.append(cc.pacing_gain)
        rooms[depth] = ROOM_GAIN in gains
    assert cwnds[0.05] >= 2 * 5e6 * 0.05
    # one bdp and the part (more than the bdp: not a ProbeRTT's 4 datagrams)
    assert 5e6 * 0.05 < cwnds[0.01] <= int(5e6 * 0.05 + SHALLOW_SHARE * 5e6 * 0.01)
    # there an empty queue is the other flow's cut, not its ProbeRTT: no
    # round at ROOM_GAIN (on the buffer of a bdp, still overflowing, there is)
    for depth, probed in rooms.items():
        assert probed == (depth == 0.05)


def test_bbr_beside_a_model_based_flow_probes_the_room_its_probe_rtt_leaves() -> None:
    """Under "model", the first round of an empty queue is the other flow's
    ProbeRTT (crosstraffic.py's `room`): the next round paces at ROOM_GAIN
    x btl_bw, so that the max filter measures the room the other flow left,
    not only the part we paced at; the phase lasts one round trip, whatever
    it put in flight (a window or a bound that holds the flight under
    ROOM_GAIN bdp does not stretch it), and the gain cycle goes on (0.75
    next), once.  Alone ("none") an empty queue is the cruise's: no such
    round."""
    gains: dict[tuple[str, float], list[float]] = {}
    for kind, held in (
        (CrossTraffic.NONE, ROOM_GAIN),
        (CrossTraffic.MODEL, ROOM_GAIN),
        (CrossTraffic.MODEL, 1.0),
    ):
        cc, now, flight = probing(kind)
        if kind == CrossTraffic.MODEL:
            now = feed_bbr(cc, 5e6, 0.1, 2, now, in_flight=flight)
        assert cc.cross_traffic == kind and cc.mode == Bbr.PROBE_BW
        run = gains[kind, held] = []
        for _ in range(8):  # the queue is gone: the flight is what the gain (or `held`) lets out
            in_flight = int(min(cc.pacing_gain, held) * flight)
            now = feed_bbr(cc, 5e6, 0.05, 1, now, in_flight=in_flight)
            run.append(cc.pacing_gain)
        assert cc.cross_traffic == kind
    for held in (ROOM_GAIN, 1.0):
        assert gains[CrossTraffic.MODEL, held].count(ROOM_GAIN) == 1  # one round, once
    model = gains[CrossTraffic.MODEL, ROOM_GAIN]
    assert model[model.index(ROOM_GAIN) + 1] < 1.0  # then the cycle's drain phase
    assert ROOM_GAIN not in gains[CrossTraffic.NONE, ROOM_GAIN]


def test_bbr_a_probe_rtt_in_a_loss_episode_ends_with_the_cwnd_of_before_the_loss() -> None:
    """Under "model", a ProbeRTT that begins while a loss episode conserves
    packets ends with the cwnd of before the loss, not the conserved one."""
    cc = Bbr(D, seed=1)
    now = feed_bbr(cc, 5e6, 0.05, 12, 100.0)
    flight = int(5e6 * 0.05)
    now = until_model(cc, now, 0.1, flight)
    assert cc.cross_traffic == CrossTraffic.MODEL
    before = cc.cwnd
    cc.on_lost(now - 0.1, D, now + 0.001)
    assert cc.cwnd < before
    # the next answers come after min_rtt went 10 s without a lower sample:
    # ProbeRTT; small answers, so that its end is not hidden by regrowth
    now = feed_bbr(cc, 1e5, 0.1, 1, now + 10.0, in_flight=D)
    assert cc.mode == Bbr.PROBE_RTT
    for _ in range(8):
        now = feed_bbr(cc, 1e5, 0.1, 1, now, in_flight=D)
        if cc.mode != Bbr.PROBE_RTT:
            break
    assert cc.mode == Bbr.PROBE_BW
    # back to it, less what the model's target now allows (without the cwnd saved, about 0.4 of it)
    assert cc.cwnd >= 0.9 * before
