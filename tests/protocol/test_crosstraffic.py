"""The judgement of what shares the bottleneck (protocol/congestion/crosstraffic.py),
round by round, without a path: each verdict from the rounds that make it,
and the rounds that must not."""

from __future__ import annotations

from purelink.protocol.congestion.crosstraffic import (
    DEEP_QUEUE,
    DEEP_ROUNDS,
    DIP_AFTER,
    DIP_EMPTY,
    DIP_GAP,
    DIP_QUEUE,
    DIP_SHARES,
    DIP_STOOD,
    EMPTIED_SETTLE,
    EMPTY_ROUNDS,
    FALL_HOLD,
    GROW_ROUNDS,
    HELD_QUIET,
    HELD_ROUNDS,
    HELD_SHARES,
    HELD_SHRINK,
    LOSSY_ROUNDS,
    LOSSY_WINDOW,
    MAX_START,
    MODEL_SETTLE,
    PROBED_ROUNDS,
    SAW_CUTS,
    SAW_LOOK,
    SAW_ROUNDS,
    SAW_TIME,
    SETTLE_DEEP,
    SQUEEZE_FALL,
    SQUEEZE_QUEUE,
    SQUEEZE_ROUNDS,
    TREND_ROUNDS,
    TREND_TIME,
    CrossTraffic,
)

D = 1200
RTT = 0.04
BW = 4_000_000.0  # bytes/s
OURS = 16 * D / BW  # the delay our share of a queue makes


CLOCK: dict[int, float] = {}
"""Each judge's time: a round lasts the path's RTT and the queue's delay."""


def feed(judge: CrossTraffic, delay: float, *, flight: int = 40 * D, cut: bool = False,
         rounds: int = 1, ours: float = OURS, btl_bw: float = BW) -> bool:  # fmt: skip
    changed = False
    for _ in range(rounds):
        now = CLOCK[id(judge)] = CLOCK.get(id(judge), 0.0) + RTT + delay
        changed |= judge.round(
            queue_delay=delay, flight=flight, ours=ours, btl_bw=btl_bw, min_rtt=RTT, cut=cut,
            now=now,
        )  # fmt: skip
    return changed


def ramp(judge: CrossTraffic, delays: tuple[float, float], flights: tuple[int, int],
         rounds: int, *, ours: float = OURS, btl_bw: float = BW) -> bool:  # fmt: skip
    """`rounds` rounds whose queue and flight move in a line between the pairs."""
    changed = False
    for i in range(rounds):
        x = i / (rounds - 1)
        delay = delays[0] + (delays[1] - delays[0]) * x
        flight = int(flights[0] + (flights[1] - flights[0]) * x)
        changed |= feed(judge, delay, flight=flight, ours=ours, btl_bw=btl_bw)
    return changed


def squeeze(judge: CrossTraffic, delays: list[float], fall: float) -> bool:
    """Rounds of `delays` over which btl_bw falls in a line to `fall` of BW."""
    changed = False
    for i, delay in enumerate(delays):
        bw = BW * (1.0 - (1.0 - fall) * i / (len(delays) - 1))
        changed |= feed(judge, delay, btl_bw=bw)
    return changed


SLOW = 0.2
"""Our share's delay when the queue has left us a small rate: a link that
holds QUEUE_SHARE datagrams in a queue of delay d has QUEUE_SHARE / d of the
path (Little's law), so the queue stands at about this, never above 1.25x."""

TREND = max(TREND_ROUNDS, int(TREND_TIME / RTT) + 1) * 2
"""Rounds that outlast the trend's window twice over."""


def hold_rounds(delay: float) -> int:
    """Rounds of `delay` that outlast the time a fall must stand to be a cut."""
    return int((FALL_HOLD + 2 * RTT) / (RTT + delay)) + 1


def model(*, settled: bool = True) -> CrossTraffic:
    """A judge that has seen a queue of others stand: MODEL (and, when
    `settled`, MODEL_SETTLE rounds of that queue since)."""
    judge = CrossTraffic(D)
    feed(judge, 0.03, rounds=HELD_ROUNDS)
    assert judge.kind == CrossTraffic.MODEL
    if settled:
        assert not feed(judge, 0.03, rounds=MODEL_SETTLE)
    return judge


def test_alone_without_a_queue_nothing_competes() -> None:
    judge = CrossTraffic(D)
    assert not feed(judge, 0.0, rounds=100)
    assert not feed(judge, 0.5 * OURS, rounds=100)  # our own queue
    assert judge.kind == CrossTraffic.NONE and judge.switches == 0


def test_a_queue_of_others_that_stands_is_a_competitor() -> None:
    judge = CrossTraffic(D)
    assert not feed(judge, 0.03, rounds=HELD_ROUNDS - 1)
    assert not feed(judge, 0.0)  # it emptied: the count starts again
    assert not feed(judge, 0.03, rounds=HELD_ROUNDS - 1)
    assert feed(judge, 0.03)
    assert judge.kind == CrossTraffic.MODEL


def test_a_count_holds_our_share_at_the_rate_it_began_with() -> None:
    """While the rounds are counted the cwnd is capped at bdp + QUEUE_SHARE and
    the max filter forgets the rate we had, so our share's delay grows round
    by round: the count compares the queue with our share at the rate of its
    first round, so that our own yield does not end it (the queue-share
    trap); a count that begins at that grown share never starts, one whose
    queue falls under the share of its first round ends, and where our
    share fell instead the smaller one counts."""
    queue = 0.03
    grown = queue / 1.1  # our share's delay once we have yielded: the queue is 1.1 of it
    judge = CrossTraffic(D)
    shares = [OURS + (grown - OURS) * i / (HELD_ROUNDS - 1) for i in range(HELD_ROUNDS)]
    changed = [feed(judge, queue, ours=ours) for ours in shares]
    assert changed == [False] * (HELD_ROUNDS - 1) + [True]
    assert judge.kind == CrossTraffic.MODEL

    trapped = CrossTraffic(D)  # already yielded: no count begins
    assert not feed(trapped, queue, ours=grown, rounds=4 * HELD_ROUNDS)
    assert trapped.kind == CrossTraffic.NONE

    # a queue at 1.2 of the first round's share ends the count, however
    # our share grew meanwhile (1.2 / 1.3 is within the shrink it allows)
    fell = CrossTraffic(D)
    assert not feed(fell, 1.3 * OURS, rounds=HELD_ROUNDS - 2)
    assert not feed(fell, 1.2 * OURS, ours=2 * OURS)
    assert not feed(fell, 1.3 * OURS, rounds=HELD_ROUNDS - 1)
    assert fell.kind == CrossTraffic.NONE

    # and where our share fell (our rate rose), the smaller one counts
    rose = CrossTraffic(D)
    first, less = 0.022, 0.015  # the queue over them: 0.029 and 0.027
    assert not feed(rose, 0.029, ours=first)
    changed = [feed(rose, 0.027, ours=less) for _ in range(HELD_ROUNDS - 1)]
    assert changed == [False] * (HELD_ROUNDS - 2) + [True]


