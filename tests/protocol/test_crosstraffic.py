"""The judgement of what shares the bottleneck (protocol/congestion/crosstraffic.py),
round by round, without a path: each verdict from the rounds that make it,
and the rounds that must not."""

from __future__ import annotations

from purelink.protocol.congestion.crosstraffic import (
    EMPTY_ROUNDS,
    GROW_ROUNDS,
    HELD_ROUNDS,
    LOSSY_ROUNDS,
    MAX_START,
    CrossTraffic,
)

D = 1200
RTT = 0.04
BW = 4_000_000.0  # bytes/s
OURS = 16 * D / BW  # the delay our share of a queue makes


def feed(judge: CrossTraffic, delay: float, *, flight: int = 40 * D, lost: int = 0,
         rounds: int = 1) -> bool:  # fmt: skip
    changed = False
    for _ in range(rounds):
        changed |= judge.round(
            queue_delay=delay, flight=flight, lost=lost, ours=OURS, btl_bw=BW, min_rtt=RTT,
        )  # fmt: skip
    return changed


def model() -> CrossTraffic:
    """A judge that has seen a queue of others stand: MODEL."""
    judge = CrossTraffic(D)
    feed(judge, 0.03, rounds=HELD_ROUNDS)
    assert judge.kind == CrossTraffic.MODEL
    return judge


def test_alone_without_a_queue_nothing_competes() -> None:
    judge = CrossTraffic(D)
    assert not feed(judge, 0.0, rounds=100)
    assert not feed(judge, 0.5 * OURS, lost=10 * D, rounds=100)  # our own queue, our overflows
    assert judge.kind == CrossTraffic.NONE and judge.switches == 0


def test_a_queue_of_others_that_stands_is_a_competitor() -> None:
    judge = CrossTraffic(D)
    assert not feed(judge, 0.03, rounds=HELD_ROUNDS - 1)
    assert not feed(judge, 0.0)  # it emptied: the count starts again
    assert not feed(judge, 0.03, rounds=HELD_ROUNDS - 1)
    assert feed(judge, 0.03)
    assert judge.kind == CrossTraffic.MODEL


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


def test_a_fall_of_the_queue_we_did_not_make_is_a_loss_based_cut() -> None:
    judge = model()
    feed(judge, 0.03, rounds=2)
    assert feed(judge, 0.015)  # half the queue went, our flight did not move
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


def test_persistent_loss_turns_a_loss_verdict_to_model() -> None:
    judge = model()
    feed(judge, 0.03, rounds=2)
    feed(judge, 0.015)
    assert judge.kind == CrossTraffic.LOSS
    assert not feed(judge, 0.03, lost=5 * D, rounds=LOSSY_ROUNDS - 1)
    assert feed(judge, 0.03, lost=5 * D)
    assert judge.kind == CrossTraffic.MODEL


def test_an_empty_queue_ends_a_model_verdict() -> None:
    judge = model()
    assert not feed(judge, 0.0, rounds=EMPTY_ROUNDS - 1)
    assert feed(judge, 0.0)
    assert judge.kind == CrossTraffic.NONE


def test_a_queue_refilling_after_a_drain_proves_nothing() -> None:
    """A BBR flow's ProbeRTT empties the queue for a moment and the queue
    then grows back: neither the fall nor that growth is a loss-based flow's."""
    judge = model()
    feed(judge, 0.03, rounds=2)
    assert not feed(judge, 0.001)  # emptied
    for i in range(GROW_ROUNDS - 1):
        assert not feed(judge, 0.001 + 0.006 * i)  # from empty: a refill
    assert judge.kind == CrossTraffic.MODEL
