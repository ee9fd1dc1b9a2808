"""Appending purelink batches to JetStream, exactly once, from any listener.

Why it exists: it is the JetStream half of the listener's storage: where the
file store writes a batch and fdatasyncs it, this publishes it and waits for
JetStream's PubAck, which comes once a quorum of the stream's replicas has it
(with the cluster's `sync_interval: always`, on their disks).

Theory of operation.  The listener's loop calls `append(stream, writes)`,
which copies the batches (they point into receive buffers), groups each
producer's consecutive batches into messages of at most `MAX_BODY` bytes and
returns a *ticket*: a number that grows per stream.  Everything else happens
on the NATS thread.  Per stream, one *round* is in flight at a time: all the
messages queued since the last round went out are published back to back
(pipelined), each with two expectations that JetStream checks before it
stores anything:

* ``Nats-Expected-Last-Sequence``: the JetStream stream's last sequence, so
  positions, which the writer stamps into each batch, stay contiguous
  whoever writes the stream: a second listener's message in between makes
  ours fail instead of interleaving wrongly;
* ``Nats-Expected-Last-Subject-Sequence`` on the producer's subject, on the
  first message of each producer in the round: so a batch of a fenced
  session fails once a newer session's epoch marker stands on the subject
  (layout.py).  Only the first: a clustered stream checks that expectation
  against what it has applied, not against the messages still being
  proposed, so a second one in the same round would always fail; and it is
  not needed, since a marker between two of our messages would break the
  stream-wide expectation of the second.

When every message of a round is acknowledged, its tickets are `on_stored`.
When any fails (a conflict, a leader change, a timeout), the round stops and
the writer looks again: it reads the stream's tail, and for each message not
known stored asks the producer's subject what is there -- a batch reaching
its last seq means it was stored (an acknowledgement was lost); an epoch
marker newer than its session means it is fenced (`on_fenced`, never stored);
otherwise it is stamped with new positions and published again.  So a batch
is stored once, or never, and never told stored unless JetStream said so.

A producer's state (for a session's ACCEPT after a failover or a restart of
a listener with no local state) is read from its subject's last message:
one get from the stream leader (never a follower, which may lag).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from purelink.errors import Error
from purelink.protocol.batch import BatchHeader, position_bytes

from .client import NatsThread, say
from .layout import (
    MAX_BODY,
    METADATA_KEY,
    BatchHeaders,
    EpochMarker,
    batch_subject,
    batches_filter,
    decode_headers,
    decode_marker,
    encode_headers,
    encode_marker,
    stream_name,
)

__all__ = ["JetStreamWriter"]

log = logging.getLogger("purelink.jetstream")

ACK_TIMEOUT = 5.0
"""Seconds to wait for a round's PubAcks before looking again."""
RETRY_PAUSE = 0.05
RETRY_PAUSE_MAX = 1.0


@dataclass
class _Message:
    """One message to publish: one producer's consecutive batches."""

    ticket: int
    producer: int
    epoch: int
    seq: int
    count: int
    batches: list[bytearray]
    position: int = 0
    part: int = 1
    parts: int = 1

    @property
    def last_seq(self) -> int:
        return self.seq + self.count - 1


@dataclass
class _Stream:
    name: str
    js_name: str
    ready: bool = False
    last_seq: int = -1  # the JetStream stream's last sequence (-1: not read yet)
    end: int = 1  # the position the next record takes
    subjects: dict[int, int] = field(default_factory=dict)  # producer -> seq of its last message
    bases: dict[int, tuple[int, int]] = field(default_factory=dict)  # producer -> (epoch, base)
    owners: dict[int, int] = field(default_factory=dict)  # producer -> its epoch's link instance
    queue: deque[_Message] = field(default_factory=deque)
    busy: bool = False
    tickets: int = 0  # the last ticket handed out (listener thread)


