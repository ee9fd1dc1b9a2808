"""What every verb of the `purelink` command shares: the error line, usage errors, files.

Why it exists: the verbs live in several modules (command.py holds the parser
and `demo`; every other verb has a module of its own), and they must fail the
same way: ONE line on stderr, `purelink VERB: error: what went wrong: why`
(`purelink: error: ...` before a verb is known), exit 2 for a bad argument
(`UsageError`), never a traceback (the README's command line).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

__all__ = [
    "PROG",
    "UsageError",
    "client_secret",
    "counted",
    "fail",
    "format_address",
    "read_secret",
    "signals_to_pipe",
    "silence_stdout",
    "wakeup_pipe",
]

PROG = "purelink"


class UsageError(Exception):
    """A bad argument found after parsing (a missing file, a refused bind): exit 2."""


def fail(message: str, prog: str = PROG) -> None:
    """Write the one error line, `PROG: error: message` (`prog`: "purelink VERB"
    once the verb is known); newlines in `message` are folded into spaces."""
    one_line = " ".join(str(message).split())
    sys.stderr.write(f"{prog}: error: {one_line}\n")
    sys.stderr.flush()


def counted(n: int, word: str) -> str:
    """ "1 record", "2,000 records": a count and its noun, plural when it is not one."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def read_secret(path: str | None) -> bytes | None:
    """The file's bytes less one trailing newline (so `echo s > f` works); None if no file."""
    if path is None:
        return None
    try:
        secret = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read --secret-file {path!r}: {exc.strerror}") from None
    if secret.endswith(b"\n"):
        secret = secret[:-1].removesuffix(b"\r")
    if not secret:
        raise UsageError(f"--secret-file {path!r} is empty")
    return secret


def client_secret(args: argparse.Namespace) -> bytes | None:
    """A client's secret (--secret-file), checked against --key-id."""
    secret = read_secret(args.secret_file)
    if args.key_id is not None and secret is None:
        raise UsageError("--key-id needs --secret-file (the key's secret)")
    return secret


def format_address(address: tuple[str, int]) -> str:
    from .. import _address  # noqa: PLC0415 -- light, but only the verbs that print need it

    return _address.format_hostport(address[0], address[1])


def silence_stdout() -> None:
    """After EPIPE, point fd 1 at /dev/null so the interpreter's final flush is quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


@contextlib.contextmanager
def signals_to_pipe(*signums: int) -> Iterator[int]:
    """While inside, each of `signums` becomes its number as a byte on a pipe;
    yields the pipe's read end, for the main thread to sleep on (poll).

    The byte is written by the interpreter's C-level handler
    (`signal.set_wakeup_fd`), on whichever thread the kernel hands the signal
    to: a Python handler runs only in the main thread, between bytecodes, so a
    signal that landed on one of a listener's threads went unseen while the
    main thread slept (`serve` did not stop).  Why not an Event set by a
    handler: it may run while the main thread holds the Event's lock.  A pipe
    write takes no lock, and a signal that arrives before the read leaves its
    byte waiting, so none is lost.  A full pipe drops bytes: one is pending.
    """

    def ignore(signum: int, frame: FrameType | None) -> None:
        """Nothing: the pipe has the number (a Python handler must be set, or the
        default action runs and the wakeup fd is not written)."""

    previous = {signum: signal.signal(signum, ignore) for signum in signums}
    try:
        with wakeup_pipe() as read_end:
            yield read_end
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def wakeup_pipe() -> Iterator[int]:
    """While inside, the interpreter's C-level handler writes the number of every
    signal that has a Python handler to a pipe (`signal.set_wakeup_fd`); yields
    the pipe's read end (non-blocking).  A wait that watches it cannot miss a
    signal that lands just before it starts, which a blocking system call does
    (subscribe.py, `interrupt_fd`)."""
    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)  # the C handler never blocks
    previous_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    try:
        yield read_end
    finally:
        signal.set_wakeup_fd(previous_fd)
        os.close(read_end)
        os.close(write_end)
