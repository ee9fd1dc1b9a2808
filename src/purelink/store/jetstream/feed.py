"""A JetStream stream's messages in order from a sequence, waiting in the cluster for more.

Why it exists: a follower -- a subscriber of a `nats://` listener
(listener/tail/jetstream.py) or `Store("nats://...").read(follow=True)` (reader.py)
-- must get each new message as soon as a quorum stored it, without asking
the cluster over and over.  A `Feed` is an ephemeral pull consumer of its
own (no acknowledgements, in memory, one replica; the cluster drops it
`INACTIVE` seconds after its last request should its owner die), starting
at a given sequence.  JetStream delivers a message to a consumer only once
its Raft group committed it, that is once a quorum appended it: what a
PubAck waits for.

`fetch` (a coroutine, on the connection's loop) returns up to `batch`
messages, or none after a long poll of `WAIT` seconds, so an idle follower
costs two small requests per `WAIT` (the fetch, and a look that its consumer
is still there).  A consumer the cluster lost, or whose server died (it has
one replica), is made again from the message after the last one fetched,
for up to `GIVE_UP` seconds of failures in a row; a caller drops by sequence
what that may bring twice.  Not thread-safe: one caller, one fetch at a
time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Final

__all__ = ["GIVE_UP", "INACTIVE", "WAIT", "Feed", "Message"]

WAIT: Final = 2.0
"""Seconds a fetch waits in the cluster for a message before it returns none."""
ALIVE_TIMEOUT: Final = 1.0
"""Seconds the consumer has to answer after an empty fetch, or it is made again."""
RETRY_PAUSE: Final = 0.05
"""Seconds before a fetch after a failed one (a consumer not ready yet, a server gone)."""
GIVE_UP: Final = 30.0
"""Seconds of failed fetches in a row after which `fetch` raises."""
INACTIVE: Final = 60.0
"""Seconds after its last request that the cluster drops a consumer."""

Message = tuple[int, dict[str, str], bytes, float | None]
"""(JetStream sequence, headers, body, when the cluster stored it: Unix seconds)."""

_deleting: set[asyncio.Future[None]] = set()
"""Consumer deletions under way (a task must be referenced until it ends)."""


class Feed:
    """The messages of JetStream stream `name` from sequence `seq`, through `js`."""

    def __init__(self, js: Any, name: str, seq: int, batch: int) -> None:
        self.js = js
        self.name = name
        self.batch = batch
        self.pulled = seq
        """The sequence after the last one fetched (a consumer made again starts there)."""
        self._sub: Any = None  # the pull subscription
        self._consumer: str | None = None  # its consumer's name
        self._failing = 0.0  # when the fetches that failed in a row began (0: none)

    async def fetch(self) -> list[Message]:
        """Up to `batch` messages from the next one, or none after WAIT seconds (or
        after a failure the next fetch will try to get past)."""
        import nats.js.errors  # noqa: PLC0415 - optional dependency

        try:
            if self._sub is None:
                await self._subscribe()
            got = await self._sub.fetch(self.batch, timeout=WAIT)
        except TimeoutError:  # nothing new, or a consumer the cluster lost?
            if not await self._alive():
                await self.close()  # made again from the next message at the next fetch
            return []
        except Exception as exc:  # not ready yet (a new consumer, a leader change), or its
            now = time.monotonic()  # server gone: ask again, on a new consumer if it is
            self._failing = self._failing or now  # not the first, for a while
            if now - self._failing > GIVE_UP:
                raise
            if not isinstance(exc, nats.js.errors.ServiceUnavailableError):
                await self.close()
            await asyncio.sleep(RETRY_PAUSE)
            return []
        self._failing = 0.0
        if got:
            self.pulled = got[-1].metadata.sequence.stream + 1
        return [
            (m.metadata.sequence.stream, dict(m.headers or {}), m.data or b"", _stamp(m))
            for m in got
        ]

    async def close(self, wait: bool = False) -> None:
        """Forget the consumer and delete it, in the background unless `wait` (the
        cluster also drops it INACTIVE seconds after its last request, should
        that fail: its server may be gone).  A later fetch makes a new one."""
        sub, name, self._sub, self._consumer = self._sub, self._consumer, None, None
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        if name is not None and wait:
            await self._delete(name)
        elif name is not None:
            task = asyncio.ensure_future(self._delete(name))
            _deleting.add(task)
            task.add_done_callback(_deleting.discard)

    async def _alive(self) -> bool:
        """Whether the consumer still answers (a server holding it may have died)."""
        try:
            await asyncio.wait_for(self._sub.consumer_info(), ALIVE_TIMEOUT)
        except Exception:
            return False
        return True

    async def _subscribe(self) -> None:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy  # noqa: PLC0415

        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=self.pulled,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=INACTIVE,
            num_replicas=1,
            mem_storage=True,
        )
        info = await self.js.add_consumer(self.name, config)
        self._consumer = info.name
        self._sub = await self.js.pull_subscribe_bind(consumer=info.name, stream=self.name)

    async def _delete(self, name: str) -> None:
        with contextlib.suppress(Exception):
            await self.js.delete_consumer(self.name, name)


def _stamp(msg: Any) -> float | None:
    """When the cluster stored a fetched message (Unix seconds), if it says."""
    when = getattr(msg.metadata, "timestamp", None)
    return when.timestamp() if when is not None else None
