"""purelink.logging: a `logging.Handler` that ships every log record through a link.

Why it exists: the most common thing a Python service ships is its own logs,
and the standard library's network handlers either block the logging thread
(SocketHandler, HTTPHandler) or lose records silently when the far side is
down.  `LinkHandler` gives log calls the link's contract: the call never
waits, and a record is either stored (written and fsynced by the listener)
or counted in `dropped`.

Theory of operation:

* `emit` formats the record (a JSON object by default; a `logging.Formatter`
  replaces that) and hands the bytes to `Link.queue`, which takes no lock and
  makes no system call.  `handle` is overridden to skip `logging.Handler`'s
  per-handler lock: nothing here needs it, and without it a thread that
  logs is never held up by another thread's `flush`/`close`.
* The first `emit` starts a daemon thread that connects (with backoff, for as
  long as it takes), so the application's first log call never waits for a
  handshake.  Until the link is up, records wait in a deque bounded by
  `capacity` (and `capacity_bytes`); the thread moves them onto the link in
  order, and from then on `emit` queues straight onto the link.  The switch is
  made under `_gate`, a lock that only the records emitted before the switch
  take: once `_link` is set no emit touches it.
* The link itself keeps every unstored record through listener restarts and
  outages (up to `capacity`); past that `queue` raises `Full`, and the record
  is counted in `dropped`, with one warning on stderr (never through
  `logging`, which would come back here).
* `close()` -- which `logging.shutdown()` calls at interpreter exit -- waits
  until everything emitted is stored, at most `timeout` seconds, then counts
  what is left as dropped and says so on stderr.  `flush()` does not wait:
  the link's thread sends records as they come, as a FileHandler's flush hands
  bytes to the OS without fsyncing them; `wait_stored()` is the checkpoint.
* After `os.fork()` the child starts afresh (its parent's link thread does not
  exist there): a new connection at once, in the child, the parent's
  unconnected records left to the parent.  A named `producer` must then
  differ per process, or the child's session fences the parent's.
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import json
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from purelink import _address
from purelink.errors import ConnectError, Error
from purelink.link import Link, connect
from purelink.protocol.names import validate_stream_name

__all__ = ["JSONFormatter", "LinkHandler", "decode"]

# LogRecord attributes that are not `extra=` fields
_BARE = logging.LogRecord("", 0, "", 0, "", (), None).__dict__
_BARE_SIZE = len(_BARE)  # a record with no more attributes than this has no extra= field
_STANDARD = frozenset(_BARE) | {"message", "asctime", "taskName"}
# one encoder for every record: json.dumps() with options builds a new one per call
_json = json.JSONEncoder(default=str, ensure_ascii=False, separators=(",", ":")).encode
_FIXED = ("time", "level", "logger", "message", "thread", "exception", "stack")
_PLAIN = (str, int, float, bool, type(None))
_BACKOFF_FIRST = 0.05
_BACKOFF_MAX = 2.0
_CONNECT_FIRST = 0.5  # the first handshake's timeout, doubling up to _CONNECT_MAX
_CONNECT_MAX = 5.0
_DRAIN_OUTSIDE_GATE = 1024  # pending records moved before taking the gate for the rest


def decode(payload: bytes | bytearray | memoryview | str) -> dict[str, Any]:
    """One record written by LinkHandler's default format, as a dict.

    Keys: `time` (Unix time, seconds), `level`, `logger`, `message`, `thread`,
    `exception` and `stack` when the call had them, and every `extra=` field
    (one named like a key above is stored as ``extra.<name>``).  Raises
    ValueError for a payload that is not such a record.
    """
    text = payload if isinstance(payload, str) else bytes(payload).decode("utf-8")
    value = json.loads(text)
    if not isinstance(value, dict) or "message" not in value:
        raise ValueError("not a purelink.logging record (a JSON object with a message)")
    return value


def _plain(value: Any, depth: int = 0) -> Any:
    """`value` with everything JSON cannot encode made a string (a cycle too, at depth 16)."""
    if isinstance(value, _PLAIN):
        return value
    if depth < 16:
        if isinstance(value, dict):
            return {
                k if isinstance(k, str) else str(k): _plain(v, depth + 1) for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [_plain(v, depth + 1) for v in value]
    return str(value)


class JSONFormatter(logging.Formatter):
    """LinkHandler's default format: one JSON object per record (see `decode`).

    Usable with any handler (`logging.FileHandler` for JSON lines, say).
    """

    def format(self, record: logging.LogRecord) -> str:
        return self.encode(record).decode("utf-8")

    def encode(self, record: logging.LogRecord) -> bytes:
        """The record as UTF-8 JSON."""
        doc: dict[str, Any] = {
            "time": record.created,
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "thread": record.threadName,
        }
        # cached on the record, as logging.Formatter does; loguru hands over "\n"
        if record.exc_info and not (record.exc_text and record.exc_text.strip()):
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            doc["exception"] = record.exc_text
        if record.stack_info:
            doc["stack"] = record.stack_info
        fields = record.__dict__
        if len(fields) > _BARE_SIZE:
            for key in sorted(fields.keys() - _STANDARD):
                doc[f"extra.{key}" if key in _FIXED else key] = fields[key]
        try:
            text = _json(doc)
        except (TypeError, ValueError):  # keys JSON cannot take, a cycle
            text = _json(_plain(doc))
        return text.encode("utf-8", "backslashreplace")


class LinkHandler(logging.Handler):
    """Ships each log record as one record on stream `stream` of the listener at `url`.

    `url`, `stream`, `producer`, `secret`, `capacity` and `capacity_bytes` are
    those of `purelink.connect`; `secret_file` reads the secret from a file (one
    trailing newline dropped), for `logging.config.dictConfig`; `key_id` is
    passed to connect.  `formatter` replaces the JSON format (JSONFormatter), as
    `setFormatter` does, which `dictConfig`'s "formatter" key calls.
    `timeout`: how long `close()` waits for everything to be stored.
    """

    def __init__(
        self,
        url: str,
        stream: str,
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
        _address.parse_url(url)  # bad ones raise ValueError here, not on a thread later
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
        self.timeout = timeout
        self._capacity = capacity
        self._capacity_bytes = capacity_bytes
        # a formatter of its own: logging.basicConfig(handlers=...) gives one to every
        # handler that has none, which would turn the JSON off
        self.setFormatter(formatter if formatter is not None else JSONFormatter())
        self.dropped = 0
        """Records not stored: refused by a full link, emitted after close, or
        still unstored when close() gave up."""
        self._drop_lock = threading.Lock()  # drops may race: the count stays exact
        self._warned = False
        self._closing = False
        self._reset()
        self._start()  # connect now, in the background: the first log call must not wait
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _after_fork(ref))

    def _reset(self) -> None:
        """The state of a handler that has not connected yet."""
        self._link: Link | None = None
        self._gate = threading.Lock()
        self._pending: collections.deque[bytes] = collections.deque()
        self._pending_bytes = 0
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()  # close() wakes the connecting thread's backoff
        self._up = threading.Event()  # set once the pending records are on the link
        self._deadline = float("inf")  # the connecting thread gives up past this
        self._failure: str | None = None  # why the link could not be made, if it gave up

    @property
    def link(self) -> Link | None:
        """The link, once connected (None before)."""
        return self._link

    @property
    def pending(self) -> int:
        """Records waiting for the first connection."""
        return len(self._pending)

    # ------------------------------------------------------------ logging's side
    def handle(self, record: logging.LogRecord) -> Any:
        """Filter and emit, without logging.Handler's lock (see the module header)."""
        rv = self.filter(record)
        if isinstance(rv, logging.LogRecord):  # a filter may return a new record (3.12+)
            record = rv
        if rv:
            self.emit(record)
        return rv

    def emit(self, record: logging.LogRecord) -> None:
        """Format the record and queue it; never blocks, never raises into the caller."""
        try:
            payload = self._encode(record)
        except Exception:
            self.handleError(record)
            return
        link = self._link
        if link is None:
            link = self._hold(payload)
            if link is None:
                return
        try:
            link.queue(payload)
        except Error as exc:  # Full; or Closed, Fenced, LinkError
            self._drop(f"the link refused it ({type(exc).__name__}: {exc})")

    def _encode(self, record: logging.LogRecord) -> bytes:
        formatter = self.formatter
        if formatter.__class__ is JSONFormatter:
            return formatter.encode(record)
        return self.format(record).encode("utf-8", "backslashreplace")

    def _hold(self, payload: bytes) -> Link | None:
        """Before the link is up: keep the record for it (or drop it).  Returns the
        link instead if it came up meanwhile, for the caller to queue on."""
        with self._gate:
            link = self._link
            if link is not None:
                return link
            if self._closing and self._up.is_set():
                self._drop("the handler is closed")
                return None
            if self._failure is not None:
                self._drop(self._failure)
                return None
            if (
                len(self._pending) >= self._capacity
                or self._pending_bytes + len(payload) > self._capacity_bytes
            ):
                self._drop(f"not connected to {self.url} yet and the capacity is used up")
                return None
            self._pending.append(payload)
            self._pending_bytes += len(payload)
            if self._thread is None:  # a fork's child: its parent's thread is not here
                self._start()
        return None

    def _start(self) -> None:
        """Start the connecting thread (under the gate, or before anyone logs)."""
        self._thread = threading.Thread(
            target=self._connect_loop, name=f"purelink-log-{self.stream}", daemon=True
        )
        self._thread.start()

    def _drop(self, why: str, count: int = 1) -> None:
        with self._drop_lock:
            self.dropped += count
            warn, self._warned = not self._warned, True
        if warn:
            _warn(
                f"dropped a log record for stream {self.stream!r}: {why}; "
                "further drops are counted in handler.dropped, not reported"
            )

    # ------------------------------------------------------- the connecting thread
    def _connect_loop(self) -> None:
        time.sleep(0)  # let the thread that started this one have the GIL back at once
        delay = _BACKOFF_FIRST
        patience = _CONNECT_FIRST
        told = False
        while True:
            left = self._deadline - time.monotonic()
            if left <= 0:
                self._give_up(f"no connection to {self.url} before close() gave up")
                return
            try:
                link = connect(
                    self.url,
                    stream=self.stream,
                    timeout=min(patience, left),
                    **self._options,
                )
                break
            except ConnectError as exc:
                if not told:
                    told = True
                    _warn(
                        f"cannot reach {self.url} ({exc}); retrying in the background, "
                        f"holding up to {self._capacity:,} log records meanwhile"
                    )
            # will not get better; RuntimeError: no new thread at interpreter shutdown (3.12+)
            except (Error, ValueError, TypeError, OSError, RuntimeError) as exc:
                self._give_up(f"cannot connect to {self.url}: {exc}")
                return
            self._wake.wait(min(delay, max(self._deadline - time.monotonic(), 0.0)))
            delay = min(delay * 2, _BACKOFF_MAX)
            patience = min(patience * 2, _CONNECT_MAX)
        pending = self._pending
        while len(pending) > _DRAIN_OUTSIDE_GATE:  # emit only appends on the right
            self._move(link, pending.popleft())
        with self._gate:
            late = self._failure is not None  # close() gave up while this connect ran
            if not late:
                while pending:
                    self._move(link, pending.popleft())
                self._pending_bytes = 0
                self._link = link
        if late:
            with contextlib.suppress(Error):  # Fenced: its records are counted below
                link.close(timeout=0)
            if link.queued > link.stored:
                self._drop(self._failure or "", link.queued - link.stored)
        self._up.set()

    def _move(self, link: Link, payload: bytes) -> None:
        self._pending_bytes -= len(payload)
        try:
            link.queue(payload)
        except Error as exc:
            self._drop(f"the link refused it ({type(exc).__name__}: {exc})")

    def _give_up(self, why: str) -> None:
        with self._gate:
            self._failure = why
            count = len(self._pending)
            self._pending.clear()
            self._pending_bytes = 0
        if count:
            self._drop(why, count)
        self._up.set()

    # ----------------------------------------------------------------- waiting
    def wait_stored(self, timeout: float | None = None) -> bool:
        """Wait until every record emitted so far is stored; False on timeout (or if
        the handler could not connect)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._link is None:
            if self._thread is None:
                return not self._pending
            if not self._up.wait(timeout):
                return False
        link = self._link
        if link is None:
            return False
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        try:
            return link.wait_stored(timeout=left)
        except Error:
            return False

    def flush(self) -> None:
        """Nothing to do: the link's thread sends records as they are queued
        (`wait_stored` waits for them to be stored)."""

    def close(self) -> None:
        """Wait until everything emitted is stored (at most `timeout` seconds), then
        close the link.  What is still unstored then is counted in `dropped` and
        reported on stderr.  Idempotent; logging.shutdown() calls it at exit."""
        with self._gate:
            closing, self._closing = self._closing, True
        if not closing:
            self._deadline = time.monotonic() + self.timeout
            if self._thread is not None:
                if not self._up.wait(self.timeout):
                    self._wake.set()  # the connecting thread gives up at the deadline
                    self._up.wait(1.0)
                    if not self._up.is_set():  # still inside a connect: count for it
                        self._give_up(f"no connection to {self.url} before close() gave up")
            else:
                self._up.set()
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


def _warn(message: str) -> None:
    """A line on stderr, never through logging (whose handler this may be)."""
    try:
        sys.stderr.write(f"purelink.logging: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # no stderr, or closed
        pass


def _after_fork(ref: Callable[[], LinkHandler | None]) -> None:
    handler = ref()
    if handler is not None:
        handler._reset()
        # connect now, not at the child's first log call: a child that logs and
        # exits at once would otherwise start the thread during interpreter
        # shutdown, which CPython 3.12.0-3.12.1 refuses (RuntimeError)
        handler._start()
