# QSBR grace periods: retire shared things without slowing their readers
# (docs/store.md; the waiting side is mechanism 2 of docs/design.md).
#
# Prior art: liburcu's QSBR flavour (Desnoyers et al., "User-Level Implementations
# of Read-Copy Update", 2012) and Paolo Bonzini, "[PATCH] urcu-qsbr: avoid useless
# futex wakeups and burning CPU for long grace periods" (ltt-dev, 2011), which this
# file follows line by line:
#
#   update_counter_and_wait()                      -> GraceDomain.synchronize()
#     readers with ctr == gp_ctr leave the list      pending = [r ... r.ctr not in (0, gp)]
#     wait_loops >= RCU_QS_ACTIVE_ATTEMPTS:          after spins - 1 busy checks, _park():
#       gp_futex = -1                                  self.futex = -1
#       for each reader still in registry:             _raise_flags(): each still pending:
#           reader->waiting = 1                            reader.waiting = True
#     list empty: gp_futex = 0, done                 none pending after that: futex = 0, done
#     else wait_gp(): futex wait while -1            else _wait_gp(): Condition wait while -1
#   _rcu_quiescent_state(): ctr = gp_ctr; wake_up_gp()    GraceReader.quiescent()
#   wake_up_gp(): if waiting: waiting = 0;         quiescent(): if self.waiting: _signal():
#     if gp_futex != -1 return;                      waiting = False; futex != -1: return;
#     gp_futex = 0; FUTEX_WAKE                       under the lock: futex = 0; notify
#   rcu_thread_offline()/online(): ctr = 0 / gp    offline()/online(), blocked()
#
# The patch changed two things, and this file is the patched version of both:
#
# 1. The waiter.  Unpatched, update_counter_and_wait() took the futex path exactly
#    once, at wait_loops == RCU_QS_ACTIVE_ATTEMPTS: it parked at most once per grace
#    period and, once woken, busy-checked (caa_cpu_relax()) until the last reader
#    came in -- "burning CPU for long grace periods".  Patched, it announces itself
#    and parks again after every wake.
# 2. The readers.  Unpatched, wake_up_gp() woke whenever gp_futex == -1 (and set it
#    to 0 first, so one wake per park); patched, only a reader whose `waiting` flag
#    the parked waiter raised, i.e. one still pending, once per grace period.
#    Without the flags, a waiter that parks again would be woken by readers already
#    counted.
#
# The unpatched waiter and readers live in bench/grace.py, which measures them
# against these (rcutorture, 10 readers and 1 updater: 302 -> 408 updates for the
# whole patch): a GraceDomain subclass that overrides `_park` (the waiter),
# `_raise_flags` and `reader_type` (the readers) and runs the rest of this file as
# it is.  One refinement: the patch raises the flags before it drops the readers
# seen quiescent, so a reader that just signalled may be flagged once more and
# signal twice; here the readers seen quiescent are dropped first, so each reader
# signals at most once per grace period.
#
# Theory of operation.  `gp` is the grace-period counter, bumped by synchronize();
# a reader's `ctr` is 0 when offline, else the `gp` it saw at its last quiescent state
# (or when it came online).  Whoever retires a thing first unpublishes it (readers that
# look now cannot find it), then calls synchronize(): once every reader that was online
# has stored the new `gp` or gone offline, none can still hold a reference taken before
# the unpublish, and the thing may be freed (a segment closed and unlinked).
#
# Why no wakeup is lost: the waiter stores futex = -1 and the flags, then loads the
# counters; a reader stores its counter, then loads its flag.  Under the interpreter's
# sequentially consistent attribute stores and loads (see wakeup.py for what is assumed)
# either the waiter sees the new counter, or the reader sees its flag and takes the lock,
# which it gets only once the waiter is inside Condition.wait() (or saw futex != -1 and
# did not wait), so its notify reaches it.
#
# Rules for readers (as in liburcu): a reader is one handle used by one thread at a
# time; it holds no reference to a retired thing across quiescent(), offline() or a
# blocking call made inside `with reader.blocked():`; it never calls synchronize()
# while online (that would wait for itself).  A registered reader that is online and
# never passes a quiescent state stalls every grace period: unregister it.
#
# Spinning: under the GIL a spinning waiter cannot see progress (parker.py measured it),
# so `spins` defaults to parker.DEFAULT_SPINS: 1 with the GIL, 100 (liburcu's
# RCU_QS_ACTIVE_ATTEMPTS) on a free-threaded build.  Nothing runs between two busy
# checks (liburcu's caa_cpu_relax() is a pause instruction) unless `relax` is given.

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType

