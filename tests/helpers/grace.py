"""Helpers for the grace-period tests of the product (tests/primitives/test_grace.py)
and of the benchmark's unpatched variants (bench/tests/test_grace_variants.py):
a reclaimer on a thread of its own, the trace as steps, and the guarantee under load."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from purelink.primitives import GraceDomain

__all__ = ["Box", "Reclaimer", "nothing_freed_under_load", "steps", "wait_until"]


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


class Box:
    """A shared thing readers look at; `freed` is set once it is retired."""

    def __init__(self, value: int) -> None:
        self.value = value
        self.freed = False


def nothing_freed_under_load(domain: GraceDomain) -> None:
    """4 readers hold the current box between quiescent states; the updater
    frees the old box only after synchronize(). A reader must never see a freed box."""
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
