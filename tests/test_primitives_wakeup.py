"""Wakeup: the flag protocol step by step, an interleaving model check, a threaded stress."""

from __future__ import annotations

import os
import random
import select
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator

import pytest

from purelink.primitives import Wakeup, WakeupStatistics

HAVE_EVENTFD = hasattr(os, "eventfd")
BACKENDS = [
    pytest.param(
        True,
        id="eventfd",
        marks=pytest.mark.skipif(not hasattr(os, "eventfd"), reason="no eventfd"),
    ),
    pytest.param(False, id="pipe"),
]


@pytest.fixture(params=BACKENDS)
def wakeup(request: pytest.FixtureRequest) -> Iterator[Wakeup]:
    with Wakeup(use_eventfd=request.param) as w:
        yield w


def readable(w: Wakeup) -> bool:
    return bool(select.select([w.fileno()], [], [], 0)[0])


def produce(w: Wakeup) -> None:
    """Exactly what the link's queue() inlines after storing the record."""
    w.pending = True
    if w.sleeping and not w.signaled:
        w.signal()


# ---- the protocol, one step at a time -------------------------------------------------


def test_fresh(wakeup: Wakeup) -> None:
    assert (wakeup.pending, wakeup.sleeping, wakeup.signaled) == (False, False, False)
    assert isinstance(wakeup.fileno(), int)
    assert not readable(wakeup)
    assert wakeup.statistics() == WakeupStatistics(wakeup.backend, 0, 0, 0, 0, 0)


def test_default_backend_is_eventfd_where_available() -> None:
    with Wakeup() as w:
        assert w.backend == ("eventfd" if hasattr(os, "eventfd") else "pipe")


def test_eventfd_demanded_where_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "eventfd", raising=False)
    with pytest.raises(ValueError, match="eventfd"):
        Wakeup(use_eventfd=True)
    with Wakeup() as w:
        assert w.backend == "pipe"


def test_mark_while_awake_does_not_write(wakeup: Wakeup) -> None:
    for _ in range(100):
        produce(wakeup)
        wakeup.mark_and_signal()
    assert wakeup.pending
    assert not readable(wakeup)
    assert wakeup.writes == 0


def test_sleeping_owner_is_written_once(wakeup: Wakeup) -> None:
    assert wakeup.prepare_sleep()
    assert wakeup.sleeping
    produce(wakeup)
    assert wakeup.signaled
    assert readable(wakeup)
    for _ in range(100):
        produce(wakeup)
        wakeup.mark_and_signal()
    assert wakeup.writes == 1

    wakeup.after_wake()
    assert (wakeup.sleeping, wakeup.signaled) == (False, False)
    assert wakeup.pending  # the mark stays until the owner looks
    assert not readable(wakeup)
    stats = wakeup.statistics()
    assert (stats.writes, stats.sleeps, stats.drains, stats.spurious) == (1, 1, 1, 0)


def test_mark_before_sleep_sends_the_owner_back(wakeup: Wakeup) -> None:
    wakeup.begin_look()
    produce(wakeup)  # queued while the owner was sending
    assert not wakeup.prepare_sleep()
    assert not wakeup.sleeping
    wakeup.begin_look()
    assert not wakeup.pending
    assert wakeup.prepare_sleep()
    stats = wakeup.statistics()
    assert (stats.rechecks, stats.sleeps, stats.writes) == (1, 1, 0)


def test_wake_for_another_reason_without_signal(wakeup: Wakeup) -> None:
    assert wakeup.prepare_sleep()
    wakeup.after_wake()  # a socket became readable, or the timer was due
    assert wakeup.statistics().drains == 0
    assert not wakeup.sleeping


