"""The simulation's competing TCP flows: Reno, CUBIC and BBR v1 as Linux runs them.

A congestion-control test that asserts a fair share against Linux TCP is
only as good as the TCP it competes with, so these tests hold the models to
what the real ones are known to do -- measured, where a figure is given, on
the TUN path emulator with Linux 6.18 (bench/paths; bench/RESULTS.md): each
fills a path alone, two of a kind share it, Reno halves and CUBIC keeps 0.7
of its window on a loss, CUBIC leaves slow start on HyStart where Linux's
does, an unpaced flow sends in pairs, BBR keeps two bdps and its budget in
flight and shrugs off random loss that starves CUBIC, and a seed is the
same run every time.  The sans-IO mechanics (the handshake, the receiver's
ACKs, dupthresh 3, the RTO) are checked segment by segment first.

Shares are line shares (purelink.testing.sharing): the bytes the bottleneck
charged for the unique payload a flow got through from the warm-up to the
end, over rate x time.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import statistics
import subprocess
import sys
from dataclasses import replace

import pytest

from helpers.shipping import report
from purelink.protocol.congestion import Bbr
from purelink.protocol.congestion.bbr import QUEUE_SHARE
from purelink.testing import (
    MSS,
    Competitor,
    FakeClock,
    FakeNet,
    SimLink,
    Simulation,
    TcpSink,
)
from purelink.testing.competitors import CHARGED, KINDS, WINDOW
from purelink.testing.sharing import PURELINK, capacity, path, share, window
from purelink.testing.tcpcc import INITIAL_WINDOW, Cubic, Reno, tso_segments
from purelink.testing.tcpsink import QUICKACKS, ack_struct, segment_struct


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


def test_the_sink_counts_unique_payload() -> None:
    flow, segments = established("reno")
    sink: TcpSink = flow.sink
    for i in (0, 2, 2, 1):
        sink.receive(segments[i], 0.06)
    assert sink.cum == 3 and sink.segments == 4
    assert sink.delivered == 3 * MSS, "the duplicate is not counted"


def acked(ack: bytes | None) -> tuple[int, list[int]]:
    """An ACK's cumulative point and the segments it reports as new arrivals."""
    assert ack is not None
    cum, _, count, *reported = ack_struct.unpack(ack)
    return cum, reported[:count]


def test_the_sink_acknowledges_as_linux_does() -> None:
    """Quick ACKs first, then every second segment, a lone one after 40 ms;
    out of order: three at once, then compressed; a hole filled and a
    duplicate at once.  (The receiver's RTT is 0.2 s here, so its receive
    window does not grow within the test.)"""
    sink = TcpSink()

    def seg(seq: int) -> bytes:
        return segment_struct.pack(seq, 0.0)

    assert acked(sink.receive(seg(-1), 0.0)) == (-1, []), "the SYN's answer"
    now = 0.2
    for seq in range(QUICKACKS):
        assert acked(sink.receive(seg(seq), now)) == (seq + 1, [seq]), "quick ACKs"
    assert sink.receive(seg(16), now) is None, "a lone segment waits"
    assert sink.next_timer() == pytest.approx(now + 0.04), "40 ms at most"
    assert acked(sink.receive(seg(17), now)) == (18, [16, 17]), "the second: both at once"
    assert sink.next_timer() is None
    assert sink.receive(seg(18), now) is None
    assert acked(sink.on_timer(now + 0.04)) == (19, [18]), "the delayed ACK"
    now += 0.05
    for seq in (20, 21, 22):  # 19 is missing: three duplicate ACKs at once
        assert acked(sink.receive(seg(seq), now)) == (19, [seq])
    assert sink.receive(seg(23), now) is None, "the fourth out of order is compressed"
    assert sink.next_timer() == pytest.approx(now + 0.001), "min(1 ms, RTT / 20)"
    assert acked(sink.receive(seg(19), now)) == (24, [23, 19]), "the hole filled: at once"
    assert acked(sink.receive(seg(19), now)) == (24, [19]), "a duplicate: at once"
    assert acked(sink.receive(seg(24), now)) == (25, [24]), "and quick ACKs again"
    assert sink.delivered == 25 * MSS and sink.acks == 1 + QUICKACKS + 8


