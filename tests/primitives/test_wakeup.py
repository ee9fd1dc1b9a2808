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
    if w.armed:
        w.signal()


# ---- the protocol, one step at a time -------------------------------------------------


def test_fresh(wakeup: Wakeup) -> None:
    assert (wakeup.pending, wakeup.armed) == (False, False)
    assert isinstance(wakeup.fileno(), int)
    assert not readable(wakeup)
    assert wakeup.statistics() == WakeupStatistics(wakeup.backend, 0, 0, 0, 0, 0)


def test_backend_choice() -> None:
    with Wakeup() as w:
        assert w.backend == ("eventfd" if HAVE_EVENTFD else "pipe")
    if not HAVE_EVENTFD:
        with pytest.raises(ValueError):
            Wakeup(use_eventfd=True)
    with Wakeup(use_eventfd=False) as w:
        assert w.backend == "pipe"


def test_item_while_awake_does_not_write(wakeup: Wakeup) -> None:
    wakeup.begin_look()
    for _ in range(100):
        produce(wakeup)
        wakeup.mark_and_signal()
    assert wakeup.pending
    assert not readable(wakeup)
    assert wakeup.writes == 0


def test_sleeping_owner_is_written_once(wakeup: Wakeup) -> None:
    assert wakeup.prepare_sleep(lambda: False)
    assert wakeup.armed
    produce(wakeup)
    assert not wakeup.armed  # this producer took on the wake
    assert readable(wakeup)
    for _ in range(100):
        produce(wakeup)
        wakeup.mark_and_signal()
    assert wakeup.writes == 1
    wakeup.after_wake(lambda: True)
    assert not wakeup.armed
    assert wakeup.pending  # the mark stays until the owner looks
    assert not readable(wakeup)
    stats = wakeup.statistics()
    assert (stats.writes, stats.sleeps, stats.drains, stats.spurious) == (1, 1, 1, 0)


def test_work_seen_before_sleep_sends_the_owner_back(wakeup: Wakeup) -> None:
    items = [1]  # stored while the owner was sending
    assert not wakeup.prepare_sleep(lambda: bool(items))
    assert not wakeup.armed
    items.clear()  # the owner takes it
    assert wakeup.prepare_sleep(lambda: bool(items))
    stats = wakeup.statistics()
    assert (stats.rechecks, stats.sleeps, stats.writes) == (1, 1, 0)


def test_mark_before_sleep_sends_the_owner_back(wakeup: Wakeup) -> None:
    wakeup.begin_look()
    wakeup.mark_and_signal()  # a producer whose work the owner cannot see
    assert not wakeup.prepare_sleep()
    assert not wakeup.armed
    wakeup.begin_look()
    assert not wakeup.pending
    assert wakeup.prepare_sleep()
    stats = wakeup.statistics()
    assert (stats.rechecks, stats.sleeps, stats.writes) == (1, 1, 0)


def test_wake_for_another_reason_without_signal(wakeup: Wakeup) -> None:
    assert wakeup.prepare_sleep()
    wakeup.after_wake()  # a socket became readable, or the timer was due
    assert wakeup.statistics().drains == 0
    assert not wakeup.armed


def test_late_signal_keeps_the_byte_for_the_next_sleep(wakeup: Wakeup) -> None:
    """A producer sees the owner armed, and signals after it woke for another reason."""
    items: list[int] = []
    assert wakeup.prepare_sleep(lambda: bool(items))
    items.append(1)
    decided = wakeup.armed
    wakeup.after_wake(lambda: bool(items))  # woken by a socket, not by the producer
    assert decided
    items.clear()  # the owner takes the item
    assert wakeup.prepare_sleep(lambda: bool(items))
    wakeup.signal()  # the producer, late: it disarms the new sleep and writes
    items.append(2)
    produce(wakeup)  # not armed any more, so this one does not write ...
    assert wakeup.writes == 1
    assert readable(wakeup)  # ... and need not: the late byte wakes the owner
    wakeup.after_wake(lambda: bool(items))
    assert wakeup.statistics().spurious == 0  # item 2 is there: not spurious
    items.clear()
    assert wakeup.prepare_sleep(lambda: bool(items))
    assert not readable(wakeup)


def test_spurious_wake_is_counted(wakeup: Wakeup) -> None:
    items: list[int] = []
    assert wakeup.prepare_sleep(lambda: bool(items))
    items.append(1)
    wakeup.after_wake(lambda: bool(items))
    items.clear()  # the owner took it
    assert wakeup.prepare_sleep(lambda: bool(items))
    wakeup.signal()  # late, its item already taken
    wakeup.after_wake(lambda: bool(items))  # the late byte woke it, with nothing to do
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
    assert wakeup.prepare_sleep()
    wakeup.close()
    wakeup.close()
    assert wakeup.closed
    assert not wakeup.armed  # an inlined producer check calls nothing
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
# can do. The work is the link's ring: a producer takes a slot (its seq), fills it in a
# later step (a taken, unfilled slot stops the owner), and sets no mark. Three
# protocols: the shipped one, and two wrong orders the header names.

GOOD = "good"  # owner: arm, then look; producer: store, load armed, disarm, write
LOOK_THEN_ARM = "look-then-arm"  # the owner looks at the work before arming: loses
WRITE_THEN_DISARM = "write-then-disarm"  # signal() writes before disarming: loses
AFTER_WAKE_ORDERS = (("drain", "disarm"), ("disarm", "drain"))  # both safe