from .parker import DEFAULT_SPINS

__all__ = ["GraceDomain", "GraceEvent", "GraceReader", "GraceStatistics"]


@dataclass(frozen=True, slots=True)
class GraceStatistics:
    """A snapshot of a GraceDomain's counters."""

    grace_periods: int
    """synchronize() calls that completed."""
    spins: int
    """Busy checks of the readers that found some still pending (before parking)."""
    parks: int
    """Times the waiter blocked (one grace period may park more than once)."""
    unparks: int
    """Signals readers sent to a parked waiter (lock taken, notify)."""
    timeouts: int
    """synchronize() calls that gave up at their timeout."""
    readers: int
    """Readers registered now."""


@dataclass(frozen=True, slots=True)
class GraceEvent:
    """One step of a grace period, recorded when the domain keeps a trace (tests)."""

    gp: int
    """The grace period it belongs to (the value of `gp` synchronize() waits for)."""
    who: str
    """"reclaimer", or the name of the reader."""
    what: str
    """"begin", "park", "wake", "end" or "timeout" (the reclaimer); "signal" (a reader)."""


class GraceReader:
    """A registered reader: announce quiescent states; go offline while blocked.

    `ctr` and `waiting` are plain attributes: quiescent() is one store and one
    load when nobody waits.
    """

    __slots__ = ("_domain", "ctr", "name", "signals", "waiting")

    def __init__(self, domain: GraceDomain, name: str, online: bool) -> None:
        self._domain = domain
        self.name = name
        """Who this is, in traces."""
        self.ctr = domain.gp if online else 0
        """0 while offline, else the grace-period counter seen at the last quiescent state."""
        self.waiting = False
        """Set by a parked synchronize() while this reader is pending; cleared on signal."""
        self.signals = 0
        """Signals this reader sent."""

    @property
    def domain(self) -> GraceDomain:
        """The domain this reader is registered with."""
        return self._domain

    def quiescent(self) -> None:
        """Announce that this reader holds no reference taken before now."""
        self.ctr = self._domain.gp
        if self.waiting:
            self._signal()

    def offline(self) -> None:
        """Stop taking part in grace periods (an extended quiescent state)."""
        self.ctr = 0
        if self.waiting:
            self._signal()

    def online(self) -> None:
        """Take part again; references may be taken from now on."""
        self.ctr = self._domain.gp

    @contextmanager
    def blocked(self) -> Iterator[None]:
        """`with reader.blocked(): block()` -- offline for the duration."""
        self.offline()
        try:
            yield
        finally:
            self.online()

    def unregister(self) -> None:
        """Leave the domain for good (offline first). Idempotent."""
        self.offline()
        self._domain.unregister(self)

    def _signal(self) -> None:
        self.waiting = False
        self._domain.wake(self)

    def __enter__(self) -> GraceReader:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.unregister()

    def __repr__(self) -> str:
        return f"<GraceReader {self.name!r} ctr={self.ctr} waiting={self.waiting}>"


