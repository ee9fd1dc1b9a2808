"""The grace benchmark's unpatched variants (bench/grace.py's VariantDomain): readers
without flags wake a re-parked reclaimer again; the unpatched reclaimer parks
once, then busy-checks; and none of them frees anything a reader still holds."""

from __future__ import annotations

import pytest

from bench.grace import VARIANTS, VariantDomain, make_domain
from helpers.grace import Reclaimer, nothing_freed_under_load, steps, wait_until


def test_naive_variant_signals_on_every_quiescent_state() -> None:
    """The benchmark's "no-flags" variant (unpatched readers): a reader already
    counted keeps waking the re-parked reclaimer."""
    domain = VariantDomain(trace=True, signal_only_waiting=False)
    a, b = domain.register("a"), domain.register("b")
    reclaimer = Reclaimer(domain)
    wait_until(reclaimer.parked(1))
    assert not a.waiting  # no flags in the naive variant
    a.quiescent()
    wait_until(reclaimer.parked(2))
    a.quiescent()  # counted already, and yet it wakes the reclaimer again
    wait_until(reclaimer.parked(3))
    b.quiescent()
    assert reclaimer.join() is True
    assert steps(domain) == [
        ("reclaimer", "begin"),
        ("reclaimer", "park"),
        ("a", "signal"),
        ("reclaimer", "wake"),
        ("reclaimer", "park"),
        ("a", "signal"),
        ("reclaimer", "wake"),
        ("reclaimer", "park"),
        ("b", "signal"),
        ("reclaimer", "wake"),
        ("reclaimer", "end"),
    ]
    assert (a.signals, b.signals) == (2, 1)


def test_always_signal_variant_takes_the_lock_at_every_quiescent_state() -> None:
    """The benchmark's "always-signal" variant: every quiescent state notifies,
    parked waiter or not; a parked reclaimer is woken (and counted) once per park,
    and no reader is ever flagged."""
    domain = VariantDomain(trace=True, signal_only_waiting=False, signal_always=True)
    a, b = domain.register("a"), domain.register("b")
    taken = [0]
    lock = domain._cond

    class Counting:  # wraps the domain's Condition to count the lock's uses
        def __enter__(self) -> None:
            taken[0] += 1
            lock.__enter__()

        def __exit__(self, *exc: object) -> None:
            lock.__exit__(None, None, None)

        def notify(self) -> None:
            lock.notify()

    for _ in range(5):
        domain._cond = Counting()  # type: ignore[assignment]
        a.quiescent()  # nobody waits: the lock is taken anyway, nothing is counted
        domain._cond = lock
    assert taken[0] == 5
    assert (a.signals, domain.statistics().unparks) == (0, 0)
    reclaimer = Reclaimer(domain)
    wait_until(reclaimer.parked(1))
    assert not a.waiting and not b.waiting  # no flags
    a.quiescent()
    wait_until(reclaimer.parked(2))
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
    assert (a.signals, b.signals) == (1, 1)


def test_unpatched_waiter_parks_once_then_busy_checks() -> None:
    """The "before" of the benchmark (liburcu without the patch): any reader wakes the
    parked reclaimer, which then never parks again in that grace period but busy-checks."""
    domain = VariantDomain(trace=True, signal_only_waiting=False, park_once=True)
    a, b = domain.register("a"), domain.register("b")
    reclaimer = Reclaimer(domain)
    wait_until(reclaimer.parked(1))
    a.quiescent()  # futex was -1: a wakes it, and sets it back to 0 first
    assert domain.futex == 0
    wait_until(lambda: domain.statistics().spins > 0)  # awake, busy-checking b
    for _ in range(100):
        a.quiescent()  # nobody parked: no signal
    assert reclaimer.thread.is_alive()
    b.quiescent()
    assert reclaimer.join() is True
    assert steps(domain) == [
        ("reclaimer", "begin"),
        ("reclaimer", "park"),
        ("a", "signal"),
        ("reclaimer", "wake"),
        ("reclaimer", "end"),
    ]
    assert (a.signals, b.signals) == (1, 0)
    stats = domain.statistics()
    assert (stats.grace_periods, stats.parks, stats.unparks) == (1, 1, 1)


def test_unpatched_waiter_times_out_while_busy_checking() -> None:
    domain = VariantDomain(trace=True, signal_only_waiting=False, park_once=True)
    a, b = domain.register("a"), domain.register("b")
    reclaimer = Reclaimer(domain, timeout=0.2)
    wait_until(reclaimer.parked(1))
    a.quiescent()  # wakes it; b never comes in
    assert reclaimer.join() is False
    assert steps(domain)[-1] == ("reclaimer", "timeout")
    stats = domain.statistics()
    assert (stats.parks, stats.timeouts, stats.grace_periods) == (1, 1, 0)
    assert stats.spins > 0
    assert domain.futex == 0
    a.offline()
    b.unregister()
    assert domain.synchronize(timeout=1.0)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_nothing_is_freed_while_a_reader_holds_it(variant: str) -> None:
    nothing_freed_under_load(make_domain(variant))