class Model:
    def __init__(
        self,
        producers: int,
        items: int,
        protocol: str = GOOD,
        after_wake: tuple[str, ...] = ("drain", "disarm"),
    ) -> None:
        self.w = Wakeup()
        # the link's ring: a producer takes a slot (its seq) and fills it in a later
        # step; the owner takes filled slots in order and stops at an empty one
        self.slots: list[int | None] = []
        self.total = producers * items
        self.taken = 0
        self.in_poll = False
        self.protocol = protocol
        self.after_wake = after_wake
        self.actors: dict[str, Generator[None, None, None]] = {"owner": self.owner()}
        for k in range(producers):
            self.actors[f"p{k}"] = self.producer(items)

    def producer(self, items: int) -> Generator[None, None, None]:
        w = self.w
        for i in range(items):
            seq = len(self.slots)
            self.slots.append(None)  # take a seq (the islice's next())
            yield
            self.slots[seq] = i  # store the item in its slot
            yield
            if not w.armed:
                yield
                continue
            yield
            if self.protocol == WRITE_THEN_DISARM:
                w._write()
                yield
                w.armed = False
            else:
                w.armed = False  # signal(), split at its two effects
                yield
                w._write()
            yield

    def owner(self) -> Generator[None, None, None]:
        w = self.w
        slots = self.slots

        def next_filled() -> bool:  # the link's has_next(): is the next slot filled?
            return self.taken < len(slots) and slots[self.taken] is not None

        while True:
            while next_filled():
                self.taken += 1
            if self.taken == self.total:
                return
            yield
            if self.protocol == LOOK_THEN_ARM:
                seen = next_filled()
                yield
                w.armed = True
                yield
            else:
                w.armed = True  # prepare_sleep: arm ...
                yield
                seen = next_filled()  # ... then look (ready())
            if seen:
                w.armed = False
                yield
                continue
            self.in_poll = True
            yield  # the scheduler resumes the owner once the fd is readable (or "other")
            self.in_poll = False
            for step in self.after_wake:
                if step == "drain":
                    w._drain()
                else:
                    w.armed = False
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


@pytest.mark.parametrize("after_wake", AFTER_WAKE_ORDERS, ids="-".join)
def test_model_every_schedule_with_two_preemptions_is_safe(after_wake: tuple[str, ...]) -> None:
    schedules, lost = explore(lambda: Model(2, 1, GOOD, after_wake), bound=2)
    assert lost is None
    assert schedules > 1_000


@pytest.mark.slow
@pytest.mark.parametrize(("producers", "items", "bound"), [(2, 1, 3), (2, 2, 2), (3, 1, 2)])
def test_model_bigger_bounded_searches_are_safe(producers: int, items: int, bound: int) -> None:
    _, lost = explore(lambda: Model(producers, items), bound)
    assert lost is None, lost


def test_model_random_deep_schedules_are_safe() -> None:
    """Beyond the bound: 3 producers of 3 items, 2,000 seeded uniform schedules."""
    for seed in range(2_000):
        rng = random.Random(seed)
        model = Model(3, 3, GOOD, AFTER_WAKE_ORDERS[seed % 2])
        assert model.run(rng.choice, other_wakes=4) == "ok", seed
        assert model.taken == model.total


@pytest.mark.parametrize("protocol", [LOOK_THEN_ARM, WRITE_THEN_DISARM])
def test_model_search_finds_the_loss_of_each_wrong_order(protocol: str) -> None:
    """The checker has teeth: each order the header warns against loses a wakeup."""
    _, lost = explore(lambda: Model(2, 1, protocol), bound=2)
    assert lost is not None


def scripted(script: list[str]) -> Callable[[list[str]], str]:
    steps = iter(script)

    def choose(options: list[str]) -> str:
        wanted = next(steps, None)
        return wanted if wanted in options else options[0]

    return choose


def test_model_write_then_disarm_loses_on_a_documented_schedule() -> None:
    """A producer writes, the owner wakes for its byte, re-arms and sleeps; the
    producer's late `armed = False` then tells the next producer a write is coming
    when none is."""
    script = (
        ["owner", "owner", "owner"]  # take nothing, arm, look: nothing; poll
        + ["p0", "p0", "p0"]  # store item 0, sees armed, writes (not yet disarmed)
        + ["owner"] * 4  # wakes, drains, disarms; takes item 0; arms
        + ["owner", "owner"]  # looks: nothing; poll
        + ["p0"]  # the late disarm
        + ["p1"] * 3  # store item 1, sees not armed: no write
    )
    model = Model(2, 1, WRITE_THEN_DISARM)
    assert model.run(scripted(script)) == "lost"
    model = Model(2, 1, GOOD)
    assert model.run(scripted(script)) == "ok"


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
            while work:
                taken.append(work.popleft())
            if len(taken) == total:
                return
            if w.prepare_sleep(lambda: bool(work)):
                if not poller.poll(5_000):  # long: only a lost wakeup lets it expire
                    timeouts += 1
                w.after_wake(lambda: bool(work))

    def producer(k: int) -> None:
        rng = random.Random(k)
        for i in range(per_producer):
            work.append((k, i))
            if w.armed:
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
