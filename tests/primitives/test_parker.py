"""Parker: signal only parked waiters, once per period; no lost wakeup; asyncio futures."""

from __future__ import annotations

import asyncio
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from purelink.primitives import DEFAULT_SPINS, Parker, ParkerStatistics


class Counter:
    """The progress side's state: what wait_stored's predicate reads."""

    def __init__(self) -> None:
        self.value = 0

    def at_least(self, target: int) -> Callable[[], bool]:
        return lambda: self.value >= target


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll a test condition about another thread's state (test scaffolding only)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


def start(target: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=target)
    thread.start()
    return thread


@pytest.fixture
def eager_switching() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


# ---- one thread -------------------------------------------------------------------------


def test_fresh() -> None:
    parker = Parker()
    assert parker.spins == DEFAULT_SPINS
    assert not parker.waiting
    assert parker.statistics() == ParkerStatistics(0, 0, 0, 0, 0, 0, 0, 0)


def test_default_spins_follow_the_gil() -> None:
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    expected = 1 if gil else 100
    assert expected == DEFAULT_SPINS
    assert Parker(spins=0).spins == 1  # the predicate is always checked once before parking


def test_unpark_with_nobody_waiting_signals_nobody() -> None:
    parker = Parker()
    for _ in range(1_000):
        parker.unpark()
    assert parker.statistics().unparks == 0


def test_satisfied_while_spinning_does_not_park() -> None:
    parker = Parker(spins=10)
    calls = 0

    def third_time() -> bool:
        nonlocal calls
        calls += 1
        return calls == 3

    assert parker.wait(third_time, timeout=1)
    parker.unpark()
    stats = parker.statistics()
    assert (stats.waits, stats.spun, stats.parks, stats.unparks) == (1, 1, 0, 0)
    assert not parker.waiting


def test_timeout_returns_false_and_clears_the_flag() -> None:
    parker = Parker()
    started = time.monotonic()
    assert not parker.wait(lambda: False, timeout=0.02)
    assert time.monotonic() - started >= 0.02
    assert not parker.waiting  # the last waiter left: unpark() is free again
    parker.unpark()
    stats = parker.statistics()
    assert (stats.timeouts, stats.parks, stats.unparks, stats.parked) == (1, 1, 0, 0)


def test_zero_timeout_checks_without_parking() -> None:
    parker = Parker()
    assert not parker.wait(lambda: False, timeout=0)
    assert parker.wait(lambda: True, timeout=0)
    assert parker.statistics().parks == 0


# ---- threads ----------------------------------------------------------------------------


def test_one_signal_per_period() -> None:
    parker, counter = Parker(), Counter()
    results: list[bool] = []
    waiter = start(lambda: results.append(parker.wait(counter.at_least(1), timeout=5)))
    wait_until(lambda: parker.statistics().parked == 1)
    counter.value = 1
    for _ in range(1_000):  # many advances before the waiter gets to run
        parker.unpark()
    waiter.join(5)
    assert results == [True]
    stats = parker.statistics()
    assert (stats.parks, stats.unparks, stats.timeouts) == (1, 1, 0)
    assert not parker.waiting


def test_a_waiter_still_unsatisfied_parks_again_for_a_new_period() -> None:
    parker, counter = Parker(), Counter()
    results: list[bool] = []
    waiter = start(lambda: results.append(parker.wait(counter.at_least(2), timeout=5)))
    wait_until(lambda: parker.statistics().parks == 1)
    counter.value = 1
    parker.unpark()  # wakes it, but its target is 2: it parks again
    wait_until(lambda: parker.statistics().parks == 2)
    counter.value = 2
    parker.unpark()
    waiter.join(5)
    assert results == [True]
    stats = parker.statistics()
    assert (stats.unparks, stats.futile_wakes) == (2, 1)


def test_one_signal_wakes_every_parked_waiter() -> None:
    parker, counter = Parker(), Counter()
    results: list[bool] = []
    lock = threading.Lock()

    def wait() -> None:
        ok = parker.wait(counter.at_least(1), timeout=5)
        with lock:
            results.append(ok)

    waiters = [start(wait) for _ in range(5)]
    wait_until(lambda: parker.statistics().parked == 5)
    counter.value = 1
    parker.unpark()
    parker.unpark()
    for waiter in waiters:
        waiter.join(5)
    assert results == [True] * 5
    assert parker.statistics().unparks == 1


