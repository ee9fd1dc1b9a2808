"""One NATS connection on a thread of its own, for code that is not asyncio.

Why it exists: nats-py is an asyncio client, and purelink's listener and
readers are threads with their own loops.  A `NatsThread` runs one asyncio
event loop on a daemon thread, connects there (trying every server of the
URL, reconnecting for ever after a server dies), and lets other threads run
coroutines on it: `call` waits for the answer with a bound, `submit` hands
back a future.  Errors become `purelink.Error` with one line of text, never
a traceback from the client's own logger.

Connecting fails at once when every server of the URL refuses the
connection (nothing listens on any of those ports), as a `tcp://` link does;
only servers that answer nothing at all are waited for, up to `timeout`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from purelink.errors import ConnectError, Error

from .layout import parse_servers

__all__ = ["NatsThread", "require_nats"]

log = logging.getLogger("purelink.jetstream")
T = TypeVar("T")


def require_nats() -> Any:
    """The `nats` package, or a clear error saying how to install it."""
    try:
        import nats  # noqa: PLC0415 - an optional dependency, loaded on use
    except ImportError:
        raise Error(
            "a nats:// store needs the nats-py client: pip install 'purelink[jetstream]'"
        ) from None
    return nats


class NoAnswer(Error):
    """NATS did not answer a call within its timeout (a leader election, a node
    down: a reader may ask again)."""


class NatsThread:
    """A connection to the servers of `url` (`nats://h1:4222,h2:4222`)."""

    def __init__(self, url: str, *, timeout: float = 5.0) -> None:
        nats = require_nats()
        self.url = url
        self.servers = parse_servers(url)
        self.timeout = timeout
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="purelink-nats", daemon=True)
        self._thread.start()
        first_try = _FirstTry(len(self.servers))
        client = nats.NATS()

        async def error_cb(exc: Exception) -> None:
            first_try.failed(exc)
            log.debug("nats: %s: %s", type(exc).__name__, exc)

        async def disconnected_cb() -> None:
            if not first_try.connected:
                return  # the first connect given up, closed: nothing was connected
            log.info("nats: disconnected from %s", url)

        async def reconnected_cb() -> None:
            log.info("nats: reconnected to %s", url)

        async def connect() -> Any:
            connecting = asyncio.ensure_future(connect_once())
            refused = asyncio.ensure_future(first_try.all_refused.wait())
            await asyncio.wait(
                {connecting, refused}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            refused.cancel()
            if connecting.done():
                first_try.over()
                return connecting.result()
            connecting.cancel()
            await asyncio.gather(connecting, refused, return_exceptions=True)
            with contextlib.suppress(Exception):  # a socket to a silent server, opened
                await asyncio.wait_for(client.close(), 1.0)
            if first_try.all_refused.is_set():
                raise ConnectionRefusedError
            raise TimeoutError

        async def connect_once() -> Any:
            await client.connect(
                servers=self.servers,
                connect_timeout=min(timeout, 2.0),
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.2,
                error_cb=error_cb,
                disconnected_cb=disconnected_cb,
                reconnected_cb=reconnected_cb,
                pending_size=64 << 20,
            )
            return client

        try:
            self.nc = self.call(connect(), timeout=timeout + 5.0)
        except (TimeoutError, Error):
            self._stop_loop()
            raise ConnectError(
                f"cannot reach NATS at {url}: no server answered within {timeout:g} s"
            ) from None
        except ConnectionRefusedError:
            self._stop_loop()
            raise ConnectError(
                f"cannot reach NATS at {url}: connection refused by every server"
            ) from None
        except Exception as exc:
            self._stop_loop()
            raise ConnectError(f"cannot reach NATS at {url}: {_say(exc)}") from None
        self.js = self.nc.jetstream(timeout=timeout)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run `coro` on the connection's loop; its future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the connection's loop and wait for its result (at most
        `timeout` seconds, default the connection's): its exception is raised."""
        future = self.submit(coro)
        try:
            return future.result(self.timeout if timeout is None else timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise NoAnswer(f"NATS at {self.url} did not answer in time") from None

    def close(self) -> None:
        if self.loop.is_closed():
            return
        try:
            self.call(self.nc.close(), timeout=self.timeout)
        except Exception as exc:
            log.debug("nats: close: %s", exc)
        self._stop_loop()

    def _stop_loop(self) -> None:
        async def cancel_the_rest() -> None:  # the client's own tasks end before the loop
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self.submit(cancel_the_rest()).result(self.timeout)
        except Exception as exc:  # a best effort at shutdown
            log.debug("nats: tasks at close: %s", exc)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self.loop.close()


class _FirstTry:
    """Whether the first connect found nothing listening on any server.

    The client tries the servers of its pool in turn (each once before any
    again) and reports each failure to `error_cb`; `all_refused` is set once
    the first `servers` failures were all refusals.  Any other failure (no
    answer, a server that hung up) leaves the wait to the timeout."""

    def __init__(self, servers: int) -> None:
        self.servers = servers
        self.refusals = 0
        self.deciding = True
        self.connected = False
        self.all_refused = asyncio.Event()

    def failed(self, exc: Exception) -> None:
        if not self.deciding:
            return
        if not isinstance(exc, ConnectionRefusedError):
            self.deciding = False
            return
        self.refusals += 1
        if self.refusals >= self.servers:
            self.deciding = False
            self.all_refused.set()

    def over(self) -> None:
        """Connected: later failures are the reconnects' own."""
        self.deciding = False
        self.connected = True


def _say(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def say(exc: BaseException) -> str:
    """One line for an exception from the client."""
    return _say(exc)
