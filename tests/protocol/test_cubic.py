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
    """A large window, so the curve and not the Reno-friendly floor leads."""
    cc = Cubic(D, initial_datagrams=1000)
    cc.srtt = 0.1
    cc.on_lost(1.0, D, 2.0)
    k = (1000 * (1 - BETA) / C) ** (1 / 3)  # the RFC's K, seconds to the plateau

    def round_trip(sent: float, now: float) -> None:  # every datagram answered, ten at a time
        for _ in range(cc.cwnd // (10 * D)):
            cc.on_ack(answer(10 * D, sent, rtt=0.1), now)

    # the epoch starts at the first answer to a datagram sent after the cut (RFC 9438 4.2)
    now, sent = 2.1, 2.01
    while now < 2.1 + k:
        round_trip(sent, now)
        sent, now = now, now + 0.1
    assert cc.cwnd / D == pytest.approx(1000, rel=0.02)  # concave: up to the plateau
    for _ in range(30):  # convex beyond it: probing for more, faster and faster
        round_trip(sent, now)
        sent, now = now, now + 0.1
    t = now - 0.1 - 2.1  # the last answers' time since the epoch began
    assert cc.cwnd / D == pytest.approx(C * (t + 0.1 - k) ** 3 + 1000, rel=0.01)
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


class Rounds:
    """Answers a round trip at a time, as the sender gives them: ten of
    datagrams sent before the round began, then one sent after (its
    prior_delivered reaches the round's end)."""

    def __init__(self, cc: Cubic) -> None:
        self.cc = cc
        self.total = 0  # bytes delivered so far
        self.round_end = 0  # the delivered count when the round's last datagram was sent

    def trip(self, rtt: float, now: float, answers: int = 10, *, limited: bool = False) -> None:
        for prior in [self.round_end - 1] * answers + [self.round_end]:
            self.total += D
            self.cc.on_ack(
                RateSample(
                    newly_acked=D,
                    last_sent=now - rtt,
                    rtt=rtt,
                    prior_delivered=prior,
                    total_delivered=self.total,
                    is_app_limited=limited,
                ),
                now,
            )
        self.round_end = self.total


def test_hystart_slows_down_when_the_round_trip_grows_and_ends_after_five_rounds() -> None:
    cc = Cubic(D, initial_datagrams=10)
    r = Rounds(cc)
    r.trip(0.050, 1.0)
    r.trip(0.050, 1.1)
    assert cc.state == Cubic.SLOW_START
    r.trip(0.056, 1.2)  # +6 ms: under max(50 / 8, 4) = 6.25 ms, a steady path
    assert cc.state == Cubic.SLOW_START
    r.trip(0.064, 1.3)  # +8 ms over the round before: a queue is building
    assert cc.state == Cubic.CONSERVATIVE
    before = cc.cwnd
    r.trip(0.066, 1.4)
    assert cc.cwnd - before == 11 * D // 4  # a quarter of what was acked
    for i in range(4):
        assert cc.state == Cubic.CONSERVATIVE
        r.trip(0.066, 1.5 + i / 10)
    assert cc.state == Cubic.AVOIDANCE  # five rounds of it: the queue held
    assert cc.ssthresh <= cc.cwnd < cc.ssthresh + D


def test_hystart_goes_back_to_slow_start_when_the_rise_was_jitter() -> None:
    cc = Cubic(D, initial_datagrams=10)
    r = Rounds(cc)
    r.trip(0.050, 1.0)
    r.trip(0.060, 1.1)
    assert cc.state == Cubic.CONSERVATIVE
    r.trip(0.052, 1.2)  # under the baseline of 60 ms: it was not a queue
    assert cc.state == Cubic.SLOW_START


def test_hystart_needs_eight_samples_and_caps_its_threshold_at_16_ms() -> None:
    cc = Cubic(D, initial_datagrams=10)
    r = Rounds(cc)
    r.trip(0.400, 1.0)
    r.trip(0.450, 1.5, answers=6)  # +50 ms, but 7 samples: not judged
    assert cc.state == Cubic.SLOW_START
    r.trip(0.467, 2.0)  # +17 ms on the 450 ms round: over the cap of 16 ms (not 450 / 8)
    assert cc.state == Cubic.CONSERVATIVE


def test_hystart_is_for_the_first_slow_start_only() -> None:
    cc = Cubic(D, initial_datagrams=100)
    cc.on_timeout(0.5)  # a slow start again, from 2 datagrams to 70
    r = Rounds(cc)
    r.trip(0.050, 1.0)
    r.trip(0.080, 1.1)
    assert cc.state == Cubic.SLOW_START


def test_an_application_limited_answer_grows_nothing_and_stops_the_curve() -> None:
    cc = Cubic(D, initial_datagrams=100)
    r = Rounds(cc)
    r.trip(0.1, 1.0)
    cc.on_lost(1.05, D, 1.1)
    r.trip(0.1, 1.3)  # after the cut: the epoch starts
    curve_start = cc._curve.start if cc._curve else None
    window = cc.cwnd
    for i in range(20):  # 2 s of a sender with too little to send
        r.trip(0.1, 1.4 + i / 10, limited=True)
    assert cc.cwnd == window
    r.trip(0.1, 3.4)
    assert curve_start is not None and cc._curve is not None
    assert cc._curve.start == pytest.approx(curve_start + 2.0)