@pytest.mark.usefixtures("eager_switching")
def test_stress_no_lost_wakeup() -> None:
    """A progress thread advances with random pauses; waiters wait for various targets."""
    parker, counter = Parker(), Counter()
    steps, waiters, waits_each = 3_000, 6, 60
    outcomes: list[bool] = []
    lock = threading.Lock()

    def progress() -> None:
        rng = random.Random(1)
        for _ in range(steps):
            counter.value += 1
            parker.unpark()
            if rng.random() < 0.3:
                time.sleep(rng.random() * 1e-4)  # load shaping, as the link waits in poll

    def waiter(k: int) -> None:
        rng = random.Random(100 + k)
        for _ in range(waits_each):
            target = min(steps, counter.value + rng.randrange(1, 60))
            ok = parker.wait(counter.at_least(target), timeout=5)  # long: only a loss expires it
            with lock:
                outcomes.append(ok)

    threads = [threading.Thread(target=waiter, args=(k,)) for k in range(waiters)]
    threads.append(threading.Thread(target=progress))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    stats = parker.statistics()
    assert outcomes == [True] * (waiters * waits_each)
    assert stats.timeouts == 0
    assert stats.parks > 50  # waiters did park: the test tested something
    assert stats.unparks <= stats.parks  # every signal woke at least one parked waiter
    assert stats.unparks < steps  # and advances with nobody parked cost no signal


# ---- asyncio ----------------------------------------------------------------------------


def test_future_already_satisfied_is_done_at_once() -> None:
    async def main() -> None:
        parker = Parker()
        future = parker.register_future(asyncio.get_running_loop(), lambda: True)
        assert future.done()
        assert await future
        assert not parker.waiting

    asyncio.run(main())


def test_future_resolved_by_unpark_from_another_thread() -> None:
    async def main() -> None:
        parker, counter = Parker(), Counter()
        future = parker.register_future(asyncio.get_running_loop(), counter.at_least(3))
        assert parker.waiting

        def progress() -> None:
            for _ in range(3):
                counter.value += 1
                parker.unpark()

        thread = start(progress)
        assert await asyncio.wait_for(future, 5)
        thread.join()
        stats = parker.statistics()
        assert (stats.unparks, stats.futures) == (1, 0)  # one resolution, not three signals
        assert not parker.waiting

    asyncio.run(main())


def test_wait_async_many_targets() -> None:
    async def main() -> None:
        parker, counter = Parker(), Counter()
        targets = [random.Random(7).randrange(1, 500) for _ in range(50)]

        def progress() -> None:
            rng = random.Random(2)
            for _ in range(500):
                counter.value += 1
                parker.unpark()
                if rng.random() < 0.2:
                    time.sleep(rng.random() * 1e-4)

        waits = [parker.wait_async(counter.at_least(t), timeout=5) for t in targets]
        gathered = asyncio.gather(*waits)
        thread = start(progress)
        assert await gathered == [True] * len(targets)
        thread.join()
        assert parker.statistics().futures == 0

    asyncio.run(main())


def test_wait_async_timeout_unregisters() -> None:
    async def main() -> None:
        parker = Parker()
        assert not await parker.wait_async(lambda: False, timeout=0.01)
        stats = parker.statistics()
        assert (stats.timeouts, stats.futures) == (1, 0)
        assert not parker.waiting  # unpark() is free again
        parker.unpark()
        assert parker.statistics().unparks == 0

    asyncio.run(main())


def test_cancelled_future_unregisters() -> None:
    async def main() -> None:
        parker = Parker()
        future = parker.register_future(asyncio.get_running_loop(), lambda: False)
        future.cancel()
        await asyncio.sleep(0)  # done callbacks run on the next loop turn
        assert parker.statistics().futures == 0
        assert not parker.waiting

    asyncio.run(main())


def test_predicate_error_reaches_the_awaiter_not_the_progress_side() -> None:
    async def main() -> None:
        parker, counter = Parker(), Counter()

        def broken() -> bool:
            if counter.value:
                raise ZeroDivisionError
            return False

        future = parker.register_future(asyncio.get_running_loop(), broken)
        counter.value = 1
        parker.unpark()  # must not raise here
        with pytest.raises(ZeroDivisionError):
            await future

    asyncio.run(main())


def test_threads_and_futures_together() -> None:
    async def main() -> None:
        parker, counter = Parker(), Counter()
        results: list[bool] = []
        thread = await asyncio.to_thread(
            lambda: start(lambda: results.append(parker.wait(counter.at_least(2), timeout=5)))
        )
        future = parker.register_future(asyncio.get_running_loop(), counter.at_least(1))
        await asyncio.to_thread(wait_until, lambda: parker.statistics().parked == 1)
        counter.value = 1
        parker.unpark()  # resolves the future; the thread wakes, finds 1 < 2, parks again
        assert await asyncio.wait_for(future, 5)
        counter.value = 2
        parker.unpark()
        await asyncio.to_thread(thread.join, 5)
        assert results == [True]
        assert parker.statistics().futures == 0

    asyncio.run(main())
