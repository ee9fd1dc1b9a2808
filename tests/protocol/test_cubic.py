"""CUBIC (RFC 9438) fed by hand: its curve, its reductions, HyStart++'s exit.

The controller is given `RateSample`s as the sender would give them; the
figures asserted are the RFC's own formulas worked by hand.  The shares it
takes beside other flows are tests/sim's.
"""

from __future__ import annotations

import pytest

from purelink.protocol.congestion import RateSample
from purelink.protocol.congestion.cubic import ALPHA, BETA, C, Cubic

D = 1000


def answer(nbytes: int, last_sent: float, *, rtt: float = 0.1) -> RateSample:
    return RateSample(newly_acked=nbytes, last_sent=last_sent, rtt=rtt)


def test_slow_start_grows_by_what_is_acked_and_paces_at_twice_the_window() -> None:
    cc = Cubic(D, initial_datagrams=10)
    cc.on_ack(answer(2 * D, 1.0), 1.1)
    assert cc.cwnd == 12 * D and cc.state == Cubic.SLOW_START
    assert cc.pacing_rate == pytest.approx(2.0 * 12 * D / 0.1)


def test_a_loss_cuts_by_beta_once_per_round_and_sets_the_plateau() -> None:
    cc = Cubic(D, initial_datagrams=100)
    cc.on_lost(1.0, D, 2.0)
    cc.on_lost(1.5, D, 2.01)  # sent before the reduction: the same round trip
    assert cc.cwnd == int(100 * D * BETA) and cc.ssthresh == cc.cwnd
    assert cc.w_max == 100 and cc.losses == 2
    cc.on_ack(answer(10 * D, 1.9), 2.1)  # sent before the reduction: no growth
    assert cc.cwnd == int(100 * D * BETA)
    assert cc.state == Cubic.RECOVERY


def test_fast_convergence_lowers_the_plateau_of_a_window_that_shrank() -> None:
    cc = Cubic(D, initial_datagrams=100)
    cc.on_lost(1.0, D, 2.0)  # w_max 100, cwnd 70
    cc.on_lost(2.5, D, 3.0)  # lost again under the old plateau
    assert cc.w_max == pytest.approx(70 * (1 + BETA) / 2)
    assert cc.cwnd == int(int(100 * D * BETA) * BETA)


def test_the_window_follows_the_cubic_curve_back_to_its_plateau() -> None:
    cc = Cubic(D, initial_datagrams=100)
    cc.srtt = 0.1
    cc.on_lost(1.0, D, 2.0)
    k = (100 * (1 - BETA) / C) ** (1 / 3)  # the RFC's K, seconds to the plateau
    # answer every datagram of each round trip for K seconds
    now, sent = 2.1, 2.01  # the first answers are of datagrams sent after the cut
    while now < 2.0 + k:
        for _ in range(cc.cwnd // D):
            cc.on_ack(answer(D, sent, rtt=0.1), now)
        sent, now = now, now + 0.1
    assert cc.cwnd / D == pytest.approx(100, rel=0.05)  # concave: up to the plateau
    for _ in range(30):  # convex beyond it: probing for more, faster and faster
        for _ in range(cc.cwnd // D):
            cc.on_ack(answer(D, sent, rtt=0.1), now)
        sent, now = now, now + 0.1
    t = now - 0.1 - 2.0  # the last answers' time since the cut
    assert cc.cwnd / D == pytest.approx(C * (t + 0.1 - k) ** 3 + 100, rel=0.03)
    assert cc.state == Cubic.AVOIDANCE
    assert cc.pacing_rate == pytest.approx(1.2 * cc.cwnd / cc.srtt)


def test_the_reno_friendly_estimate_is_a_floor_on_short_paths() -> None:
    """On a small window and a short RTT the cubic curve is flat for seconds:
    the window grows as Reno with alpha_cubic would, 0.53 datagrams a round."""
    cc = Cubic(D, initial_datagrams=20)
    cc.srtt = 0.002
    cc.on_lost(1.0, D, 2.0)  # cwnd 14, plateau 20: K = 2.47 s away
    start = cc.cwnd
    now, sent = 2.002, 2.001
    for _ in range(10):  # 10 round trips of 2 ms: the curve moves by almost nothing
        for _ in range(cc.cwnd // D):
            cc.on_ack(answer(D, sent, rtt=0.002), now)
        sent, now = now, now + 0.002
    assert (cc.cwnd - start) / D == pytest.approx(10 * ALPHA, abs=1.0)


def test_a_spurious_loss_restores_the_window_and_the_curve() -> None:
    cc = Cubic(D, initial_datagrams=100)
    cc.on_lost(1.0, D, 2.0)
    cc.on_spurious(1.0, 2.05)
    assert cc.cwnd == 100 * D and cc.w_max == 0 and cc.undos == 1
    assert cc.state == Cubic.SLOW_START


def test_a_timeout_starts_over_from_the_minimum() -> None:
    cc = Cubic(D, initial_datagrams=100)
    cc.on_timeout(2.0)
    assert cc.cwnd == cc.minimum and cc.ssthresh == int(100 * D * BETA)


def test_hystart_ends_slow_start_when_the_round_trip_grows() -> None:
    cc = Cubic(D, initial_datagrams=10)
    total = 0  # bytes delivered so far
    round_end = 0  # the delivered count when the round's last datagram was sent

    def round_trip(rtt: float, now: float) -> None:
        """Ten answers of datagrams sent before the round began, then one of
        a datagram sent after (prior_delivered reaches the round's end)."""
        nonlocal total, round_end
        for prior in [round_end - 1] * 10 + [round_end]:
            total += D
            cc.on_ack(
                RateSample(
                    newly_acked=D,
                    last_sent=now - rtt,
                    rtt=rtt,
                    prior_delivered=prior,
                    total_delivered=total,
                ),
                now,
            )
        round_end = total

    round_trip(0.050, 1.0)
    round_trip(0.050, 1.1)
    assert cc.state == Cubic.SLOW_START
    round_trip(0.052, 1.2)  # +2 ms: under the 4 ms floor, a steady path
    assert cc.state == Cubic.SLOW_START
    round_trip(0.060, 1.3)  # +8 ms, over 52 / 8 = 6.5 ms: a queue is building
    assert cc.state == Cubic.AVOIDANCE
    assert cc.ssthresh <= cc.cwnd < cc.ssthresh + D  # from the window it had, in avoidance