class JetStreamWriter:
    """The listener's appends to the cluster behind `nats`."""

    def __init__(
        self,
        nats: NatsThread,
        *,
        replicas: int,
        on_stored: Callable[[str, int], None],
        on_fenced: Callable[[str, int, int], None],
    ) -> None:
        self.nats = nats
        self.js: Any = nats.js
        self.replicas = replicas
        self.on_stored = on_stored  # (stream, ticket): every message of that ticket is stored
        self.on_fenced = on_fenced  # (stream, producer, last seq stored): a newer session owns it
        self._streams: dict[str, _Stream] = {}
        self.messages = 0
        self.retries = 0
        self._inbox: str | None = None
        self._token = 0
        self._waiting: dict[str, asyncio.Future[int]] = {}

    # ------------------------------------------------------------ listener thread
    def check(self) -> None:
        """Refuse at once a cluster that cannot hold `replicas` copies."""
        # longer than the client's own request timeout, so that its answer (or its
        # timeout: a cluster of fewer servers may not answer at all) is what we see
        self.nats.call(self._check(), timeout=3 * self.nats.timeout)

    def append(self, stream: str, writes: Sequence[tuple[bytes | memoryview, BatchHeader]]) -> int:
        """Queue these batches (in order); returns their ticket."""
        s = self._stream(stream)
        s.tickets += 1
        ticket = s.tickets
        msgs = _group(ticket, writes)
        self.nats.loop.call_soon_threadsafe(self._enqueue, s, msgs)
        return ticket

    def idle(self) -> bool:
        """Nothing queued and no round in flight, on any stream."""
        return not any(s.busy or s.queue for s in list(self._streams.values()))

    def producer_state(self, stream: str, producer: int) -> tuple[int, int, int]:
        """(epoch, last stored seq, owner) of a producer, from its subject."""
        return self.nats.call(self._producer_state(self._stream(stream), producer))

    def new_epoch(self, stream: str, producer: int, owner: int) -> int:
        """Take the producer's next epoch (an epoch marker on its subject,
        written only if nothing else was meanwhile)."""
        return self.nats.call(self._new_epoch(self._stream(stream), producer, owner))

    def _stream(self, stream: str) -> _Stream:
        s = self._streams.get(stream)
        if s is None:
            s = self._streams[stream] = _Stream(stream, stream_name(stream))
        return s

    # ------------------------------------------------------------ NATS thread
    async def _publish(
        self, subject: str, body: bytes, headers: dict[str, str]
    ) -> asyncio.Future[int]:
        """Publish with a reply inbox of our own; the future's result is the
        message's JetStream sequence, or the API error JetStream answered.
        (nats-py's publish_async loses error answers: its reply handler raises
        where it should set the future's exception.)"""
        nc = self.nats.nc
        if self._inbox is None:
            self._inbox = nc.new_inbox()
            await nc.subscribe(self._inbox + ".*", cb=self._on_reply)
        self._token += 1
        token = str(self._token)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting[token] = future
        future.add_done_callback(lambda _: self._waiting.pop(token, None))
        await nc.publish(subject, body, reply=f"{self._inbox}.{token}", headers=headers)
        return future

    async def _on_reply(self, msg: Any) -> None:
        future = self._waiting.get(msg.subject.rpartition(".")[2])
        if future is None or future.done():
            return
        if msg.headers and msg.headers.get("Status") == "503":
            future.set_exception(Error("no JetStream stream answered (503 no responders)"))
            return
        try:
            answer = json.loads(msg.data)
        except ValueError:
            future.set_exception(Error(f"JetStream answered {msg.data[:80]!r}"))
            return
        error = answer.get("error")
        if error:
            future.set_exception(
                _Refused(int(error.get("err_code", 0)), str(error.get("description", error)))
            )
        else:
            future.set_result(int(answer["seq"]))

    async def _check(self) -> None:
        from nats.js.api import StorageType, StreamConfig  # noqa: PLC0415

        probe = "PURELINK_REPLICAS_CHECK"
        try:
            await self.js.add_stream(
                StreamConfig(
                    name=probe,
                    subjects=["purelink-check.replicas"],
                    num_replicas=self.replicas,
                    storage=StorageType.MEMORY,
                )
            )
        except Exception as exc:
            raise Error(
                f"the JetStream cluster at {self.nats.url} cannot keep {self.replicas} "
                f"replicas ({say(exc)}); give --replicas at most the number of servers"
            ) from None
        await self.js.delete_stream(probe)

    async def _ensure(self, s: _Stream) -> None:
        if s.ready:
            return
        from nats.js.api import StorageType, StreamConfig  # noqa: PLC0415
        from nats.js.errors import BadRequestError  # noqa: PLC0415

        config = StreamConfig(
            name=s.js_name,
            subjects=[batches_filter(s.name)],
            num_replicas=self.replicas,
            storage=StorageType.FILE,
            allow_direct=True,
            metadata={METADATA_KEY: s.name},
            description=f"purelink stream {s.name}",
        )
        try:
            await self.js.add_stream(config)
        except BadRequestError:  # made by another listener, with settings of its own
            await self.js.stream_info(s.js_name)
        s.ready = True

    async def _tail(self, s: _Stream) -> None:
        """Read the stream's last sequence and the position after its last record."""
        await self._ensure(s)
        info = await self.js.stream_info(s.js_name)
        s.last_seq = info.state.last_seq
        s.end = 1
        seq = s.last_seq
        while seq >= max(info.state.first_seq, 1):
            m = await self._get(s, seq)
            if m is not None:
                h = m.headers or {}
                if decode_marker(h) is None:
                    s.end = decode_headers(h).end
                    break
            seq -= 1
        s.subjects.clear()
        s.bases.clear()

    async def _get(self, s: _Stream, seq: int) -> Any:
        from nats.js.errors import NotFoundError  # noqa: PLC0415

        try:
            return await self.js.get_msg(s.js_name, seq)
        except NotFoundError:
            return None

    async def _last_on_subject(self, s: _Stream, producer: int) -> Any:
        from nats.js.errors import NotFoundError  # noqa: PLC0415

        await self._ensure(s)
        try:
            return await self.js.get_last_msg(s.js_name, batch_subject(s.name, producer))
        except NotFoundError:
            return None

    async def _producer_state(self, s: _Stream, producer: int) -> tuple[int, int, int]:
        epoch, last_seq, _ = await self._where(s, producer)
        return epoch, last_seq, s.owners.get(producer, 0)

    async def _where(self, s: _Stream, producer: int) -> tuple[int, int, int]:
        """(epoch, last stored seq, the epoch's base) from the producer's subject;
        the base is its last stored seq when that epoch was taken."""
        m = await self._last_on_subject(s, producer)
        if m is None:
            s.subjects[producer] = 0
            return 0, 0, 0
        s.subjects[producer] = m.seq
        marker = decode_marker(m.headers)
        if marker is not None:
            s.bases[producer] = (marker.epoch, marker.seq)
            s.owners[producer] = marker.owner
            return marker.epoch, marker.seq, marker.seq
        h = decode_headers(m.headers)
        s.bases[producer] = (h.epoch, h.base)
        s.owners[producer] = h.owner
        return h.epoch, h.last_seq, h.base

    async def _new_epoch(self, s: _Stream, producer: int, owner: int) -> int:
        while s.busy:  # markers go between rounds: the writer's view of the tail stays exact
            await asyncio.sleep(0.001)
        s.busy = True
        try:
            for _ in range(20):
                epoch, stored, _ = await self._producer_state(s, producer)
                headers = encode_marker(EpochMarker(epoch + 1, owner, stored))
                headers["Nats-Expected-Last-Subject-Sequence"] = str(s.subjects[producer])
                try:
                    ack = await self.js.publish(
                        batch_subject(s.name, producer), b"", headers=headers
                    )
                except Exception as exc:
                    log.debug("jetstream: epoch marker not written (%s); again", say(exc))
                    await asyncio.sleep(RETRY_PAUSE)
                    continue
                s.subjects[producer] = ack.seq
                s.bases[producer] = (epoch + 1, stored)
                s.owners[producer] = owner
                if s.last_seq >= 0:
                    s.last_seq = max(s.last_seq, ack.seq)
                return epoch + 1
            raise Error(f"stream {s.name!r}: could not take a new epoch in JetStream")
        finally:
            s.busy = False
            if s.queue:
                asyncio.get_running_loop().create_task(self._pump(s))

    def _enqueue(self, s: _Stream, msgs: list[_Message]) -> None:
        s.queue.extend(msgs)
        if not s.busy:
            asyncio.get_running_loop().create_task(self._pump(s))

    async def _pump(self, s: _Stream) -> None:
        if s.busy:
            return
        s.busy = True
        try:
            while s.queue:
                round_ = list(s.queue)
                s.queue.clear()
                await self._round(s, round_)
        except Exception:  # never silent: a bug here would leave links waiting for ever
            log.exception("purelink: JetStream writer of stream %s stopped", s.name)
            raise
        finally:
            s.busy = False

    async def _round(self, s: _Stream, msgs: list[_Message]) -> None:
        """Publish `msgs` in order until each is stored or fenced."""
        pause = RETRY_PAUSE
        while msgs:
            try:
                done, failure = await self._send(s, msgs)
            except Exception as exc:  # the cluster did not answer a look-up in time
                done, failure = 0, exc
            self.messages += done
            s.last_seq += done
            self._tell(s, msgs[:done], msgs[done:])
            if failure is None:
                return
            log.info(
                "purelink: JetStream stream %s: a publish failed (%s); looking again",
                s.name,
                say(failure),
            )
            self.retries += 1
            s.last_seq = -1  # read again: what went in is found out below
            msgs = await self._recheck(s, msgs[done:])
            await asyncio.sleep(0 if msgs and isinstance(failure, _Refused) else pause)
            pause = min(pause * 2, RETRY_PAUSE_MAX)

    async def _send(self, s: _Stream, msgs: list[_Message]) -> tuple[int, BaseException | None]:
        """Publish `msgs` back to back; how many in front were stored, and the
        first failure (None when all were)."""
        if s.last_seq < 0:
            await self._tail(s)
        futures = []
        checked: set[int] = set()
        for i, m in enumerate(msgs):
            if m.producer not in s.subjects:
                await self._producer_state(s, m.producer)
            expected = s.last_seq + i
            m.position = s.end
            _stamp(m)
            epoch, base = s.bases.get(m.producer, (m.epoch, 0))
            headers = encode_headers(
                BatchHeaders(
                    m.position,
                    m.count,
                    m.producer,
                    m.seq,
                    m.epoch,
                    m.part,
                    m.parts,
                    base=base if epoch == m.epoch else 0,
                    owner=s.owners.get(m.producer, 0) if epoch == m.epoch else 0,
                )
            )
            headers["Nats-Expected-Last-Sequence"] = str(expected)
            if m.producer not in checked:  # see the module header: the first only
                checked.add(m.producer)
                headers["Nats-Expected-Last-Subject-Sequence"] = str(s.subjects[m.producer])
            s.subjects[m.producer] = expected + 1
            if m.part == m.parts:
                s.end += m.count
            futures.append(
                await self._publish(batch_subject(s.name, m.producer), b"".join(m.batches), headers)
            )
        results = await _settle(futures, ACK_TIMEOUT)
        for done, r in enumerate(results):
            if isinstance(r, BaseException):
                return done, r
        return len(results), None

    async def _recheck(self, s: _Stream, msgs: list[_Message]) -> list[_Message]:
        """After a failure: which of `msgs` are stored after all, fenced, or to send again."""
        while True:
            try:
                await self._tail(s)
                places = [await self._where(s, m.producer) for m in msgs]
                break
            except Exception as exc:
                log.warning("purelink: JetStream stream %s: %s; again", s.name, say(exc))
                s.last_seq = -1
                await asyncio.sleep(RETRY_PAUSE_MAX)
        again: list[_Message] = []
        stored: list[_Message] = []
        for m, (epoch, last_seq, base) in zip(msgs, places, strict=True):
            if (epoch == m.epoch and last_seq >= m.last_seq) or (
                epoch > m.epoch and base >= m.last_seq
            ):
                stored.append(m)  # it went in; its acknowledgement did not come back
            elif epoch > m.epoch:
                self.on_fenced(s.name, m.producer, base)
            else:
                again.append(m)
        self._tell(s, stored, again)
        return again

    def _tell(self, s: _Stream, stored: list[_Message], rest: list[_Message]) -> None:
        """Tell the tickets all of whose messages are now stored."""
        waiting = {m.ticket for m in rest} | {m.ticket for m in s.queue}
        for ticket in sorted({m.ticket for m in stored} - waiting):
            self.on_stored(s.name, ticket)