def test_purelink_links_shares_are_no_competitor() -> None:
    """Links that each keep their share of a queue hover about it (each
    yields when over it): no verdict; nor a queue of others that shrinks as
    everyone yields."""
    judge = CrossTraffic(D)
    for i in range(200):
        feed(judge, OURS * (0.8 if i % 3 == 0 else 1.2))
    assert judge.kind == CrossTraffic.NONE
    for i in range(4 * HELD_ROUNDS):
        feed(judge, 0.03 * 0.85**i)  # 15 % less every round
    assert judge.kind == CrossTraffic.NONE


def test_a_queue_many_shares_deep_counts_through_our_own_yield() -> None:
    """A queue of HELD_SHARES of our shares or more is others' whatever we
    do (purelink links at their shares make one of about one share of ours):
    while it stands that deep, its shrinking is our own yield's (the cwnd
    capped at bdp + QUEUE_SHARE from the count's first round), and the count
    goes on to a "model" verdict; shallower, the same shrinking is others
    yielding too, and it ends the count."""
    fall = 0.97  # 3 % less a round: under HELD_SHRINK of the first in 4 rounds
    assert fall**4 < HELD_SHRINK
    deep = CrossTraffic(D)
    first = 1.2 * RTT  # 10 shares, and under the deep queue of DEEP_QUEUE min RTTs
    assert first * fall ** (HELD_ROUNDS - 1) >= HELD_SHARES * OURS
    changed = [feed(deep, first * fall**i) for i in range(HELD_ROUNDS)]
    assert changed == [False] * (HELD_ROUNDS - 1) + [True]
    assert deep.kind == CrossTraffic.MODEL

    shallow = CrossTraffic(D)
    first = 0.9 * HELD_SHARES * OURS
    assert not any(feed(shallow, first * fall**i) for i in range(2 * HELD_ROUNDS))
    assert shallow.kind == CrossTraffic.NONE


def test_a_newcomer_s_startup_and_drain_is_no_competitor() -> None:
    """A link that starts beside ours raises the queue in its startup and
    lowers it in its drain to the two links' shares, which then stand:
    counted from the startup's first rounds (before their peak), the queue
    stays above where it began and the shares' rounds would count on to a
    "model" verdict; falling under HELD_DRAIN of the first rounds' peak ends
    the count, when the queue was ours alone for HELD_QUIET rounds before
    it.  A model-based competitor's probe cycle moves its queue far less,
    and its queue still counts."""
    ours = 0.4 * OURS  # our share at the rate we have before the newcomer
    newcomer = (0.018, 0.034, 0.032, 0.031, 0.036, 0.039, 0.038, 0.024)
    judge = CrossTraffic(D)
    assert not feed(judge, 0.5 * ours, ours=ours, rounds=HELD_QUIET)  # our queue alone
    for delay in newcomer:
        assert not feed(judge, delay, ours=ours)  # startup, then its drain
    assert not feed(judge, 0.020, ours=ours, rounds=HELD_ROUNDS)  # the two shares stand
    assert judge.kind == CrossTraffic.NONE

    # a queue that was there before the count (a flow that overfills a
    # shallow buffer moves its queue as much): the peak does not end it
    there = CrossTraffic(D)
    for delay in newcomer:
        assert not feed(there, delay, ours=ours)
    assert feed(there, 0.020, ours=ours, rounds=HELD_ROUNDS)
    assert there.kind == CrossTraffic.MODEL

    probing = CrossTraffic(D)  # a queue of 30 ms that a probe cycle moves by 20 %
    feed(probing, 0.5 * ours, ours=ours, rounds=HELD_QUIET)
    cycle = (1.0, 1.2, 0.92, 1.0, 1.0, 1.0, 1.0, 1.0)
    changed = [feed(probing, 0.03 * cycle[i % 8], ours=ours) for i in range(HELD_ROUNDS)]
    assert changed == [False] * (HELD_ROUNDS - 1) + [True]
    assert probing.kind == CrossTraffic.MODEL


def test_a_fall_of_the_queue_we_did_not_make_is_a_loss_based_cut() -> None:
    judge = model()
    feed(judge, 0.03, rounds=2)
    assert not feed(judge, 0.015)  # half the queue went, our flight did not move
    assert judge.kind == CrossTraffic.MODEL  # not yet: it must stay down
    assert feed(judge, 0.015, rounds=hold_rounds(0.015))
    assert judge.kind == CrossTraffic.LOSS
    # the fair window the cut implies: above our flight, at most MAX_START x it
    assert 40 * D < judge.window <= MAX_START * 40 * D


def test_a_fall_of_our_own_making_is_not() -> None:
    judge = model()
    feed(judge, 0.03, flight=120 * D, rounds=2)
    # our flight fell by 80 datagrams: 24 ms of the queue at BW, the whole fall
    assert not feed(judge, 0.008, flight=40 * D)
    assert judge.kind == CrossTraffic.MODEL


