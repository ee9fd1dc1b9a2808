"""overflows.py: whether the queue falls after an overflow, and the share it leaves."""

from __future__ import annotations

from purelink.protocol.congestion.overflows import (
    CALM,
    FALL,
    FALL_ROUNDS,
    MIN_SHARE,
    OVERFLOWS,
    SHALLOW,
    SHALLOW_SHARE,
    SHARE_OF_BUFFER,
    Overflows,
)

SIZE = 1400
MOST = 16 * SIZE
BUFFER = 0.020  # a 20 ms buffer
BW = 2.5e6  # 20 Mbit/s
FLIGHT = 100_000  # our bytes in flight


class Rounds:
    """Feeds an Overflows one round trip at a time."""

    def __init__(self) -> None:
        self.o = Overflows(SIZE)
        self.count = 0

    def overflow(self, depth: float = BUFFER) -> None:
        self.count += 1
        self.o.round(
            round_count=self.count,
            overflow=True,
            queue_min=depth / 2,
            queue_max=depth,
            flight=FLIGHT,
            btl_bw=BW,
        )

    def quiet(self, queue: float | None, n: int = 1, flight: int = FLIGHT) -> bool:
        for _ in range(n):
            self.count += 1
            peak = queue if queue is not None else 0.0
            self.o.round(
                round_count=self.count,
                overflow=False,
                queue_min=queue,
                queue_max=peak,
                flight=flight,
                btl_bw=BW,
            )
        return self.o.elastic


def test_without_an_overflow_the_share_is_the_cooperative_one() -> None:
    r = Rounds()
    assert not r.quiet(0.0, 50)
    assert r.o.buffer == 0.0
    assert r.o.share(MOST) == MOST


def test_a_queue_that_falls_after_each_overflow_is_elastic() -> None:
    """A loss-based flow halves at the overflow: within a round or two the
    queue is a small part of the buffer.  From the second such overflow the
    share is SHARE_OF_BUFFER of the buffer at the link's rate."""
    r = Rounds()
    r.overflow()
    assert not r.quiet(0.001)  # one fall is not yet a pattern
    r.overflow()
    assert r.quiet(0.001)
    assert r.o.buffer == BUFFER
    assert r.o.share(MOST) == int(SHARE_OF_BUFFER * BW * BUFFER)
    assert MIN_SHARE * SIZE < r.o.share(MOST) < MOST


def test_a_queue_that_stands_after_each_overflow_is_not() -> None:
    """A model-based flow (BBR v1) keeps its flight: the queue stays near
    the buffer's depth through the rounds after the overflow."""
    r = Rounds()
    for _ in range(10):
        r.overflow()
        assert not r.quiet(0.5 * BUFFER, FALL_ROUNDS + 1)
    assert r.o.share(MOST) == MOST


def test_the_fall_must_come_within_a_few_rounds() -> None:
    r = Rounds()
    for _ in range(4):
        r.overflow()
        r.quiet(0.8 * BUFFER, FALL_ROUNDS + 1)  # judged: no fall
        r.quiet(0.0, 2)  # a fall too late is not this overflow's
    assert not r.o.elastic


def test_a_fall_our_own_flight_explains_is_not_another_flow_s() -> None:
    """Purelink links that overfill a buffer shallower than their shares cut
    their loss bounds at the overflow, and the queue falls by what their
    flights fell: this link's own part of that fall is added back (else
    two links on a one-bdp buffer capped their shares at the rates their
    startups measured, and split 0.37/0.63)."""
    own, other = Rounds(), Rounds()
    fell = int(0.5 * BUFFER * BW)  # our flight fell by half the buffer's bytes
    for _ in range(4):
        own.overflow()
        own.quiet(0.0, FALL_ROUNDS + 1, flight=FLIGHT - fell)
        other.overflow()
        other.quiet(0.0, flight=FLIGHT)
    assert not own.o.elastic and other.o.elastic


def test_an_overflow_before_the_fall_counts_as_none() -> None:
    r = Rounds()
    for _ in range(6):
        r.overflow()
    assert not r.quiet(0.0)  # five overflows without a fall, the last with one


def test_a_round_without_a_sample_judges_nothing() -> None:
    r = Rounds()
    for _ in range(2):
        r.overflow()
        r.quiet(None, 10)
        r.quiet(0.0)  # the fall comes in the first round that timed a datagram
    assert r.o.elastic


def test_a_fall_is_judged_against_the_buffer() -> None:
    """FALL of the deepest queue seen at the overflows: just under it is a fall,
    just over it is not."""
    low, high = Rounds(), Rounds()
    for _ in range(3):
        low.overflow()
        low.quiet(0.99 * FALL * BUFFER)
        high.overflow()
        high.quiet(1.01 * FALL * BUFFER, FALL_ROUNDS + 1)
    assert low.o.elastic and not high.o.elastic