def test_late_signal_keeps_the_byte_for_the_next_sleep(wakeup: Wakeup) -> None:
    """A producer checks while the owner sleeps, signals after it woke for another reason."""
    assert wakeup.prepare_sleep()
    wakeup.pending = True
    decided = wakeup.sleeping and not wakeup.signaled
    wakeup.after_wake()  # woken by a socket, not by the producer
    assert decided
    wakeup.signal()  # the producer, late
    wakeup.begin_look()  # the owner takes the item
    assert wakeup.prepare_sleep()
    produce(wakeup)  # signaled is set, so this one does not write ...
    assert wakeup.writes == 1
    assert readable(wakeup)  # ... and need not: the late byte wakes the owner
    wakeup.after_wake()
    assert wakeup.statistics().spurious == 0  # the second mark is pending: not spurious
    wakeup.begin_look()
    assert wakeup.prepare_sleep()
    assert not readable(wakeup)


def test_spurious_wake_is_counted(wakeup: Wakeup) -> None:
    assert wakeup.prepare_sleep()
    wakeup.pending = True
    wakeup.after_wake()
    wakeup.signal()  # late, its item already marked
    wakeup.begin_look()  # the owner took it
    assert wakeup.prepare_sleep()
    wakeup.after_wake()  # the late byte woke it, with nothing to do
    assert wakeup.statistics().spurious == 1


def test_pipe_drains_more_than_one_read() -> None:
    with Wakeup(use_eventfd=False) as w:
        for _ in range(10_000):  # 10 KB in the pipe, more than one 4 KB read
            w.signal()
        assert w.prepare_sleep()
        w.after_wake()
        assert not readable(w)
        assert w.writes == 10_000


def test_close_is_idempotent_and_silences_producers(wakeup: Wakeup) -> None:
    wakeup.close()
    wakeup.close()
    assert wakeup.closed
    produce(wakeup)
    wakeup.signal()
    assert wakeup.writes == 0  # no write to a closed fd (its number may be reused)
    assert "closed=True" in repr(wakeup)


def test_statistics_is_a_frozen_snapshot(wakeup: Wakeup) -> None:
    stats = wakeup.statistics()
    assert wakeup.prepare_sleep()
    assert stats.sleeps == 0
    with pytest.raises(AttributeError):
        stats.sleeps = 1  # type: ignore[misc]


# ---- a model check of every interleaving of the flag steps ------------------------------
#
# Each actor is a generator that performs one load or store of the real Wakeup per step
# and yields; a scheduler picks who runs next. Under the GIL a thread can be switched
# out between any two of these steps, so exploring schedules explores what the threads
# can do. The owner's after_wake() is split as the code does it: drain, then clear.

GOOD_AFTER_WAKE = ("drain", "unsleep", "unsignal")
BAD_AFTER_WAKE = ("unsleep", "unsignal", "drain")  # clear first: shown to lose a wakeup


class Model:
    def __init__(self, producers: int, items: int, after_wake: tuple[str, ...]) -> None:
        self.w = Wakeup()
        self.work: deque[int] = deque()
        self.total = producers * items
        self.taken = 0
        self.in_poll = False
        self.after_wake = after_wake
        self.actors: dict[str, Generator[None, None, None]] = {"owner": self.owner()}
        for k in range(producers):
            self.actors[f"p{k}"] = self.producer(items)

    def producer(self, items: int) -> Generator[None, None, None]:
        w = self.w
        for i in range(items):
            self.work.append(i)
            yield
            w.pending = True
            yield
            if not w.sleeping:
                yield
                continue
            yield
            if w.signaled:
                yield
                continue
            yield
            w.signaled = True  # signal(), split at its two effects
            yield
            w._write()
            yield

    def owner(self) -> Generator[None, None, None]:
        w = self.w
        while True:
            w.pending = False  # begin_look
            yield
            while self.work:
                self.work.popleft()
                self.taken += 1
            if self.taken == self.total:
                return
            yield
            w.sleeping = True  # prepare_sleep
            yield
            if w.pending:
                w.sleeping = False
                yield
                continue
            self.in_poll = True
            yield  # the scheduler resumes the owner once the fd is readable (or "other")
            self.in_poll = False
            for step in self.after_wake:
                if step == "drain":
                    w._drain()
                elif step == "unsleep":
                    w.sleeping = False
                else:
                    w.signaled = False
                yield

    def run(self, choose: Callable[[list[str]], str], other_wakes: int = 2) -> str:
        """Step actors until all are done: "ok", or "lost" if the owner sleeps forever."""
        try:
            for _ in range(10_000):
                options = [n for n in self.actors if n != "owner"]
                if "owner" in self.actors and (not self.in_poll or readable(self.w)):
                    options.append("owner")
                if self.in_poll and other_wakes and len(self.actors) > 1:
                    options.append("other")  # a socket or the timer wakes the owner
                if not options:
                    return "lost" if "owner" in self.actors else "ok"
                name = choose(options)
                if name == "other":
                    other_wakes -= 1
                    name = "owner"
                try:
                    next(self.actors[name])
                except StopIteration:
                    del self.actors[name]
            raise AssertionError("the model did not finish")
        finally:
            self.w.close()


