"""BBR: a model of the path (bottleneck bandwidth and round-trip time), not a loss count.

After draft-ietf-ccwg-bbr (BBR v1's state machine, with the later versions'
startup and drain gains, their ack-aggregation allowance and their shallower
ProbeRTT).  The default window policy of UDP links: on a path with random
loss or reordering a loss-based window (NewReno) halves again and again,
while the path's capacity has not changed; BBR measures that capacity and
sends at it.

The model, updated on every answer from its `RateSample`:

    btl_bw  = max of the delivery-rate samples over the last 10 round trips
              (an app-limited sample counts only if it raises the max)
    min_rtt = min of the RTT samples over the last 10 s (the first: the
              handshake's round trip, timed before data queues on the path)
    jitter  = mean |rtt - previous rtt| of consecutive samples (RFC 3550's
              interarrival jitter, gain 1/16): fast variation only; a queue
              that grows or drains moves the RTT slowly and barely shows in it
    typical = min_rtt + 2 * jitter: the mean RTT of a path without a queue
              (for delays spread uniformly, the mean lies about 2.1 jitters
              above the minimum)
    rtt     = max(min_rtt, 5/8 * typical)
    bdp     = btl_bw * rtt

On a path whose delay varies both ways (jitter of +-20 ms on 25 ms each
way), min_rtt is the luckiest round trip, far below what most datagrams
take: by Little's law the bytes in flight at btl_bw are btl_bw * the mean
RTT, so a cwnd of 2 * btl_bw * min_rtt would cap the rate below btl_bw, the
next samples would be lower and the model would spiral down (measured on the
TUN emulator: 250 KB/s on a 6,250 KB/s path).  5/8 of the typical RTT is
what a cwnd of 2 bdp needs to carry the 1.25 probe's rate at that RTT; on a
path where the typical RTT is under 1.6 min_rtt (steady, or jitter on top
of the propagation delay) the model is BBR's own.

What is sent follows from it:

    pacing_rate = pacing_gain * btl_bw * 0.99
    cwnd        = cwnd_gain * bdp + extra_acked (ack aggregation, once the pipe is full)
                  reached by growing with every byte acknowledged, never below 4 datagrams

A round trip ends when a datagram sent after the previous round's end is
acknowledged (`prior_delivered` passes the count noted at the round's start)
and at least the typical RTT after it began: where delay varies both ways,
the first datagram of a round to be answered is the luckiest of many, so
without the second condition rounds lasted a third of a real round trip,
startup gave up after one, and the 10-round bandwidth filter forgot a probe
before the next (on a steady path the second condition always holds).
The jitter starts as the mean of the first differences, then follows RFC
3550's 1/16.

States:

    STARTUP    pacing_gain 2.77, cwnd_gain 2: the sending rate doubles every round
               trip, paced at no less than 2.77 initial windows per min_rtt (the
               first samples measure a datagram or two, not the path).  The pipe
               is full when btl_bw has not grown by 25 % for 3 rounds in a row
               (app-limited rounds do not count) -> DRAIN.  Loss does not end
               it: with BBR v2's exit at a lossy round, of two links that start
               together into a buffer below the bdp one left startup at a
               fraction of the other's rate, and they did not come within 25 %
               of each other in 10 s.
    DRAIN      pacing_gain 0.35: the queue Startup built drains; once bytes in
               flight are at most one bdp (or the minimum window, on a path
               whose bdp is a datagram or two) -> PROBE_BW.
    PROBE_BW   pacing_gain cycles 1.25, 0.75, 1, 1, 1, 1, 1, 1, each phase about
               one min_rtt long (entering at a random phase other than 0.75, from
               a seeded RNG): probe for more bandwidth, drain what the probe
               queued, cruise.  The 1.25 phase ends early on a loss or once a
               1.25 bdp is in flight; the 0.75 phase ends early once in flight
               falls to one bdp.  Beside a model-based flow, its ProbeRTT's
               room is probed at ROOM_GAIN instead of 1.25 (below).
    PROBE_RTT  when min_rtt has not been refreshed for 10 s: cwnd = max(4 datagrams,
               bdp / 2) for 200 ms and one round trip, so the queue empties and
               the true propagation delay is measured; then back.  After
               12.5 s instead of 10 while the judgement below watches for
               another flow's ProbeRTT (crosstraffic.py's dip: flows that
               started together would probe together, and ours would hide
               theirs); at once if the watch ends past 10 s.

Random loss does not move the model (a path that drops 1 % or 5 % at random
has not got slower).  Loss that comes with a queue does bound it, as BBR
v2's inflight_hi does: when a round trip lost more than 2 % of its bytes
beyond the path's own loss rate (and at least 2 datagrams) while even its
smallest RTT stood above 1.25 min_rtt and above min_rtt + 2 * jitter (a
standing queue, as CoDel judges one: the buffer overflowed, it was not
noise or jitter on the line), then

    inflight_hi = max(0.7 * the most in flight that round, 0.7 * min(bdp, cwnd),
                      bdp / 0.85)

(inflight_hi is None until then: no bound), and in PROBE_BW the cwnd
stays under inflight_hi (under 0.85 of it outside
the 1.25 phase, leaving room for other flows' probes, so flows sharing a
shallow buffer converge instead of overflowing it for ever).  Each later
round without such loss in which the bound held the flight back raises it
by 2 datagrams per 25 ms of min_rtt: the same bytes for every flow, so that
flows sharing a buffer converge as AIMD's do (an overflow cuts the larger
flight by more; both regain alike).

* The path's own loss rate is the share of bytes lost in the cruising round
  trips of PROBE_BW without a standing queue (decayed, about the last ten
  of them): on a path that drops 5 % at random, a round that loses 6 % is
  not an overflow.  Startup's and the probes' rounds do not count: their
  overflows are this flow's own.
* The bound never goes below bdp / 0.85 (at a cut, and as probing raises
  btl_bw), so the cwnd it leaves carries the model's own bandwidth: a bound
  under it would cap the delivery rate, which lowers btl_bw, which lowers
  the bound again, down to the minimum.  Beside a model-based flow
  (crosstraffic.py's MODEL) the floor is btl_bw x the round's standing RTT
  / 0.85 instead: that flow keeps its queue whatever we do, so every round
  trip of ours lasts min_rtt and that queue, and a bound of one bdp carries
  only min_rtt / RTT of our rate -- the spiral again: beside Linux's BBR
  v1 on a 1-bdp buffer of 20 Mbit/s, 40 ms on the path emulator, a link
  that had given the verdict fell to 0.24 of the pair; with this floor,
  three that gave it took 0.52-0.66 (docs/performance.md, paths).
  On a shallow buffer (under overflows.py's SHALLOW, 0.8 min RTTs, known
  from two overflows) the floor is that under "none" too, but no more
  than the bdp and FLOOR_SHARE (0.5) of our share of the queue
  (`queue_share`): BBR v1 keeps such a buffer full, and its whole delay
  (20 ms on half a bdp of 20 Mbit/s, 40 ms) is under the 1.25 of our
  shares that crosstraffic.py counts toward "model", so the verdict stays
  "none", and with a floor of one bdp each of BBR's overflows cuts the
  link's bound to the bdp: its btl_bw halves in 20 s, and it takes
  0.28-0.38 of the pair on the path emulator (five runs), 0.34-0.49 at
  four seeds in virtual time; with this floor 0.37-0.51 (five runs) and
  0.46-0.51.  Half the share, not
  all of it: each link keeps its floor however many flows share the
  buffer, and a few shares fill a shallow one (with the whole share one
  link took 0.51-0.55 beside one BBR v1 flow, but two links took
  0.86-0.93 of the path beside one, and one link 0.49-0.53 beside two;
  docs/performance.md, "Measured and not kept").  On a deeper buffer a
  standing queue under "none" is ours, and the bound still drains it to
  the bdp.
* A loss proven spurious (the original arrived) no longer counts toward
  its round, and a bound it helped set in the last two rounds is undone
  once that round's remaining losses are under the threshold.

A buffer that does not overflow gives no such signal: two flows each
keeping 2 bdp in flight share a standing queue in proportion to what they
send, and with the max filter each keeps the share it started with (a
second flow whose startup met the first one's queue stayed at a fifth of
the path).  So each flow also judges its part of the queue, as Vegas does:
at each round's end in PROBE_BW, the delay that stood all round long (the
round's smallest RTT above the typical one) times btl_bw is about its own
bytes in the queue; when that is more than QUEUE_SHARE (16) datagrams,

    btl_bw = the largest delivery rate of that round (the max filter's older
             samples were others' room)
    cwnd   = at most bdp + QUEUE_SHARE datagrams

The share is the same for every flow, so the one with the most in the
queue yields first, and a flow with less keeps its 2 bdp and grows into
the room: they meet where each holds the share.  A lone flow on a deep
buffer keeps a queue of 16 datagrams instead of a bdp, at the same rate.

On a buffer of a bdp or less those 16 datagrams are half of it or more,
and beside a loss-based flow (CUBIC, Reno) that is too much: the other
flow overflows the buffer at a fraction of the window it would have,
halves, and the link keeps 0.8 of the path (20 Mbit/s, 40 ms, 0.5 bdp).
Such a flow backs off at an overflow, and the link can see it do so
(overflows.py; not under "bbr-cooperative"): in PROBE_BW each round
that lost more than the path's own loss rate and 2 % of its bytes notes
its deepest queue (about the buffer's delay), and is judged by whether
within the next 3 rounds a round's standing queue falls under 0.4 of
that, beyond what the fall of the link's own flight since the overflow
explains.
When most of the last 16 overflows were followed by such a fall, the
share is 0.3 of the buffer in bytes instead (its delay at the largest
btl_bw the link has measured: at its own rate, which falls as it
yields, the share fell with it and the link starved; at least 4
datagrams, never more than the 16).  A model-based flow (BBR v1) and
purelink links keep their flights through an overflow, so the queue
stands and the share stays 16 datagrams; the judgement of what shares
the path (below) counts in 16-datagram shares whatever the cap.

Beside other traffic (not under "bbr-cooperative").  The queue-share rule is right
beside purelink links, which yield by it as this flow does, and wrong beside
TCP: a loss-based
flow keeps the buffer full whatever we do, so a flow that reads that queue
as its own yields round after round (the Vegas starvation: 2 % of the path
beside CUBIC on a buffer of 10 bdp).  So each round's standing queue, our
flight and our losses also go to a judgement of what shares the path
(crosstraffic.py, after Copa's test of a queue that never empties and
Nimbus's question of whether the cross traffic is elastic), and the flow
competes by the verdict (`cross_traffic`, and `competing` when not "none"):

    none    the rules above (alone, or beside purelink links)
    model   a competitor that keeps a queue and does not yield to one
            (Linux's BBR v1): no queue-share rule, so that two models
            each keep their 2 bdp; the loss bound set while we yielded
            goes, and an overflow sets it again as in the rules above,
            but never under what carries our rate at the round trip that
            flow's queue makes (see the bound below; without a bound,
            on buffers of a bdp and less, the link overfilled the buffer
            and the BBR v1 flow lost more than it: 0.84 of the pair
            beside it on 20 Mbit/s, 40 ms, 1 bdp at one seed of two,
            0.64-0.69 on 50 Mbit/s, 100 ms, 0.4 bdp, in virtual time);
            and a loss is answered as BBR v1 answers it (tcp_bbr.c's
            recovery): the cwnd loses what was lost, and an episode's
            first loss sets it to the flight, which for a round grows only
            with what is answered (packet conservation); a round later the
            cwnd of before comes back.  Two flows that answer the same
            overflows alike split them alike: without it the BBR v1 flow
            shrank at each overflow and the link did not, and the link
            took 0.20-0.76 of the pair beside it on 20 Mbit/s, 40 ms,
            1 bdp over four seeds, 0.46-0.73 on 50 Mbit/s, 100 ms, 0.4 bdp
            with BBR 5 s first; with it 0.20-0.65 and 0.37-0.60 (bench
            ccshare --grid, and with --stagger 5; the 0.20 is a run that
            kept "none"); and on a shallow buffer, under 0.8 min RTT of
            queue (from the overflows, overflows.py), once its overflows
            have calmed (at most one of the last 16 round trips
            overflowed: two flows that each keep 2 bdp overfill it
            round after round), the cwnd is one bdp and half of the
            buffer (`shallow_part`): a loss-based flow judged "model"
            whose cuts are too small to see keeps no more than its
            window there, and the link's 2 bdp take the rest (CUBIC's
            window at about 45 KB beside the link's 440 KB on 81.5
            Mbit/s, 38 ms, 0.52 bdp, the link at 0.88-0.91 of the pair;
            with the cap 0.49-0.65; beside BBR v1 0.65-0.74 without it,
            0.52-0.62 with it); and the round after the first one whose
            queue is empty (the other flow's ProbeRTT, crosstraffic.py's
            `room`) is paced at ROOM_GAIN (2) x btl_bw for one round
            trip, in the place of the cycle's 1.25 phase (which ends at
            1.25 bdp in flight or a loss: ended so, a window or an
            inflight bound that holds the flight under 2 bdp would keep
            the room's round going for round trips, whatever the other
            flow has taken back meanwhile): two models
            that each keep 2 bdp of their own rates make one min RTT of
            queue at any split of the path, so a link whose yields had
            left it a small part keeps it, until its filter measures the
            room the other flow's ProbeRTT leaves (beside BBR v1 on
            29.4 Mbit/s, 143 ms, 2.27 bdp, 33.3 Mbit/s, 145 ms, 9.05 bdp
            and 57.6 Mbit/s, 138 ms, 3.88 bdp the link takes 0.37-0.38
            of the pair at the worst of four seeds, 0.30-0.31 without the
            round; 0.41-0.51 on 50 Mbit/s, 100 ms, 2 bdp,
            0.34 without: bench ccshare --cells 12 and --grid).  Not on
            a shallow buffer whose overflows have calmed (`shallow_part`
            above): the other flow there is a loss-based one, and the
            empty queue its cut (with the round, beside CUBIC on 81.5
            Mbit/s, 38 ms, 0.52 bdp one seed of four took 0.71)
    loss    a competitor that backs off at an overflow and grows its window
            with every answer (CUBIC, Reno): the window is CUBIC's (RFC
            9438: its curve, its Reno-friendly estimate, one cut per round
            trip of loss, the undo of a spurious one) but with a cut to 0.5
            instead of 0.7 (a paced window loses less than the unpaced
            flows beside it at a drop-tail queue; 0.5 gives back what
            pacing takes in the simulation, not all of it beside Linux's
            CUBIC on short paths, where the link loses far less still:
            docs/performance.md, paths), paced as CUBIC paces, starting
            in avoidance at the fair window the verdict estimated from a
            cut, or, when the verdict came from a growing queue (the
            competitor still in its first climb), a steadily rising one,
            one deeper than a model keeps or, under "none", the queue's
            sawtooth (crosstraffic.py), in slow start without HyStart from
            our flight to the first loss, as the competitor climbs to it.
            No ProbeRTT
            (beside a loss-based flow the queue never empties, and a
            ProbeRTT would hand it the buffer); the model keeps measuring
            underneath, for the way back

While the judgement counts the rounds of a queue that is not only ours, the
flow still caps its cwnd at bdp + QUEUE_SHARE but keeps its bandwidth
filter: resetting it to each round's rate, round after round until the
verdict, spiralled the model down to a twentieth of the path beside CUBIC
(50 Mbit/s, 100 ms, 2 bdp: 0.05-0.08 of the pair) before the verdict came.
On a "model" verdict the bandwidth and cwnd of before those rounds come
back (the yield was for a queue that was not ours), and a "loss" window
starts from no less than that cwnd or the flight.

A loss-based window that keeps cutting (in 3 of 32 round trips, in
congestion avoidance: the competitor does not back off) goes to "model"; a
"model" verdict whose queue stays empty for 8 round trips goes back to
"none".  Alone the verdict stays "none" and the flow is the BBR above.

The judgement is on by default (`Bbr(shared=True)`, "bbr").  It has a
price where only purelink links share a buffer of one bdp or more: they
may take each other's queue (a newcomer's startup, a loss bound's cut) for
a competitor's, turn competitive one after the other and keep an uneven
split.  A round counts toward the "model" verdict only while the queue
stands above OTHERS_SHARES (1.25) times the delay of our share of it, not
just above it: at 1.0, 6 of the 47 slow pair cases of
tests/sim/test_congestion_sim.py ended outside 25 % of each other; at 1.25
all 47 converge, as they do without the judgement.  On a path that only
purelink links share, "bbr-cooperative" (`Bbr(shared=False)`) never judges:
its verdict stays "none", and beside TCP it yields as described above.

A probe timeout (the path may be gone: an outage) sets cwnd to the
minimum but keeps btl_bw and min_rtt; the first answer afterwards restores
the cwnd of before, so after an outage the link is back at full rate within
a round trip or two.  No rate sample is taken across the outage that could
lower btl_bw, since it is a max filter.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Final

from .base import CongestionControl, RateSample
from .crosstraffic import CrossTraffic
from .cubic import Cubic
from .overflows import Overflows

__all__ = ["Bbr"]

STARTUP_PACING_GAIN: Final = 2.77
STARTUP_CWND_GAIN: Final = 2.0
DRAIN_PACING_GAIN: Final = 0.35
CWND_GAIN: Final = 2.0
PROBE_BW_GAINS: Final = (1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
PACING_MARGIN: Final = 0.01
BW_FILTER_ROUNDS: Final = 10
EXTRA_ACKED_ROUNDS: Final = 10
MIN_RTT_WINDOW: Final = 10.0
PROBE_RTT_LATE: Final = 2.5  # s later while crosstraffic.py watches for another's ProbeRTT
PROBE_RTT_TIME: Final = 0.2
FULL_BW_GROWTH: Final = 1.25
FULL_BW_ROUNDS: Final = 3
MIN_DATAGRAMS: Final = 4
LOSS_THRESH: Final = 0.02
LOSS_EVENTS: Final = 2
QUEUE_RTT: Final = 1.25
QUEUE_SHARE: Final = 16
BETA: Final = 0.7
HEADROOM: Final = 0.15
BASE_DECAY: Final = 0.9
GROWTH_DATAGRAMS: Final = 2
GROWTH_TIME: Final = 0.025
JITTER_GAIN: Final = 1 / 16
JITTER_RTTS: Final = 2.0
TYPICAL_SHARE: Final = 0.625
COMPETING_BETA: Final = 0.5
COMPETING_SLOW_START: Final = True
ROOM_GAIN: Final = 2.0
FLOOR_SHARE: Final = 0.5  # of the queue share: above the bdp, the shallow buffer's floor


class _MaxFilter:
    """The maximum of values over the last `rounds` round trips (one slot per round)."""

    __slots__ = ("_rounds", "_slots", "value")

    def __init__(self, rounds: int) -> None:
        self._rounds = rounds
        self._slots: deque[tuple[int, float]] = deque()
        self.value = 0.0

    def update(self, value: float, round_count: int) -> None:
        slots = self._slots
        if slots and slots[-1][0] == round_count:
            if value <= slots[-1][1]:
                return
            slots[-1] = (round_count, value)
        else:
            slots.append((round_count, value))
            while slots[0][0] <= round_count - self._rounds:
                slots.popleft()
        self.value = max(v for _, v in slots)


class Bbr(CongestionControl):
    """BBR congestion control (see the module docstring)."""

    name = "bbr"
    STARTUP = "startup"
    DRAIN = "drain"
    PROBE_BW = "probe_bw"
    PROBE_RTT = "probe_rtt"

    def __init__(
        self,
        datagram_size: int,
        *,
        initial_datagrams: int = 32,
        seed: int = 0,
        shared: bool = True,
    ) -> None:
        super().__init__(datagram_size)
        self.shared = shared
        """Whether the flow judges what shares the path and competes by it
        ("bbr", the default); without it ("bbr-cooperative") the verdict stays
        "none" (see the module docstring, "Beside other traffic")."""
        self.name = "bbr" if shared else "bbr-cooperative"
        self.initial_cwnd = initial_datagrams * datagram_size
        self.cwnd = self.initial_cwnd
        self.pacing_rate = 0.0
        self.mode = Bbr.STARTUP
        self.pacing_gain = STARTUP_PACING_GAIN
        self.cwnd_gain = STARTUP_CWND_GAIN
        self._bw = _MaxFilter(BW_FILTER_ROUNDS)
        self.min_rtt = 0.0
        self._min_rtt_stamp = 0.0
        self.round_count = 0
        self._next_round_delivered = 0
        self._round_stamp = 0.0
        self._round_start = False
        self.filled = False
        """Startup found the pipe full."""
        self._full_bw = 0.0
        self._full_bw_rounds = 0
        self._rng = random.Random(seed)
        # the PROBE_BW phase: its index, when it began, whether it is the
        # room's round (ROOM_GAIN in the place of the 1.25 phase)
        self._cycle, self._cycle_stamp, self._room = 0, 0.0, False
        self._probe_rtt_done = 0.0
        self._probe_rtt_round = -1
        self._prior_cwnd = 0
        self._timed_out = False
        self._extra = _MaxFilter(EXTRA_ACKED_ROUNDS)
        self._epoch_start = 0.0
        self._epoch_acked = 0
        self.inflight_hi: int | None = None
        """Bytes in flight past which the path dropped more than 2 % (None: no bound)."""
        self._round_lost = 0
        self._round_acked = 0
        self._round_inflight = 0
        self._round_rtt = 0.0
        self._round_max = 0.0
        self.overflows = Overflows(datagram_size)
        """Whether the queue falls after an overflow (overflows.py): the share's cap."""
        self._base_lost = 0.0
        self._base_total = 0.0
        self._undo: tuple[int | None, int, int, int] | None = None  # the last bound set, to undo
        self.jitter = 0.0
        """Mean |difference| of consecutive RTT samples, seconds (RFC 3550)."""
        self._last_rtt = 0.0
        self._round_rate = 0.0
        """The round's largest delivery-rate sample, bytes/s."""
        self._queue_delay = 0.0
        """Queueing delay that stood all the last round long, seconds."""
        self._jitter_samples = 0
        self.queue_share = QUEUE_SHARE * datagram_size
        """Bytes of ours a standing queue may hold before we yield (see the module docstring)."""
        self.cross = CrossTraffic(datagram_size)
        """What shares the bottleneck (crosstraffic.py): how this flow competes."""
        self._window: Cubic | None = None  # the loss-based window while cross.kind is LOSS
        self._flight = 0  # bytes in flight after the last answer
        self._before_yield = (0.0, 0)
        self._cuts = 0
        # a loss episode under MODEL: (since when, packet conservation); the
        # cwnd before it waits in _prior_cwnd, as it does through a ProbeRTT
        self._episode: tuple[float, bool] | None = None

    # ------------------------------------------------------------ model
    @property
    def btl_bw(self) -> float:
        """Bottleneck bandwidth estimate, bytes/s (0: no sample yet)."""
        return self._bw.value

    @property
    def bdp(self) -> float:
        """Bandwidth-delay product, bytes (0 without a model): at the typical RTT
        of a jittery path, not its luckiest (see the module docstring)."""
        return self._bw.value * self.rtt

    @property
    def typical_rtt(self) -> float:
        """The mean RTT of the path without a queue (see the module docstring)."""
        return self.min_rtt + JITTER_RTTS * self.jitter

    @property
    def rtt(self) -> float:
        """The round trip the model sizes the pipe by (see the module docstring)."""
        return max(self.min_rtt, TYPICAL_SHARE * self.typical_rtt)

    @property
    def base_loss(self) -> float:
        """The path's own loss rate: the share of bytes lost in round trips
        without a standing queue (decayed over about ten of them)."""
        return self._base_lost / self._base_total if self._base_total else 0.0

    @property
    def state(self) -> str:
        return self.mode

    @property
    def competing(self) -> bool:
        """Whether a flow that does not yield as purelink links do shares the path."""
        return self.cross.kind != CrossTraffic.NONE

    @property
    def cross_traffic(self) -> str:
        """crosstraffic.py's verdict: "none", "loss" or "model"."""
        return self.cross.kind

    @property
    def minimum(self) -> int:
        return MIN_DATAGRAMS * self.datagram_size

    # ----------------------------------------------------------- inputs
    def on_ack(self, sample: RateSample, now: float) -> None:
        """Update the model, then the state, then pacing rate and cwnd."""
        acked = sample.newly_acked
        self._flight = sample.in_flight
        if self._window is not None:
            self._window.on_ack(sample, now)
        if self._timed_out and acked:
            self._timed_out = False  # answers again: the cwnd of before the outage
            self.cwnd = max(self.cwnd, self._prior_cwnd)
        self._round_acked += acked
        self._round_inflight = max(self._round_inflight, sample.prior_in_flight)
        if sample.rtt > 0 and (not self._round_rtt or sample.rtt < self._round_rtt):
            self._round_rtt = sample.rtt  # the round's smallest: a standing queue shows in it
        self._round_max = max(self._round_max, sample.rtt)
        self._update_round(sample, now)
        if self._round_start:
            self._check_loss_rate(sample, now)
        self._update_bw(sample)
        self._update_min_rtt(sample, now)
        self._update_extra_acked(acked, now)
        if self.mode == Bbr.STARTUP:
            self._check_full_pipe(sample)
            if self.filled:
                self._enter(Bbr.DRAIN, now)
        if self.mode == Bbr.DRAIN and sample.in_flight <= self._drained():
            self._enter_probe_bw(now)
        if self.mode == Bbr.PROBE_BW:
            self._advance_cycle(sample, now)
        self._check_probe_rtt(sample, now)
        self._set_pacing_rate()
        self._episode_ack(sample)
        self._set_cwnd(acked)

    def on_lost(self, sent_time: float, size: int, now: float) -> None:
        """Counted toward this round's loss rate (see the module docstring)."""
        self.losses += 1
        self._round_lost += size
        if self.cross.kind == CrossTraffic.MODEL and self.mode == Bbr.PROBE_BW:
            self._on_model_loss(size, now)
        if self._window is not None:
            self._window.on_lost(sent_time, size, now)

    def on_spurious(self, sent_time: float, now: float) -> None:
        """A loss that was not one: it no longer counts toward the round's loss
        rate, and a bound it helped set in the last two rounds is undone once
        that round's real losses fall under the threshold."""
        size = self.datagram_size
        self._round_lost = max(self._round_lost - size, 0)
        if self._window is not None:
            self._window.on_spurious(sent_time, now)
        undo = self._undo
        if undo is None:
            return
        prior, lost, total, round_count = undo
        if self.round_count - round_count > 2:
            self._undo = None
            return
        lost -= size
        if self._lossy(lost, total):
            self._undo = (prior, lost, total, round_count)
            return
        self._undo = None
        self.inflight_hi = prior
        self.undos += 1

    def on_path_rtt(self, rtt: float, now: float) -> None:
        """The handshake's round trip seeds min_rtt: taken before this flow's
        data (or another's that starts with it) queues on the path, it is the
        path's delay; a flow that first timed its own datagrams behind another
        flow's startup took that queue for delay and kept it for 10 s."""
        if rtt > 0 and (not self.min_rtt or rtt < self.min_rtt):
            self.min_rtt = rtt
            self._min_rtt_stamp = now

    def on_timeout(self, now: float) -> None:
        """The path may be gone: keep the model, send the minimum until answered."""
        if not self._timed_out:
            self._prior_cwnd = max(self._prior_cwnd, self.cwnd)
            self._timed_out = True
        self.cwnd = self.minimum
        if self._window is not None:
            self._window.on_timeout(now)

    def _on_model_loss(self, size: int, now: float) -> None:
        """BBR v1's answer to a loss (tcp_bbr.c's bbr_set_cwnd_to_recover_or_restore),
        beside a flow that answers so: the cwnd loses what was lost; an
        episode's first loss saves the cwnd and conserves packets for a round."""
        if self._episode is None:
            self._episode = (now, True)
            self._prior_cwnd = self.cwnd  # bbr_save_cwnd, outside a ProbeRTT
            self.cwnd = self._flight
        self.cwnd = max(self.cwnd - size, self.minimum)

    def _episode_ack(self, sample: RateSample) -> None:
        """An answer in a loss episode: its first round ends when a datagram
        sent after its start is answered; the episode, a round later, with
        the cwnd of before.  A new verdict's rules, or a ProbeRTT (which ends
        with the cwnd saved), take over from it."""
        if self._episode is None:
            return
        since, conserving = self._episode
        if self.cross.kind != CrossTraffic.MODEL or self.mode != Bbr.PROBE_BW:
            self._episode = None
        elif sample.last_sent > since:
            if conserving:
                self._episode = (sample.last_sent, False)
            else:
                self._episode = None
                self.cwnd = max(self.cwnd, self._prior_cwnd)
                self._prior_cwnd = 0

    # -------------------------------------------------------- internals
    def _update_round(self, rs: RateSample, now: float) -> None:
        self._round_start = False
        if (
            rs.newly_acked
            and rs.prior_delivered >= self._next_round_delivered
            and now - self._round_stamp >= self.typical_rtt
        ):
            self._next_round_delivered = rs.total_delivered
            self._round_stamp = now
            self.round_count += 1
            self._round_start = True

    def _check_loss_rate(self, rs: RateSample, now: float) -> None:
        """At each round's end: more than 2 % lost means the flights were too
        many for the path's buffer: bound them (BBR v2's inflight_hi); a round
        that probed for more without such loss raises the bound."""
        lost, acked, inflight = self._round_lost, self._round_acked, self._round_inflight
        self._round_lost = self._round_acked = self._round_inflight = 0
        round_rtt, self._round_rtt = self._round_rtt, 0.0
        round_max, self._round_max = self._round_max, 0.0
        if self.shared and self.mode == Bbr.PROBE_BW and not rs.is_app_limited and self.min_rtt:
            self._check_overflows(lost, lost + acked, round_rtt, round_max)
        self._check_queue_share(round_rtt, rs.is_app_limited, now)
        if self.mode == Bbr.PROBE_RTT or rs.is_app_limited:
            return
        total = lost + acked
        floor = max(QUEUE_RTT * self.min_rtt, self.typical_rtt)
        queued = round_rtt > floor
        if not queued and total and self.mode == Bbr.PROBE_BW and self.pacing_gain <= 1.0:
            # the path's own loss rate, measured where no queue of ours stood and
            # none was being built (startup's and the probes' overflows are ours:
            # a shallow buffer's overflow in startup, counted here, read as 40 %
            # of random loss and hid every overflow for seconds after it)
            self._base_lost = BASE_DECAY * self._base_lost + lost
            self._base_total = BASE_DECAY * self._base_total + total
        if queued and self._lossy(lost, total):
            target = min(self.bdp, self.cwnd) if self.bdp else self.cwnd
            prior = self.inflight_hi
            self.inflight_hi = max(int(BETA * inflight), int(BETA * target), self.minimum)
            self._undo = (prior, lost, total, self.round_count)
        elif (
            self.inflight_hi is not None
            and self.pacing_gain >= 1.0
            and inflight + 2 * self.datagram_size >= self.inflight_hi * (1.0 - HEADROOM)
        ):
            # the bound held the round back: raise it, by the same bytes for every
            # flow (additive: flows that share a buffer converge, as AIMD's do),
            # as many per round trip as GROWTH_TIME intervals it lasts
            per = max(1.0, self.min_rtt / GROWTH_TIME)
            self.inflight_hi += int(GROWTH_DATAGRAMS * self.datagram_size * per)
        if self.inflight_hi is not None:
            # never below what carries the model's bandwidth at the cruise headroom
            # (at a cut, and as probing raises btl_bw): a bound under it would cap
            # the delivery rate, which lowers btl_bw, which lowers the bound again
            # (a spiral to the minimum)
            least = int(self._carried(round_rtt) / (1.0 - HEADROOM))
            self.inflight_hi = max(self.inflight_hi, least)

    def _lossy(self, lost: int, total: int) -> bool:
        """A round that lost more than the path's own loss rate and LOSS_THRESH
        of its `total` bytes, and at least LOSS_EVENTS datagrams: with a
        standing queue, an overflow of the buffer."""
        return (
            lost >= LOSS_EVENTS * self.datagram_size
            and lost > (LOSS_THRESH + self.base_loss) * total
        )

    def _check_overflows(self, lost: int, total: int, round_rtt: float, round_max: float) -> None:
        """At each round's end in PROBE_BW: an overflow, or the queue after
        one, to the judgement of whether the others back off (overflows.py),
        which caps the share of the queue we keep."""
        self.overflows.round(
            round_count=self.round_count,
            overflow=self._lossy(lost, total),
            queue_min=round_rtt - self.min_rtt if round_rtt else None,
            queue_max=round_max - self.min_rtt,
            flight=self._flight,
            btl_bw=self._bw.value,
        )
        self.queue_share = self.overflows.share(QUEUE_SHARE * self.datagram_size)

    def _carried(self, round_rtt: float) -> float:
        """The flight that carries btl_bw for a round trip: the bdp, or beside a
        model-based flow (MODEL) btl_bw x the round's standing RTT, since the
        other flow's queue is in every round trip; on a shallow buffer under
        NONE that too, but no more than the bdp and FLOOR_SHARE of our share
        of the queue (module docstring)."""
        if round_rtt <= self.min_rtt:
            return self.bdp
        if self.cross.kind == CrossTraffic.MODEL:
            return self._bw.value * round_rtt
        if self.cross.kind == CrossTraffic.NONE and self.overflows.shallow(self.min_rtt):
            most = self.bdp + FLOOR_SHARE * self.queue_share
            return max(self.bdp, min(self._bw.value * round_rtt, most))
        return self.bdp

    def _check_queue_share(self, round_rtt: float, app_limited: bool, now: float) -> None:
        """At each round's end in PROBE_BW: the queue that stood all round long
        (its smallest RTT above the typical one) holds about btl_bw x its delay
        of our bytes; more than QUEUE_SHARE datagrams of them is more than our
        share (see the module docstring).  The round also goes to the judgement
        of what shares the path (crosstraffic.py).  An app-limited round judges
        nothing."""
        rate, self._round_rate = self._round_rate, 0.0
        self._queue_delay = 0.0
        if self.mode != Bbr.PROBE_BW or app_limited or not round_rtt:
            return
        self._queue_delay = max(round_rtt - self.typical_rtt, 0.0)
        bw = self._bw.value
        cuts = self._window.avoidance_cuts if self._window is not None else 0
        cut, self._cuts = cuts > self._cuts, cuts
        changed = self.shared and self.cross.round(
            cut=cut,
            now=now,
            queue_delay=self._queue_delay,
            flight=self._flight,
            ours=QUEUE_SHARE * self.datagram_size / bw if bw else 0.0,
            btl_bw=bw,
            min_rtt=self.min_rtt,
        )
        if self.cross.held == 1:  # (never without the judgement: it stays 0)
            self._before_yield = (bw, self.cwnd)  # what we had before a queue not ours
        if changed:
            self._compete()
        if self.cross.room and self.overflows.shallow_part(self.min_rtt) is None:
            # the other flow's ProbeRTT: a round at ROOM_GAIN measures the room
            # it left (not on a calm shallow buffer: there the other flow is a
            # loss-based one, and its cut emptied the queue)
            self._phase(0, now, room=True)
        if rate and self._over_share() and not self.cross.held:
            # the max filter's samples from our probes were others' room: the
            # rate the round delivered is our rate
            self._bw = _MaxFilter(BW_FILTER_ROUNDS)
            self._bw.update(rate, self.round_count)

    def _drained(self) -> float:
        """The flight at which DRAIN ends: one bdp; with the judgement on, at
        least the minimum window, so that a path whose bdp is a datagram or
        two reaches PROBE_BW, where the judgement runs."""
        return max(self.bdp, self.minimum) if self.shared else self.bdp

    def _over_share(self) -> bool:
        if self.cross.kind != CrossTraffic.NONE:
            return False  # a competitor that does not yield: no share to keep
        return self._bw.value * self._queue_delay > self.queue_share

    def _compete(self) -> None:
        """The verdict changed (crosstraffic.py): MODEL drops the loss bound
        set while we yielded (the next overflow sets it again); LOSS starts
        the loss-based window at the verdict's window, in congestion
        avoidance on a curve whose plateau is that window; NONE goes back to
        the cooperative rules."""
        kind = self.cross.kind
        self._window = None
        if kind == CrossTraffic.NONE:
            self._before_yield = (0.0, 0)
        elif kind == CrossTraffic.MODEL:
            self.inflight_hi = None
            bw, cwnd = self._before_yield
            if bw > self._bw.value:
                self._bw = _MaxFilter(BW_FILTER_ROUNDS)
                self._bw.update(bw, self.round_count)
            self.cwnd = max(self.cwnd, cwnd)
        elif kind == CrossTraffic.LOSS:
            window = Cubic(self.datagram_size, beta=COMPETING_BETA, hystart=False)
            start = max(int(self.cross.window), self._before_yield[1], self._flight)
            window.cwnd = max(start, self.minimum)
            if not (COMPETING_SLOW_START and self.cross.growing):
                window.ssthresh = window.cwnd
                window.w_max = window.cwnd / self.datagram_size
            window.on_path_rtt(self.min_rtt, 0.0)
            self._cuts = 0
            window.srtt = self.rtt + self._queue_delay
            self._window = window

    def _update_bw(self, rs: RateSample) -> None:
        rate = rs.delivery_rate
        if rate > self._round_rate and not rs.is_app_limited:
            self._round_rate = rate
        if rate > 0 and (not rs.is_app_limited or rate >= self._bw.value):
            self._bw.update(rate, self.round_count)

    def _update_min_rtt(self, rs: RateSample, now: float) -> None:
        rtt = rs.rtt
        if rtt <= 0:
            return
        if self._last_rtt:
            # the mean of the first differences, then RFC 3550's 1/16 (from 0 it
            # took some 30 samples to learn the jitter, and until then a round's
            # RTTs on a jittery path looked like a standing queue)
            self._jitter_samples += 1
            gain = max(JITTER_GAIN, 1 / self._jitter_samples)
            self.jitter += (abs(rtt - self._last_rtt) - self.jitter) * gain
        self._last_rtt = rtt
        if not self.min_rtt or rtt <= self.min_rtt:
            self.min_rtt = rtt
            self._min_rtt_stamp = now

    def _update_extra_acked(self, acked: int, now: float) -> None:
        """How many bytes arrive in bursts beyond what btl_bw explains (ACK
        aggregation): added to the cwnd so that the sender does not stall
        between bursts of answers."""
        bw = self._bw.value
        if not acked or not bw:
            return
        expected = bw * (now - self._epoch_start)
        if self._epoch_acked <= expected:
            self._epoch_start = now
            self._epoch_acked = 0
            expected = 0.0
        self._epoch_acked += acked
        extra = min(self._epoch_acked - expected, self.cwnd)
        self._extra.update(extra, self.round_count)

    def _check_full_pipe(self, rs: RateSample) -> None:
        if self.filled or not self._round_start or rs.is_app_limited:
            return
        bw = self._bw.value
        if bw >= self._full_bw * FULL_BW_GROWTH:
            self._full_bw = bw
            self._full_bw_rounds = 0
            return
        self._full_bw_rounds += 1
        if self._full_bw_rounds >= FULL_BW_ROUNDS:
            self.filled = True

    def _enter(self, mode: str, now: float) -> None:
        self.mode = mode
        if mode == Bbr.STARTUP:
            self.pacing_gain, self.cwnd_gain = STARTUP_PACING_GAIN, STARTUP_CWND_GAIN
        elif mode == Bbr.DRAIN:
            self.pacing_gain, self.cwnd_gain = DRAIN_PACING_GAIN, STARTUP_CWND_GAIN
        elif mode == Bbr.PROBE_RTT:
            self.pacing_gain, self.cwnd_gain = 1.0, 1.0

    def _enter_probe_bw(self, now: float) -> None:
        self.mode = Bbr.PROBE_BW
        self.cwnd_gain = CWND_GAIN
        # any phase but the 0.75 one (index 1), from the seeded RNG
        self._phase((2 + self._rng.randrange(len(PROBE_BW_GAINS) - 1)) % len(PROBE_BW_GAINS), now)

    def _advance_cycle(self, rs: RateSample, now: float) -> None:
        elapsed = now - self._cycle_stamp > self.typical_rtt
        gain = self.pacing_gain
        if self._room:
            done = elapsed  # the room's round: one round trip, whatever it put in flight
        elif gain > 1.0:
            done = elapsed and (rs.newly_lost > 0 or rs.prior_in_flight >= gain * self.bdp)
        elif gain < 1.0:
            done = elapsed or rs.prior_in_flight <= self.bdp
        else:
            done = elapsed
        if done:
            self._phase((self._cycle + 1) % len(PROBE_BW_GAINS), now)

    def _phase(self, index: int, now: float, *, room: bool = False) -> None:
        """Enter phase `index` of the PROBE_BW cycle at `now`, paced at its gain
        (or, `room`, the room's round at ROOM_GAIN in the place of the 1.25 phase)."""
        self._cycle, self._cycle_stamp, self._room = index, now, room
        self.pacing_gain = ROOM_GAIN if room else PROBE_BW_GAINS[index]

    def _check_probe_rtt(self, rs: RateSample, now: float) -> None:
        if self._window is not None:
            # beside a loss-based flow the queue never empties: no ProbeRTT
            self._min_rtt_stamp = now
            return
        late = now - self._min_rtt_stamp - MIN_RTT_WINDOW  # > 0: min_rtt is stale
        if (
            self.mode != Bbr.PROBE_RTT
            and self.min_rtt
            and late > 0
            # another flow's ProbeRTT is due: ours would hide it (asked only
            # once min_rtt is stale, not at every answer)
            and not (late <= PROBE_RTT_LATE and self.shared and self.cross.watching(now))
        ):
            self._prior_cwnd = max(self._prior_cwnd, self.cwnd)
            self._enter(Bbr.PROBE_RTT, now)
            self._probe_rtt_done = 0.0
        if self.mode != Bbr.PROBE_RTT:
            return
        if not self._probe_rtt_done:
            if rs.in_flight <= self._probe_rtt_cwnd():
                self._probe_rtt_done = now + PROBE_RTT_TIME
                self._probe_rtt_round = self.round_count
            return
        if now >= self._probe_rtt_done and self.round_count > self._probe_rtt_round:
            self._min_rtt_stamp = now  # the min_rtt taken meanwhile stands for 10 s more
            self.cross.probed(now)
            self.cwnd = max(self.cwnd, self._prior_cwnd)
            self._prior_cwnd = 0
            if self.filled:
                self._enter_probe_bw(now)
            else:
                self._enter(Bbr.STARTUP, now)

    def _probe_rtt_cwnd(self) -> int:
        return max(self.minimum, int(self.bdp / 2))

    def _set_pacing_rate(self) -> None:
        bw = self._bw.value
        if not bw:
            if self.min_rtt:  # no rate sample yet: the initial window per RTT, with the gain
                self.pacing_rate = max(
                    self.pacing_rate, self.pacing_gain * self.cwnd / self.min_rtt
                )
            return
        rate = self.pacing_gain * bw * (1 - PACING_MARGIN)
        if not self.filled and self.min_rtt:
            # never under the initial window per round trip before the pipe is
            # full: the first samples measure a datagram or two, not the path
            rate = max(rate, self.pacing_gain * self.initial_cwnd / self.min_rtt)
        if self.filled or rate > self.pacing_rate:
            self.pacing_rate = rate

    def _cwnd_target(self, bdp: float) -> float:
        return self.cwnd_gain * bdp

    def _set_cwnd(self, acked: int) -> None:
        bdp = self.bdp
        if not bdp:
            target = float(self.initial_cwnd)
        else:
            target = self._cwnd_target(bdp)
            if self.filled:
                target += self._extra.value
            # room for the pacer's bursts (3 quanta of about 1 ms each)
            target += 3 * max(2 * self.datagram_size, self.pacing_rate / 1000)
        if self._episode is not None and self._episode[1]:  # packet conservation
            cwnd = max(self.cwnd, self._flight + acked)
        elif self.filled:
            cwnd = min(self.cwnd + acked, int(target))
        elif self.cwnd < target or self.cwnd < self.initial_cwnd:
            cwnd = self.cwnd + acked
        else:
            cwnd = self.cwnd
        if self.mode == Bbr.PROBE_BW and self._over_share():
            # more than our share of a standing queue: one bdp and the share
            cwnd = min(cwnd, int(bdp + self.queue_share))
        if self.mode == Bbr.PROBE_BW and self.cross.kind == CrossTraffic.MODEL:
            part = self.overflows.shallow_part(self.min_rtt)
            if part is not None:  # a shallow buffer that calmed: one bdp and our part of it
                cwnd = min(cwnd, int(bdp + part))
        if self.inflight_hi is not None and self.mode == Bbr.PROBE_BW:
            # leave some room for others' probes except while probing (BBR v2's headroom)
            room = 1.0 if self.pacing_gain > 1.0 else 1.0 - HEADROOM
            cwnd = min(cwnd, int(self.inflight_hi * room))
        cwnd = max(cwnd, self.minimum)
        if self.mode == Bbr.PROBE_RTT:
            cwnd = min(cwnd, self._probe_rtt_cwnd())
        if self._window is not None:
            # beside a loss-based flow: the loss-based window, paced as it paces
            cwnd = max(self._window.cwnd, self.minimum)
            if self._window.pacing_rate:
                self.pacing_rate = self._window.pacing_rate
        if self._timed_out:
            cwnd = self.minimum
        self.cwnd = cwnd
