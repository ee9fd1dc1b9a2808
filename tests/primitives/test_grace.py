"""QSBR grace periods: who waited, who signalled, how many times; nothing freed early.

The traces are checked step by step against the liburcu patch's sequence: the
reclaimer parks, each pending reader signals it once, readers already counted
never signal again in that grace period, and nobody signals a reclaimer that
does not wait.  The benchmark's unpatched variants are checked in
bench/tests/test_grace_variants.py.
"""

from __future__ import annotations

from helpers.grace import Reclaimer, nothing_freed_under_load, steps, wait_until
from purelink.primitives import GraceDomain, GraceEvent, GraceStatistics

# ---- one thread ---------------------------------------------------------------------


def test_fresh_domain() -> None:
    domain = GraceDomain()
    assert domain.statistics() == GraceStatistics(0, 0, 0, 0, 0, 0)


def test_no_readers_no_wait() -> None:
    domain = GraceDomain(trace=True)
    assert domain.synchronize()
    assert domain.synchronize()
    stats = domain.statistics()
    assert (stats.grace_periods, stats.parks, stats.unparks) == (2, 0, 0)
    assert domain.trace == [
        GraceEvent(2, "reclaimer", "begin"),
        GraceEvent(2, "reclaimer", "end"),
        GraceEvent(3, "reclaimer", "begin"),
        GraceEvent(3, "reclaimer", "end"),
    ]


def test_offline_readers_are_not_waited_for() -> None:
    domain = GraceDomain(trace=True)
    reader = domain.register("r", online=False)
    assert reader.ctr == 0
    assert domain.synchronize()
    reader.online()
    reader.offline()
    assert domain.synchronize()
    assert domain.statistics().parks == 0


def test_quiescent_with_nobody_waiting_signals_nobody() -> None:
    domain = GraceDomain()
    reader = domain.register("r")
    for _ in range(1_000):
        reader.quiescent()
    with reader.blocked():
        assert reader.ctr == 0
        assert domain.synchronize()  # an offline reader does not hold it up
    assert reader.ctr == domain.gp
    assert domain.statistics().unparks == 0
    assert reader.signals == 0


def test_timeout_when_a_reader_never_passes_a_quiescent_state() -> None:
    domain = GraceDomain(trace=True)
    reader = domain.register("stuck")
    assert not domain.synchronize(timeout=0.05)
    stats = domain.statistics()
    assert (stats.grace_periods, stats.timeouts, stats.parks) == (0, 1, 1)
    assert steps(domain) == [
        ("reclaimer", "begin"),
        ("reclaimer", "park"),
        ("reclaimer", "timeout"),
    ]
    assert domain.futex == 0
    reader.quiescent()  # its stale flag costs a store and a load, no signal
    assert reader.signals == 0
    assert domain.synchronize(timeout=0.01) is False  # still online, no new quiescent state
    reader.unregister()
    assert domain.synchronize(timeout=0.01)
    assert domain.statistics().readers == 0


def test_spinning_counts_checks_before_parking() -> None:
    domain = GraceDomain(spins=5)
    reader = domain.register()
    assert not domain.synchronize(timeout=0.001)
    assert domain.statistics().spins == 4  # 4 checks, the 5th one announces and parks
    reader.unregister()


def test_registration_names_and_context_manager() -> None:
    domain = GraceDomain()
    with domain.register() as a, domain.register() as b:
        assert (a.name, b.name) == ("reader-1", "reader-2")
        assert domain.statistics().readers == 2
    assert domain.statistics().readers == 0
    a.unregister()  # idempotent


# ---- traces with a parked reclaimer -------------------------------------------------


def test_one_reader_signals_a_parked_reclaimer_once() -> None:
    domain = GraceDomain(trace=True)
    reader = domain.register("a")
    reclaimer = Reclaimer(domain)
    wait_until(reclaimer.parked(1))
    assert reader.waiting
    reader.quiescent()
    assert reclaimer.join() is True
    assert steps(domain) == [
        ("reclaimer", "begin"),
        ("reclaimer", "park"),
        ("a", "signal"),
        ("reclaimer", "wake"),
        ("reclaimer", "end"),
    ]
    assert {e.gp for e in domain.trace or []} == {2}
    assert (reader.signals, reader.waiting) == (1, False)
    reader.quiescent()  # the grace period is over: no signal
    assert domain.statistics() == GraceStatistics(1, 0, 1, 1, 0, 1)


def test_each_reader_signals_at_most_once_per_grace_period() -> None:
    domain = GraceDomain(trace=True)
    a, b, c = (domain.register(n) for n in "abc")
    c.offline()  # not waited for, never flagged
    reclaimer = Reclaimer(domain)
    wait_until(reclaimer.parked(1))
    assert (a.waiting, b.waiting, c.waiting) == (True, True, False)
    a.quiescent()
    wait_until(reclaimer.parked(2))  # woke, found b pending, flagged only b, parked again
    assert (a.waiting, b.waiting) == (False, True)
    for _ in range(100):
        a.quiescent()  # already counted in this grace period: never signals again
    c.online()  # came online after the grace period began: not waited for
    c.quiescent()
    b.quiescent()
    assert reclaimer.join() is True
    assert steps(domain) == [
        ("reclaimer", "begin"),
        ("reclaimer", "park"),
        ("a", "signal"),
        ("reclaimer", "wake"),
        ("reclaimer", "park"),
        ("b", "signal"),
        ("reclaimer", "wake"),
        ("reclaimer", "end"),
    ]
    assert (a.signals, b.signals, c.signals) == (1, 1, 0)
    stats = domain.statistics()
    assert (stats.grace_periods, stats.parks, stats.unparks) == (1, 2, 2)


def test_going_offline_signals_like_a_quiescent_state() -> None:
    domain = GraceDomain(trace=True)
    reader = domain.register("blocked")
    reclaimer = Reclaimer(domain)
    wait_until(reclaimer.parked(1))
    with reader.blocked():
        assert reclaimer.join() is True
    assert steps(domain)[2] == ("blocked", "signal")
    assert reader.signals == 1


def test_unregister_releases_a_parked_reclaimer() -> None:
    domain = GraceDomain(trace=True)
    reader = domain.register("leaving")
    reclaimer = Reclaimer(domain)
    wait_until(reclaimer.parked(1))
    reader.unregister()
    assert reclaimer.join() is True
    assert ("leaving", "signal") in steps(domain)


def test_relax_runs_between_busy_checks() -> None:
    calls: list[None] = []
    domain = GraceDomain(spins=5, relax=lambda: calls.append(None))
    reader = domain.register()
    assert not domain.synchronize(timeout=0.001)
    assert len(calls) == domain.statistics().spins == 4
    reader.unregister()


# ---- the guarantee, under load --------------------------------------------------------


def test_nothing_is_freed_while_a_reader_holds_it() -> None:
    nothing_freed_under_load(GraceDomain())
