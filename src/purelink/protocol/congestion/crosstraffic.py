"""What shares the bottleneck: nothing that keeps a queue, a loss-based flow or a model-based one.

Why a module of its own: BBR's cooperative rules (bbr.py: each flow keeps
at most QUEUE_SHARE datagrams of its own in a standing queue) are right
beside purelink links and wrong beside TCP.  A loss-based flow (CUBIC,
Reno) fills the buffer whatever the others do, so a flow that reads that
queue as its own yields, and yields again, to 2 % of the path (the Vegas
starvation that BBR v2/v3, Copa's competitive mode and Nimbus were designed
around); a model-based one (Linux's BBR v1) keeps 2 bdp in flight and
ignores loss, so a loss-based answer to it starves on shallow buffers.  The
controller must tell the three apart from what it measures -- its own
flight, the round trip's standing queue, its losses -- and this is the
judgement, kept apart from the window arithmetic so that it can be tested
on its own.

Once per round trip (in BBR's PROBE_BW, not app-limited) the controller
reports the round: the delay that stood all round long (its smallest RTT
above the typical one), its flight at the round's end, its losses, and the
delay its own share of a queue would make.  The verdict (`kind`):

    NONE   no competitor that keeps a queue: the cooperative rules
           (alone, or beside purelink links, which yield as we do)
    MODEL  a flow that keeps a queue and does not yield to one: for
           HELD_ROUNDS rounds in a row the queue stood at more than
           OTHERS_SHARES (1.25) times our share of it (QUEUE_SHARE datagrams
           at our rate, so that we yielded every round; N purelink links
           at their fair shares keep a queue whose delay is exactly that
           of one link's share, whatever N, and 1.25 leaves their swings
           about it out: at 1.0, 6 of the 47 slow pair cases of
           tests/sim/test_congestion_sim.py ended outside 25 %, at 1.25
           none.  Within a count our share is the one at the rate of
           its first round, or less: while the rounds are counted the
           cwnd is capped at bdp + QUEUE_SHARE, the max filter forgets
           the rate we had and our share's delay grows round by round.
           Beside BBR v1 on 20 Mbit/s, 40 ms, 2.5 bdp at seed 1 (python
           -m bench.ccshare --path mbit=20,rtt=0.04,buffer=2.5,tcp=bbr
           --seed 1 --trace 0.5) the link gives "model" 2.5 s in and
           takes 0.44 of the pair; measured against the grown share
           instead, the queue is under 1.25 of it after 11 rounds of 16,
           the count ends, the link stays at "none" until the dip below,
           and takes 0.31.
           What it still costs: a link whose yields lowered its rate
           before any count began sees its share's delay grown, and may
           never count the rounds, the queue-share trap below) and
           did not shrink below HELD_SHRINK of
           where it was at the first (unless it still stood at HELD_SHARES
           (6) of our shares or more, below).  Purelink links that share a queue
           yield too, so it shrinks, and they hover about their shares,
           over one round and under the next; HELD_ROUNDS (16) outlasts
           a newcomer's startup and drain, whose queue stands a few
           rounds (with 3, links started 0.5-1.5 s apart took the verdict
           and split 0.3/0.7; with 16 and the queue counted above 1.0
           of our share, 41 of the 47 slow pair cases of
           tests/sim/test_congestion_sim.py came within 25 %, and all 47
           above 1.25), nor, when the count began after HELD_QUIET (8)
           rounds of a queue that was ours alone, under HELD_DRAIN (0.7)
           of the highest queue of its first HELD_PEAK (4) rounds: a
           newcomer that starts while we run at the whole path's rate
           raises the queue in its startup, from before the count's
           first round, and its drain leaves the two links' shares
           standing, above our own share (the rate in our filter is
           still more than ours) and above where the count began; they
           counted on to "model" and the first link kept 0.8 of the
           pair (on 20 Mbit/s, 40 ms, 1 bdp, with the second link 2 or
           3 s late, at 4 of the 8 runs of
           tests/sim/test_congestion_sim.py's
           test_a_link_started_seconds_later_shares_a_one_bdp_buffer_slow;
           none with the peak).  A model-based competitor's probe cycle
           moves its queue by a fifth at most; one that overfills a
           shallow buffer moves it more, but then its queue was there
           before the count (with the peak taken in counts that begin
           one after the other, a link that came 5 s after BBR v1 on
           50 Mbit/s, 100 ms, 0.4 bdp stayed at "none" and took
           0.23-0.40 of the pair in bench ccshare's grid, 0.46-0.53
           without).  A queue of HELD_SHARES (6) of our shares or more
           is others' however it shrinks: N purelink links that each keep
           their share make a queue of N shares at the path's rate C,
           which is N r / C of our share's delay at our rate r, so six
           would take six links or more and us with the whole path; what
           shrinks such a queue is our own yield (the cwnd capped at bdp +
           QUEUE_SHARE from the count's first round) and the other flow's
           probing; its rounds of a queue deeper than DEEP_QUEUE go on
           counting too (the deep rule below).  At a high rate our 16
           datagrams are a millisecond or two of a queue of tens: beside
           BBR v1 on 200 Mbit/s, 200 ms, 10 bdp, without the rule each
           count ends within a few rounds while the link yields round
           after round, and it takes 0.11-0.41 of the pair at four seeds;
           with it 0.27-0.41 (python -m bench.ccshare --path
           mbit=200,rtt=0.2,buffer=10,tcp=bbr --seeds 4).  Copa's test
           of a queue that never empties, with our own part taken out.
           Or a dip (`_dipped`): the other flow's ProbeRTT, seen where
           the count cannot see it.  Once our
           yields have left us QUEUE_SHARE datagrams per min RTT, the
           queue a model-based flow keeps (one min RTT: BBR v1 caps its
           flight at 2 bdp) is the delay of our own share at our rate,
           and the count stops: the queue-share trap, where our bdp is
           one share and we keep 16 datagrams a bdp of the path (0.20-0.22
           of the pair beside BBR v1 on 1, 2.5 and 10 bdp of 20 Mbit/s,
           40 ms).  Among bdp / 16 purelink links each sees the same.
           What differs is BBR v1's ProbeRTT: it takes its whole flight
           out for 200 ms, our 2 shares of flight leave the rest of the
           pipe idle, and the queue is gone; one of N other purelink
           links takes out its share and half its bdp and leaves most of
           the others' standing.  So a round with a queue under
           DIP_EMPTY (0.02) min RTT, at most DIP_GAP (0.5 s) after a
           stand -- rounds of DIP_QUEUE (0.5) min RTT of queue or more,
           none more than DIP_GAP apart, over DIP_STOOD (2 s) -- while
           our bdp is within DIP_SHARES (0.75-1.25) of one share, and at
           least DIP_AFTER (1 s) after our own ProbeRTT ended, is MODEL,
           and the rounds after it settle as after any empty round
           (EMPTIED_SETTLE, below).  Half a min RTT, not more: on a
           buffer of one bdp, BBR v1's probes and the full buffer's drops
           move the queue between half and one min RTT, so rounds of 0.75
           min RTT or more come more than DIP_GAP apart.  Beside BBR v1 on
           20 Mbit/s, 40 ms, 1 bdp the dip comes with BBR's ProbeRTT, by
           11 s, and the link takes 0.32 of the pair at seed 1 (python -m
           bench.ccshare --path mbit=20,rtt=0.04,buffer=1,tcp=bbr --seed 1
           --trace 1); beside Linux's BBR on the path emulator 0.40
           (0.40-0.51) of the pair in three runs (python -m bench.paths
           --shared --paths 20mbit-40ms-1bdp --transports bbr --repeat 3),
           and 0.41 (0.22-0.51) in three more (the same with --paths
           20mbit-40ms-0.5bdp,20mbit-40ms-1bdp).  Where a round trip lasts more than
           DIP_GAP (a min RTT of about 0.25 s and more, with the queue)
           no stand is seen, and the dip is not judged.  Where the
           whole path is about two shares (two purelink links at one
           share each) a peer's ProbeRTT can empty the queue too, where
           the trap would have left a fair part anyway (16 datagrams of
           32).  Of 36 pairs of links 1-3 s apart on 12 drawn one-bdp
           paths 8 end outside 25 % of each other at a seed of two
           (python -m bench.ccsweep --share --gap 1,2,3 --cells 12 --seeds
           2), among them such a path, 24.9 Mbit/s, 14 ms, 1-3 s apart
           (0.58-0.67 at the worst seed), and 3.8 Mbit/s, 10 ms, 3 s
           apart (0.55), where
           each link's bdp is a fifth of a share and the verdicts switch
           back and forth.  Where
           the dip is due, our own ProbeRTT would hide it (flows that
           started together measured min RTT together and probe it
           together), so while it is watched for (`watching`) bbr.py puts
           ours off by PROBE_RTT_LATE (2.5 s); purelink links that see
           each other in the trap's shape probe every 12.5 s instead of
           10.  BBR v1 probes its min RTT 10 s after it last fell: a
           link that comes 5 s after it on 2.5 and 10 bdp of 20 Mbit/s,
           40 ms yields into the trap, gives the verdict at BBR's
           ProbeRTT about 5 s after its start, and takes 0.47-0.48 of
           the pair 3-20 s after its start at four seeds (python -m
           bench.ccshare --grid --seeds 4 --tcp bbr --stagger 5; the
           round at ROOM_GAIN after the dip, the queue still empty,
           below, moves it from 0.38-0.40).  Then BBR v1's rules: no
           queue-share yield (bbr.py keeps its loss bound, set again at
           an overflow)
    LOSS   the competitor is elastic: it backs off when the buffer
           overflows (Nimbus's question, asked of the events a loss-based
           flow cannot hide), seen in a MODEL verdict in one of two ways:
             * a cut: within FALL_ROUNDS rounds the queue fell by more than
               FALL_SHARE of itself and FALL_RTT min RTTs beyond what our
               own flight's fall explains (our fall in bytes / btl_bw), and
               never to under 0.1 min RTT on the way (a BBR flow's ProbeRTT
               empties the queue for a moment); a loss-based flow's multiplicative
               decrease, which a paced model-based flow does not make;
               and it stood: the queue stayed under halfway back for
               FALL_HOLD (0.3 s) and two min RTTs.  A BBR flow's ProbeRTT
               beside ours does not empty the queue (our part stands) and
               lowers it for 200 ms and a round trip, then the flow's
               flight comes back whole; where it does empty it (our flight
               held to a shallow buffer's part, overflows.py) the fall is a
               drain, however slowly the queue comes back;
             * growth: over GROW_ROUNDS rounds the queue grew nearly every
               round, from at least 0.1 min RTT (not a refill after a
               drain), by GROW_RATIO and by a quarter of the smaller of min
               RTT and the deepest queue seen, to at least half that
               deepest queue (about the buffer, once it overflowed), while
               our flight did not grow: a window that grows with every ACK
               (CUBIC's), which a model-based flow capped at 2 bdp does not;
               and to a new high, over GROW_HIGH (1.1) x the highest queue
               before those rounds: a BBR flow back from its ProbeRTT
               refills the queue round by round to where it stood, and no
               higher (read as growth, it sent a link beside BBR v1 on 10
               bdp, 20 Mbit/s, 40 ms, into a slow start that took 0.65 of
               the pair; 0.51 with the new high).
           Four more ways to LOSS, for a loss-based flow that the rounds of a
           queue not ours (MODEL's test) miss, take too long to find or take
           for a model-based flow:
             * a trend, under NONE: over the last TREND_TIME (1 s) and at
               least TREND_ROUNDS (12) rounds the queue's mean delay rose
               quarter by quarter, each rise between a tenth and TREND_STEP
               (0.6) of the whole and the last round above the last
               quarter's mean (not a step, nor a step that decays), the
               whole more than TREND_RISE min RTTs and a third of where it
               began, and at most DEEP_QUEUE min RTTs deep, while our rate
               (flight / RTT) fell under TREND_RATE of what it was: a window
               that grows whatever the queue, and us yielding to it (a queue
               that our own flight grows leaves our rate where it was;
               deeper, the deep queue's rule below judges: a trend read
               there, beside CUBIC on 10 bdp of 20 Mbit/s, 40 ms, started
               the slow start while CUBIC's window was small after its own
               startup, and took 0.62-0.74 of the pair).  MODEL's test
               cannot see this flow once we have yielded: a link that keeps
               QUEUE_SHARE datagrams in a queue of delay d gets
               QUEUE_SHARE / d of the path (Little's law), so the standing
               queue is always about our share's delay at the rate we are
               left with, whoever keeps the rest; only the queue's motion
               tells.  Purelink links keep a flat queue (QUEUE_SHARE
               datagrams each, whatever their rates): a queue refilling to it
               after a drain rises while our rate holds (read over 8 rounds
               without the rate's fall, the trend put 10 of the 47 slow pair
               cases of tests/sim/test_congestion_sim.py outside 25 %); a
               newcomer's startup raises it in a step; BBR v1 holds it flat
               between its probes.  And the first of those rounds came
               TREND_WAIT (0.5 s) or more after the queue was last found
               empty (under 0.1 min RTT): another purelink link's ProbeRTT
               empties the queue for 200 ms, we take the room it leaves,
               and as it refills its share the queue rises from empty
               while our rate falls back to ours (of 72 runs of two links
               1-3 s apart on bench ccsweep's 12 drawn one-bdp paths, 23
               ended outside 25 % of each other; 9 with a wait of 1 s
               alone; with HELD_DRAIN, 12 without a trend from rounds that
               include an empty one and 7 with a wait of 0.5 or 1 s:
               python -m bench.ccsweep --share --gap 1,2,3 --cells 12
               --seeds 2).  Not longer: beside BBR v1 on 50 Mbit/s, 10 ms,
               2 bdp, the link 5 s late, the trend after
               BBR's ProbeRTT is what leaves the queue-share trap (0.50-0.52
               of the pair; with 1 s, "none" and 0.32);
             * a sawtooth, under NONE: SAW_CUTS (2) cuts within SAW_LOOK
               (12) s, each a fall as MODEL's cut is (confirmed the same
               way), our flight's fall taken out at the rate the queue
               drains at, which the most we delivered in the rounds kept
               bounds (our own rate is a part of it: read at that rate, our
               flight's fall at the overflow that made the cut explained it
               all), from a top the queue rose to gradually: from a quarter
               of the way up from the lowest queue of its tooth, over
               SAW_TIME (0.5 s) and SAW_ROUNDS (4) rounds, no round rising
               by more than SAW_STEP (0.5) of the whole.  The tooth is the
               rounds since the last one that stood at SAW_TOP (0.9) of its
               top or more with a fall since (the tooth before), else all
               the rounds kept: with the lowest queue of all SAW_LOOK s
               instead, one low (a link's first round after its startup's
               drain) was the start of every rise for 12 s and the step
               from it most of the rise, and no cut counted (beside CUBIC
               on 20 Mbit/s, 40 ms, 1 bdp, the link 5 s after it, at seed
               2: "none" all run and 0.31 of the pair; by its teeth "loss"
               13 s after its start and 0.42: python -m bench.ccshare
               --path mbit=20,rtt=0.04,buffer=1,tcp=cubic,stagger=5 --seed
               2 --trace 1).  On a buffer of about a bdp the trend misses a
               loss-based window: our rate falls too slowly to count, and
               CUBIC's window rises flat near its last maximum; but it is
               cut there, and purelink links keep a flat queue.  One cut is
               not enough: a newcomer's startup raises the queue over half
               a second and more, and its drain lowers it at once (with
               one, 8 of the 47 slow pair cases of
               tests/sim/test_congestion_sim.py ended outside 25 %; with
               two, none); a newcomer that doubles its flight every round
               makes a step, not a gradual rise.  Beside CUBIC on 20
               Mbit/s, 40 ms, 1 bdp it gives LOSS at the second cut, and
               the link's part went from 0.28-0.31 to 0.45 in virtual time
               and from 0.29-0.30 to 0.40-0.48 beside Linux's CUBIC on the
               path emulator, in five runs (docs/performance.md). The
               PROBED_ROUNDS (2) rounds after our own ProbeRTT are not the
               sawtooth's: it took our flight out of the queue and its end
               puts it back in a step, so its low would be the lowest queue
               of the next rise and the refill most of that rise, and the
               next cut would not count (beside CUBIC on 20 Mbit/s, 40 ms,
               1 bdp at seed 2, python -m bench.ccshare --path
               mbit=20,rtt=0.04,buffer=1,tcp=cubic --seed 2 --trace 1: the
               link kept "none" all run and took 0.28 of the pair; without
               those rounds "loss" by 15 s and 0.39).  Unless the queue
               emptied in them: among purelink links in the trap our
               ProbeRTT empties it, the others' filters take the room and
               overfill the queue for ten rounds, then drain it; the empty
               round marks that as a drain and a refill, and without it the
               overfill read as a rise and its drain as a cut (with the
               empty round's exception taken out, two links 3 s apart on
               50 Mbit/s, 43 ms, 1 bdp split 0.29/0.70 at one seed of two:
               python -m bench.ccsweep --share --gap 1,2,3 --cells 12
               --seeds 2);
             * a deep queue: for DEEP_ROUNDS (4) rounds in a row more than
               DEEP_QUEUE (1.5) min RTTs of queue beyond our share's (under
               NONE, while a queue not ours is being counted) or in all (under
               MODEL): a model-based flow caps its flight at 2 bdp, one min
               RTT of queue, and so do we under MODEL; a loss-based flow
               fills whatever buffer there is;
             * a squeeze, under MODEL: for SQUEEZE_ROUNDS (12) rounds in a
               row after the settling ones (below), more than SQUEEZE_QUEUE
               (1) min RTT of queue in each, while our btl_bw fell under
               SQUEEZE_FALL (0.85) of what it was at their first.  Two
               models that each keep 2 bdp in flight make a min RTT of
               queue between them and keep their rates; in a deeper one our
               2 bdp carries less than btl_bw each round trip, the max
               filter forgets the rate and the flight follows it down, round
               after round.  A loss-based flow that has not overflowed its
               buffer for a while (CUBIC's window flat by its last maximum)
               gives MODEL, and keeps such a queue: beside CUBIC on 50
               Mbit/s, 100 ms, 2 bdp the queue stood at 1.4-1.5 min RTTs,
               under DEEP_QUEUE, and without this rule btl_bw fell from 1.6
               to 1.0 MB/s in 9 s.  Beside BBR v1 under MODEL btl_bw holds
               (11 % lower after 10 s on 20 Mbit/s, 40 ms, 10 bdp: about
               110 rounds), and
               its ProbeRTT empties the queue every 10 s.
           All four start from our flight and slow-start, as `growing` does.
           Neither growth, a deep queue nor a squeeze gives its verdict in
           the first MODEL_SETTLE (10) rounds after a switch to MODEL:
           bbr.py gives the model back the bandwidth of before the yield,
           which its filter
           keeps for 10 rounds, while the competitor's model took the room
           we left; until the filter forgets it, the two overfill the queue,
           and the queue that grows is ours.  Growth's rounds count
           meanwhile: a queue still growing once they are over is not ours
           (beside BBR v1 on 20 Mbit/s, 40 ms, 10 bdp, read at once as a
           loss-based flow's, the overfill started a slow start that took
           0.84 of the pair; 0.49 with the rounds left to settle).  A deep
           queue's count only from the first round after them: the
           overfill drains once the filter has forgotten, not at once, and
           Linux's BBR keeps its own rate in its filter as long (counted
           through the settling rounds, a queue of 1.8 min RTTs still
           standing at their end beside Linux's BBR on the path emulator,
           10 bdp of 20 Mbit/s, 40 ms, gave LOSS 1.2-1.3 s after MODEL in
           3 of the 4 runs that gave MODEL, and the slow start took
           0.78-0.80 of the pair; counted after, MODEL stayed in all 3
           runs of 8 that gave it, 0.45-0.49).  Except a queue deeper than
           SETTLE_DEEP (3) min RTTs, which counts in them too: two models
           that each keep 2 bdp of a rate of at most the path's make at
           most 3 min RTTs of it (beside CUBIC on 10 bdp of 20 Mbit/s, 40
           ms, waiting out the rounds there, each of them as long as the
           queue, took the link from 0.58-0.63 of the pair to 0.42-0.47).
           Nor do growth, a deep queue or a squeeze count in the
           EMPTIED_SETTLE (20) rounds from one whose queue was empty (under
           0.1 min RTT; that round and the 19 after it; a deeper queue than
           SETTLE_DEEP again excepted): a model-based
           flow's ProbeRTT, in which our filter took the whole path's rate.
           It keeps that rate for 10 rounds, the two overfill the queue
           meanwhile, and the rates of the overfill fill the 10 rounds
           after.  Beside BBR v1 on 20 Mbit/s, 40 ms, 10 bdp, a queue of
           1.8-2.9 min RTTs in the second after BBR's ProbeRTT gave LOSS
           (with 10 rounds' wait, one of 1.5-2.1 min RTTs in the second
           after that), and the slow start took up to 0.85 of the
           pair over 60 s at four seeds; 0.52 with 20 (bench ccshare --grid
           --seeds 4 --seconds 60 --warm 10).  A loss-based flow does not
           empty a buffer deep enough for these rules.
           The first round of an empty queue under MODEL is `room`: the
           other flow's ProbeRTT has left it the path, and bbr.py paces the
           round after it at ROOM_GAIN (2) x btl_bw, so that our filter
           does take the path's rate, not only the part we paced at
           (beside BBR v1's ProbeRTT on 83.5 Mbit/s, 139 ms, 1.27 bdp at
           seed 3, 10.5 s in, our btl_bw went from 1.70 to 3.36 MB/s of
           the path's 10.4; paced at the cycle's 1.25, from 1.58 to 1.70).
           Two models that each keep 2 bdp of their own rates make
           one min RTT of queue at any split of the path, and a split
           moves only when one of them measures more than it had: the
           room of a ProbeRTT is where that can happen.  (Not where a
           shallow buffer's overflows have calmed, bbr.py: there the empty
           queue is a loss-based flow's cut.)
           Then a window that competes as a loss-based flow does (bbr.py:
           CUBIC's curve with a deeper cut), from `window`: the fair share
           that the cut implies when it was a cut (a CUBIC cut of 0.3 W
           lowers the queue by 0.3 W / mu with W = (mu - r) rtt, which
           gives the path's rate mu from our rate r); when it was growth
           (`growing`: the competitor has not cut yet, and nothing tells
           its window) our flight scaled by the queue's growth, from which
           the window slow-starts to the first loss, as the competitor's
           own did; never below our flight nor above 3 x it.
    back   LOSS -> MODEL when our loss-based window cut in LOSSY_ROUNDS (3)
           of the last LOSSY_WINDOW (32) rounds while in congestion
           avoidance (the competitor does not back off: it keeps the
           buffer overflowing.  Beside BBR v1 on a buffer of one bdp,
           which overflows at its probes, our window is cut about once a
           second, every 15 round trips or so, seldom 3 times in 8: on 20
           Mbit/s, 40 ms at seed 3 the link takes LOSS at 2 s, MODEL again
           by 7 s, and 0.51 of the pair (python -m bench.ccshare --path
           mbit=20,rtt=0.04,buffer=1,tcp=bbr --seed 3 --trace 0.5);
           a CUBIC competitor's epochs last seconds, and the end of our own
           slow start, an overshoot of ours, does not count: counting lost
           rounds instead sent a link that slow-started into a 10-bdp
           buffer beside CUBIC to BBR v1's rules, where it fell to 0.07 of
           the path); MODEL -> NONE once the queue has been
           under 0.1 min RTT for EMPTY_ROUNDS rounds in a row (it left;
           or both flows' ProbeRTTs came at once: a trend's rounds must
           begin TREND_WAIT after it, as after any empty round under
           NONE -- without, beside BBR v1 on 10 bdp of 20 Mbit/s, 40 ms,
           the refill reads as a trend, and the slow start that follows
           takes 0.67 of the pair over 60 s at one seed of four).
           LOSS stays LOSS: a lone loss-based window's own queue cannot be
           told from a competitor's, so it goes back through MODEL.

The judgement looks only at the queue's delay and its own flight, never at
another flow's packets: what a sender can see (RFC 9438's and the BBR
draft's premise).
"""

