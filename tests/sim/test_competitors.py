"""The simulation's competing TCP flows: Reno, CUBIC and BBR v1 as Linux runs them.

A congestion-control test that asserts a fair share against Linux TCP is
only as good as the TCP it competes with, so these tests hold the models to
what the real ones are known to do: each fills a path alone, two of a kind
share it, Reno halves and CUBIC keeps 0.7 of its window on a loss, BBR keeps
about two bdps in flight and shrugs off random loss that starves CUBIC, and
a seed is the same run every time.  The sans-IO mechanics (the handshake,
dupthresh 3, the RTO) are checked segment by segment first.

Shares are line shares (purelink.testing.sharing): the bytes the bottleneck
charged for the unique payload a flow got through from the warm-up to the
end, over rate x time.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from dataclasses import replace

import pytest

from helpers.shipping import report
from purelink.testing import (
    MSS,
    Competitor,
    FakeClock,
    FakeNet,
    SimLink,
    Simulation,
    TcpSink,
)
from purelink.testing.competitors import ACK_SIZE, CHARGED, UDP_IP, WINDOW
from purelink.testing.sharing import PURELINK, capacity, path, share, window
from purelink.testing.tcpcc import INITIAL_WINDOW, KINDS, Reno


def established(kind: str, *, paced: bool | None = None) -> tuple[Competitor, list[bytes]]:
    """A flow whose handshake took 40 ms, and its initial window."""
    flow = Competitor("tcp:1", kind, start=0.0, paced=paced)
    sink = flow.sink
    (syn,) = flow.datagrams_to_send(0.0)
    flow.receive_ack(sink.receive(syn, 0.02), 0.04)
    assert flow.established and flow.srtt == pytest.approx(0.04)
    return flow, flow.datagrams_to_send(0.04)


def test_the_handshake_and_the_initial_window() -> None:
    flow = Competitor("tcp:1", "cubic", start=1.0)
    assert flow.datagrams_to_send(0.5) == [] and flow.next_timer() == 1.0
    (syn,) = flow.datagrams_to_send(1.0)
    assert len(syn) < 100
    assert flow.datagrams_to_send(1.01) == [], "nothing before the handshake's answer"
    flow.receive_ack(flow.sink.receive(syn, 1.02), 1.04)
    segments = flow.datagrams_to_send(1.04)
    assert len(segments) == INITIAL_WINDOW and {len(s) for s in segments} == {CHARGED}
    assert flow.datagrams_to_send(1.04) == [], "cwnd-limited"
    assert flow.next_timer() == pytest.approx(1.04 + flow.rto), "an unpaced flow waits for ACKs"


def test_the_sink_counts_unique_payload_and_acknowledges_every_segment() -> None:
    flow, segments = established("reno")
    sink: TcpSink = flow.sink
    acks = [sink.receive(segments[i], 0.06) for i in (0, 2, 2, 1)]
    assert len(acks) == 4 and sink.cum == 3 and sink.segments == 4
    assert {len(a) for a in acks} == {ACK_SIZE - UDP_IP}
    assert sink.delivered == 3 * MSS, "the duplicate is not counted"


def test_a_segment_is_lost_once_three_sent_after_it_arrive() -> None:
    flow, segments = established("reno")
    sink, now = flow.sink, 0.08
    for i in (1, 2):
        flow.receive_ack(sink.receive(segments[i], 0.06), now)
    assert flow.losses == 0 and not flow.recovering
    flow.receive_ack(sink.receive(segments[3], 0.06), now)
    assert flow.losses == 1 and flow.recovering and flow.recoveries == 1
    assert flow.cwnd == (INITIAL_WINDOW + 2) / 2, "Reno halves the window it found the loss at"
    for i in range(4, 10):
        flow.receive_ack(sink.receive(segments[i], 0.06), now)
    assert flow.losses == 1 and flow.recoveries == 1
    first, *_ = flow.datagrams_to_send(now)
    assert first[:8] == segments[0][:8], "the lost segment goes first"
    assert flow.retransmits == 1
    flow.receive_ack(sink.receive(first, now + 0.02), now + 0.04)
    assert sink.cum == 10 and sink.delivered == 10 * MSS
    assert not flow.recovering, "everything sent before the episode is acknowledged"


def test_the_rto_backs_off_and_restarts_from_one_segment() -> None:
    flow, segments = established("cubic")
    rto = flow.next_timer()
    assert rto is not None and rto == pytest.approx(0.04 + 0.2), "at least 200 ms"
    flow.on_timer(rto)
    assert flow.losses == INITIAL_WINDOW and flow.timeouts == 1 and flow.cwnd == 1
    (again,) = flow.datagrams_to_send(rto)
    assert again[:8] == segments[0][:8]
    assert flow.next_timer() == pytest.approx(rto + 2 * flow.rto), "backed off"
    flow.receive_ack(flow.sink.receive(again, rto + 0.02), rto + 0.04)
    assert len(flow.datagrams_to_send(rto + 0.04)) == 2, "slow start: one delivered, two out"


def test_a_paced_flow_spaces_its_segments() -> None:
    flow, segments = established("bbr")
    rate = flow.cc.pacing_rate
    assert len(segments) == 1 and rate == pytest.approx(2.885 * INITIAL_WINDOW / 0.04, rel=1e-3)
    assert flow.next_timer() == pytest.approx(0.04 + 1 / rate)
    assert len(flow.datagrams_to_send(flow.next_timer() or 0.0)) == 1
    cubic, segments = established("cubic", paced=True)
    assert len(segments) == 1 and cubic.cc.pacing_rate == pytest.approx(2 * INITIAL_WINDOW / 0.04)


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="vegas"):
        Simulation(FakeNet(1)).add_competitor("vegas")


PATHS = [(20, 0.04), (100, 0.01), (5, 0.2)]
PATH_IDS = [f"{m}mbit-{int(r * 1e3)}ms" for m, r in PATHS]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("mbit", "rtt"), PATHS, ids=PATH_IDS)
def test_each_kind_alone_fills_a_path(kind: str, mbit: float, rtt: float) -> None:
    """Behind a one-bdp drop-tail buffer every kind keeps the line busy."""
    seconds, warm = (4.0, 1.5) if mbit >= 100 else (8.0, 3.0)
    run = share([kind], mbit=mbit, rtt=rtt, seconds=seconds, warm=warm)
    flow = run.flows[0]
    assert isinstance(flow, Competitor)
    report("test_each_kind_alone_fills_a_path", {"kind": kind, "mbit": mbit, "share": run.total})
    assert run.total >= 0.90, run.shares
    assert flow.timeouts == 0


def two_of_a_kind(kind: str, buffer: float, stagger: float, seconds: float, warm: float) -> None:
    run = share([kind, kind], buffer=buffer, seconds=seconds, warm=warm, stagger=stagger)
    report(
        "test_two_flows_of_a_kind_share",
        {"kind": kind, "buffer": buffer, "stagger": stagger, "shares": run.shares},
    )
    assert run.total >= 0.95, run.shares
    assert 0.35 <= run.share(0) <= 0.65, run.shares


@pytest.mark.parametrize("kind", KINDS)
def test_two_flows_of_a_kind_share(kind: str) -> None:
    """20 Mbit/s, 40 ms, a one-bdp buffer, starting together."""
    two_of_a_kind(kind, 1.0, 0.0, 20.0, 5.0)


# In a deep buffer a late CUBIC flow takes minutes to catch up (the drop-tail
# queue makes both flows lose in the same round trip, and equal cuts keep the
# ratio: 0.68 after two minutes behind ten bdps), so there they start together.
SHARES = [
    (kind, buffer, stagger)
    for kind in KINDS
    for buffer in (0.5, 1.0, 2.5, 10.0)
    for stagger in (0.0, 2.0)
    if not (kind == "cubic" and buffer > 2.5 and stagger)
]


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "buffer", "stagger"), SHARES, ids=str)
def test_two_flows_of_a_kind_share_slow(kind: str, buffer: float, stagger: float) -> None:
    """From half a bdp of buffer to ten; together, or the second flow 2 s late."""
    two_of_a_kind(kind, buffer, stagger, 30.0, 10.0)


@pytest.mark.parametrize(("kind", "beta"), [("reno", 0.5), ("cubic", 0.7)])
def test_a_loss_cuts_the_window_once(kind: str, beta: float) -> None:
    """In congestion avoidance, two segments dropped in one round trip: one
    reduction, to beta of the window the loss was found at."""
    up, down = path(20, 0.04, 4.0)
    sim = Simulation(FakeNet(1, up, down))
    flow = sim.add_competitor(kind)
    start = sim.clock.now
    sim.run(lambda: sim.clock.now >= start + 6.0, max_time=7.0)
    cc = flow.cc
    assert isinstance(cc, Reno) and cc.kind == kind
    assert flow.recoveries >= 1 and not flow.recovering and cc.cwnd >= cc.ssthresh, "avoiding"
    episodes, sent = flow.recoveries, flow.sent
    sim.net.up = replace(up, loss=1.0)
    assert sim.run(lambda: flow.sent >= sent + 2, max_time=1.0), "two segments sent into the loss"
    sim.net.up = up
    before, steps = flow.cwnd, 0
    while flow.recoveries == episodes and steps < 10_000:  # a round trip is ~1,300 steps
        before = flow.cwnd
        assert sim.step(), "the flow has something to do"
        steps += 1
    assert flow.recoveries == episodes + 1, f"no loss found in {steps} steps"
    assert flow.cwnd == pytest.approx(beta * before, rel=0.01)
    assert sim.run(lambda: not flow.recovering, max_time=1.0)
    assert flow.recoveries == episodes + 1 and flow.timeouts == 0
    assert flow.cwnd == pytest.approx(beta * before, rel=0.01), "no growth in recovery"


def bbr_and_cubic_through_random_loss(loss: float) -> tuple[float, float, list[float]]:
    """BBR's and CUBIC's line shares alone through 20 Mbit/s, 40 ms, `loss` each
    way, and BBR's windows in bdps of the path, every 100 ms in PROBE_BW."""
    windows = []
    run = share(["bbr"], loss=loss, seconds=10.0, warm=3.0)
    bbr = run.flows[0]
    assert isinstance(bbr, Competitor)
    bdp = 20e6 / 8 / CHARGED * 0.04
    sim, start = run.sim, run.sim.clock.now
    for i in range(1, 21):
        sim.run(lambda i=i: sim.clock.now >= start + i * 0.1, max_time=1.0)  # type: ignore[misc]
        assert bbr.in_flight <= bbr.cwnd
        if bbr.cc.mode == "probe_bw":  # type: ignore[union-attr]
            windows.append(bbr.cwnd / bdp)
    cubic = share(["cubic"], loss=loss, seconds=10.0, warm=3.0)
    return run.total, cubic.total, windows