def test_an_unpaced_flow_sends_in_pairs() -> None:
    """The receiver acknowledges two segments at a time once the window stops
    growing, and an unpaced flow answers each ACK with two: on the emulator
    79-86 % of an unpaced CUBIC flow's segments left in back-to-back pairs.
    In slow start, while the receiver's window grows, ACKs come one a segment."""
    up, down = path(20, 0.04, 1.0)
    net = FakeNet(1, up, down)
    sends: list[float] = []
    send = net.send

    def watch(data: bytes, source: tuple[str, int], dest: str, now: float, up: bool) -> None:
        if up and len(data) == CHARGED:
            sends.append(now)
        send(data, source, dest, now, up)

    net.send = watch  # type: ignore[method-assign]
    sim = Simulation(net)
    flow = sim.add_competitor("cubic")
    start = sim.clock.now
    sim.run(lambda: sim.clock.now >= start + 0.25, max_time=1.0)
    assert flow.sink.acks >= 0.8 * flow.sink.segments, "slow start: mostly one ACK a segment"
    sim.run(lambda: sim.clock.now >= start + 3.0, max_time=4.0)
    segments, acks, first = flow.sink.segments, flow.sink.acks, len(sends)
    sim.run(lambda: sim.clock.now >= start + 6.0, max_time=4.0)
    assert flow.sink.acks - acks <= 0.6 * (flow.sink.segments - segments), "then one per two"
    times = sends[first:]
    runs, run = [], 1
    for a, b in itertools.pairwise(times):
        if b == a:
            run += 1
        else:
            runs.append(run)
            run = 1
    in_pairs = 2 * runs.count(2) / len(times)
    report("test_an_unpaced_flow_sends_in_pairs", {"in_pairs": in_pairs})
    assert in_pairs >= 0.75, in_pairs


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


def test_a_paced_flow_spaces_its_gso_packets() -> None:
    """Each pacing release sends a GSO packet: 1 ms of the rate, at least 2 segments."""
    flow, segments = established("bbr")
    rate = flow.cc.pacing_rate
    assert rate == pytest.approx(2.885 * INITIAL_WINDOW / 0.04, rel=1e-3)
    assert len(segments) == 2 and tso_segments(rate) == 2, "721 segments/s: 1 KB a ms"
    assert flow.next_timer() == pytest.approx(0.04 + 2 / rate)
    assert len(flow.datagrams_to_send(flow.next_timer() or 0.0)) == 2
    cubic, segments = established("cubic", paced=True)
    assert len(segments) == 2 and cubic.cc.pacing_rate == pytest.approx(2 * INITIAL_WINDOW / 0.04)
    assert tso_segments(50e6 / 8 / MSS) == 4 and tso_segments(100.0) == 1


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


# In a deep buffer a late CUBIC flow takes minutes to settle (the drop-tail
# queue makes both flows lose in the same round trip, and equal cuts keep the
# ratio; HyStart ends the late flow's slow start at the first flow's queue):
# behind 2.5 bdps its share of the last 20 s was 0.32 after 30 s, 0.55 after
# 60 s and 0.70 after 120 s, so from 2.5 bdps up they start together.
SHARES = [
    (kind, buffer, stagger)
    for kind in KINDS
    for buffer in (0.5, 1.0, 2.5, 10.0)
    for stagger in (0.0, 2.0)
    if not (kind == "cubic" and buffer >= 2.5 and stagger)
]


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "buffer", "stagger"), SHARES, ids=str)
def test_two_flows_of_a_kind_share_slow(kind: str, buffer: float, stagger: float) -> None:
    """From half a bdp of buffer to ten; together, or the second flow 2 s late."""
    two_of_a_kind(kind, buffer, stagger, 30.0, 10.0)