class BoundedChooser:
    """Picks the next actor for one run of explore(): a prefix, then run on."""

    def __init__(self, prefix: tuple[str, ...], bound: int, todo: list[tuple[str, ...]]) -> None:
        self.prefix, self.bound, self.todo = prefix, bound, todo
        self.trace: list[str] = []
        self.last: str | None = None
        self.preemptions = 0

    def __call__(self, options: list[str]) -> str:
        run_on = self.last if self.last in options else None
        if len(self.trace) < len(self.prefix):
            pick = self.prefix[len(self.trace)]
        else:
            pick = run_on or options[0]
            if self.preemptions + (run_on is not None) <= self.bound:
                self.todo.extend((*self.trace, other) for other in options if other != pick)
        if run_on is not None and pick != run_on:
            self.preemptions += 1
        self.trace.append(pick)
        self.last = "owner" if pick == "other" else pick
        return pick


def explore(make: Callable[[], Model], bound: int) -> tuple[int, list[str] | None]:
    """Run every schedule with at most `bound` preemptions (CHESS-style bounded search).

    A preemption is switching away from an actor that could have run on; switches
    forced by an actor finishing or blocking in poll are free. Each schedule runs
    from scratch, following a prefix and then the default (run on) choice, and
    queues its alternatives. Returns (schedules run, the first losing schedule).
    """
    schedules = 0
    todo: list[tuple[str, ...]] = [()]
    while todo:
        chooser = BoundedChooser(todo.pop(), bound, todo)
        schedules += 1
        if make().run(chooser) == "lost":
            return schedules, chooser.trace
    return schedules, None


def test_model_every_schedule_with_two_preemptions_is_safe() -> None:
    schedules, lost = explore(lambda: Model(2, 1, GOOD_AFTER_WAKE), bound=2)
    assert lost is None
    assert schedules > 10_000


@pytest.mark.slow
@pytest.mark.parametrize(("producers", "items", "bound"), [(2, 1, 3), (2, 2, 2), (3, 1, 2)])
def test_model_bigger_bounded_searches_are_safe(producers: int, items: int, bound: int) -> None:
    _, lost = explore(lambda: Model(producers, items, GOOD_AFTER_WAKE), bound)
    assert lost is None, lost


def test_model_random_deep_schedules_are_safe() -> None:
    """Beyond the bound: 3 producers of 3 items, 2,000 seeded uniform schedules."""
    for seed in range(2_000):
        rng = random.Random(seed)
        model = Model(3, 3, GOOD_AFTER_WAKE)
        assert model.run(rng.choice, other_wakes=4) == "ok", seed
        assert model.taken == model.total


def test_model_search_finds_the_loss_of_clearing_before_draining() -> None:
    """The checker has teeth: the order the header warns against loses a wakeup."""
    _, lost = explore(lambda: Model(2, 1, BAD_AFTER_WAKE), bound=2)
    assert lost is not None