async def _settle(futures: list[Any], timeout: float) -> list[Any]:
    """Each future's result or exception; TimeoutError for those still open
    after `timeout` (the client's own futures never time out)."""
    _, pending = await asyncio.wait(futures, timeout=timeout)
    for f in pending:
        f.cancel()
    out: list[Any] = []
    for f in futures:
        if f in pending:
            out.append(TimeoutError("no PubAck in time"))
        elif f.exception() is not None:
            out.append(f.exception())
        else:
            out.append(f.result())
    return out


class _Refused(Error):
    """JetStream refused a message (its API error code and text)."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"{text} (err_code {code})")
        self.code = code


def _stamp(m: _Message) -> None:
    if m.part > 1:  # a later part of a cut batch: its header is in part 1
        return
    position = m.position
    for b in m.batches:
        b[0:8] = position_bytes(position)
        position += int.from_bytes(b[20:24], "little")


def _group(ticket: int, writes: Sequence[tuple[bytes | memoryview, BatchHeader]]) -> list[_Message]:
    """One producer's consecutive batches of one epoch per message, each body at
    most MAX_BODY bytes; a larger batch alone, cut into parts."""
    out: list[_Message] = []
    cur: _Message | None = None
    size = 0
    for data, h in writes:
        if h.length > MAX_BODY:
            cur = None
            whole = bytes(data)
            parts = [whole[i : i + MAX_BODY] for i in range(0, len(whole), MAX_BODY)]
            for k, piece in enumerate(parts, 1):
                out.append(
                    _Message(
                        ticket,
                        h.producer,
                        h.epoch,
                        h.first_seq,
                        h.count,
                        [bytearray(piece)],
                        part=k,
                        parts=len(parts),
                    )
                )
            continue
        if (
            cur is None
            or cur.producer != h.producer
            or cur.epoch != h.epoch
            or cur.seq + cur.count != h.first_seq
            or size + h.length > MAX_BODY
        ):
            cur = _Message(ticket, h.producer, h.epoch, h.first_seq, 0, [])
            out.append(cur)
            size = 0
        cur.batches.append(bytearray(data))
        cur.count += h.count
        size += h.length
    return out