def test_a_queue_that_grows_while_we_hold_still_is_a_growing_window() -> None:
    judge = model()
    assert any(feed(judge, 0.04 + 0.004 * i) for i in range(GROW_ROUNDS))
    assert judge.kind == CrossTraffic.LOSS
    # a queue that grows as much while our own flight grows is ours
    judge = model()
    for i in range(GROW_ROUNDS):
        feed(judge, 0.04 + 0.004 * i, flight=(40 + 4 * i) * D)
    assert judge.kind == CrossTraffic.MODEL


def test_the_rounds_after_a_model_verdict_settle_before_growth_or_depth_counts() -> None:
    """Just after the switch the model has back the bandwidth of before the
    yield, and its filter keeps it for 10 rounds: the queue our flight and
    the competitor's model overfill meanwhile is ours.  Growth and a deep
    queue give their verdict from the round after MODEL_SETTLE, when the
    queue is still what they say (growth counting the settling rounds, a
    deep queue only the rounds after them); a cut counts at once."""
    deep = (DEEP_QUEUE + 0.2) * RTT
    judge = model(settled=False)
    for i in range(MODEL_SETTLE):  # it grows, then stands deep
        assert not feed(judge, 0.03 + 0.004 * i if i < GROW_ROUNDS else deep)
    assert not feed(judge, 0.03, rounds=2)  # and settles
    assert not feed(judge, deep, rounds=DEEP_ROUNDS - 1)
    assert judge.kind == CrossTraffic.MODEL
    assert feed(judge, deep)  # settled, and deep for DEEP_ROUNDS in a row
    assert judge.kind == CrossTraffic.LOSS and judge.growing
    # deep through the settling rounds: those do not count (the overfill
    # drains after the filter forgets), DEEP_ROUNDS after them do
    judge = model(settled=False)
    assert not feed(judge, deep, rounds=MODEL_SETTLE)
    assert not feed(judge, deep, rounds=DEEP_ROUNDS - 1)
    assert judge.kind == CrossTraffic.MODEL
    assert feed(judge, deep)
    assert judge.kind == CrossTraffic.LOSS
    # deeper than two models overfilling make: it counts in them too
    judge = model(settled=False)
    assert not feed(judge, (SETTLE_DEEP + 0.5) * RTT, rounds=DEEP_ROUNDS - 1)
    assert feed(judge, (SETTLE_DEEP + 0.5) * RTT)
    assert judge.kind == CrossTraffic.LOSS and judge.growing
    judge = model(settled=False)
    feed(judge, 0.03, rounds=2)
    feed(judge, 0.015, rounds=hold_rounds(0.015) + 1)
    assert judge.kind == CrossTraffic.LOSS and not judge.growing


def test_the_rounds_after_the_queue_emptied_settle_again() -> None:
    """Under MODEL a round whose queue is empty is the other flow's ProbeRTT:
    our filter takes the path's whole rate meanwhile and the two models
    overfill the queue until it has forgotten it.  Growth, a deep queue and
    a squeeze count again only EMPTIED_SETTLE rounds after it (a queue
    deeper than two models make counts at once, as in the first settling)."""
    assert SQUEEZE_ROUNDS < EMPTIED_SETTLE
    deep = (DEEP_QUEUE + 0.2) * RTT
    judge = model()
    assert not feed(judge, 0.0)
    assert not feed(judge, deep, rounds=EMPTIED_SETTLE + DEEP_ROUNDS - 2)
    assert judge.kind == CrossTraffic.MODEL
    assert feed(judge, deep)
    assert judge.kind == CrossTraffic.LOSS and judge.growing
    judge = model()
    assert not feed(judge, 0.0)
    under_deep = (DEEP_QUEUE - 0.1) * RTT
    assert not squeeze(judge, [under_deep] * SQUEEZE_ROUNDS, SQUEEZE_FALL - 0.05)
    assert judge.kind == CrossTraffic.MODEL
    # the rounds of before the empty one are forgotten: they do not make a
    # squeeze with the first round that counts again
    judge = model()
    fallen = (SQUEEZE_FALL - 0.05) * BW
    assert not feed(judge, under_deep, rounds=SQUEEZE_ROUNDS - 1)
    assert not feed(judge, 0.0)
    assert not feed(judge, under_deep, rounds=EMPTIED_SETTLE, btl_bw=fallen)
    assert judge.kind == CrossTraffic.MODEL
    judge = model()
    assert not feed(judge, 0.0)
    assert not feed(judge, (SETTLE_DEEP + 0.5) * RTT, rounds=DEEP_ROUNDS - 1)
    assert feed(judge, (SETTLE_DEEP + 0.5) * RTT)
    assert judge.kind == CrossTraffic.LOSS


def test_a_squeeze_counts_only_rounds_of_the_present_model_verdict() -> None:
    """Rounds of an earlier MODEL verdict, before a LOSS and back, are not
    part of a squeeze under the next one."""
    under_deep = (DEEP_QUEUE - 0.1) * RTT
    deep = (DEEP_QUEUE + 0.2) * RTT
    judge = model()
    assert not feed(judge, under_deep, rounds=SQUEEZE_ROUNDS - DEEP_ROUNDS)
    assert not feed(judge, deep, rounds=DEEP_ROUNDS - 1)
    assert feed(judge, deep)  # LOSS
    assert not feed(judge, deep, rounds=LOSSY_ROUNDS - 1, cut=True)
    assert feed(judge, deep, cut=True)
    assert judge.kind == CrossTraffic.MODEL
    assert not feed(judge, 0.03, rounds=MODEL_SETTLE)
    assert not feed(judge, under_deep, btl_bw=(SQUEEZE_FALL - 0.05) * BW)
    assert judge.kind == CrossTraffic.MODEL


def test_a_fall_that_comes_back_is_no_cut() -> None:
    """A BBR flow's ProbeRTT lowers the queue for 200 ms and a round trip
    (ours keeps part of it standing), then its flight comes back whole."""
    judge = model()
    feed(judge, 0.03, rounds=2)
    assert not feed(judge, 0.012, rounds=3)
    assert not feed(judge, 0.03, rounds=hold_rounds(0.03))
    assert judge.kind == CrossTraffic.MODEL


