"""`CongestionControl.statistics()`: each controller's view of the path, as a snapshot.

What `link.stats()` and the metrics show of the congestion control comes from
here, so each controller is fed by hand and its snapshot compared with the
controller itself: the four figures every controller has, the optional ones
(`btl_bw`, `min_rtt`, `competing`) where it keeps them, and None where it
does not (never a made-up 0 or no).
"""

from __future__ import annotations

import dataclasses

import pytest

from purelink.protocol.congestion import (
    Bbr,
    CongestionControl,
    CongestionStatistics,
    Cubic,
    NewReno,
    RateSample,
    create,
)

D = 1000
RATE = 5e6  # bytes/s the path delivers
RTT = 0.05


def answer(cc: CongestionControl, now: float, delivered: int, *, rtt: float = RTT) -> int:
    """One answer of a path that delivers RATE with `rtt`: a quarter of a bdp acked."""
    acked = int(RATE * rtt / 4)
    cc.on_ack(
        RateSample(
            delivery_rate=RATE, delivered=acked, interval=rtt, rtt=rtt,
            prior_delivered=max(delivered - int(RATE * rtt) + acked, 0), newly_acked=acked,
            last_sent=now - rtt, prior_in_flight=int(RATE * rtt), in_flight=int(RATE * rtt),
            total_delivered=delivered + acked,
        ),
        now,
    )  # fmt: skip
    return delivered + acked


def feed(cc: CongestionControl, answers: int, now: float = 100.0, *, rtt: float = RTT) -> float:
    delivered = 0
    for _ in range(answers):
        now += rtt / 4
        delivered = answer(cc, now, delivered, rtt=rtt)
    return now


def mirrors(cc: CongestionControl, s: CongestionStatistics) -> None:
    """The snapshot says what the controller holds."""
    assert (s.name, s.state, s.cwnd, s.pacing_rate) == (
        cc.name,
        cc.state,
        cc.cwnd,
        cc.pacing_rate,
    )


@pytest.mark.parametrize("name", ["bbr", "bbr-cooperative", "cubic", "newreno"])
def test_a_snapshot_is_frozen_and_apart_from_the_controller(name: str) -> None:
    cc = create(name, D)
    before = cc.statistics()
    assert isinstance(before, CongestionStatistics)
    with pytest.raises(dataclasses.FrozenInstanceError):
        before.cwnd = 0  # type: ignore[misc]
    cc.on_path_rtt(RTT, 100.0)
    feed(cc, 8)
    assert cc.cwnd != before.cwnd  # the controller moved on; the snapshot did not
    assert cc.statistics().cwnd == cc.cwnd


def test_bbr_shows_its_model_bandwidth_and_min_rtt() -> None:
    cc = Bbr(D, seed=1)
    s = cc.statistics()
    mirrors(cc, s)
    assert (s.name, s.state) == ("bbr", Bbr.STARTUP)
    # no sample yet: measured as nothing so far (0.0), not unknown (None)
    assert s.btl_bw == 0.0 and s.min_rtt == 0.0 and s.pacing_rate == 0.0
    assert s.competing is False and s.cross_traffic == "none"  # nothing judged yet
    cc.on_path_rtt(0.04, 100.0)  # the handshake's round trip
    assert cc.statistics().min_rtt == 0.04
    feed(cc, 4 * 12)  # a dozen round trips: startup finds the pipe full
    s = cc.statistics()
    mirrors(cc, s)
    assert s.state in (Bbr.DRAIN, Bbr.PROBE_BW)
    assert s.btl_bw == cc.btl_bw == RATE
    assert s.min_rtt == cc.min_rtt == 0.04
    assert s.pacing_rate is not None and s.pacing_rate > 0


def test_cubic_shows_its_phase_and_min_rtt_and_no_bandwidth() -> None:
    cc = Cubic(D, initial_datagrams=10)
    s = cc.statistics()
    mirrors(cc, s)
    assert (s.name, s.state) == ("cubic", Cubic.SLOW_START)
    assert s.btl_bw is None  # CUBIC keeps no model of the path's rate
    assert s.min_rtt == 0.0 and s.competing is None
    cc.on_path_rtt(0.06, 100.0)
    assert cc.statistics().min_rtt == 0.06
    now = feed(cc, 4)  # samples of 50 ms: the smaller one wins
    s = cc.statistics()
    mirrors(cc, s)
    assert s.min_rtt == cc.min_rtt == RTT
    assert s.pacing_rate == pytest.approx(2.0 * cc.cwnd / cc.srtt)
    cc.on_lost(now - RTT, D, now)
    assert cc.statistics().state == Cubic.RECOVERY
    feed(cc, 1, now, rtt=0.08)  # a larger sample does not raise it
    assert cc.statistics().min_rtt == RTT


def test_newreno_shows_its_phases_and_nothing_it_does_not_measure() -> None:
    cc = NewReno(D, initial_datagrams=10)
    s = cc.statistics()
    mirrors(cc, s)
    assert (s.name, s.state) == ("newreno", NewReno.SLOW_START)
    assert s.btl_bw is None and s.min_rtt is None  # it times nothing
    assert s.pacing_rate == 0.0 and s.competing is None  # the window alone clocks it
    cc.on_lost(1.0, D, 2.0)
    assert cc.statistics().state == NewReno.RECOVERY
    cc.on_ack(RateSample(newly_acked=D, last_sent=1.9), 2.05)  # sent before the reduction
    assert cc.statistics().state == NewReno.RECOVERY
    cc.on_ack(RateSample(newly_acked=D, last_sent=2.01), 2.1)  # sent after it
    s = cc.statistics()
    mirrors(cc, s)
    assert s.state == NewReno.AVOIDANCE  # cwnd == ssthresh after the halving
    cc.on_lost(2.5, D, 3.0)
    cc.on_spurious(2.5, 3.1)  # undone: the window and phase of before
    assert cc.statistics().state == NewReno.AVOIDANCE


class _Sharing(CongestionControl):
    """A policy that keeps every optional figure, `competing` among them."""

    name = "sharing"

    def __init__(self) -> None:
        super().__init__(D)
        self.cwnd = 20 * D
        self.pacing_rate = 1e6
        self.btl_bw = 2e6
        self.min_rtt = 0.03
        self.competing = False

    def on_ack(self, sample: RateSample, now: float) -> None:
        self.competing = sample.rtt > 2 * self.min_rtt  # a standing queue: someone else's

    def on_lost(self, sent_time: float, size: int, now: float) -> None:
        pass

    def on_spurious(self, sent_time: float, now: float) -> None:
        pass

    def on_timeout(self, now: float) -> None:
        pass


def test_a_controller_that_keeps_the_optional_figures_shows_them() -> None:
    cc = _Sharing()
    s = cc.statistics()
    assert s == CongestionStatistics(
        name="sharing",
        state="sharing",  # the base's state: the name
        cwnd=20 * D,
        pacing_rate=1e6,
        btl_bw=2e6,
        min_rtt=0.03,
        competing=False,
    )
    cc.on_ack(RateSample(rtt=0.09), 1.0)
    assert cc.statistics().competing is True
