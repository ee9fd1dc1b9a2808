"""`purelink send`: each input line is one record; exit 0 once all are stored.

Why it exists: it is the verb a shell script runs once per job, so it must
say plainly what happened to the data, whatever happens: every way out
ends with one line on stderr that says how many records were stored.

* all stored: `purelink send: N records (B payload bytes) stored in S s (R records/s)`, exit 0;
* the listener goes away: after `STALL_NOTICE` seconds without progress a
  line says that send is waiting and how many records are not yet stored,
  and another when it is storing again; after `--timeout` seconds without
  progress it gives up: exit 1, saying how many were stored and which input
  lines are not confirmed stored (the link keeps resending meanwhile, so a
  listener back in time loses nothing).  "Without progress" means: records
  wait to be stored and none was told stored -- whether send waits or reads
  its input (`tail -F app.log | purelink send ...` hears of an outage while
  lines still flow).  A clock thread sends the main thread SIGALRM every
  `_STEP`, so the stall is seen while send is blocked reading its input; it
  speaks, and gives up, only there or between records, never in the middle
  of a queue() call;
* a line longer than the listener's max_record: by default send stops at
  it (exit 1, naming the line and the limit, once the lines before it are
  stored); with `--skip-long` it skips it, counts it, and goes on, as a
  Kafka console producer goes on past a record the broker refuses;
* Ctrl-C: a summary of what was stored (after waiting up to `INTERRUPT_GRACE`
  for the answers already on their way; a second Ctrl-C goes at once), exit 130;
* the link fails (fenced, the listener lost records): the error and the summary, exit 1.

Memory stays bounded whatever the input: a line is read at most
`MAX_LINE` bytes (the largest record any listener accepts) at a time, and a
longer one is skipped over in pieces, never held whole.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import IO, Final

from .. import Error, Full, Link, connect
from .args import add_stream, producer_type, seconds, url_type
from .common import PROG, UsageError, client_secret
from .progress import Progress

__all__ = ["INTERRUPT_GRACE", "MAX_LINE", "STALL_NOTICE", "add_send_arguments", "cmd_send"]

MAX_LINE: Final = 16 << 20
"""The largest record any listener accepts (its --max-record is at most this)."""
STALL_NOTICE: Final = 1.0
"""Seconds without progress on `stored` before send says that it is waiting."""
INTERRUPT_GRACE: Final = 0.5
"""Seconds a Ctrl-C'd send waits for answers on their way, so its summary is current."""
_STEP: Final = 0.1  # seconds per wait: the progress bar and the stall clock tick at this rate


class _GaveUp(Error):
    """The listener stored nothing for --timeout seconds."""


class _TooLong(Error):
    """A line over max_record, without --skip-long."""


