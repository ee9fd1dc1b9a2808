"""Opt-in interpreter tuning for latency: the GIL switch interval.

Why this exists: a link thread woken by a record (or by the listener's
answer) needs the GIL to act.  If another application thread is busy
running Python, CPython hands the GIL over only when that thread has held
it for the switch interval, 5 ms by default, so one record's queue-to-told
latency can grow by several such waits (woken thread, answer, waiter).
Lowering the interval makes busy threads yield sooner, at the cost of more
switches for everyone in the process; it is the application's call, so
purelink never changes it by itself.  `bench/latency.py` measures both ways.

    import purelink.tuning
    old = purelink.tuning.set_switch_interval(0.0005)   # 0.5 ms
"""

from __future__ import annotations

import logging
import sys

__all__ = ["LOW_LATENCY_SWITCH_INTERVAL", "set_switch_interval"]

log = logging.getLogger("purelink")

LOW_LATENCY_SWITCH_INTERVAL = 0.0005
"""A switch interval that keeps a busy thread from holding the GIL for long
(0.5 ms: a tenth of CPython's default)."""


def set_switch_interval(seconds: float = LOW_LATENCY_SWITCH_INTERVAL) -> float:
    """Set the interpreter's GIL switch interval; returns the previous value.

    Affects the whole process (every thread, not only purelink's): call it
    from the application, once, if queue-to-told latency matters more than
    the small cost of more frequent thread switches.
    """
    if not 0 < seconds <= 1:
        raise ValueError("the switch interval must be in (0, 1] seconds")
    old = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    log.info("GIL switch interval %.6f s -> %.6f s", old, seconds)
    return old