LOSING_SCHEDULE = (
    ["owner"] * 4  # look, take nothing, sleeping = True, pending is False: poll
    + ["p0"] * 4  # append, pending = True, sees sleeping, sees not signaled ...
    + ["other"]  # ... and is switched out; a socket wakes the owner: after_wake step 1
    + ["owner"]  # after_wake step 2
    + ["p0"] * 3  # signaled = True, write, done
    + ["owner"] * 5  # after_wake step 3, look, take item 0, sleeping = True, poll
    + ["p1"] * 6  # append, pending = True, sees sleeping and signaled: no write
)


def scripted(script: list[str]) -> Callable[[list[str]], str]:
    steps = iter(script)

    def choose(options: list[str]) -> str:
        wanted = next(steps, None)
        return wanted if wanted in options else options[0]

    return choose


def test_model_loses_on_the_documented_schedule_when_clearing_first() -> None:
    model = Model(2, 1, BAD_AFTER_WAKE)
    assert model.run(scripted(LOSING_SCHEDULE)) == "lost"
    assert model.taken == 1


def test_model_same_schedule_is_safe_with_drain_first() -> None:
    model = Model(2, 1, GOOD_AFTER_WAKE)
    assert model.run(scripted(LOSING_SCHEDULE)) == "ok"


# ---- real threads ---------------------------------------------------------------------


@pytest.fixture
def eager_switching() -> Iterator[None]:
    """Switch threads every 10 us instead of 5 ms, to visit more interleavings."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def run_owner_and_producers(
    w: Wakeup, producers: int, per_producer: int, pause: float
) -> tuple[list[tuple[int, int]], int]:
    """The owner loop of the link against `producers` threads; returns (taken, timeouts)."""
    work: deque[tuple[int, int]] = deque()
    taken: list[tuple[int, int]] = []
    timeouts = 0
    total = producers * per_producer

    def owner() -> None:
        nonlocal timeouts
        poller = select.poll()
        poller.register(w.fileno(), select.POLLIN)
        while True:
            w.begin_look()
            while work:
                taken.append(work.popleft())
            if len(taken) == total:
                return
            if w.prepare_sleep():
                if not poller.poll(5_000):  # long: only a lost wakeup lets it expire
                    timeouts += 1
                w.after_wake()

    def producer(k: int) -> None:
        rng = random.Random(k)
        for i in range(per_producer):
            work.append((k, i))
            w.pending = True
            if w.sleeping and not w.signaled:
                w.signal()
            if pause and rng.random() < 0.5:
                time.sleep(rng.random() * pause)  # load shaping: let the owner fall asleep

    threads = [threading.Thread(target=owner)]
    threads += [threading.Thread(target=producer, args=(k,)) for k in range(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    return taken, timeouts


@pytest.mark.usefixtures("eager_switching")
@pytest.mark.parametrize("use_eventfd", BACKENDS)
def test_stress_no_lost_wakeup(use_eventfd: bool) -> None:
    producers, per_producer = 4, 4_000
    with Wakeup(use_eventfd) as w:
        taken, timeouts = run_owner_and_producers(w, producers, per_producer, pause=1e-4)
        stats = w.statistics()
    assert timeouts == 0
    assert sorted(taken) == [(k, i) for k in range(producers) for i in range(per_producer)]
    for k in range(producers):  # each producer's items in its order
        assert [i for p, i in taken if p == k] == list(range(per_producer))
    assert stats.sleeps > 100  # the owner did fall asleep often: the test tested something
    # One write per sleep, but for the benign double signal (two producers both see the
    # owner asleep and unsignaled) and writes that land during a recheck.
    assert stats.writes <= stats.sleeps + stats.rechecks + producers * 10


@pytest.mark.parametrize("use_eventfd", BACKENDS)
def test_fast_producers_write_far_less_than_once_per_item(use_eventfd: bool) -> None:
    producers, per_producer = 2, 20_000
    with Wakeup(use_eventfd) as w:
        taken, timeouts = run_owner_and_producers(w, producers, per_producer, pause=0)
        stats = w.statistics()
    assert timeouts == 0
    assert len(taken) == producers * per_producer
    assert stats.writes <= stats.sleeps + stats.rechecks + producers * 10
    assert stats.writes * 20 < producers * per_producer