class _Send:
    """One run of `purelink send`: the link, the counts, and the waits."""

    def __init__(self, link: Link, url: str, timeout: float, skip_long: bool) -> None:
        self.link = link
        self.url = url
        self.timeout = timeout
        self.skip_long = skip_long
        self.base = link.stored  # a named producer resumes at its last stored seq
        self.lines = 0  # lines read
        self.records = 0  # records queued
        self.size = 0  # their payload bytes
        self.skipped = 0
        self.first_skip = ""
        self._skips: list[int] = []  # records queued before each skipped line (line numbers)
        self.progress = Progress(f"{PROG} send", None)
        self._seen = link.stored
        self._moved = time.monotonic()  # when `stored` last moved (or nothing was waiting)
        self._waiting = False  # the "waiting for the listener" line was said
        self._reading = False  # blocked reading input: the timer may speak (and give up)
        self._due = False  # the timer ticked while send was busy: speak at the next record

    def summary(self) -> str:
        """'3 of 5 records stored; 2 not confirmed stored (input lines 4 to 5 ...)'
        (and the lines skipped).  Stored records are always a prefix, so it can
        say exactly where a re-send should start."""
        queued = self.link.queued - self.base
        stored = min(self.link.stored - self.base, queued)
        text = f"{stored:,} of {queued:,} record{_s(queued)} stored"
        if queued > stored:
            first, last = self.line_of(stored + 1), self.line_of(queued)
            where = f"input line{'' if first == last else 's'} {first:,}"
            if last != first:
                where += f" to {last:,}"
            text += (
                f"; {queued - stored:,} not confirmed stored ({where}: the listener may "
                "have stored some of them, so a re-send from there may repeat those)"
            )
        return text + self.skips()

    def line_of(self, record: int) -> int:
        """The input line number of the `record`-th record queued in this run."""
        return record + bisect.bisect_right(self._skips, record - 1)

    def skips(self) -> str:
        if not self.skipped:
            return ""
        return f"; {self.skipped:,} line{_s(self.skipped)} skipped ({self.first_skip})"

    # ---- the stall clock ----

    def speak(self, now: float) -> None:
        """Look at the link: say "waiting for the listener" once nothing was told
        stored for STALL_NOTICE seconds while records wait, "storing again" when
        something is; raise _GaveUp after --timeout seconds of that.  Called
        between records, in waits, and by the timer while input blocks."""
        self._due = False
        link = self.link
        stored = link.stored
        if stored != self._seen or link.queued <= stored:  # progress, or nothing waits
            moved = stored != self._seen
            self._seen, self._moved = stored, now
            if moved and self._waiting:
                self._waiting = False
                self.progress.note(f"{PROG} send: the listener is storing again")
            return
        stalled = now - self._moved
        if stalled >= self.timeout:
            raise _GaveUp(
                f"the listener at {self.url} stored nothing for {self.timeout:g} s; "
                f"gave up with {self.summary()}"
            )
        if stalled >= STALL_NOTICE and not self._waiting:
            self._waiting = True
            unstored = link.queued - stored
            waiting = link.stats().waiting
            why = {"disk_full": " (it has no room on its disk)"}.get(waiting, "")
            if waiting == "stream_failed":
                why = " (its store failed on the stream: it needs a restart)"
            self.progress.note(
                f"{PROG} send: waiting for the listener at {self.url}{why}: "
                f"{unstored:,} record{_s(unstored)} not yet stored "
                f"(giving up after {self.timeout:g} s without progress)"
            )

    def _tick(self, signum: int, frame: FrameType | None) -> None:
        """SIGALRM: on the main thread, between two of its bytecodes -- or inside a
        blocked read of the input, which the handler's exception (a give-up) ends."""
        if self._reading:
            self.speak(time.monotonic())
        else:
            self._due = True

    def _readline(self, source: IO[bytes]) -> Callable[[int], bytes]:
        read = source.readline

        def readline(size: int) -> bytes:
            if self._due:
                self.speak(time.monotonic())
            self._reading = True
            try:
                return read(size)
            finally:
                self._reading = False

        return readline

    @contextlib.contextmanager
    def ticking(self) -> Iterator[None]:
        """The timer: a thread that sends the main thread SIGALRM every _STEP
        (pthread_kill: a signal for the process could land on the link's thread
        and leave a read on the main one blocked).  Elsewhere than on the main
        thread (a program that calls cmd_send on a thread of its own) the clock
        moves only between records and in waits."""
        main = threading.main_thread()
        if threading.current_thread() is not main or main.ident is None:
            yield
            return
        ident = main.ident
        previous = signal.signal(signal.SIGALRM, self._tick)
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(_STEP):
                signal.pthread_kill(ident, signal.SIGALRM)

        ticker = threading.Thread(target=tick, name="purelink-send-clock", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()  # no SIGALRM comes after this: the default would end the process
            signal.signal(signal.SIGALRM, previous)

    def wait(self, seq: int | None) -> bool:
        """Wait a step for `seq` (None: all queued) to be stored (speak() says what
        a stall means)."""
        done = self.link.wait_stored(seq, timeout=_STEP)
        self.speak(time.monotonic())
        return done

    # ---- the main loop ----

    def run(self, source: IO[bytes]) -> None:
        link = self.link
        queue = link.queue
        progress = self.progress
        for record in _lines(self._readline(source)):
            self.lines += 1
            if record is None:  # longer than any listener accepts: never read whole
                self._too_long(f"line {self.lines:,} is longer than {MAX_LINE:,} bytes")
                continue
            while True:
                try:
                    queue(record)
                except Full:  # never drop: wait for the oldest unstored record, then retry
                    self.wait(link.stored + 1)
                    progress.update(self.records, f"stored {link.stored - self.base:,} (full)")
                    continue
                except ValueError as exc:  # over the listener's max_record
                    self._too_long(f"line {self.lines:,}: {exc}")
                    break
                self.records += 1
                self.size += len(record)
                if self.records & 1023 == 0:
                    progress.update(self.records, f"stored {link.stored - self.base:,}")
                break
            if self._due:
                self.speak(time.monotonic())
        while not self.wait(None):
            progress.update(self.records, f"stored {link.stored - self.base:,}")
        progress.close(self.records, f"stored {link.stored - self.base:,}")

    def _too_long(self, why: str) -> None:
        if self.skip_long:
            self._skips.append(self.records)
            self.skipped += 1
            if self.skipped == 1:
                self.first_skip = f"the first: {why}"
            return
        while not self.wait(None):  # the lines before it: stored, or a clear give-up
            pass
        self.progress.close(self.records)
        before = self.link.stored - self.base
        raise _TooLong(
            f"{why}; stopped there: the {before:,} record{_s(before)} before it "
            f"{'was' if before == 1 else 'were'} stored, nothing after it was sent "
            "(--skip-long skips such lines)"
        )


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _lines(readline: Callable[[int], bytes]) -> Iterator[bytes | None]:
    """Each line less its b"\\n" (a b"\\r" stays payload); None for a line longer
    than MAX_LINE, whose bytes are read in pieces and dropped."""
    while True:
        line = readline(MAX_LINE + 1)
        if not line:
            return
        if line.endswith(b"\n"):
            yield line[:-1]
        elif len(line) <= MAX_LINE:
            yield line  # the last line, without a newline
        else:
            while (rest := readline(1 << 20)) and not rest.endswith(b"\n"):
                pass
            yield None


def _open_input(path: str | None) -> IO[bytes]:
    if path is None:
        return sys.stdin.buffer
    try:
        return open(path, "rb")  # closed by cmd_send
    except OSError as exc:
        raise UsageError(f"cannot read --file {path!r}: {exc.strerror}") from None


def add_send_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "url",
        type=url_type,
        metavar="URL[,URL...]",
        help="udp://HOST:PORT or tcp://HOST:PORT; several listeners, comma-separated, "
        "are tried in order (failover)",
    )
    add_stream(p)
    p.add_argument(
        "--producer",
        type=producer_type,
        metavar="NAME",
        help="a named producer, same rule as a stream name (default: anonymous)",
    )
    p.add_argument("--file", metavar="F", help="read lines from F instead of stdin")
    p.add_argument("--secret-file", metavar="F", help="the secret (of the key --key-id names)")
    p.add_argument("--key-id", metavar="ID", help="the key's id in the listener's --keys-file")
    p.add_argument(
        "--timeout",
        type=seconds,
        default=10.0,
        metavar="DURATION",
        help="give up (exit 1) after this long without an answer at connect, "
        "or without progress while records wait to be stored (10)",
    )
    p.add_argument(
        "--skip-long",
        action="store_true",
        help="skip (and count) lines over the listener's max_record instead of stopping",
    )