class GraceDomain:
    """Readers register and announce quiescent states; synchronize() waits until
    every reader online when it started has passed one (spin, then park)."""

    reader_type: type[GraceReader] = GraceReader
    """What register() makes (a subclass may make other readers: bench/grace.py)."""

    def __init__(
        self,
        *,
        spins: int | None = None,
        relax: Callable[[], object] | None = None,
        trace: bool = False,
    ) -> None:
        """`spins`: busy checks before parking (default parker.DEFAULT_SPINS);
        `relax` is called between two busy checks (default: nothing).
        `trace=True` records every step in `trace` (tests)."""
        self.spins = DEFAULT_SPINS if spins is None else max(1, spins)
        self.relax = relax
        self.gp = 1
        """The grace-period counter (readers' `ctr` is 0 when offline, so it starts at 1)."""
        self.futex = 0
        """-1 while the waiter is parked or about to park, else 0 (liburcu's gp_futex)."""
        self.trace: list[GraceEvent] | None = [] if trace else None
        """Every step of every grace period, when tracing."""
        self._cond = threading.Condition(threading.Lock())
        self._gp_lock = threading.Lock()  # one synchronize() at a time
        self._registry_lock = threading.Lock()
        self._readers: list[GraceReader] = []
        self._count = 0
        self._grace_periods = 0
        self._spins = 0
        self._parks = 0
        self._unparks = 0
        self._timeouts = 0

    # ---- readers ------------------------------------------------------------------

    def register(self, name: str | None = None, *, online: bool = True) -> GraceReader:
        """A new reader, online unless `online=False`. Unregister it when done
        (or use it as a context manager)."""
        with self._registry_lock:
            self._count += 1
            label = name if name is not None else f"reader-{self._count}"
            reader = self.reader_type(self, label, online)
            self._readers.append(reader)
        return reader

    def unregister(self, reader: GraceReader) -> None:
        """Forget `reader` (GraceReader.unregister() calls this). Idempotent."""
        with self._registry_lock:
            if reader in self._readers:
                self._readers.remove(reader)

    def wake(self, reader: GraceReader) -> None:
        """A flagged reader's signal: wake the parked waiter, once per park (the
        first reader to get here sets `futex` back to 0; the others return)."""
        if self.futex != -1:  # the waiter is spinning, or another reader woke it
            return
        with self._cond:
            if self.futex != -1:
                return
            self._wake_by(reader)

    def _wake_by(self, reader: GraceReader) -> None:
        """With the lock held and the waiter parked: wake it, count it."""
        self.futex = 0
        self._unparks += 1
        reader.signals += 1
        if self.trace is not None:
            self.trace.append(GraceEvent(self.gp, reader.name, "signal"))
        self._cond.notify()

    # ---- the waiter ---------------------------------------------------------------

    def synchronize(self, timeout: float | None = None) -> bool:
        """Wait for a grace period: return True once every reader that was
        online when this began has passed a quiescent state or gone offline;
        False if `timeout` seconds pass first (nothing retired may be freed then)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._gp_lock:
            with self._registry_lock:
                pending = [r for r in self._readers if r.ctr]
            gp = self.gp + 1
            self.gp = gp  # from here on, a quiescent state stores the new period
            trace = self.trace
            if trace is not None:
                trace.append(GraceEvent(gp, "reclaimer", "begin"))
            if not self._wait_readers(gp, pending, deadline):
                return self._timed_out(gp)
            self._grace_periods += 1
            if trace is not None:
                trace.append(GraceEvent(gp, "reclaimer", "end"))
            return True

    def _wait_readers(self, gp: int, pending: list[GraceReader], deadline: float | None) -> bool:
        """Until every reader in `pending` has stored `gp` or gone offline (True),
        or the deadline passed (False): `spins` checks, all but the last busy, then
        `_park`."""
        relax = self.relax
        for _ in range(self.spins - 1):  # busy checks
            pending = [r for r in pending if (c := r.ctr) and c != gp]
            if not pending:
                return True
            self._spins += 1
            if relax is not None:
                relax()
        return self._park(gp, pending, deadline)

    def _park(self, gp: int, pending: list[GraceReader], deadline: float | None) -> bool:
        """The wait after the busy checks, the patch's waiter: check; announce,
        raise the pending readers' flags and park; again after every wake.  True
        once none is pending, False at the deadline.  (bench/grace.py's "before"
        overrides it with the unpatched waiter: park once, then busy checks.)"""
        while True:
            pending = [r for r in pending if (c := r.ctr) and c != gp]
            if not pending:
                return True
            self.futex = -1  # announce, then check again: the header's Dekker pair
            self._raise_flags(pending)
            pending = [r for r in pending if (c := r.ctr) and c != gp]
            if not pending:
                self.futex = 0
                return True
            if not self._wait_gp(gp, deadline):
                return False

    def _raise_flags(self, pending: list[GraceReader]) -> None:
        """Flag the readers still pending, so that each signals once when it comes
        in (the patch's readers; bench/grace.py's unpatched readers have no flag)."""
        for reader in pending:
            reader.waiting = True

    def _timed_out(self, gp: int) -> bool:
        self.futex = 0
        self._timeouts += 1
        if self.trace is not None:
            self.trace.append(GraceEvent(gp, "reclaimer", "timeout"))
        return False

    def _wait_gp(self, gp: int, deadline: float | None) -> bool:
        """Park until a reader signals (True) or the deadline passes (False)."""
        with self._cond:
            if self.futex != -1:  # a reader signalled after our flags went up
                return True
            remaining = None
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
            self._parks += 1
            if self.trace is not None:
                self.trace.append(GraceEvent(gp, "reclaimer", "park"))
            signalled = self._cond.wait(remaining)
            if self.trace is not None and signalled:
                self.trace.append(GraceEvent(gp, "reclaimer", "wake"))
            return signalled or self.futex != -1

    # ---- observation --------------------------------------------------------------

    def statistics(self) -> GraceStatistics:
        with self._registry_lock:
            readers = len(self._readers)
        return GraceStatistics(
            grace_periods=self._grace_periods,
            spins=self._spins,
            parks=self._parks,
            unparks=self._unparks,
            timeouts=self._timeouts,
            readers=readers,
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} gp={self.gp} spins={self.spins}>"