def cubic_alone(mbit: float, rtt: float, buffer: float, seconds: float) -> Competitor:
    """A CUBIC flow alone through a path, `seconds` long."""
    sim = Simulation(FakeNet(1, *path(mbit, rtt, buffer)))
    flow = sim.add_competitor("cubic")
    start = sim.clock.now
    sim.run(lambda: sim.clock.now >= start + seconds, max_time=seconds + 1)
    return flow


@pytest.mark.parametrize(
    ("mbit", "rtt", "linux"), [(20, 0.04, 76), (50, 0.1, 533)], ids=["20mbit-40ms", "50mbit-100ms"]
)
def test_hystart_ends_slow_start_where_linux_does(mbit: float, rtt: float, linux: int) -> None:
    """Alone, behind two bdps of buffer: the ACK train (ACKs 2 ms apart or closer
    for half the smallest RTT) ends slow start before any loss, at the window
    Linux's HyStart ended it at on the emulator (TcpExtTCPHystartTrainCwnd)."""
    flow = cubic_alone(mbit, rtt, 2.0, 1.0 + 12 * rtt)
    cc = flow.cc
    assert isinstance(cc, Cubic)
    assert cc.hystart_exit == "train" and flow.losses == 0
    assert cc.ssthresh == pytest.approx(linux, rel=0.03)


def test_without_hystart_slow_start_fills_the_buffer() -> None:
    """hystart=0: slow start runs until the 10-bdp buffer overflows, and loses
    hundreds of segments (with HyStart, Linux loses 48 in 20 s, the model 47)."""
    sim = Simulation(FakeNet(1, *path(20, 0.04, 10.0)))
    flow = sim.add_competitor("cubic")
    flow.cc = cc = Cubic(hystart=False)
    start = sim.clock.now
    sim.run(lambda: sim.clock.now >= start + 6.0, max_time=7.0)
    assert cc.hystart_exit == "loss" and flow.losses > 300


def test_an_rto_makes_cubic_forget() -> None:
    """Linux's Loss state resets tcp_cubic: no W_max, no delay_min, HyStart again."""
    cc = Cubic()
    cc.on_established(0.04, 0.0)
    cc.cwnd, cc.w_max, cc.delay_min, cc.found = 80.0, 100.0, 0.04, True
    cc.on_timeout(1.0, recovering=False)
    assert cc.cwnd == 1 and cc.ssthresh == pytest.approx(56.0)
    assert cc.w_max == 0 and cc.delay_min == math.inf and not cc.found


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


def test_bbr_keeps_two_bdps_and_its_budget_in_flight_at_most() -> None:
    """2 bdps, the quantization budget (3 GSO packets: 6 segments at 20 Mbit/s)
    and the ACK aggregation it measured: Linux's window alone on the emulator
    (20 Mbit/s, 40 ms, one bdp of buffer) was 2.16-2.28 bdps in PROBE_BW."""
    bbr, cubic, windows = bbr_and_cubic_through_random_loss(0.0)
    assert bbr >= 0.95 and cubic >= 0.95
    assert min(windows) >= 2.05 and max(windows) <= 2.3, windows


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


SHARED = PURELINK
"""A link whose controller judges what shares the path (the default, "bbr")."""
COOPERATIVE = f"{PURELINK}-bbr-cooperative"
"""A link whose BBR never judges ("bbr-cooperative")."""


def verdict(kinds: list[str], buffer: float, **kw: float) -> tuple[str, float]:
    """What the first flow's (a purelink link's) controller believes shares
    its path at the end of a run, and that link's part of the pair."""
    run = share(kinds, buffer=buffer, **kw)
    link = run.flows[0]
    assert isinstance(link, SimLink)
    return str(link.sender.cc.statistics().cross_traffic), run.share(0) if len(kinds) > 1 else 1.0


def test_alone_the_link_keeps_its_cooperative_rules() -> None:
    """Alone on a deep buffer the link's own queue is its share: no verdict."""
    kind, _ = verdict([SHARED], 10.0, seconds=8.0, warm=2.0)
    assert kind == "none"


