# Spin briefly, then park; wake only a waiter that waits, once per period
# (docs/design.md, mechanism 2).
#
# Prior art: Paolo Bonzini, "[PATCH] urcu-qsbr: avoid useless futex wakeups and
# burning CPU for long grace periods" (liburcu, ltt-dev). There the grace-period
# waiter busy-checks RCU_QS_ACTIVE_ATTEMPTS times, then sets each reader's `waiting`
# flag and sleeps on a futex; a reader passing a quiescent state signals the futex
# only if its `waiting` flag is set, and clears it, so a reader signals at most once
# per grace period and never when nobody sleeps (n_updates 302 -> 408 in rcutorture).
# trio's `_parking_lot.py` for the shape: park, unpark, a statistics() snapshot.
#
# The mapping:
#   RCU_QS_ACTIVE_ATTEMPTS busy checks  -> `spins` predicate checks in wait()
#   reader->waiting = 1; futex wait       -> waiting = True; re-check; Condition.wait()
#   wake_up_gp(): if waiting: clear, wake -> unpark(): if waiting: _signal() clears, wakes
# A "period" is the time from a waiter announcing itself to the first signal after it;
# a waiter that wakes and still cannot go announces itself again: a new period.
#
# Why no wakeup is lost. The progress side changes its state, then loads `waiting`;
# a waiter stores `waiting = True` (under the lock), then evaluates its predicate
# (reads the state) still under the lock, then waits on the Condition, which releases
# the lock atomically. Dekker's pattern again (see wakeup.py for what is assumed of
# the interpreter): either the waiter's re-check sees the new state, or the progress
# side sees `waiting` and takes the lock, which it can only get once the waiter is
# inside Condition.wait() (or gone), so its notify reaches it.
#
# Several waiters share one flag: any of them parking sets it, one signal wakes them
# all (notify_all), and each re-checks its own predicate; those still unsatisfied set
# the flag again. When the last waiter leaves by timeout the flag is cleared, so a
# later unpark() costs a single attribute load again.
#
# Futures (asyncio): a registered future is a waiter that cannot re-announce itself,
# so while any are registered `waiting` stays True and each unpark() evaluates their
# predicates on the progress thread (no syscall); it resolves a future, through
# loop.call_soon_threadsafe (one write to the loop's self-pipe), only when its
# predicate holds: once per future.
#
# Spinning, measured (CPython 3.11, 2 cores; a progress thread sleeping 0-50 us in a
# GIL-releasing call, then advancing a counter; 3,000 waits):
#   park at once:             wake p50 12-15 us, p99 30-40 us, waiter CPU  9 us/wait
#   100 or 1,000 bare checks: 0 % satisfied by spinning (the predicate cannot change
#                             while the spinner holds the GIL), CPU 9 / 40-60 us/wait
#   time.sleep(0) between:    each one is a ~76 us timer-slack nap, not a yield: p99
#                             70-83 us, CPU 21-30 us/wait
#   os.sched_yield() between: releases the GIL (0.55 us), satisfied 1-99 %, but CPU
#                             61-120 us/wait for no better latency
# So checks are bare (nothing between them) and, with the GIL, `spins` defaults to 1:
# check, then park. On a free-threaded build the progress side can run while we spin,
# and `spins` defaults to 100 as in liburcu.

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where it is used: asyncio costs ~25 ms to import, and
    import asyncio  # a process that never awaits a link should not pay for it

__all__ = ["DEFAULT_SPINS", "Parker", "ParkerStatistics"]

Predicate = Callable[[], bool]


def _gil_enabled() -> bool:
    is_enabled: Callable[[], bool] | None = getattr(sys, "_is_gil_enabled", None)
    return True if is_enabled is None else is_enabled()


DEFAULT_SPINS = 1 if _gil_enabled() else 100
"""Predicate checks before parking: 1 under the GIL (spinning cannot see progress), else 100."""


@dataclass(frozen=True, slots=True)
class ParkerStatistics:
    """A snapshot of a Parker's counters."""

    waits: int
    """wait() calls."""
    spun: int
    """wait() calls satisfied while spinning, without taking the lock."""
    parks: int
    """Times a thread blocked on the Condition (one wait() may park more than once)."""
    futile_wakes: int
    """Parked threads woken whose own predicate was still false (several waiters)."""
    timeouts: int
    """wait() calls that returned False."""
    unparks: int
    """Signals sent: one per notify of parked threads, one per future resolved."""
    parked: int
    """Threads parked right now."""
    futures: int
    """Futures registered right now."""


@dataclass(slots=True)
class _Registration:
    loop: asyncio.AbstractEventLoop
    predicate: Predicate


def _settle(future: asyncio.Future[bool], error: Exception | None) -> None:
    """Runs on the future's loop: resolve it unless it was cancelled meanwhile."""
    if future.done():
        return
    if error is None:
        future.set_result(True)
    else:
        future.set_exception(error)