def test_most_of_the_last_overflows_decide() -> None:
    """A majority of the last OVERFLOWS: once the others stop backing off
    (a BBR v1 flow joins), the cap goes when half of them have not."""
    r = Rounds()
    for _ in range(OVERFLOWS):
        r.overflow()
        r.quiet(0.0)
    assert r.o.elastic
    for _ in range(OVERFLOWS // 2):
        r.overflow()
        r.quiet(0.6 * BUFFER, FALL_ROUNDS + 1)
    assert not r.o.elastic
    assert r.o.share(MOST) == MOST


def test_the_buffer_is_the_deepest_of_the_last_overflows() -> None:
    r = Rounds()
    r.overflow(0.1)
    for _ in range(OVERFLOWS - 1):
        r.overflow(BUFFER)
    assert r.o.buffer == 0.1
    r.overflow(BUFFER)
    assert r.o.buffer == BUFFER  # the deep one is forgotten: the path changed


def test_the_share_stays_between_its_floor_and_the_cooperative_share() -> None:
    r = Rounds()
    for _ in range(3):
        r.overflow(0.001)  # a buffer of a millisecond
        r.quiet(0.0)
    assert r.o.elastic
    assert r.o.share(MOST) == MIN_SHARE * SIZE
    deep = Rounds()
    for _ in range(3):
        deep.overflow(1.0)  # a second of buffer
        deep.quiet(0.0)
    assert deep.o.share(MOST) == MOST
    blind = Overflows(SIZE)
    for n in range(6):  # elastic, but before any rate was measured: no cap
        blind.round(
            round_count=n,
            overflow=n % 2 == 0,
            queue_min=0.0,
            queue_max=0.02,
            flight=FLIGHT,
            btl_bw=0.0,
        )
    assert blind.elastic and blind.share(MOST) == MOST


def test_the_share_is_in_bytes_at_the_largest_rate_measured() -> None:
    """A link that yields lowers its btl_bw; a share at that rate would fall
    with it, and the link would yield again (a spiral).  The share stays at
    the buffer's delay at the largest rate the link measured."""
    o = Overflows(SIZE)
    rates = [BW, BW, BW / 2, BW / 4, BW / 4, BW / 8]
    for n, rate in enumerate(rates):
        o.round(
            round_count=n,
            overflow=n % 2 == 0,
            queue_min=0.0,
            queue_max=BUFFER,
            flight=FLIGHT,
            btl_bw=rate,
        )
    assert o.elastic and o.peak_bw == BW
    assert o.share(MOST) == int(SHARE_OF_BUFFER * BW * BUFFER)


def test_a_shallow_buffer_that_calmed_leaves_half_of_it_as_our_part() -> None:
    """Under "model" (bbr.py): on a buffer under SHALLOW min RTTs, once at
    most CALM of the last OVERFLOWS round trips overflowed, our part is
    SHALLOW_SHARE of the buffer at the largest rate measured."""
    short = BUFFER / SHALLOW * 2  # a min RTT for which BUFFER is shallow
    r = Rounds()
    r.overflow()
    r.quiet(0.5 * BUFFER, OVERFLOWS)
    assert r.o.shallow_part(short) is None  # one overflow: no buffer known yet
    for _ in range(CALM + 1):
        r.overflow()
    assert r.o.shallow_part(short) is None  # overflowing: not calm
    r.quiet(0.5 * BUFFER, OVERFLOWS - CALM)
    assert r.o.shallow_part(short) == int(SHALLOW_SHARE * BW * BUFFER)
    assert r.o.shallow_part(BUFFER) is None  # a buffer of a bdp is not shallow
    edge = BUFFER / SHALLOW  # the min RTT for which BUFFER is SHALLOW of it
    assert r.o.shallow_part(edge * 1.001) is not None
    assert r.o.shallow_part(edge * 0.999) is None
    assert r.o.shallow_part(0.0) is None  # no min RTT measured
    for _ in range(CALM + 1):  # overflowing again
        r.overflow()
    assert r.o.shallow_part(short) is None


def test_the_part_of_a_shallow_buffer_is_at_least_min_share_datagrams() -> None:
    r = Rounds()
    for _ in range(2):
        r.overflow(0.0001)  # a tenth of a millisecond of buffer
    r.quiet(0.0, OVERFLOWS)
    assert r.o.shallow_part(0.01) == MIN_SHARE * SIZE


def test_a_buffer_is_shallow_once_two_overflows_put_it_under_shallow_min_rtts() -> None:
    """`shallow`: the deepest queue of 2 overflows or more under SHALLOW min
    RTTs, whether or not the overflows have calmed (bbr.py's bound floor)."""
    min_rtt = BUFFER / SHALLOW * 1.1  # the buffer is a little under SHALLOW of it
    r = Rounds()
    assert not r.o.shallow(min_rtt)
    r.overflow()
    assert not r.o.shallow(min_rtt)  # one overflow does not tell the buffer
    r.overflow()
    assert r.o.shallow(min_rtt) and r.o.shallow_part(min_rtt) is None  # not calm
    assert not r.o.shallow(BUFFER / SHALLOW * 0.9)  # a shorter path: over SHALLOW min RTTs
