"""Exceptions on purelink's threads fail the test that caused them.

Why: every thread purelink starts (a link's, the listener's loop and sync
threads, the retention thread, the tail server's) catches what escapes its
loop, so that a bug never dies silently: it logs the exception with its
traceback and turns it into an error the application sees on its next call.
A test that never makes that next call passes with the traceback only in a
log line -- which is how a DeprecationWarning, made an error by
`filterwarnings = error`, once crashed a link thread under a green suite.

So, while each test runs (wired in conftest.py):
- a record of a `purelink` logger that carries an exception (`log.exception`,
  `exc_info=`) fails it; plain error lines (a fenced link, a damaged segment)
  report conditions the tests provoke on purpose, and do not;
- an exception that escapes any thread (`threading.excepthook`) fails it;
- a `purelink serve` child (serve_process.py) whose stderr shows a traceback
  fails it.
A test that provokes one on purpose says which:
`@pytest.mark.logged_exception("on_stored callback raised")` names a part of
each message it expects, and then each must have been logged.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

TRACEBACK = "Traceback (most recent call last)"


class Guard(logging.Handler):
    """Collects what went wrong on any thread while one test runs."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.setFormatter(logging.Formatter("%(message)s"))
        self.records: list[logging.LogRecord] = []
        self.problems: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info is not None:
            self.records.append(record)  # list.append: atomic, any thread may log

    def note(self, problem: str) -> None:
        """Something a test helper saw (a child's traceback) that fails the test."""
        self.problems.append(problem)

    def excepthook(self, args: threading.ExceptHookArgs) -> None:
        name = args.thread.name if args.thread is not None else "?"
        text = "".join(
            traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback)
        )
        self.note(f"an exception escaped thread {name!r}:\n{text}")

    def failures(self, expected: Sequence[str] = ()) -> list[str]:
        """What fails the test: unexpected records and problems, expectations unmet."""
        records = list(self.records)
        out = list(self.problems)
        for record in records:
            message = record.getMessage()
            if not any(part in message for part in expected):
                out.append(
                    f"{record.name} logged an exception on thread {record.threadName!r}: "
                    f"{self.format(record)}"
                )
        for part in expected:
            if not any(part in r.getMessage() for r in records):
                out.append(f"expected a logged exception matching {part!r}; none was logged")
        return out


_current: Guard | None = None


def note(problem: str) -> None:
    """Fail the running test with `problem` (for helpers such as serve_process.py)."""
    if _current is not None:
        _current.note(problem)


@contextmanager
def guarded() -> Iterator[Guard]:
    """Watch purelink's loggers and every thread while the block runs; yield the
    guard, whose `failures()` the caller reports.  Blocks may nest (the tests of
    this module do): the inner one then sees what happens inside it."""
    global _current  # one guard per running test, as threading has one hook
    logger = logging.getLogger("purelink")
    guard = Guard()
    outer, previous_hook = _current, threading.excepthook
    logger.addHandler(guard)
    threading.excepthook = guard.excepthook
    _current = guard
    try:
        yield guard
    finally:
        _current = outer
        threading.excepthook = previous_hook
        logger.removeHandler(guard)