class Parker:
    """Waiters spin briefly, then park; unpark() signals only parked waiters, once.

    `waiting` is a plain attribute: unpark() reads it without a lock, and that read
    is all it costs when nobody waits.
    """

    def __init__(self, spins: int | None = None) -> None:
        self.spins = DEFAULT_SPINS if spins is None else max(1, spins)
        self.waiting = False
        self._cond = threading.Condition(threading.Lock())
        self._threads_unsignaled = False  # a parked thread awaits this period's signal
        self._parked = 0
        self._futures: dict[asyncio.Future[bool], _Registration] = {}
        self._waits = 0
        self._spun = 0
        self._parks = 0
        self._futile_wakes = 0
        self._timeouts = 0
        self._unparks = 0

    # ---- progress side ------------------------------------------------------------

    def unpark(self) -> None:
        """Call after making progress. Free unless somebody waits."""
        if self.waiting:
            self._signal()

    def _signal(self) -> None:
        settle: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[bool], Exception | None]] = []
        with self._cond:
            if self._threads_unsignaled:
                self._threads_unsignaled = False
                self._unparks += 1
                self._cond.notify_all()
            for future, registration in list(self._futures.items()):
                try:
                    if not registration.predicate():
                        continue
                    error = None
                except Exception as exc:  # the predicate's failure is the awaiter's, not ours
                    error = exc
                del self._futures[future]
                settle.append((registration.loop, future, error))
            self._unparks += len(settle)
            self.waiting = bool(self._futures)
        for loop, future, error in settle:  # outside the lock: this writes the loop's self-pipe
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits it any more
                loop.call_soon_threadsafe(_settle, future, error)

    # ---- waiter side (threads) ----------------------------------------------------

    def wait(self, predicate: Predicate, timeout: float | None = None) -> bool:
        """Return True once predicate() is true, False if `timeout` seconds pass first."""
        self._waits += 1
        for _ in range(self.spins):
            if predicate():
                self._spun += 1
                return True
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._parked += 1
            try:
                while True:
                    self._threads_unsignaled = True
                    self.waiting = True  # announce, then re-check: the header's Dekker pair
                    if predicate():
                        return True
                    if deadline is None:
                        remaining = None
                    else:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            self._timeouts += 1
                            return False
                    self._parks += 1
                    notified = self._cond.wait(remaining)
                    if predicate():
                        return True
                    if notified:
                        self._futile_wakes += 1
            finally:
                self._parked -= 1
                if self._parked == 0:
                    self._threads_unsignaled = False
                    self.waiting = bool(self._futures)

    # ---- waiter side (asyncio) ------------------------------------------------------

    def register_future(
        self, loop: asyncio.AbstractEventLoop, predicate: Predicate
    ) -> asyncio.Future[bool]:
        """A future of `loop` that becomes True once predicate() holds after an unpark().

        Call it on the loop's thread. `predicate` is then also called on the progress
        thread, under the Parker's lock: it must be cheap, thread-safe and not block.
        Cancelling the future (asyncio.wait_for does on timeout) unregisters it.
        """
        future: asyncio.Future[bool] = loop.create_future()
        if predicate():
            future.set_result(True)
            return future
        with self._cond:
            self._futures[future] = _Registration(loop, predicate)
            self.waiting = True  # announce, then re-check, as wait() does
            ready = predicate()
            if ready:
                del self._futures[future]
                self.waiting = self._threads_unsignaled or bool(self._futures)
        if ready:
            future.set_result(True)
        else:
            future.add_done_callback(self._forget)
        return future

    async def wait_async(self, predicate: Predicate, timeout: float | None = None) -> bool:
        """The asyncio form of wait(): True once predicate() holds, False on timeout."""
        import asyncio  # noqa: PLC0415 -- see the imports: already loaded by any caller

        future = self.register_future(asyncio.get_running_loop(), predicate)
        if future.done():
            return future.result()
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            if predicate():  # it came true as the deadline passed: as wait() would, say so
                return True
            self._timeouts += 1
            return False

    def _forget(self, future: asyncio.Future[bool]) -> None:
        with self._cond:
            if self._futures.pop(future, None) is not None:
                self.waiting = self._threads_unsignaled or bool(self._futures)

    # ---- observation ------------------------------------------------------------------

    def statistics(self) -> ParkerStatistics:
        with self._cond:
            return ParkerStatistics(
                waits=self._waits,
                spun=self._spun,
                parks=self._parks,
                futile_wakes=self._futile_wakes,
                timeouts=self._timeouts,
                unparks=self._unparks,
                parked=self._parked,
                futures=len(self._futures),
            )

    def __repr__(self) -> str:
        return (
            f"<Parker spins={self.spins} waiting={self.waiting} parked={self._parked} "
            f"futures={len(self._futures)}>"
        )