def test_a_fall_that_ends_in_an_empty_queue_is_no_cut() -> None:
    """A BBR flow's ProbeRTT beside a link that keeps less than the path
    (a shallow buffer's part, overflows.py) empties the queue, and the
    queue comes back slowly, below where it stood: a drain, not a cut."""
    judge = model()
    feed(judge, 0.03, rounds=2)
    assert not feed(judge, 0.015)  # the fall begins: a cut if it stays down
    assert not feed(judge, 0.0, rounds=2)  # it empties
    assert not feed(judge, 0.005, rounds=hold_rounds(0.005))
    assert judge.kind == CrossTraffic.MODEL


def test_persistent_cuts_turn_a_loss_verdict_to_model() -> None:
    """Our loss-based window cut in LOSSY_ROUNDS of the last 8 round trips
    (in avoidance: a slow start's end is our own overshoot): the competitor
    does not back off.  Loss without a cut of ours counts nothing."""
    judge = model()
    feed(judge, 0.03, rounds=2)
    feed(judge, 0.015, rounds=hold_rounds(0.015) + 1)
    assert judge.kind == CrossTraffic.LOSS
    assert not feed(judge, 0.03, rounds=20)  # no cut of ours
    assert not feed(judge, 0.03, cut=True, rounds=LOSSY_ROUNDS - 1)
    assert feed(judge, 0.03, cut=True)
    assert judge.kind == CrossTraffic.MODEL


