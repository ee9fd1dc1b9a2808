"""QSBR grace periods: who waited, who signalled, how many times; nothing freed early.

The traces are checked step by step against the liburcu patch's sequence: the
reclaimer parks, each pending reader signals it once, readers already counted
never signal again in that grace period, and nobody signals a reclaimer that
does not wait.  The benchmark's unpatched variants are checked too: readers
without flags wake a re-parked reclaimer again; the unpatched reclaimer parks
once, then busy-checks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from purelink.primitives import GraceDomain, GraceEvent, GraceStatistics


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll a test condition about another thread's state (test scaffolding only)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.0005)


class Reclaimer:
    """synchronize() on a thread of its own, so the test can step the readers."""

    def __init__(self, domain: GraceDomain, timeout: float | None = None) -> None:
        self.domain = domain
        self.result: bool | None = None
        self.thread = threading.Thread(target=self._run, args=(timeout,))
        self.thread.start()

    def _run(self, timeout: float | None) -> None:
        self.result = self.domain.synchronize(timeout)

    def parked(self, times: int) -> Callable[[], bool]:
        return lambda: self.domain.statistics().parks >= times and self._in_wait()

    def _in_wait(self) -> bool:
        trace = self.domain.trace
        assert trace is not None
        return trace[-1].what == "park"

    def join(self) -> bool | None:
        self.thread.join(5)
        assert not self.thread.is_alive(), "synchronize() did not return"
        return self.result


def steps(domain: GraceDomain) -> list[tuple[str, str]]:
    assert domain.trace is not None
    return [(e.who, e.what) for e in domain.trace]


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


def test_naive_variant_signals_on_every_quiescent_state() -> None:
    """The benchmark's "no-flags" variant (unpatched readers): a reader already
    counted keeps waking the re-parked reclaimer."""
    domain = GraceDomain(trace=True, signal_only_waiting=False)
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
    domain = GraceDomain(trace=True, signal_only_waiting=False, signal_always=True)
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
    domain = GraceDomain(trace=True, signal_only_waiting=False, park_once=True)
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
    domain = GraceDomain(trace=True, signal_only_waiting=False, park_once=True)
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


def test_relax_runs_between_busy_checks() -> None:
    calls: list[None] = []
    domain = GraceDomain(spins=5, relax=lambda: calls.append(None))
    reader = domain.register()
    assert not domain.synchronize(timeout=0.001)
    assert len(calls) == domain.statistics().spins == 4
    reader.unregister()


# ---- the guarantee, under load --------------------------------------------------------


class Box:
    """A shared thing readers look at; `freed` is set once it is retired."""

    def __init__(self, value: int) -> None:
        self.value = value
        self.freed = False


@pytest.mark.parametrize(
    ("only_waiting", "park_once", "always"),
    [(True, False, False), (False, False, False), (False, True, False), (False, False, True)],
)
def test_nothing_is_freed_while_a_reader_holds_it(
    only_waiting: bool, park_once: bool, always: bool
) -> None:
    """4 readers hold the current box between quiescent states; the updater
    frees the old box only after synchronize(). A reader must never see a freed box."""
    domain = GraceDomain(
        signal_only_waiting=only_waiting, park_once=park_once, signal_always=always
    )
    current = Box(0)
    stop = threading.Event()
    errors: list[str] = []
    reads = [0] * 4

    def reader(k: int) -> None:
        with domain.register(f"r{k}") as me:
            while not stop.is_set():
                box = current  # take a reference...
                for _ in range(20):  # ...and use it for a while
                    if box.freed:
                        errors.append(f"r{k} saw box {box.value} freed")
                reads[k] += 1
                me.quiescent()  # no reference held past here
                if reads[k] % 64 == 0:
                    with me.blocked():
                        time.sleep(0)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    updates = 0
    deadline = time.monotonic() + 0.5
    try:
        while updates < 300 and time.monotonic() < deadline:
            old = current
            current = Box(old.value + 1)  # unpublish the old one
            assert domain.synchronize(timeout=5.0)
            old.freed = True
            updates += 1
    finally:
        stop.set()
        for t in threads:
            t.join(5)
    assert not errors
    assert updates > 10
    assert all(reads)
    stats = domain.statistics()
    assert stats.grace_periods == updates
    assert stats.readers == 0