def test_the_cooperative_controller_does_not_judge_and_yields_beside_cubic() -> None:
    """ "bbr-cooperative" keeps its cooperative rules beside CUBIC on a deep
    buffer: no verdict, and it yields (the Vegas starvation the judgement is for)."""
    kind, part = verdict([COOPERATIVE, "cubic"], 10.0, seconds=12.0, warm=4.0)
    assert kind == "none"
    assert part < 0.2, part


def test_beside_cubic_on_a_deep_buffer_the_link_competes() -> None:
    """CUBIC fills 10 bdps whatever the link does: the cooperative rules left
    the link 0.02 of the pair.  The queue stands, then grows while the link
    holds still: the link takes a CUBIC window (and, once the buffer
    overflows round after round, BBR v1's rules), and a fair part."""
    kind, part = verdict([SHARED, "cubic"], 10.0, seconds=12.0, warm=4.0)
    assert kind in ("loss", "model")
    assert 0.35 <= part <= 0.65, part


def test_beside_bbr_on_a_long_path_the_link_competes() -> None:
    """BBR v1 keeps 2 bdp in flight and its queue stands whatever the link
    does: on 20 Mbit/s, 100 ms, 2 bdp the cooperative rules leave the link
    0.16 of the pair (bbr-cooperative, this seed); judging that queue a
    competitor's, the link stops yielding to it and holds more."""
    kind, part = verdict([SHARED, "bbr"], 2.0, mbit=20, rtt=0.1, seconds=12.0, warm=4.0)
    assert kind in ("loss", "model")
    assert part > 0.3, part


def test_while_it_judges_the_link_keeps_its_model() -> None:
    """Beside CUBIC on a long path (100 ms, 2 bdp) the judgement takes seconds
    of rounds; resetting the bandwidth filter to each of those rounds' rate,
    as the cooperative yield does, left the link 0.07-0.10 of the pair by
    12 s.  Kept, and restored at the verdict, it holds more than that."""
    kind, part = verdict([SHARED, "cubic"], 2.0, mbit=20, rtt=0.1, seconds=12.0, warm=4.0)
    assert kind in ("loss", "model")
    assert part > 0.15, part


def overflows_after(kinds: list[str], buffer: float, seed: int = 0) -> tuple[SimLink, float]:
    """The first flow (a purelink link) after 12 s beside `kinds[1:]` on 20
    Mbit/s, 40 ms, and its part of what the flows got from 4 s on."""
    run = share(kinds, buffer=buffer, seconds=12.0, warm=4.0, seed=seed)
    link = run.flows[0]
    assert isinstance(link, SimLink)
    return link, run.share(0)


def test_beside_cubic_on_half_a_bdp_the_link_leaves_it_room() -> None:
    """CUBIC backs off at each overflow of half a bdp and the queue falls
    to a small part of the buffer (overflows.py): the link keeps no more
    than 0.3 of the buffer of its own in the queue, not 16 datagrams, and
    not more than 0.65 of the pair (0.77-0.83 with 16 datagrams)."""
    link, part = overflows_after([SHARED, "cubic"], 0.5)
    cc = link.sender.cc
    assert isinstance(cc, Bbr)
    assert cc.overflows.elastic
    assert cc.overflows.buffer == pytest.approx(0.02, rel=0.25)  # half of 40 ms
    assert cc.queue_share < QUEUE_SHARE * cc.datagram_size
    assert part <= 0.65, part


def test_beside_bbr_on_half_a_bdp_the_queue_stands_and_the_share_stays() -> None:
    """BBR v1 keeps its flight through an overflow: the queue does not fall,
    and the link keeps its 16-datagram share (a cap there starved it)."""
    link, part = overflows_after([SHARED, "bbr"], 0.5)
    cc = link.sender.cc
    assert isinstance(cc, Bbr)
    assert cc.overflows.buffer > 0  # it overflowed
    assert not cc.overflows.elastic
    assert cc.queue_share == QUEUE_SHARE * cc.datagram_size
    assert part > 0.3, part