def test_cuts_spread_over_the_window_turn_a_loss_verdict_to_model() -> None:
    """Beside BBR v1 on a buffer of one bdp our window is cut at its probes,
    every 15 round trips or so, never in consecutive ones: LOSSY_ROUNDS cuts
    within the last LOSSY_WINDOW rounds count; spread wider, they do not."""
    for every, kind in ((15, CrossTraffic.MODEL),
                        (LOSSY_WINDOW // LOSSY_ROUNDS, CrossTraffic.MODEL),
                        (LOSSY_WINDOW // (LOSSY_ROUNDS - 1) + 1, CrossTraffic.LOSS)):  # fmt: skip
        judge = model()
        feed(judge, 0.03, rounds=2)
        feed(judge, 0.015, rounds=hold_rounds(0.015) + 1)
        assert judge.kind == CrossTraffic.LOSS
        for _ in range(2 * LOSSY_ROUNDS):
            feed(judge, 0.03, cut=True)
            if judge.kind != CrossTraffic.LOSS:
                break
            feed(judge, 0.03, rounds=every - 1)
        assert judge.kind == kind, every


def test_an_empty_queue_ends_a_model_verdict() -> None:
    judge = model()
    assert not feed(judge, 0.0, rounds=EMPTY_ROUNDS - 1)
    assert feed(judge, 0.0)
    assert judge.kind == CrossTraffic.NONE


def test_the_first_empty_round_under_model_is_the_other_flow_s_room() -> None:
    """Under MODEL the first round of an empty queue is the other flow's
    ProbeRTT: `room` (bbr.py measures it); not the rounds after it, not a
    standing queue's, and not an empty queue under NONE (alone, or our own)."""
    judge = model()
    feed(judge, 0.03)
    assert not judge.room
    feed(judge, 0.0)
    assert judge.room and judge.kind == CrossTraffic.MODEL
    feed(judge, 0.0)
    assert not judge.room  # the second empty round: the probe was made
    feed(judge, 0.03)
    assert not judge.room
    feed(judge, 0.0)
    assert judge.room  # the next ProbeRTT
    alone = CrossTraffic(D)
    feed(alone, 0.0, rounds=3)
    assert alone.kind == CrossTraffic.NONE and not alone.room


TRAPPED = RTT
"""Our share's delay in the queue-share trap: our yields have left us
QUEUE_SHARE datagrams per min RTT, and the queue a model-based flow keeps
(one min RTT) is our own share's delay."""

TRAP_QUEUE = 1.1 * RTT
"""A queue of a model-based flow that stands at the trap: above DIP_QUEUE
min RTTs, under the 1.25 shares that the count of held rounds needs."""


def stand(judge: CrossTraffic, seconds: float, *, ours: float = TRAPPED,
          delay: float = TRAP_QUEUE) -> bool:  # fmt: skip
    """Rounds of a standing queue for at least `seconds`."""
    return feed(judge, delay, ours=ours, rounds=int(seconds / (RTT + delay)) + 2)


def test_a_queue_that_empties_right_after_standing_is_a_model_s_probe_rtt() -> None:
    """In the queue-share trap the count of held rounds stops; the other
    flow's ProbeRTT, an empty round right after a queue that stood, tells
    a model-based flow (module docstring, MODEL)."""
    judge = CrossTraffic(D)
    assert not stand(judge, DIP_STOOD)
    assert judge.watching(CLOCK[id(judge)])
    assert feed(judge, 0.0, ours=TRAPPED)
    assert judge.kind == CrossTraffic.MODEL
    assert not judge.watching(CLOCK[id(judge)])


def test_a_stand_of_half_a_min_rtt_counts_on_a_shallow_buffer() -> None:
    """On a buffer of one bdp BBR v1's probes and the drops move the queue
    between half and one min RTT: a stand is DIP_QUEUE (half a min RTT) or
    more; a queue under it stands for nothing."""
    for level, kind in ((0.55, CrossTraffic.MODEL), (1.1 * DIP_QUEUE, CrossTraffic.MODEL),
                        (0.9 * DIP_QUEUE, CrossTraffic.NONE)):  # fmt: skip
        judge = CrossTraffic(D)
        assert not stand(judge, DIP_STOOD, delay=level * RTT)
        feed(judge, 0.0, ours=TRAPPED)
        assert judge.kind == kind, level


def test_a_dip_counts_only_where_our_bdp_is_about_one_share() -> None:
    """The trap leaves our bdp at one share (DIP_SHARES about it): a path
    of less than that, or a link with more, is not in it."""
    low, high = DIP_SHARES
    assert 1.2 / (1.05 * high) > DIP_QUEUE  # a queue can stand, held rounds not count
    none, model = CrossTraffic.NONE, CrossTraffic.MODEL
    for shares, kind in ((0.95 * low, none), (1.05 * low, model),
                         (0.95 * high, model), (1.05 * high, none)):  # fmt: skip
        judge = CrossTraffic(D)
        ours = RTT / shares
        assert not stand(judge, DIP_STOOD, ours=ours, delay=1.2 * ours)
        assert judge.watching(CLOCK[id(judge)]) == (kind == CrossTraffic.MODEL)
        feed(judge, 0.0, ours=ours)
        assert judge.kind == kind, shares


def test_a_queue_not_quite_empty_is_no_dip_but_keeps_the_stand() -> None:
    """A ProbeRTT that leaves some queue (a purelink link's half bdp) is no
    dip; the round on the way down ends nothing."""
    judge = CrossTraffic(D)
    stand(judge, DIP_STOOD)
    assert not feed(judge, 1.5 * DIP_EMPTY * RTT, ours=TRAPPED)
    assert judge.kind == CrossTraffic.NONE
    assert feed(judge, 0.5 * DIP_EMPTY * RTT, ours=TRAPPED)
    assert judge.kind == CrossTraffic.MODEL


def test_a_dip_after_our_own_probe_rtt_or_a_short_stand_is_no_verdict() -> None:
    """Our own ProbeRTT empties the queue too (DIP_AFTER); and an empty round
    ends the stand, so the next dip needs DIP_STOOD s of a new one."""
    judge = CrossTraffic(D)
    stand(judge, DIP_STOOD)
    judge.probed(CLOCK[id(judge)])  # the queue our own ProbeRTT emptied
    assert not feed(judge, 0.0, ours=TRAPPED)
    # a stand shorter than DIP_STOOD (the empty round ended the one before)
    assert not stand(judge, DIP_AFTER + 0.5 * (DIP_STOOD - DIP_AFTER))
    assert not feed(judge, 0.0, ours=TRAPPED)
    assert judge.kind == CrossTraffic.NONE
    assert not stand(judge, DIP_STOOD)
    assert feed(judge, 0.0, ours=TRAPPED)


def test_a_queue_that_fell_before_it_emptied_is_no_dip() -> None:
    """The empty round must come within DIP_GAP of the last standing one: a
    queue that drains over longer is not a flight taken out at once."""
    judge = CrossTraffic(D)
    stand(judge, DIP_STOOD)
    low = 0.5 * DIP_QUEUE * RTT
    feed(judge, low, ours=TRAPPED, rounds=int(DIP_GAP / (RTT + low)) + 1)
    assert not judge.watching(CLOCK[id(judge)])
    assert not feed(judge, 0.0, ours=TRAPPED)
    assert judge.kind == CrossTraffic.NONE
    # after such a gap a stand begins anew: shorter than DIP_STOOD, no dip
    assert not stand(judge, 0.5 * DIP_STOOD)
    feed(judge, low, ours=TRAPPED, rounds=int(DIP_GAP / (RTT + low)) + 1)
    assert not stand(judge, 0.6 * DIP_STOOD)
    assert not feed(judge, 0.0, ours=TRAPPED)
    assert judge.kind == CrossTraffic.NONE


def test_a_stand_does_not_outlast_a_change_of_verdict() -> None:
    """A stand seen before MODEL does not count once MODEL has ended."""
    judge = CrossTraffic(D)
    stand(judge, DIP_STOOD)
    assert feed(judge, 0.03, rounds=HELD_ROUNDS)  # a queue of others: MODEL by the count
    assert judge.kind == CrossTraffic.MODEL
    assert feed(judge, 0.0, rounds=EMPTY_ROUNDS)  # it left
    assert not feed(judge, TRAP_QUEUE, ours=TRAPPED)
    assert not feed(judge, 0.0, ours=TRAPPED)
    assert judge.kind == CrossTraffic.NONE


def test_the_rounds_after_a_dip_settle_as_after_an_empty_one() -> None:
    """The dip is an empty round: under MODEL, a deep queue counts only once
    the EMPTIED_SETTLE rounds from it are over (our filter has the whole
    path's rate from the other flow's ProbeRTT)."""
    judge = CrossTraffic(D)
    stand(judge, DIP_STOOD)
    assert feed(judge, 0.0, ours=TRAPPED)
    assert judge.kind == CrossTraffic.MODEL
    deep = 0.5 * (DEEP_QUEUE + SETTLE_DEEP) * RTT  # deep, but no deeper than two models make
    assert not feed(judge, deep, rounds=EMPTIED_SETTLE + DEEP_ROUNDS - 1)
    assert feed(judge, deep)
    assert judge.kind == CrossTraffic.LOSS


def test_a_queue_growing_back_to_where_it_stood_is_not_a_growing_window() -> None:
    """A model-based flow that comes back after its ProbeRTT refills the queue
    to its old level over a few rounds: growth counts only to a new high."""
    judge = model()
    feed(judge, 0.05, rounds=GROW_ROUNDS + 2)
    for i in range(2 * GROW_ROUNDS):
        assert not feed(judge, min(0.02 + 0.004 * i, 0.05))
    assert judge.kind == CrossTraffic.MODEL


def test_a_queue_refilling_after_a_drain_proves_nothing() -> None:
    """A BBR flow's ProbeRTT empties the queue for a moment and the queue
    then grows back: neither the fall nor that growth is a loss-based flow's."""
    judge = model()
    feed(judge, 0.03, rounds=2)
    assert not feed(judge, 0.001)  # emptied
    for i in range(GROW_ROUNDS - 1):
        assert not feed(judge, 0.001 + 0.006 * i)  # from empty: a refill
    assert judge.kind == CrossTraffic.MODEL


def test_a_queue_that_grows_as_we_yield_is_a_loss_based_window() -> None:
    """A loss-based window grows whatever the queue: the queue rises over a
    second and more, and a link that keeps its share of it yields, its rate
    falling.  MODEL's count never starts (the queue is our share's delay at
    the rate we are left with): the trend tells, and the verdict is LOSS
    from our flight, slow-starting (`growing`)."""
    judge = CrossTraffic(D)
    assert not feed(judge, 0.02, rounds=4, ours=SLOW)
    assert ramp(judge, (0.02, 0.08), (40 * D, 25 * D), TREND, ours=SLOW)
    assert judge.kind == CrossTraffic.LOSS and judge.growing
    assert 25 * D <= judge.window <= 40 * D


def test_a_queue_refilling_after_a_model_verdict_ended_is_not_a_trend() -> None:
    """MODEL ends with rounds of an empty queue (both flows' ProbeRTTs at
    once, say): a trend under NONE must begin TREND_WAIT after it, so the
    queue that refills is none (read as one beside BBR v1, it slow-starts)."""
    rounds = int((TREND_TIME + 0.3) / (RTT + 0.03)) + 1
    for ended, kind in ((False, CrossTraffic.LOSS), (True, CrossTraffic.NONE)):
        judge = model() if ended else CrossTraffic(D)
        if ended:
            assert feed(judge, 0.0, rounds=EMPTY_ROUNDS)
        assert judge.kind == CrossTraffic.NONE
        ramp(judge, (0.01, 0.05), (40 * D, 25 * D), rounds, ours=SLOW)
        assert judge.kind == kind


def test_a_queue_refilling_while_our_rate_holds_is_not_a_trend() -> None:
    """Purelink links refill the queue to their shares after a drain: it
    rises quarter by quarter as a growing window's would, but our flight
    holds and so, nearly, does our rate (it falls by less than TREND_RATE)."""
    judge = CrossTraffic(D)
    assert not ramp(judge, (0.006, 0.016), (40 * D, 40 * D), TREND // 2, ours=SLOW)
    assert not feed(judge, 0.016, rounds=TREND, ours=SLOW)
    assert judge.kind == CrossTraffic.NONE


def test_a_queue_refilling_after_a_peer_s_drain_is_not_a_trend() -> None:
    """A purelink link's ProbeRTT empties the queue for a moment; ours takes
    the room it leaves (our flight grows), then gives it back as the other
    link refills its share: the queue rises round by round from empty while
    our rate falls, as beside a growing window, but from an emptied queue
    (the same rise from a queue that stood is a trend): not judged from
    rounds that begin less than TREND_WAIT after the queue was last empty."""
    judge = CrossTraffic(D)
    assert not feed(judge, 0.0002, rounds=4, flight=50 * D, ours=SLOW)  # the drain
    assert not ramp(judge, (0.0002, 0.016), (50 * D, 25 * D), TREND // 2, ours=SLOW)
    assert judge.kind == CrossTraffic.NONE
    # a rise that goes on long after the queue last emptied is a trend
    assert ramp(judge, (0.016, 0.04), (25 * D, 12 * D), TREND, ours=SLOW)
    assert judge.kind == CrossTraffic.LOSS

    stood = CrossTraffic(D)
    assert not feed(stood, 0.006, rounds=4, flight=50 * D, ours=SLOW)
    assert ramp(stood, (0.006, 0.022), (50 * D, 25 * D), TREND, ours=SLOW)
    assert stood.kind == CrossTraffic.LOSS


def test_a_step_of_the_queue_or_one_grown_by_our_own_flight_is_not_a_trend() -> None:
    """A newcomer's startup raises the queue in a step, not quarter by
    quarter; a queue that our own flight grows is ours."""
    judge = CrossTraffic(D)
    assert not feed(judge, 0.02, rounds=TREND // 2, flight=40 * D, ours=SLOW)
    assert not feed(judge, 0.06, rounds=TREND // 2, flight=30 * D, ours=SLOW)
    assert judge.kind == CrossTraffic.NONE
    judge = CrossTraffic(D)
    assert not ramp(judge, (0.02, 0.06), (30 * D, 60 * D), TREND, ours=SLOW)
    assert judge.kind == CrossTraffic.NONE


def test_a_queue_deeper_than_a_model_based_flow_keeps_is_a_loss_based_one() -> None:
    """A model-based flow caps its flight at 2 bdp: a min RTT of queue.  More
    than DEEP_QUEUE min RTTs for DEEP_ROUNDS rounds is a loss-based flow's,
    under MODEL and, beyond our own share of it, under NONE."""
    deep = (DEEP_QUEUE + 0.2) * RTT
    judge = model()
    assert not feed(judge, 1.0 * RTT, rounds=4 * DEEP_ROUNDS)  # BBR v1's queue
    assert not feed(judge, deep, rounds=DEEP_ROUNDS - 1)
    assert feed(judge, deep)
    assert judge.kind == CrossTraffic.LOSS and judge.growing
    judge = CrossTraffic(D)
    assert not feed(judge, deep, rounds=DEEP_ROUNDS - 1)
    assert feed(judge, deep)
    assert judge.kind == CrossTraffic.LOSS
    # the same queue, all of it ours (a slow link's share): nothing
    judge = CrossTraffic(D)
    assert not feed(judge, deep, rounds=4 * DEEP_ROUNDS, ours=deep)
    assert judge.kind == CrossTraffic.NONE


def test_a_queue_that_squeezes_our_model_is_a_loss_based_one() -> None:
    """Under MODEL, a queue deeper than two models make (a min RTT) in which
    our btl_bw keeps falling is not a model-based flow's, even under
    DEEP_QUEUE: our 2 bdp carries less than btl_bw in it each round trip."""
    under_deep = (DEEP_QUEUE - 0.1) * RTT
    assert under_deep > SQUEEZE_QUEUE * RTT
    falls = SQUEEZE_FALL - 0.05  # past the limit over SQUEEZE_ROUNDS rounds
    judge = model()
    assert not feed(judge, under_deep, rounds=3 * SQUEEZE_ROUNDS)  # our rate holds
    judge = model()
    assert not squeeze(judge, [under_deep] * (SQUEEZE_ROUNDS - 1), falls)  # too few rounds
    assert judge.kind == CrossTraffic.MODEL
    judge = model()
    assert squeeze(judge, [under_deep] * SQUEEZE_ROUNDS, falls)
    assert judge.kind == CrossTraffic.LOSS and judge.growing
    # a fall within SQUEEZE_FALL: nothing
    judge = model()
    assert not squeeze(judge, [under_deep] * SQUEEZE_ROUNDS, SQUEEZE_FALL + 0.05)
    # one round of a queue two models make (or BBR's ProbeRTT emptying it): nothing
    judge = model()
    delays = [under_deep] * SQUEEZE_ROUNDS
    delays[SQUEEZE_ROUNDS // 2] = 0.9 * SQUEEZE_QUEUE * RTT
    assert not squeeze(judge, delays, falls)
    assert judge.kind == CrossTraffic.MODEL
    # the settling rounds (the model's bandwidth of before the yield, forgotten) do not count
    judge = model(settled=False)
    assert not squeeze(judge, [under_deep] * SQUEEZE_ROUNDS, falls)
    assert judge.kind == CrossTraffic.MODEL


def test_a_trend_deeper_than_a_model_based_flow_keeps_is_left_to_the_deep_rule() -> None:
    """The trend judges queues up to DEEP_QUEUE min RTTs: deeper, a loss-based
    flow early in its growth would start our slow start while its window is
    small (the deep queue's rule judges there, from rounds of a queue not ours)."""
    judge = CrossTraffic(D)
    deep = (DEEP_QUEUE + 0.5) * RTT
    assert not ramp(judge, (deep, 3 * deep), (40 * D, 20 * D), TREND // 2, ours=SLOW)
    assert judge.kind == CrossTraffic.NONE


def test_a_rise_that_turns_down_is_not_judged_while_it_falls() -> None:
    """A queue that rose for a second and now falls (a step decaying, or the
    competitor's cut under way) is no window growing whatever the queue:
    the round must still be above the last quarter's mean."""
    judge = CrossTraffic(D)
    feed(judge, 0.02, rounds=4, ours=SLOW)
    rising = [
        (0.02 + 0.06 * i / (TREND - 1), int(40 * D - 15 * D * i / (TREND - 1))) for i in range(13)
    ]
    for delay, flight in rising[:-1]:  # the round after these would give the verdict
        assert not feed(judge, delay, flight=flight, ours=SLOW)
    assert not feed(judge, 0.028, flight=rising[-1][1], ours=SLOW)
    assert judge.kind == CrossTraffic.NONE


def sawtooth(judge: CrossTraffic, *, rise: int = 16, low: float = 0.012, top: float = 0.03,
             fell: int = 0, btl_bw: float = BW, ours: float = SLOW) -> bool:  # fmt: skip
    """One cycle of a loss-based window beside a link that keeps its share:
    the queue rises from `low` to `top` over `rise` rounds (our flight rises
    with it, so our rate holds: no trend), then falls by half at once, our
    flight falling by `fell` bytes, and stays down as a cut does."""
    flights = (int(40 * D), int(40 * D * (RTT + top) / (RTT + low)))
    changed = ramp(judge, (low, top), flights, rise, ours=ours, btl_bw=btl_bw)
    return changed | feed(judge, 0.5 * top, flight=flights[1] - fell, ours=ours, btl_bw=btl_bw,
                          rounds=1 + hold_rounds(0.5 * top))  # fmt: skip


def test_a_sawtooth_under_none_is_a_loss_based_window() -> None:
    """Beside a loss-based window on a buffer of about a bdp a link that
    keeps its share never sees a queue of others stand (Little's law) and
    yields to a rate too small to see a trend in; the queue's sawtooth
    tells: it rose over seconds and fell at once while our flight did not.
    SAW_CUTS of them within SAW_LOOK s give LOSS, slow-starting from our
    flight (`growing`), as a growing queue does."""
    judge = CrossTraffic(D)
    assert not feed(judge, 0.012, rounds=4, ours=SLOW)
    assert SAW_CUTS == 2
    assert not sawtooth(judge)  # one: a newcomer's startup and drain look like it
    assert judge.kind == CrossTraffic.NONE
    assert sawtooth(judge)
    assert judge.kind == CrossTraffic.LOSS and judge.growing


def test_a_startup_step_or_our_own_fall_makes_no_sawtooth() -> None:
    """A rise in a step (a newcomer's startup doubles its flight each
    round), or one too short in time or in rounds, or a fall that our own
    flight's fall explains, counts no cut, however often."""
    judge = CrossTraffic(D)
    assert not feed(judge, 0.012, rounds=8, ours=SLOW)
    for _ in range(4):  # most of the rise in one round, then a plateau
        assert not feed(judge, 0.012, rounds=2, ours=SLOW)
        assert not feed(judge, 0.03, rounds=int(2 * SAW_TIME / RTT), ours=SLOW)
        assert not feed(judge, 0.018, rounds=hold_rounds(0.018), ours=SLOW)
    assert judge.kind == CrossTraffic.NONE
    # gradual, SAW_ROUNDS rounds and more, but over about half of SAW_TIME
    judge = CrossTraffic(D)
    for _ in range(4):
        assert not sawtooth(judge, rise=7)
    assert judge.kind == CrossTraffic.NONE
    # gradual and over more than SAW_TIME, but in SAW_ROUNDS - 1 rounds (long
    # rounds: a queue of 0.2-0.5 s; our share's delay 1 s, none of it others')
    judge = CrossTraffic(D)
    for _ in range(4):
        assert not sawtooth(judge, rise=SAW_ROUNDS, low=0.2, top=0.5, ours=1.0)
    assert judge.kind == CrossTraffic.NONE
    # the same with a round more: a sawtooth
    judge = CrossTraffic(D)
    assert not sawtooth(judge, rise=SAW_ROUNDS + 2, low=0.2, top=0.5, ours=1.0)
    assert sawtooth(judge, rise=SAW_ROUNDS + 2, low=0.2, top=0.5, ours=1.0)
    judge = CrossTraffic(D)
    for _ in range(4):  # our flight fell with the queue, by all of it at the path's rate
        assert not ramp(judge, (0.012, 0.03), (40 * D, 120 * D), 16, ours=SLOW)
        assert not feed(judge, 0.018, flight=40 * D, ours=SLOW, rounds=hold_rounds(0.018))
    assert judge.kind == CrossTraffic.NONE


def test_cuts_more_than_saw_look_apart_and_a_long_gap_are_no_sawtooth() -> None:
    """The two cuts must come within SAW_LOOK s; and rounds that stop for
    longer (an application that paused) leave nothing of before to judge a
    fall by, and no error."""
    judge = CrossTraffic(D)
    assert not sawtooth(judge)
    assert SAW_LOOK == 12.0  # the docs' figure: 12.5 s between the cuts is too long
    assert not feed(judge, 0.012, ours=SLOW, rounds=int(12.5 / (RTT + 0.012)) + 1)
    assert not sawtooth(judge)  # the first is too old: this is one again
    assert judge.kind == CrossTraffic.NONE
    assert sawtooth(judge)
    assert judge.kind == CrossTraffic.LOSS
    for queued in (1, 2, 3, 4):
        judge = CrossTraffic(D)
        assert not feed(judge, 0.02, rounds=queued, ours=SLOW)
        CLOCK[id(judge)] += SAW_LOOK + 3  # no round judged for 15 s
        assert not feed(judge, 0.008, ours=SLOW)
        assert not feed(judge, 0.008, ours=SLOW, rounds=hold_rounds(0.008))
        assert judge.kind == CrossTraffic.NONE


def test_our_own_probe_rtt_is_no_part_of_the_sawtooth() -> None:
    """Our ProbeRTT takes our flight out of a queue another flow keeps, and
    its return refills the queue in a step.  Kept, that low would be the
    lowest queue of the next rise and the refill most of its climb, and the
    loss-based window's next cut would not count: beside CUBIC on 20
    Mbit/s, 40 ms, 1 bdp at seed 2 the link kept "none" all run and took
    0.28 of the pair.  The PROBED_ROUNDS rounds after our ProbeRTT are not
    the sawtooth's; a low and a step that are not ours still are, and so
    is a ProbeRTT that emptied the queue (purelink links in the trap: the
    others' filters take the room, overfill the queue and drain it, which
    without the empty round read as a rise and a cut: with that exception
    taken out, two links 3 s apart on 50 Mbit/s, 43 ms, 1 bdp split
    0.29/0.70)."""
    rate = 40 * D / (RTT + 0.012)  # our rate holds throughout: no trend
    fell = int(40 * D * (RTT + 0.03) / (RTT + 0.012) - rate * (RTT + 0.015))
    for ours_probed, low, judged in ((True, 0.008, True), (False, 0.008, False),
                                     (True, 0.002, False)):  # fmt: skip
        judge = CrossTraffic(D)
        assert not feed(judge, 0.012, rounds=4, ours=SLOW)
        assert not sawtooth(judge, fell=fell)
        if ours_probed:
            judge.probed(CLOCK[id(judge)])
        flight = int(rate * (RTT + low))
        assert not feed(judge, low, flight=flight, rounds=PROBED_ROUNDS, ours=SLOW)
        assert sawtooth(judge, low=0.02) is judged, (ours_probed, low)
        assert (judge.kind == CrossTraffic.LOSS) is judged


def test_a_rise_is_judged_from_its_own_trough() -> None:
    """The rise to a cut runs from the trough after the cut before it (the
    tooth before: the last round that stood SAW_TOP of this top or more,
    with a fall since), not from the lowest queue of SAW_LOOK s.  A low of
    our own start, before a loss-based window's queue stood, stayed the
    lowest for 12 s and made every rise after it start with that step:
    beside CUBIC on 20 Mbit/s, 40 ms, 1 bdp, the link 5 s after it, no cut
    counted, the link kept "none" and took 0.31 of the pair at seed 2."""
    judge = CrossTraffic(D)
    assert not feed(judge, 0.0, rounds=2, ours=SLOW)
    # our flight falls back with each cut to where the next rise begins (our
    # rate holds: no trend)
    fell = int(40 * D * (RTT + 0.03) / (RTT + 0.018)) - 40 * D
    assert not sawtooth(judge, low=0.018, fell=fell)  # the step is a part of this rise: no cut
    assert not sawtooth(judge, low=0.018, fell=fell)  # from the first tooth's trough: one
    assert judge.kind == CrossTraffic.NONE
    assert sawtooth(judge, low=0.018, fell=fell)  # two
    assert judge.kind == CrossTraffic.LOSS


def test_one_fall_counts_once() -> None:
    """A fall whose hold is met within a round (a deep queue's rounds are
    long) is confirmed once: its top does not count again the next round."""
    judge = CrossTraffic(D)
    assert not sawtooth(judge, low=0.2, top=0.8, ours=4.0)
    assert not feed(judge, 0.4, ours=4.0, rounds=4)
    assert judge.kind == CrossTraffic.NONE


def test_our_flight_s_fall_drains_at_the_path_s_rate_not_ours() -> None:
    """Under NONE a link that has yielded delivers a part of the path: the
    bytes its flight lost leave the queue at the path's rate, which the most
    it delivered in the rounds kept bounds (here 4 x its rate now).  Judged
    at its own rate, a fall of 20 datagrams would explain 24 ms, more than
    the whole fall, and the sawtooth of a loss-based window beside it would
    never count."""
    judge = CrossTraffic(D)
    assert not feed(judge, 0.012, rounds=4, ours=SLOW, btl_bw=BW)
    assert not sawtooth(judge, fell=20 * D, btl_bw=BW / 4)
    assert sawtooth(judge, fell=20 * D, btl_bw=BW / 4)
    assert judge.kind == CrossTraffic.LOSS
    # with no such rate kept, 20 datagrams at our rate are the fall itself
    judge = CrossTraffic(D)
    assert not feed(judge, 0.012, rounds=4, ours=SLOW, btl_bw=BW / 4)
    for _ in range(3):
        assert not sawtooth(judge, fell=20 * D, btl_bw=BW / 4)
    assert judge.kind == CrossTraffic.NONE