from __future__ import annotations

import math
from collections import deque
from itertools import pairwise
from typing import Final

__all__ = ["CrossTraffic"]

HELD_ROUNDS: Final = 16
HELD_SHRINK: Final = 0.9
HELD_SHARES: Final = 6.0  # a queue of this many of our shares or more: no shrink ends a count
HELD_PEAK: Final = 4  # the first rounds of a count, whose highest queue is its peak
HELD_DRAIN: Final = 0.7  # a round under this part of that peak ends the count
HELD_QUIET: Final = 8  # rounds of our own queue alone before a count, for HELD_DRAIN to apply
OTHERS_SHARES: Final = 1.25  # the queue's delay over our share's, for a round to count
FALL_SHARE: Final = 0.25
FALL_RTT: Final = 0.1
FALL_ROUNDS: Final = 4
FALL_HOLD: Final = 0.3
GROW_ROUNDS: Final = 6
GROW_RATIO: Final = 1.2
GROW_HIGH: Final = 1.1
EMPTY_ROUNDS: Final = 8
LOSSY_ROUNDS: Final = 3
LOSSY_WINDOW: Final = 32
FLIGHT_ROUNDS: Final = 6
CUBIC_CUT: Final = 0.3
MAX_START: Final = 3.0
EMPTY_QUEUE: Final = 0.1
DEEP_QUEUE: Final = 1.5  # min RTTs of queue that no model-based flow keeps
DEEP_ROUNDS: Final = 4
MODEL_SETTLE: Final = 10  # rounds after a switch to MODEL before growth or depth counts
EMPTIED_SETTLE: Final = 20  # rounds after a round of an empty queue before they count again
SETTLE_DEEP: Final = 3.0  # min RTTs of queue that counts in them: more than two models overfill
TREND_TIME: Final = 1.0  # seconds of rounds in which the queue's trend is judged
TREND_ROUNDS: Final = 12  # and at least this many rounds
TREND_STEP: Final = 0.6  # no quarter's rise more than this part of the whole
TREND_RISE: Final = 0.1  # the whole rise, in min RTTs
TREND_REL: Final = 0.33  # and over where the queue began
TREND_RATE: Final = 0.8  # our rate (flight / RTT) fell to this part of what it was
TREND_WAIT: Final = 0.5  # seconds from the queue's last empty round to the trend's first
SAW_TIME: Final = 0.5  # under NONE, a cut counts if the queue rose to it over this long
SAW_ROUNDS: Final = 4  # and this many rounds
SAW_STEP: Final = 0.5  # no round of it rising by more than this part of the whole
SAW_LOOK: Final = 12.0  # seconds of rounds kept to judge it by
SAW_TOP: Final = 0.9  # the tooth before stood this part of this one's top, or more
SAW_CUTS: Final = 2  # such cuts within SAW_LOOK s: a newcomer's startup and drain makes one
SQUEEZE_ROUNDS: Final = 12  # under MODEL, rounds of a queue deeper than two models make ...
SQUEEZE_QUEUE: Final = 1.0  # (this many min RTTs of it in each) ...
SQUEEZE_FALL: Final = 0.85  # ... over which btl_bw fell under this part of itself
DIP_QUEUE: Final = 0.5  # min RTTs of queue in rounds before a dip ...
DIP_STOOD: Final = 2.0  # ... over this many seconds ...
DIP_GAP: Final = 0.5  # ... none more than this apart, nor from the last to the empty round
DIP_AFTER: Final = 1.0  # seconds after our own ProbeRTT ended, at least
DIP_SHARES: Final = (0.75, 1.25)  # our bdp in queue shares (min RTT / our share's delay)
DIP_EMPTY: Final = 0.02  # min RTTs of queue the empty round stays under
PROBED_ROUNDS: Final = 2  # rounds after our own ProbeRTT that the sawtooth does not see