def test_bbr_keeps_two_bdps_in_flight_at_most() -> None:
    bbr, cubic, windows = bbr_and_cubic_through_random_loss(0.0)
    assert bbr >= 0.95 and cubic >= 0.95
    assert min(windows) >= 1.95 and max(windows) <= 2.2, windows


def test_bbr_ignores_random_loss_that_starves_cubic() -> None:
    """1 % each way: CUBIC cuts its window every few round trips and keeps a
    fifth of the line; BBR's model does not see the loss (only its window dips
    to the packets in flight for a round trip of each recovery)."""
    bbr, cubic, windows = bbr_and_cubic_through_random_loss(0.01)
    report("test_bbr_ignores_random_loss", {"bbr": bbr, "cubic": cubic})
    assert bbr >= 0.90 and cubic <= 0.4 and cubic <= 0.5 * bbr, (bbr, cubic)
    assert 1.8 <= statistics.median(windows) <= 2.2, windows


def figures(seed: int) -> str:
    """A link and the three kinds through a lossy path at `seed`: the run's
    shares, steps, and each flow's bytes and losses, to the last bit."""
    shared = share([PURELINK, *KINDS], loss=0.005, buffer=0.5, seconds=3.0, warm=1.0, seed=seed)
    flows = [f for f in shared.flows if isinstance(f, Competitor)]
    return repr([shared.shares, shared.sim.steps, [(f.delivered, f.losses) for f in flows]])


