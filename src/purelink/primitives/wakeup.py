# Wake a thread only when it sleeps, and only once (docs/design.md, mechanism 1).
#
# Prior art: the C link's commit "Wake a link's thread only when it sleeps, once"
# (serve/link.c: `sleeping, signaled, queued_new`), which took queuing from 400k to
# 730k records/s by not writing the eventfd for every record; trio's
# `_wakeup_socketpair.py` for the shape of a wakeup fd (non-blocking, drained until
# EAGAIN, a pipe where nothing better exists).
#
# Theory of operation. One owner thread sleeps in poll() on `fileno()` (and its
# sockets); any number of producer threads hand it work. Two plain attributes:
#
#   armed    the owner sleeps in poll() (or is about to), and no producer has taken
#            on the job of waking it since: the next producer to see it must write
#   pending  a generic mark, "work was handed over since the owner last looked", for
#            producers whose work the owner cannot see for itself
#
# Producer (the link's queue() inlines exactly this):
#     <store the item>; if w.armed: w.signal()        # signal(): armed = False; write
# Owner loop:
#     w.begin_look(); <take all work>
#     if w.prepare_sleep(ready): poll(...); w.after_wake()
# where prepare_sleep sets `armed` and then asks `ready()` (or looks at `pending`)
# whether work is there after all.  The link's ready() looks at the one ring slot the
# link thread must read next, so queue() stores nothing but the item and loads one
# flag: no mark per record.
#
# Why no wakeup is lost. The producer stores the item, then loads `armed`; the owner
# stores `armed`, then loads the item (ready()). This is Dekker's pattern: in every
# interleaving at least one side sees the other's store. Either the owner sees the
# item and looks again instead of sleeping, or the producer sees `armed` and writes
# the fd -- unless `armed` is already False while the owner sleeps. That happens only
# when another producer cleared it, and signal() clears it BEFORE it writes, so that
# producer's byte is on its way: the invariant is "the owner in poll with armed False
# implies a byte in the fd or on its way". The owner re-arms before every sleep, and
# clears `armed` after every wake (after draining the fd; the order of those two does
# not matter here, because no flag outlives the sleep it was set for).  The model
# check in tests/primitives/test_wakeup.py runs every schedule of these loads and
# stores up to a preemption bound: no loss in this protocol, and a loss in each of
# the two wrong orders (the owner looking before arming; a producer clearing
# `armed` after its write).
#
# The benign races: two producers can both see `armed` and both write (two writes for
# one sleep); a producer can write just after the owner woke for another reason, which
# costs the owner one spurious wake later. Neither loses work; both are counted
# (writes, spurious).
#
# With the compiled core (purelink.native, part "ring"), `armed`, `writes`, `_closed`
# and the fds live in a C base type, WakeFlag (src/speedups/ring.c), so that the
# link's queue() in C loads and clears the same flag and writes the same fd, in the
# same order (store the record, load `armed`; clear `armed`, then write).  This
# class's code is the same either way.
#
# What is assumed of the interpreter. Under the GIL (CPython 3.11, the target) every
# attribute store and load here is one bytecode on a plain instance attribute, and
# the GIL hand-off between threads is a mutex, so all threads see one total order of
# these stores and loads: the argument above holds as written. On a free-threaded
# build (3.13t+) a store to a slot like these is a release store made inside the
# object's critical section (PyMember_SetOne), and loads do not take that lock.
# Release and acquire alone do not order a store before a later load of another
# attribute, which is what Dekker's pattern needs, and CPython promises nothing more.
# On x86-64 the critical section's locked compare-exchange is a full fence, so it
# holds there in practice; on other CPUs we are not sure. A driver on such a build
# should keep its poll timeout finite as a backstop (and count the timeouts that
# found work).

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

from .. import native

__all__ = ["Wakeup", "WakeupStatistics"]

_EVENTFD_ONE = (1).to_bytes(8, "little")

_core = native.part("ring")
if TYPE_CHECKING or _core is None:

    class _Flag:
        """Pure Python: `armed`, `writes`, `_closed` and the fds are Wakeup's own slots."""

        __slots__ = ()

    _FLAG_SLOTS: tuple[str, ...] = ("_closed", "_read_fd", "_write_fd", "armed", "writes")
else:  # the compiled core: they live in a C base, where the link's queue() in C
    _Flag = _core.WakeFlag  # reads and writes the same flag (src/speedups/ring.c)
    _FLAG_SLOTS = ()


