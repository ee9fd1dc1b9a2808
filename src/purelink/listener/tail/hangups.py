"""Tells a parked follower at once that its subscriber hung up (server.py).

Why it exists: a follower at the tail of an idle stream parks on the
stream's parker (mechanism 2) and wakes only when a record is stored, so it
could not see its subscriber leave until a heartbeat timer fired -- seconds
in which the subscription held its slot (`max_subscriptions`) and a new
subscriber was refused.  A timer short enough to matter would wake every
idle follower many times a second, and an idle listener must stay asleep.

So one thread watches every follower's socket in one epoll, for
EPOLLRDHUP/EPOLLHUP/EPOLLERR (and EPOLLIN: a subscriber sends nothing after
its request, so bytes are as good as a hang-up -- the follower reads and
refuses them).  When one fires it calls that follower's `on_event`, which
flags the follower and unparks its stream's parker; the follower wakes,
checks its socket itself (`_hung_up`), and lets its slot go.  The thread
sleeps in `epoll.poll()` with no timeout: nothing fires while nothing
happens.

Each socket is registered EPOLLONESHOT: an event disarms it until the
follower re-arms it (`rearm`, after a wake that found its subscriber still
there), so a socket with unread bytes cannot spin the thread.  A stale event
for a descriptor number that was closed and reused by another follower is
harmless: the callback only asks that follower to look, and it re-arms.
The thread starts with the first follower and stops on `close()`.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
from collections.abc import Callable
from typing import Final

__all__ = ["HangUps"]

_EVENTS: Final = (
    select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR | select.EPOLLONESHOT
)


class HangUps:
    """One epoll and one thread for every follower's socket (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._epoll: select.epoll | None = None
        self._stop_fd = -1
        self._thread: threading.Thread | None = None
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._closed = False
        self.events = 0
        """Events delivered to followers (a hang-up, bytes, or a stale event)."""

    def watch(self, sock: socket.socket, on_event: Callable[[], None]) -> bool:
        """Call `on_event` (on the watch thread) when `sock` hangs up or has bytes.
        False if the watch cannot run (closed, or no thread or descriptor to be had):
        the caller then falls back to looking now and then."""
        fd = sock.fileno()
        with self._lock:
            if self._closed:
                return False
            try:
                epoll = self._start()
                epoll.register(fd, _EVENTS)
            except (OSError, RuntimeError):
                return False
            self._callbacks[fd] = on_event
        return True

    def rearm(self, sock: socket.socket) -> None:
        """Watch `sock` again after an event (EPOLLONESHOT disarmed it)."""
        with self._lock:
            if self._epoll is not None and sock.fileno() in self._callbacks:
                with contextlib.suppress(OSError):
                    self._epoll.modify(sock.fileno(), _EVENTS)

    def unwatch(self, sock: socket.socket) -> None:
        """Stop watching `sock` (before it is closed)."""
        fd = sock.fileno()
        with self._lock:
            if self._callbacks.pop(fd, None) is not None and self._epoll is not None:
                with contextlib.suppress(OSError):
                    self._epoll.unregister(fd)

    def close(self) -> None:
        """Stop the thread and release the epoll."""
        with self._lock:
            self._closed = True
            thread = self._thread
            if self._stop_fd >= 0:
                os.eventfd_write(self._stop_fd, 1)
        if thread is not None:
            thread.join(5.0)
        with self._lock:
            if self._epoll is not None:
                self._epoll.close()
                self._epoll = None
            if self._stop_fd >= 0:
                os.close(self._stop_fd)
                self._stop_fd = -1
            self._callbacks.clear()

    def _start(self) -> select.epoll:
        """The epoll, and its thread running (under _lock)."""
        if self._epoll is None:
            epoll = select.epoll()
            try:
                self._stop_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
                epoll.register(self._stop_fd, select.EPOLLIN)
                thread = threading.Thread(
                    target=self._run, args=(epoll,), name="purelink-tail-hangups", daemon=True
                )
                thread.start()
            except BaseException:
                epoll.close()
                if self._stop_fd >= 0:
                    os.close(self._stop_fd)
                    self._stop_fd = -1
                raise
            self._epoll, self._thread = epoll, thread
        return self._epoll

    def _run(self, epoll: select.epoll) -> None:
        stop = self._stop_fd
        while True:
            try:
                ready = epoll.poll()
            except OSError:  # closed under us: the listener is closing
                return
            for fd, _ in ready:
                if fd == stop:
                    return
                with self._lock:
                    callback = self._callbacks.get(fd)
                    self.events += callback is not None
                if callback is not None:
                    callback()