ELSEWHERE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("competitors", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(json.dumps({"hash": hash("purelink"), "figures": module.figures(7)}))
"""


def test_a_seed_is_the_same_run_in_another_process() -> None:
    """The same seed, here and in a process whose str hashes differ (another
    PYTHONHASHSEED): the same figures.  Another seed: other figures."""
    ours = os.environ.get("PYTHONHASHSEED", "random")
    theirs = str(int(ours) + 1) if ours.isdigit() else "0"
    env = {**os.environ, "PYTHONHASHSEED": theirs, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-c", ELSEWHERE, __file__]
    there = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert there.returncode == 0, there.stderr
    out = json.loads(there.stdout)
    assert out["hash"] != hash("purelink"), "the other process hashes strings differently"
    here = figures(7)
    assert out["figures"] == here
    assert figures(8) != here


def test_a_flow_starts_at_its_time_on_an_idle_path() -> None:
    """The first flow starts at its start time though nothing was on its way
    before it (no event to step to), the second at its own."""
    run = share(["cubic", "cubic"], starts=[1.0, 1.5], seconds=2.0, warm=1.6)
    first, second = run.flows
    begin = FakeClock().now
    assert isinstance(first, Competitor) and isinstance(second, Competitor)
    assert first.start == begin + 1.0
    assert second.start == pytest.approx(begin + 1.5, abs=1e-3)
    assert first.delivered > second.delivered > 0


def test_a_flow_s_receive_window_never_binds_on_its_path() -> None:
    """On a path that holds more than Linux's largest receive window (200
    Mbit/s, 200 ms, ten bdps: 55 MB), a flow's window is 4 x what it holds,
    and slow start takes it past the default cap; elsewhere, the default cap."""
    assert window(20, 0.04, 1.0) == WINDOW
    rwnd = window(200, 0.2, 10.0)
    assert capacity(200, 0.2, 10.0) > 50e6 and rwnd * CHARGED >= 4 * capacity(200, 0.2, 10.0)
    run = share(["reno"], mbit=200, rtt=0.2, buffer=10.0, seconds=2.5, warm=1.0)
    (flow,) = run.flows
    assert isinstance(flow, Competitor) and flow.window == rwnd
    assert flow.in_flight > WINDOW and flow.recoveries == 0


def beside(kind: str, buffer: float, seconds: float, warm: float) -> list[float]:
    """A purelink link (BBR) and a `kind` flow through 20 Mbit/s, 40 ms: both
    move data and together they fill the path.  The link's share is reported
    and printed, not held to a band: bench/ccshare.py judges it."""
    run = share([PURELINK, kind], buffer=buffer, seconds=seconds, warm=warm)
    link, other = run.flows
    name = f"test_a_purelink_link_beside_{kind}"
    report(name, {"buffer": buffer, "purelink": run.share(0), kind: run.share(1)})
    shares = [round(x, 3) for x in run.shares]
    print(f"{name}[{buffer}]: line shares {shares}, the link's part {run.share(0):.2f}")
    assert isinstance(link, SimLink) and isinstance(other, Competitor)
    assert link.sender.stored > 0 and other.delivered > 0
    assert run.total >= 0.85, run.shares
    return run.shares


def test_a_purelink_link_beside_cubic() -> None:
    shares = beside("cubic", 1.0, 12.0, 4.0)
    assert min(shares) > 0.02, "both took part of the line"


@pytest.mark.slow
@pytest.mark.parametrize("buffer", [0.5, 1.0, 2.5, 10.0])
@pytest.mark.parametrize("kind", ["cubic", "bbr"])
def test_a_purelink_link_beside_a_tcp_flow_slow(kind: str, buffer: float) -> None:
    beside(kind, buffer, 40.0, 10.0)