class CrossTraffic:
    """The verdict on what shares the bottleneck (see the module docstring)."""

    NONE: Final = "none"
    LOSS: Final = "loss"
    MODEL: Final = "model"

    def __init__(self, datagram_size: int) -> None:
        self.datagram_size = datagram_size
        self.kind = CrossTraffic.NONE
        self.window = 0.0
        """On a switch to LOSS: the window to start from, bytes."""
        self.switches = 0
        """How many times the verdict changed."""
        self.growing = False
        """The last LOSS verdict did not come from MODEL's cut (a growing, rising
        or deep queue, or a sawtooth under NONE): `window` is our flight, to
        slow-start from, not the fair window a cut implies."""
        self._held = 0  # consecutive rounds of a queue that is not (only) ours
        self._held_from = 0.0  # the queue's delay when they began
        self._held_ours = 0.0  # the delay of our share at their first round's rate
        self._held_peak = 0.0  # the highest queue of their first HELD_PEAK rounds
        self._quiet = 0  # rounds in a row of a queue that is ours alone
        self._empty = 0  # consecutive rounds without a queue
        self._deep = 0
        self._settled = 0  # rounds since the switch to MODEL
        # (when, delay, flight) of the rounds under NONE; the bound keeps a
        # path of sub-millisecond rounds (over 1,024 a second) from any trend
        self._trend: deque[tuple[float, float, int]] = deque(maxlen=1024)
        # when a round under NONE last found the queue empty, or MODEL ended at an empty one
        self._emptied = -math.inf
        self._queues: deque[float] = deque(maxlen=FALL_ROUNDS)  # each round's standing delay
        self._grown: deque[tuple[float, int]] = deque(maxlen=GROW_ROUNDS)  # (delay, flight)
        self._flights: deque[int] = deque(maxlen=FLIGHT_ROUNDS)
        self._lossy: deque[bool] = deque(maxlen=LOSSY_WINDOW)
        self._high = 0.0  # the highest queue before the growth window, since the last switch
        self._fall: tuple[float, float, float] | None = None  # a cut seen: (when, halfway, window)
        self._deepest = 0.0  # the deepest standing queue seen: about the buffer, once full
        # (when, delay) of the rounds under NONE, at most SAW_LOOK s and 1,024
        # of them (as the trend's: rounds of under 12 ms keep less than
        # SAW_LOOK s, and those of under 0.5 ms less than SAW_TIME, no sawtooth)
        self._saw: deque[tuple[float, float]] = deque(maxlen=1024)
        # (when, btl_bw) of those rounds, falling: the most of SAW_LOOK s first
        self._peaks: deque[tuple[float, float]] = deque(maxlen=1024)
        self._saw_cuts: deque[float] = deque()  # when each cut of a sawtooth was confirmed
        # (delay, btl_bw) of the last rounds under MODEL once settled
        self._squeeze: deque[tuple[float, float]] = deque(maxlen=SQUEEZE_ROUNDS)
        # under NONE: since when, and until when, the queue stood at DIP_QUEUE
        # min RTTs or more in rounds at most DIP_GAP apart; whether our bdp was within
        # DIP_SHARES shares in the last round; when our own ProbeRTT ended
        self._stood_since = math.inf
        self._stood_last = -math.inf
        self._one_share = False
        self._probed = -math.inf
        self._refilling = 0  # rounds left whose queue our own ProbeRTT lowered
        self.room = False
        """Under MODEL, the last round was the first of an empty queue: the other
        flow's ProbeRTT, its room ours to measure (bbr.py probes it)."""

    def round(
        self,
        *,
        queue_delay: float,
        flight: int,
        ours: float,
        btl_bw: float,
        min_rtt: float,
        cut: bool,
        now: float,
    ) -> bool:
        """One round trip: its standing queue's delay (seconds), our flight at
        its end (bytes), the delay our share of a queue makes (QUEUE_SHARE
        datagrams / btl_bw), the model's btl_bw and min_rtt, whether our
        loss-based window cut in congestion avoidance in it, and the time
        at its end.  True when the verdict changed."""
        self._flights.append(flight)
        self._deepest = max(self._deepest, queue_delay)
        self._lossy.append(cut)
        self.room = False
        if self.kind == CrossTraffic.NONE:
            return self._round_none(queue_delay, flight, ours, btl_bw, min_rtt, now)
        self._empty = self._empty + 1 if queue_delay < EMPTY_QUEUE * min_rtt else 0
        if self.kind == CrossTraffic.LOSS:
            if sum(self._lossy) >= LOSSY_ROUNDS:
                return self._switch(CrossTraffic.MODEL)
            return False
        if self._empty >= EMPTY_ROUNDS:
            self._emptied = now  # under NONE the queue refills now: no trend (TREND_WAIT)
            return self._switch(CrossTraffic.NONE)
        if self._empty:  # the other flow's ProbeRTT: our filter has the path's rate again
            self._settle_again()
            self.room = self._empty == 1
        self._settled += 1
        settled = self._settled > MODEL_SETTLE
        # a deep round counts once settled (or beyond what two models make)
        deep = queue_delay > DEEP_QUEUE * min_rtt
        deep = deep and (settled or queue_delay > SETTLE_DEEP * min_rtt)
        self._deep = self._deep + 1 if deep else 0
        if self._deep >= DEEP_ROUNDS:
            return self._growing(flight)
        if settled and self._squeezed(queue_delay, btl_bw, min_rtt):
            return self._growing(flight)
        self._queues.append(queue_delay)
        if len(self._grown) == GROW_ROUNDS:
            self._high = max(self._high, self._grown[0][0])  # older than the window
        self._grown.append((queue_delay, flight))
        window = self._confirmed(self._cut(flight, btl_bw, min_rtt), queue_delay, now, min_rtt)
        self.growing = window is None
        if window is None and settled:
            window = self._growth(min_rtt)
        if window is None:
            return False
        self.window = min(max(window, flight), MAX_START * max(flight, 4 * self.datagram_size))
        return self._switch(CrossTraffic.LOSS)

    def _settle_again(self) -> None:
        """Under MODEL, a round of an empty queue: it and the EMPTIED_SETTLE - 1
        rounds after it wait, as the first settling's do (module docstring)."""
        self._settled = MODEL_SETTLE - EMPTIED_SETTLE
        self._squeeze.clear()
        self._fall = None  # a fall that ends in an empty queue is a drain, not a cut

    def _round_none(
        self, queue: float, flight: int, ours: float, btl_bw: float, min_rtt: float, now: float
    ) -> bool:
        """A round under NONE (`round`): MODEL's and LOSS's ways out of it."""
        if self._dipped(queue, ours, min_rtt, now):
            self._switch(CrossTraffic.MODEL)
            self._settle_again()  # the dip is an empty round under MODEL's eyes
            return True
        if self._trending(now, queue, flight, min_rtt):
            return self._growing(flight)
        if self._sawtooth(queue, flight, btl_bw, min_rtt, now):
            return self._growing(flight)
        self._count_held(queue, ours, min_rtt)
        deep = queue - OTHERS_SHARES * ours > DEEP_QUEUE * min_rtt
        self._deep = self._deep + 1 if deep and self._held else 0
        if self._deep >= DEEP_ROUNDS:
            return self._growing(flight)
        if self._held >= HELD_ROUNDS:
            return self._switch(CrossTraffic.MODEL)
        return False

    def probed(self, now: float) -> None:
        """Our own ProbeRTT ended at `now`: the queue it emptied was ours."""
        self._probed = now
        self._refilling = PROBED_ROUNDS

    def watching(self, now: float) -> bool:
        """Under NONE, a queue standing as a model-based flow keeps one, and our
        bdp about one share (DIP_SHARES): the queue-share trap, whose way out
        is that flow's ProbeRTT, the dip; ours should not fall on it (module
        docstring, MODEL)."""
        return (
            self.kind == CrossTraffic.NONE
            and self._one_share
            and now - self._stood_last <= DIP_GAP
            and self._stood_last - self._stood_since >= DIP_STOOD
        )

    def _dipped(self, queue: float, ours: float, min_rtt: float, now: float) -> bool:
        """Under NONE: the queue emptied (under DIP_EMPTY) right after standing
        for DIP_STOOD s in the trap, not by our own ProbeRTT (module
        docstring, MODEL)."""
        low, high = DIP_SHARES
        self._one_share = low * ours <= min_rtt <= high * ours
        if queue >= DIP_QUEUE * min_rtt:
            if now - self._stood_last > DIP_GAP:
                self._stood_since = now  # a new stretch of standing rounds
            self._stood_last = now
            return False
        if queue >= DIP_EMPTY * min_rtt:
            return False
        dipped = self.watching(now) and now - self._probed >= DIP_AFTER
        self._stood_since, self._stood_last = math.inf, -math.inf  # the stretch ends
        return dipped

    def _count_held(self, queue: float, ours: float, min_rtt: float) -> None:
        """Under NONE: one more round of a queue not (only) ours, or none
        (module docstring, MODEL)."""
        if self._held:  # our share as the count found it: our yield in it does not end it
            ours = min(ours, self._held_ours)
        if queue <= OTHERS_SHARES * ours or queue <= EMPTY_QUEUE * min_rtt:
            self._held = 0
            self._quiet += 1
        elif not self._held:
            fresh = self._quiet >= HELD_QUIET
            self._held, self._held_from = 1, queue
            self._held_ours = ours
            self._held_peak = queue if fresh else 0.0
            self._quiet = 0
        elif (
            queue >= HELD_SHRINK * self._held_from or 0 < HELD_SHARES * ours <= queue
        ) and queue >= HELD_DRAIN * self._held_peak:
            # a queue that shrinks as we yield is one that others yield to
            # too, unless HELD_SHARES of ours still stand in it; one that
            # falls from its first rounds' peak, a newcomer's drain
            if self._held < HELD_PEAK and self._held_peak:
                self._held_peak = max(self._held_peak, queue)
            self._held += 1
        else:
            self._held = 0

    def _squeezed(self, delay: float, btl_bw: float, min_rtt: float) -> bool:
        """Under MODEL, settled: the queue stood deeper than two models make
        for SQUEEZE_ROUNDS rounds while our btl_bw fell by more than
        SQUEEZE_FALL allows (module docstring)."""
        rounds = self._squeeze
        rounds.append((delay, btl_bw))
        return (
            len(rounds) == SQUEEZE_ROUNDS
            and min(d for d, _ in rounds) > SQUEEZE_QUEUE * min_rtt
            and rounds[-1][1] < SQUEEZE_FALL * rounds[0][1]
        )

    def _trending(self, now: float, delay: float, flight: int, min_rtt: float) -> bool:
        """Under NONE: the queue grew steadily over the last TREND_TIME s and
        TREND_ROUNDS rounds while we yielded (module docstring)."""
        trend = self._trend
        trend.append((now, delay, flight))
        if delay < EMPTY_QUEUE * min_rtt:
            self._emptied = now
        while len(trend) > TREND_ROUNDS and now - trend[1][0] >= TREND_TIME:
            trend.popleft()
        if len(trend) < TREND_ROUNDS or now - trend[0][0] < TREND_TIME:
            return False
        if trend[0][0] - self._emptied < TREND_WAIT:
            return False  # a queue refilling after a drain, and our rate the room it left
        items = list(trend)
        n = len(items) // 4
        quarters = [items[i * n : (i + 1) * n] for i in range(3)] + [items[3 * n :]]
        delays = [sum(d for _, d, _ in q) / len(q) for q in quarters]
        rates = [sum(f / (min_rtt + d) for _, d, f in q) / len(q) for q in quarters]
        rises = [b - a for a, b in pairwise(delays)]
        whole = delays[-1] - delays[0]
        return (
            min(rises) > (1.0 - TREND_STEP) / 4 * whole
            and max(rises) < TREND_STEP * whole
            and delay >= delays[-1]  # still rising, not a step that decays
            and whole > TREND_RISE * min_rtt
            and whole > TREND_REL * delays[0]
            and delays[-1] <= DEEP_QUEUE * min_rtt  # deeper: the deep queue's rule
            and rates[-1] <= TREND_RATE * rates[0]
        )

    def _sawtooth(
        self, queue: float, flight: int, btl_bw: float, min_rtt: float, now: float
    ) -> bool:
        """Under NONE: the SAW_CUTS-th cut within SAW_LOOK s (as MODEL's cut,
        confirmed the same way) of a queue that rose to it gradually
        (`_stood`): a loss-based window's sawtooth (module docstring)."""
        if self._refilling and queue < EMPTY_QUEUE * min_rtt:
            self._refilling = 0  # it emptied the queue: a drain, which the rules know
        if self._refilling:
            # our own ProbeRTT lowered the queue another flow keeps and our
            # flight refills it: neither its low nor the refill's step is the
            # sawtooth's
            self._refilling -= 1
            return False
        saw, peaks = self._saw, self._peaks
        if saw and now - saw[-1][0] > SAW_LOOK:
            self._queues.clear()  # no round judged for SAW_LOOK s: what came before is gone
            self._fall = None
        saw.append((now, queue))
        while now - saw[0][0] > SAW_LOOK:
            saw.popleft()
        while peaks and peaks[-1][1] <= btl_bw:
            peaks.pop()  # a sliding maximum: O(1) a round on paths of many rounds a second
        peaks.append((now, btl_bw))
        while now - peaks[0][0] > SAW_LOOK:
            peaks.popleft()
        self._queues.append(queue)
        # our flight's fall drains the queue at the path's rate, which the
        # most we delivered lately bounds from below while the path's rate
        # holds (our rate is a part of it)
        window = self._cut(flight, btl_bw, min_rtt, peaks[0][1])
        if window is not None and self._fall is None and not self._stood(min_rtt):
            window = None
        if self._confirmed(window, queue, now, min_rtt) is None:
            return False
        self._queues.clear()  # that fall is counted: its top must not count again
        cuts = self._saw_cuts
        cuts.append(now)
        while now - cuts[0] > SAW_LOOK:
            cuts.popleft()
        return len(cuts) >= SAW_CUTS

    def _stood(self, min_rtt: float) -> bool:
        """The queue rose to the top before the fall gradually: from a quarter
        of the way up from the lowest queue of its tooth, over SAW_TIME s and
        SAW_ROUNDS rounds, no round rising by more than SAW_STEP of the whole
        (a newcomer's startup doubles its flight round by round)."""
        items = list(self._saw)
        # the rounds before it (`_queues` holds no more rounds than `_saw`)
        fall = range(max(len(items) - len(self._queues), 0), len(items) - 1)
        if not fall:
            return False
        top = max(fall, key=lambda i: items[i][1])
        # this tooth: the rounds since the last one that stood about as high
        # as its top with a fall since (the tooth before), not the lowest
        # queue of SAW_LOOK s, which may be another tooth's or our startup's
        first, lowest = top, items[top][1]  # lowest: of items[first : top + 1]
        while first > 0:
            before = items[first - 1][1]
            if before >= SAW_TOP * items[top][1] and lowest < (1.0 - FALL_SHARE) * before:
                break
            first -= 1
            lowest = min(lowest, before)
        rise = items[top][1] - lowest
        if rise <= EMPTY_QUEUE * min_rtt:
            return False
        start = top
        while start > first and items[start][1] > lowest + rise / 4:
            start -= 1
        steps = [b[1] - a[1] for a, b in pairwise(items[start : top + 1])]
        return (
            top - start >= SAW_ROUNDS
            and items[top][0] - items[start][0] >= SAW_TIME
            and max(steps) <= SAW_STEP * rise
        )

    def _growing(self, flight: int) -> bool:
        """A loss-based competitor whose window is still growing: LOSS, from
        our flight, slow-starting to the first loss (bbr.py) as its own did."""
        self.growing = True
        self.window = float(flight)
        return self._switch(CrossTraffic.LOSS)

    def _cut(self, flight: int, btl_bw: float, min_rtt: float, drains: float = 0.0) -> float | None:
        """A fall of the queue that our own flight does not explain (its fall
        over `drains`, the rate the queue drains at, else btl_bw): the fair
        window it implies (module docstring), or None."""
        queues = list(self._queues)
        if len(queues) < 2:
            return None
        now = queues[-1]
        if now < EMPTY_QUEUE * min_rtt:
            return None  # emptied: a ProbeRTT's drain (BBR's), not a cut
        ours = max(max(self._flights) - flight, 0) / max(drains, btl_bw, 1.0)
        for i, before in enumerate(queues[:-1]):
            if min(queues[i:]) < EMPTY_QUEUE * min_rtt:
                continue  # it emptied since: a drain, not a cut
            fall = before - now - ours
            if fall > FALL_SHARE * before and fall > FALL_RTT * min_rtt:
                # a cut of 0.3 W by a flow of window W = (mu - r) rtt lowers the
                # delay by 0.3 W / mu: mu = r / (1 - fall / (0.3 rtt))
                share = min(fall / (CUBIC_CUT * (min_rtt + before)), 0.95)
                mu = btl_bw / (1.0 - share)
                return mu * (min_rtt + now) / 2
        return None

    def _confirmed(
        self, window: float | None, queue: float, now: float, min_rtt: float
    ) -> float | None:
        """A cut stands only once the queue stayed down for FALL_HOLD s and two
        round trips: a BBR flow's ProbeRTT lowers it for 200 ms and a round
        trip, then its flight comes back whole (and under MODEL an empty
        round drops the pending fall: `_settle_again`)."""
        pending = self._fall
        if pending is None:
            if window is not None:
                self._fall = (now, (max(self._queues) + queue) / 2, window)
            return None
        since, halfway, estimate = pending
        if queue > halfway:
            self._fall = None  # it came back: not a cut
            return None
        if now - since < FALL_HOLD + 2 * min_rtt:
            return None
        self._fall = None
        return estimate

    def _growth(self, min_rtt: float) -> float | None:
        """A queue that grew nearly every round while our flight did not: our
        flight scaled by the growth (module docstring), or None."""
        grown = list(self._grown)
        if len(grown) < GROW_ROUNDS:
            return None
        delays = [d for d, _ in grown]
        rises = sum(b > a for a, b in pairwise(delays))
        first, last = grown[0], grown[-1]
        if (
            rises >= len(delays) - 2
            and first[0] >= EMPTY_QUEUE * min_rtt  # not a queue refilling after a drain
            and last[1] <= first[1]
            and last[0] > GROW_RATIO * first[0]
            and last[0] - first[0] > 0.25 * min(min_rtt, self._deepest)
            and last[0] > 0.5 * self._deepest
            and last[0] > GROW_HIGH * self._high  # a new high, not a refill to an old level
        ):
            return last[1] * last[0] / max(first[0], 1e-6) / 2
        return None

    @property
    def held(self) -> int:
        """Rounds in a row of a queue that is not (only) ours, under NONE."""
        return self._held if self.kind == CrossTraffic.NONE else 0

    def _switch(self, kind: str) -> bool:
        self.kind = kind
        self.switches += 1
        self._held = self._empty = self._deep = self._settled = self._quiet = 0
        self._refilling = 0
        self._stood_since, self._stood_last = math.inf, -math.inf
        self._trend.clear()
        self._saw.clear()
        self._peaks.clear()
        self._saw_cuts.clear()
        self._squeeze.clear()
        self._queues.clear()
        self._grown.clear()
        self._high = 0.0
        self._lossy.clear()
        self._fall = None
        return True