def cmd_send(args: argparse.Namespace) -> int:
    """Queue each input line as one record; see the module docstring."""
    secret = client_secret(args)
    source = _open_input(args.file)  # before connecting: a missing file is a usage error
    try:
        try:
            link = connect(
                args.url,
                stream=args.stream,
                producer=args.producer,
                timeout=args.timeout,
                secret=secret,
                key_id=args.key_id,
            )
        except ValueError as exc:  # the link refused an argument
            raise UsageError(str(exc)) from None
        send = _Send(link, args.url, args.timeout, args.skip_long)
        started = time.perf_counter()
        try:
            with send.ticking():
                send.run(source)
        except KeyboardInterrupt:
            send.progress.close(send.records)
            with contextlib.suppress(KeyboardInterrupt, Error):  # a second Ctrl-C: go now
                link.wait_stored(timeout=INTERRUPT_GRACE)  # answers already on their way
            link.close(timeout=0)
            sys.stderr.write(f"{PROG} send: interrupted: {send.summary()}\n")
            return 130
        except (_GaveUp, _TooLong) as exc:
            link.close(timeout=0)
            raise Error(str(exc)) from None  # the message says it all: no class name
        except Error as exc:  # the link failed (fenced, lost records): say what was stored
            send.progress.close(send.records)
            link.close(timeout=0)
            kind = "" if type(exc) is Error else f"{type(exc).__name__}: "
            raise Error(f"{kind}{exc}; {send.summary()}") from None
        link.close(timeout=0)  # all stored already
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    seconds = time.perf_counter() - started
    count = send.records
    rate = count / seconds if seconds > 0 else 0.0
    sys.stderr.write(
        f"{PROG} send: {count:,} record{_s(count)} ({send.size:,} payload byte{_s(send.size)}) "
        f"stored in {seconds:.3f} s ({rate:,.0f} records/s){send.skips()}\n"
    )
    return 0
