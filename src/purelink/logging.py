"""purelink.logging: a `logging.Handler` that ships every log record through a link.

Why it exists: the most common thing a Python service ships is its own logs,
and the standard library's network handlers either block the logging thread
(SocketHandler, HTTPHandler) or lose records silently when the far side is
down.  `LinkHandler` gives log calls the link's contract: the call never
waits, and a record is either stored (written and fsynced by the listener)
or counted in `dropped`.

Theory of operation:

* A log call does only what must happen in the caller's thread: `emit`
  freezes what could change after the call -- a tuple of the fields the JSON
  needs, the message formatted (its arguments may be mutated later) and the
  `extra=` values copied into a dict of their own -- and appends it to the
  hand-off, a deque, which takes no lock (the GIL makes
  `append` and `popleft` atomic).  The handler's own thread takes it from
  there, encodes the JSON (`_log_json.encode_captured`) and queues it on the
  link.  One consumer, one FIFO: the records of each thread keep their order.
  Encoded in the caller instead, at the cost of a call through JSONFormatter:
  a record with an exception (its traceback is formatted there anyway), one
  with an `extra=` value that could change after the call (a dict, a list, an
  object: anything but str, int, float, bool and None), and every record when
  the user gave a formatter of their own (its `format` may read anything).
* `handle` is overridden to skip `logging.Handler`'s per-handler lock (and
  the call to `filter` when there are no filters): nothing here needs the
  lock, and without it a thread that logs is never held up by another
  thread's `flush`/`close`.  No lock is held across the link: only the
  handler's thread calls `Link.queue`.
* The handler's thread is woken only when it sleeps: it arms a Wakeup
  (primitives/wakeup.py) before sleeping, and `emit` writes its eventfd only
  when it sees it armed.  After taking records the thread looks again
  `_LINGER` (2 ms) later before it arms: waking a sleeping thread costs the
  call ~15 us, and an application that logs more often than every 2 ms
  writes no fd at all; a burst of log calls writes it once.
* The hand-off is bounded: past `capacity` records waiting for the thread a
  record is dropped (counted in `dropped`, one warning on stderr, never
  through `logging`, which would come back here).  The link keeps every
  unstored record through listener restarts and outages (up to `capacity`);
  past that `queue` raises `Full`, and the record is counted the same way.
* The thread first connects (with backoff, for as long as it takes), so the
  application's first log call never waits for a handshake.  A refusal that
  cannot heal (ConnectError.permanent: a wrong secret, a key that may not
  write the stream, a bad name) is not retried: the handler says so on
  stderr at once, and drops and counts what it held and what comes later.  Until the link
  is up the thread does not take from the hand-off: records wait there, in
  order, bounded by `capacity` and `capacity_bytes` (their text), counted
  under `_gate`, a lock that only the records emitted before the connection
  take.
* `close()` -- which `logging.shutdown()` calls at interpreter exit -- appends
  a mark to the hand-off and waits for the thread to reach it (everything
  logged before close() is then on the link), then until all of it is stored,
  at most `timeout` seconds in all; what is left is counted as dropped and
  said on stderr.  Records logged after close() began are dropped and counted:
  once the thread has ended (`_drained`), whoever sees the flag first --
  `emit` itself checks it after appending -- takes them back, so nothing is
  left in the hand-off uncounted.  `flush()` waits until everything logged so
  far is on the link (a mark of its own), as a FileHandler's flush hands
  bytes to the OS without fsyncing them; `wait_stored()` is the checkpoint.
* After `os.fork()` the child starts afresh (its parent's thread does not
  exist there): a new hand-off and a new connection at once, in the child,
  the parent's held records left to the parent.  A named `producer` must then
  differ per process, or the child's session fences the parent's.
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import itertools
import logging
import os
import select
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from purelink import _address
from purelink._log_json import BARE_SIZE, IMMUTABLE, JSONFormatter, decode, encode_captured
from purelink.errors import ConnectError, Error
from purelink.link.link import Link, connect, launch
from purelink.link.transport import FIRST_CONNECT_WAIT
from purelink.primitives.wakeup import Wakeup
from purelink.protocol.names import validate_stream_name

__all__ = ["JSONFormatter", "LinkHandler", "decode"]

_BACKOFF_FIRST = 0.05
_BACKOFF_MAX = 2.0
_CONNECT_FIRST = 0.5  # the first handshake's timeout, doubling up to _CONNECT_MAX
_CONNECT_MAX = 5.0
_EXIT_REFUSES_THREADS = (3, 12, 0) <= sys.version_info[:3] < (3, 12, 2)
"""CPython 3.12.0 and 3.12.1 refuse to start a thread once the interpreter exits,
atexit handlers included (gh-113964, fixed in 3.12.2)."""
_LAUNCH_WAIT = FIRST_CONNECT_WAIT + 1.0
"""At most this long, on those versions, the handler's constructor waits for its
first link's thread: the address resolved, a socket made (for tcp://, its
connection, up to FIRST_CONNECT_WAIT), a thread started -- not a handshake."""
_IDLE_MS = 1000  # the thread's sleep, at most: a backstop, a wakeup is never lost
_LOOK_EVERY = 0.25  # seconds between looks at whether the listener refuses the link for now
_LINGER = 0.002  # after taking records, the thread looks again this much later, unarmed
_FIELDS_SIZE = 100  # what the JSON adds to a held record's text: keys, time, names


class LinkHandler(logging.Handler):
    """Ships each log record as one record on stream `stream` of the listener at `url`.

    `url`, `stream` ("app-logs" unless named), `producer`, `secret`, `capacity`
    and `capacity_bytes` are those of `purelink.connect`; `secret_file` reads
    the secret from a file (one trailing newline dropped), for
    `logging.config.dictConfig`; `key_id` is passed to connect.  `formatter`
    replaces the JSON format (JSONFormatter), as `setFormatter` does, which
    `dictConfig`'s "formatter" key calls; such a formatter runs in the thread
    that logs.  `timeout`: how long `close()` waits
    for everything to be stored.
    """

    def __init__(
        self,
        url: str,
        stream: str = "app-logs",
        *,
        producer: str | None = None,
        secret: bytes | str | None = None,
        secret_file: str | os.PathLike[str] | None = None,
        key_id: str | None = None,
        capacity: int = 100_000,
        capacity_bytes: int = 64 << 20,
        formatter: logging.Formatter | None = None,
        level: int | str = logging.NOTSET,
        timeout: float = 5.0,
    ) -> None:
        super().__init__(level)
        _address.parse_urls(url)  # bad ones raise ValueError here, not on a thread later
        validate_stream_name(stream)
        if capacity < 1 or capacity_bytes < 1:
            raise ValueError("capacity and capacity_bytes must be positive")
        if secret is not None and secret_file is not None:
            raise ValueError("give secret or secret_file, not both")
        if secret_file is not None:
            data = Path(secret_file).read_bytes()
            secret = data[:-1].removesuffix(b"\r") if data.endswith(b"\n") else data
        self._options: dict[str, Any] = {
            "producer": producer,
            "capacity": capacity,
            "capacity_bytes": capacity_bytes,
            "secret": secret.encode() if isinstance(secret, str) else secret,
        }
        if self._options["secret"] is not None and len(self._options["secret"]) < 16:
            raise ValueError("secret must be at least 16 bytes")  # connect's rule, said now
        if key_id is not None:
            if "key_id" not in inspect.signature(connect).parameters:
                raise ValueError(
                    "key_id= needs a purelink whose connect() takes key_id (this one does not)"
                )
            self._options["key_id"] = key_id
        self.url = url
        self.stream = stream
        self.producer = producer or None
        """The producer's name (None: anonymous)."""
        self.timeout = timeout
        self._capacity = capacity
        self._capacity_bytes = capacity_bytes
        # a formatter of its own: logging.basicConfig(handlers=...) gives one to every
        # handler that has none, which would turn the JSON off
        self.setFormatter(formatter if formatter is not None else JSONFormatter())
        self.dropped = 0
        """Records not stored: refused by a full hand-off or link, emitted after
        close, or still unstored when close() gave up."""
        self._drop_lock = threading.Lock()  # drops may race: the count stays exact
        self._warned = False
        self._closing = False
        self._reset()
        self._start()  # connect now, in the background: the first log call must not wait
        self._wait_launched()
        # a weak reference: the fork hook must not keep a closed handler alive
        after_fork = weakref.WeakMethod(self._after_fork_in_child)
        os.register_at_fork(after_in_child=lambda: _call_if_alive(after_fork))

    def _reset(self) -> None:
        """The state of a handler that has not connected yet."""
        self._link: Link | None = None
        self._gate = threading.Lock()
        # tuples (what emit captured, encoded by the thread), bytes (a formatter's
        # text), threading.Events (a waiter's mark: everything before it is on the
        # link) and None (close()'s mark: the thread ends there); appended by any
        # thread, taken by the handler's thread only
        self._handoff: collections.deque[Any] = collections.deque()
        self._held_bytes = 0  # of the records held before the first connection
        old = getattr(self, "_wakeup", None)
        if old is not None:
            old.close()  # a fork's child: the parent's fd, whose thread is not here
        # written only while the handler's thread sleeps; its fd is closed with the
        # handler, not by close(): a thread in emit may be about to write it
        self._wakeup = Wakeup()
        # not at exit: logging.shutdown() runs after the finalizers, and needs it
        weakref.finalize(self, self._wakeup.close).atexit = False
        self._abort = False  # close() ran out of time: end now
        self._drained = False  # the thread has ended: what is appended now is dropped
        self._refusal = "the handler is closed"  # why, once _drained
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()  # close() wakes the connecting thread's backoff
        self._up = threading.Event()  # set once connected (or given up)
        self._launched = threading.Event()  # the first link's thread started, or failed
        self._deadline = float("inf")  # the connecting thread gives up past this
        self._failure: str | None = None  # why the link could not be made, if it gave up

    @property
    def link(self) -> Link | None:
        """The link, once connected (None before)."""
        return self._link

    @property
    def pending(self) -> int:
        """Records held by the handler, not on the link yet: waiting for the first
        connection, or for the handler's thread to encode them."""
        return len(self._handoff)

    # ------------------------------------------------------------ logging's side
    def handle(self, record: logging.LogRecord) -> Any:
        """Filter and emit, without logging.Handler's lock (see the module header)."""
        if self.filters:
            rv = self.filter(record)
            if isinstance(rv, logging.LogRecord):  # a filter may return a new record (3.12+)
                record = rv
            if not rv:
                return rv
        self.emit(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        """Capture the record and hand it to the handler's thread; never blocks,
        never raises into the caller (see the module header)."""
        try:
            formatter = self.formatter
            item: Any
            if type(formatter) is not JSONFormatter:  # a subclass may read anything too
                item = self.format(record).encode("utf-8", "backslashreplace")
            elif record.exc_info:  # the traceback is formatted here anyway: all of it, then
                item = formatter.encode(record)
            else:
                # what the JSON needs, frozen now: the message formatted, the extra=
                # fields (makeRecord adds them last) copied -- or, if one of them
                # could change later, or a record factory set some first, the JSON
                fields = record.__dict__
                extra = None
                now = False
                if len(fields) > BARE_SIZE:
                    extra = dict(itertools.islice(fields.items(), BARE_SIZE, None))
                    now = next(iter(fields)) != "name" or not IMMUTABLE.issuperset(
                        map(type, extra.values())
                    )
                if now:
                    item = formatter.encode(record)
                else:
                    item = (
                        record.created,
                        record.levelname,
                        record.name,
                        record.getMessage(),
                        record.threadName,
                        record.stack_info,
                        extra,
                    )
            handoff = self._handoff
            if self._link is None:
                if not self._hold(item):
                    return
            elif len(handoff) >= self._capacity:
                self._drop(f"{self._capacity:,} records wait for the handler's thread (capacity)")
                return
            else:
                handoff.append(item)
            if self._drained:
                self._strand()
            elif self._wakeup.armed:
                self._wakeup.signal()
        except Exception:
            self.handleError(record)

    def _hold(self, item: Any) -> bool:
        """Before the link is up: keep the record for it (or drop it), counting its
        bytes against `capacity_bytes`.  False: dropped."""
        with self._gate:
            size = 0 if self._link is not None else _size(item)
            if (
                len(self._handoff) >= self._capacity
                or self._held_bytes + size > self._capacity_bytes
            ):
                self._drop(f"not connected to {self.url} yet and the capacity is used up")
                return False
            self._held_bytes += size
            self._handoff.append(item)
        return True

    def _strand(self) -> None:
        """The thread has ended: drop what is in the hand-off (and free its waiters)."""
        handoff = self._handoff
        count = 0
        while True:
            try:
                item = handoff.popleft()
            except IndexError:
                break
            if item.__class__ is threading.Event:
                item.set()
            elif item is not None:  # None: close()'s mark
                count += 1
        if count:
            self._drop(self._refusal, count)

    def _start(self) -> None:
        """Start the handler's thread (before anyone logs, or in a fork's child)."""
        self._thread = threading.Thread(
            target=self._run, name=f"purelink-log-{self.stream}", daemon=True
        )
        self._thread.start()

    def _after_fork_in_child(self) -> None:
        """A fork's child: start over with no link and connect now, not at the
        child's first log call: a child that logs and exits at once would
        otherwise start the thread during interpreter shutdown, which CPython
        3.12.0-3.12.1 refuses (RuntimeError)."""
        self._reset()
        self._start()
        self._wait_launched()

    def _wait_launched(self) -> None:
        """On CPython 3.12.0-3.12.1 only: wait until the first link's thread is started,
        so that a program that logs and exits at once does not ask for that thread
        at exit, where it is refused and every record would be dropped."""
        if _EXIT_REFUSES_THREADS:
            self._launched.wait(_LAUNCH_WAIT)

    def _drop(self, why: str, count: int = 1) -> None:
        with self._drop_lock:
            self.dropped += count
            warn, self._warned = not self._warned, True
        if warn:
            _warn(
                f"dropped a log record for stream {self.stream!r}: {why}; "
                "further drops are counted in handler.dropped, not reported"
            )

    # ------------------------------------------------------- the handler's thread
    def _run(self) -> None:
        link = self._connect()
        if link is not None:
            try:
                self._pump(link)
            finally:
                self._drained = True  # emit drops from now on (and so does close)
                self._strand()

    def _connect(self) -> Link | None:
        time.sleep(0)  # let the thread that started this one have the GIL back at once
        delay = _BACKOFF_FIRST
        # where exit refuses new threads, a second try cannot be made at exit:
        # the first gets all the patience that close() would give it
        patience = max(_CONNECT_FIRST, self.timeout) if _EXIT_REFUSES_THREADS else _CONNECT_FIRST
        told = False
        while True:
            left = self._deadline - time.monotonic()
            if left <= 0:
                self._give_up(f"no connection to {self.url} before close() gave up")
                return None
            try:
                link = Link(self.url, self.stream, timeout=min(patience, left), **self._options)
                launch(link, self._launched)  # connect(), telling when its thread is up
                break
            except ConnectError as exc:
                if exc.permanent:  # a wrong secret, a forbidden stream: never heals
                    why = f"{self.url} refused the handler for good ({exc})"
                    _warn(f"error: {why}; its log records are dropped and counted")
                    self._give_up(why)
                    return None
                if not told:
                    told = True
                    _warn(
                        f"cannot reach {self.url} ({exc}); retrying in the background, "
                        f"holding up to {self._capacity:,} log records meanwhile"
                    )
            # will not get better; RuntimeError: no new thread at interpreter shutdown (3.12+)
            except (Error, ValueError, TypeError, OSError, RuntimeError) as exc:
                self._give_up(f"cannot connect to {self.url}: {exc}")
                return None
            finally:
                self._launched.set()  # the first try is over, whatever it did
            self._wake.wait(min(delay, max(self._deadline - time.monotonic(), 0.0)))
            delay = min(delay * 2, _BACKOFF_MAX)
            patience = min(patience * 2, _CONNECT_MAX)
        with self._gate:
            late = self._failure is not None  # close() gave up while this connect ran
            if not late:
                self._held_bytes = 0
                self._link = link
        self._up.set()
        if late:
            with contextlib.suppress(Error):  # Fenced: its records are counted below
                link.close(timeout=0)
            if link.queued > link.stored:
                self._drop(self._failure or "", link.queued - link.stored)
            return None
        return link

    def _pump(self, link: Link) -> None:
        """Encode what the hand-off brings and queue it on the link, in order, up to
        close()'s mark; sleep (on the Wakeup) while there is nothing."""
        handoff = self._handoff
        wakeup = self._wakeup
        poller = select.poll()
        poller.register(wakeup.fileno(), select.POLLIN)

        def ready() -> bool:
            return bool(handoff)

        waiting = ""  # why the link waits, as last said on stderr
        looked = 0.0
        while not self._abort:
            now = time.monotonic()
            if now - looked >= _LOOK_EVERY:
                looked = now
                waiting = self._say_waiting(link, waiting)
            wakeup.begin_look()
            took = False
            while handoff and not self._abort:
                item = handoff.popleft()
                if item is None:  # close()'s mark: what was handed off after it is dropped
                    return
                self._send(link, item)
                took = True
            if took:
                # more may come soon: wait a little unarmed, so that the calls
                # meanwhile write no fd (waking a thread costs the caller ~15 us)
                time.sleep(_LINGER)
                continue
            if wakeup.prepare_sleep(ready):
                poller.poll(_IDLE_MS)  # a finite backstop (primitives/wakeup.py)
                wakeup.after_wake(ready)

    def _say_waiting(self, link: Link, said: str) -> str:
        """Say on stderr once when the listener refuses the link for now (its disk
        has no room, its store failed on the stream) and once when it stores
        again; looked at after a wake, at most every _LOOK_EVERY (and at least
        every _IDLE_MS)."""
        waiting = link.stats().waiting
        if waiting != said:
            if waiting:
                _warn(
                    f"the listener at {self.url} refused stream {self.stream!r} for now "
                    f"({waiting}); log records wait on the link, up to its capacity"
                )
            else:
                _warn(f"the listener at {self.url} is storing stream {self.stream!r} again")
        return waiting

    def _send(self, link: Link, item: Any) -> None:
        cls = item.__class__
        if cls is tuple:
            try:
                payload = encode_captured(item)
            except Exception as exc:  # counted, and the thread goes on
                self._drop(f"it could not be encoded ({type(exc).__name__}: {exc})")
                return
        elif cls is bytes:
            payload = item
        else:  # a waiter's mark
            item.set()
            return
        try:
            link.queue(payload)
        except Error as exc:  # Full; or Closed, Fenced, LinkError
            self._drop(f"the link refused it ({type(exc).__name__}: {exc})")

    def _give_up(self, why: str) -> None:
        with self._gate:
            self._failure = why
        self._refusal = why
        self._drained = True
        self._strand()
        self._up.set()

    # ----------------------------------------------------------------- waiting
    def _reach(self, timeout: float | None) -> bool:
        """Wait until everything handed off so far is on the link (or dropped)."""
        if self._drained:
            return True
        mark = threading.Event()
        self._handoff.append(mark)
        if self._drained:
            self._strand()
        elif self._wakeup.armed:
            self._wakeup.signal()
        return mark.wait(timeout)

    def wait_stored(self, timeout: float | None = None) -> bool:
        """Wait until every record emitted so far is stored; False on timeout (or if
        the handler could not connect)."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(deadline - time.monotonic(), 0.0)

        if self._link is None:
            if self._thread is None:
                return not self._handoff
            if not self._up.wait(timeout):
                return False
        link = self._link
        if link is None or not self._reach(left()):
            return False
        try:
            return link.wait_stored(timeout=left())
        except Error:
            return False

    def flush(self) -> None:
        """Wait (at most `timeout` seconds) until every record emitted so far is on
        the link, whose thread sends it; not until it is stored (`wait_stored`).
        Before the first connection, returns at once: records wait for it."""
        if self._link is not None:
            self._reach(self.timeout)

    def close(self) -> None:
        """Wait until everything emitted is stored (at most `timeout` seconds), then
        close the link.  What is still unstored then is counted in `dropped` and
        reported on stderr.  Idempotent; logging.shutdown() calls it at exit."""
        with self._gate:
            closing, self._closing = self._closing, True
        if not closing:
            self._deadline = time.monotonic() + self.timeout
            thread = self._thread
            if thread is not None:
                if not self._up.wait(self.timeout):
                    self._wake.set()  # the connecting thread gives up at the deadline
                    self._up.wait(1.0)
                    if not self._up.is_set():  # still inside a connect: count for it
                        self._give_up(f"no connection to {self.url} before close() gave up")
                if self._link is not None:  # connected: the thread takes records
                    self._handoff.append(None)  # it ends there
                    self._wakeup.mark_and_signal()
                    thread.join(max(self._deadline - time.monotonic(), 0.0))
                    if thread.is_alive():  # more records than the time left to encode
                        self._abort = True
                        self._wakeup.mark_and_signal()
                        thread.join(1.0)
            self._drained = True
            self._strand()
            if self._failure is not None and self.dropped:  # never connected: say so again
                _warn(
                    f"closed with {self.dropped:,} log records for stream {self.stream!r} "
                    f"dropped: {self._failure}"
                )
            link = self._link
            if link is not None:
                left = max(self._deadline - time.monotonic(), 0.0)
                with contextlib.suppress(Error):  # a fenced link raises: counted below
                    link.close(timeout=left)
                unstored = link.queued - link.stored
                if unstored > 0:
                    with self._drop_lock:
                        self.dropped += unstored
                    _warn(
                        f"{unstored:,} log records for stream {self.stream!r} were not "
                        f"stored within {self.timeout:g} s of close()"
                    )
        super().close()

    def __repr__(self) -> str:
        level = logging.getLevelName(self.level)
        return f"<LinkHandler {self.url} stream={self.stream!r} ({level})>"


def _size(item: Any) -> int:
    """What a record held before the connection counts against `capacity_bytes`:
    its bytes, or the text of fields not encoded yet."""
    if item.__class__ is bytes:
        return len(item)
    return len(item[3]) + len(item[5] or "") + _FIELDS_SIZE


def _warn(message: str) -> None:
    """A line on stderr, never through logging (whose handler this may be)."""
    try:
        sys.stderr.write(f"purelink.logging: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # no stderr, or closed
        pass


def _call_if_alive(method: weakref.WeakMethod[Callable[[], None]]) -> None:
    """Call a weakly held bound method, unless its object is gone."""
    bound = method()
    if bound is not None:
        bound()