@dataclass(frozen=True, slots=True)
class WakeupStatistics:
    """A snapshot of a Wakeup's counters."""

    backend: str
    """"eventfd" or "pipe"."""
    writes: int
    """Writes to the fd (`LinkStats.wakeups`); under contention a rare increment may be lost."""
    sleeps: int
    """prepare_sleep() calls that let the owner sleep."""
    rechecks: int
    """prepare_sleep() calls that found work (marked or ready) and sent the owner back."""
    drains: int
    """after_wake() calls that found the fd written and emptied it."""
    spurious: int
    """Drains with no work marked or ready: a late write (see the header), or a signal
    whose item the owner had already taken."""


class Wakeup(_Flag):
    """An eventfd (or a pipe) written only when its owner sleeps, and only once.

    `armed` and `pending` are plain attributes on purpose: the link's queue() reads
    `armed` inline (in C with the compiled core). See the module header for the protocol.
    """

    __slots__ = ("backend", "drains", "pending", "rechecks", "sleeps", "spurious", *_FLAG_SLOTS)

    def __init__(self, use_eventfd: bool | None = None) -> None:
        """Open the fd: an eventfd if available (or `use_eventfd=True`), else a pipe."""
        have_eventfd = hasattr(os, "eventfd")
        if use_eventfd is None:
            use_eventfd = have_eventfd
        if use_eventfd and not have_eventfd:
            raise ValueError("eventfd is not available on this platform")
        if use_eventfd:
            fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            self._read_fd = self._write_fd = fd
            self.backend = "eventfd"
        else:
            self._read_fd, self._write_fd = os.pipe()  # non-inheritable (PEP 446)
            os.set_blocking(self._read_fd, False)
            os.set_blocking(self._write_fd, False)
            self.backend = "pipe"
        self._closed = False
        self.pending = False
        self.armed = False
        self.writes = 0
        self.sleeps = 0
        self.rechecks = 0
        self.drains = 0
        self.spurious = 0

    def fileno(self) -> int:
        """The fd to poll for POLLIN."""
        return self._read_fd

    # ---- producer side ---------------------------------------------------------

    def mark_and_signal(self) -> None:
        """Mark work pending; write the fd if the owner sleeps and nobody woke it yet."""
        self.pending = True
        if self.armed:
            self.signal()

    def signal(self) -> None:
        """Disarm, then write the fd.  Callers check `armed` first."""
        self.armed = False  # before the write: see the header for why the order matters
        if not self._closed:
            self._write()
            self.writes += 1

    def _write(self) -> None:
        try:
            if self._read_fd == self._write_fd:
                os.write(self._write_fd, _EVENTFD_ONE)
            else:
                os.write(self._write_fd, b"\0")
        except BlockingIOError:
            pass  # counter or pipe full: the fd is readable already, which is all we need

    # ---- owner side ------------------------------------------------------------

    def begin_look(self) -> None:
        """Clear the mark; call it before taking work, so work handed over later is seen."""
        self.pending = False

    def prepare_sleep(self, ready: Callable[[], bool] | None = None) -> bool:
        """Arm, then look again: at the mark, and at the work itself through `ready()`
        (True: work the owner can take is there).  False: look again, do not sleep."""
        self.armed = True
        if self.pending or (ready is not None and ready()):
            self.armed = False
            self.rechecks += 1
            return False
        self.sleeps += 1
        return True

    def after_wake(self, ready: Callable[[], bool] | None = None) -> None:
        """After poll() returns, for whatever reason: drain the fd, then disarm.
        `ready` (as for prepare_sleep) only tells a spurious wake from a real one."""
        if self._drain():
            self.drains += 1
            if not self.pending and (ready is None or not ready()):
                self.spurious += 1
        self.armed = False

    def _drain(self) -> bool:
        """Read until EAGAIN; True if anything was read."""
        got = False
        while True:
            try:
                data = os.read(self._read_fd, 4096)
            except BlockingIOError:
                return got
            if not data:  # pipe writer closed: nothing more will come
                return got
            got = True
            if self._read_fd == self._write_fd:
                return got  # an eventfd read takes the whole counter at once

    # ---- life cycle and observation ----------------------------------------------

    def close(self) -> None:
        """Close the fd(s); later signals are ignored. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.armed = False  # an inlined producer check now never calls signal()
        os.close(self._read_fd)
        if self._write_fd != self._read_fd:
            os.close(self._write_fd)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Wakeup:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def statistics(self) -> WakeupStatistics:
        return WakeupStatistics(
            backend=self.backend,
            writes=self.writes,
            sleeps=self.sleeps,
            rechecks=self.rechecks,
            drains=self.drains,
            spurious=self.spurious,
        )

    def __repr__(self) -> str:
        return (
            f"<Wakeup {self.backend} fd={self._read_fd} pending={self.pending} "
            f"armed={self.armed} closed={self._closed}>"
        )
