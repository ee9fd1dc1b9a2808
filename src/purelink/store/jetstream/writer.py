"""Appending purelink batches to JetStream, exactly once, from any listener.

Why it exists: it is the JetStream half of the listener's storage: where the
file store writes a batch and fdatasyncs it, this publishes it and waits for
JetStream's PubAck, which comes once a quorum of the stream's replicas has it
(with the cluster's `sync_interval: always`, on their disks).

Theory of operation.  The listener's loop calls `append(stream, writes)`,
which copies the batches into messages (batching.py) and returns a *ticket*:
a number that grows per stream.  Everything else happens on the NATS thread.
Per stream, one *round* is in flight at a time: the messages queued since
the last one went out, those of one producer that continue each other merged
into messages of up to 1 MB (batching.take), at most `ROUND_MESSAGES` of them
or `ROUND_BYTES`.  A round of several messages is one JetStream *atomic
batch* (`Nats-Batch-Id`, `-Sequence`, `-Commit`: the stream is created with
`allow_atomic`): the leader stores all of it or none of it, in one proposal,
and answers once.  JetStream checks two expectations before it stores
anything:

* ``Nats-Expected-Last-Sequence`` on the round's first message: the
  JetStream stream's last sequence, so positions, which the writer stamps
  into each batch, stay contiguous whoever writes the stream: a second
  listener's message in between makes the round fail instead of
  interleaving wrongly;
* ``Nats-Expected-Last-Subject-Sequence`` on the producer's subject, on the
  first message of each producer in the round: so a batch of a fenced
  session fails once a newer session's epoch marker stands on the subject
  (layout.py).

Why rounds, and not messages pipelined one behind the other: JetStream checks
an expected last sequence when the leader proposes a message, counting what
is proposed but not yet stored; so when one message of a pipeline is refused
because another listener's message got in first, the next one -- expecting
the sequence the refused one would have taken, which the stranger's now
holds -- passes, and lands with positions that assumed the refused one.
(`Nats-Expected-Last-Msg-Id` would catch it, but the replicas check that one
as they apply, and in a clustered stream a failed check there stops the
stream.)  An atomic batch is the one way to have several messages in one
answer that stand or fall together.  A stream made without `allow_atomic` (by
another tool) gets rounds of one message.

When a round is acknowledged, `on_stored(stream, t)` tells the last ticket
all of whose messages are stored (a ticket told covers those before it; a
fenced message counts as resolved, and `on_fenced` said so first).  When it
fails (a refusal, a leader change, no PubAck within `ACK_TIMEOUT`), the
writer looks again: it reads the stream's tail, and for each message of the
round asks the producer's subject what is there -- a batch reaching its last
seq means it was stored (the acknowledgement was lost); an epoch marker newer
than its session means it is fenced (`on_fenced`, never stored); otherwise it
goes back to the front of the queue, to be stamped with new positions and
published again.  So a batch is stored once, or never, and never told stored
unless JetStream said so.

A producer's state (for a session's ACCEPT after a failover or a restart of
a listener with no local state) is read from its subject's last message:
one get from the stream leader (never a follower, which may lag).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from purelink.errors import Error
from purelink.protocol.batch import BatchHeader

from .batching import Message, group, stamp, take
from .client import NatsThread, say
from .layout import (
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

ACK_TIMEOUT = 2.0
"""Seconds a round's PubAck may take before the writer looks again (a quorum's
fsync takes milliseconds; a leader that died never answers)."""
ROUND_MESSAGES = 256
"""Most messages in one round (one atomic batch; JetStream takes up to 1,000)."""
ROUND_BYTES = 4 << 20
"""A round takes no more messages once its bodies reach this many bytes."""
RETRY_PAUSE = 0.05
RETRY_PAUSE_MAX = 1.0
LOOK_PAUSE = 0.2
"""Seconds between looks at a stream that does not answer (no leader yet)."""


@dataclass
class _Stream:
    name: str
    js_name: str
    ready: bool = False
    atomic: bool = False  # the stream takes atomic batches (allow_atomic)
    last_seq: int = -1  # the JetStream stream's last sequence (-1: read the tail)
    end: int = 1  # the position the next record takes
    subjects: dict[int, int] = field(default_factory=dict)  # producer -> seq of its last message
    bases: dict[int, tuple[int, int]] = field(default_factory=dict)  # producer -> (epoch, base)
    owners: dict[int, int] = field(default_factory=dict)  # producer -> its epoch's link instance
    queue: deque[Message] = field(default_factory=deque)  # not yet published
    inflight: list[Message] = field(default_factory=list)  # the round in flight
    busy: bool = False  # the pump runs
    hold: int = 0  # epoch markers waiting for the round in flight to end
    enqueued: int = 0  # the last ticket whose messages are queued (NATS thread)
    told: int = 0  # the last ticket told stored
    pause: float = RETRY_PAUSE
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
        self.on_stored = on_stored  # (stream, ticket): every message up to that ticket is stored
        self.on_fenced = on_fenced  # (stream, producer, last seq stored): a newer session owns it
        self._streams: dict[str, _Stream] = {}
        self.messages = 0
        """Messages acknowledged."""
        self.retries = 0
        """Times a publish failed and the writer looked again."""
        self.rounds = 0
        """Rounds published (a round published again counts again)."""
        self.round_messages = 0
        """Messages of those rounds."""
        self._inbox: str | None = None
        self._token = 0
        self._ids = 0
        self._id = secrets.token_hex(8)
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
        msgs = group(ticket, writes)
        self.nats.loop.call_soon_threadsafe(self._enqueue, s, ticket, msgs)
        return ticket

    def idle(self) -> bool:
        """Nothing queued and no round in flight, on any stream."""
        return not any(s.busy or s.queue or s.inflight for s in list(self._streams.values()))

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
    def _next_id(self) -> str:
        self._ids += 1
        return f"{self._id}.{self._ids}"

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
        from nats.errors import TimeoutError as NoAnswer  # noqa: PLC0415
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
        except NoAnswer:
            raise Error(
                f"the JetStream cluster at {self.nats.url} did not answer within "
                f"{self.nats.timeout:g} s whether it can keep {self.replicas} replicas "
                "(a cluster of fewer servers, or one electing its meta leader, says "
                "nothing); give --replicas at most the number of servers"
            ) from None
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
            allow_atomic=True,
            metadata={METADATA_KEY: s.name},
            description=f"purelink stream {s.name}",
        )
        try:
            info = await self.js.add_stream(config)
        except BadRequestError:  # made by another listener, with settings of its own
            info = await self.js.stream_info(s.js_name)
        s.atomic = bool(info.config.allow_atomic)
        s.ready = True

    async def _tail(self, s: _Stream) -> None:
        """Read the stream's last sequence and the position after its last record."""
        await self._ensure(s)
        s.last_seq = -1
        info = await self.js.stream_info(s.js_name)
        last_seq, end = info.state.last_seq, 1
        seq = last_seq
        while seq >= max(info.state.first_seq, 1):
            m = await self._get(s, seq)
            if m is not None:
                h = m.headers or {}
                if decode_marker(h) is None:
                    end = decode_headers(h).end
                    break
            seq -= 1
        s.subjects.clear()
        s.bases.clear()
        s.last_seq, s.end = last_seq, end

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
        s.hold += 1  # markers go between rounds: the writer's view of the tail stays exact
        try:
            while s.busy:
                await asyncio.sleep(0.001)
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
            s.hold -= 1
            if s.queue and not s.busy:
                asyncio.get_running_loop().create_task(self._pump(s))

    def _enqueue(self, s: _Stream, ticket: int, msgs: list[Message]) -> None:
        s.queue.extend(msgs)
        s.enqueued = ticket
        if not s.busy:
            asyncio.get_running_loop().create_task(self._pump(s))

    async def _pump(self, s: _Stream) -> None:
        """Publish `s`'s queue, one round at a time, until it is empty."""
        if s.busy:
            return
        s.busy = True
        try:
            while s.queue and not s.hold:
                if s.last_seq < 0:
                    await self._look(s)
                    continue
                round_ = self._next_round(s)
                self.rounds += 1
                self.round_messages += len(round_)
                failure = await self._send(s, round_)
                if failure is None:
                    self.messages += len(round_)
                    s.pause = RETRY_PAUSE
                    self._tell(s)
                else:
                    await self._recover(s, round_, failure)
        except Exception:  # never silent: a bug here would leave links waiting for ever
            log.exception("JetStream writer of stream %s stopped", s.name)
            raise
        finally:
            s.busy = False

    def _next_round(self, s: _Stream) -> list[Message]:
        """The messages of the next round: everything queued (merged), within
        the round's limits; one message on a stream without atomic batches."""
        round_ = [take(s.queue)]
        size = round_[0].size
        if s.atomic:
            while s.queue and len(round_) < ROUND_MESSAGES and size < ROUND_BYTES:
                m = take(s.queue)
                round_.append(m)
                size += m.size
        s.inflight.extend(round_)  # seen by idle() and _tell() until resolved
        return round_

    async def _look(self, s: _Stream) -> None:
        """Read the stream's tail (after a pause, if that fails)."""
        try:
            await self._tail(s)
        except Exception as exc:  # the cluster did not answer in time
            log.warning("JetStream stream %s: %s; again", s.name, say(exc))
            s.last_seq = -1
            await asyncio.sleep(LOOK_PAUSE)

    async def _send(self, s: _Stream, msgs: list[Message]) -> BaseException | None:
        """Publish one round (one atomic batch when it has several messages) and
        wait for its PubAck; the failure, or None when every message is stored."""
        batch = self._next_id() if len(msgs) > 1 else ""
        expected = s.last_seq
        end = s.end
        seen: set[int] = set()
        future: asyncio.Future[int] | None = None
        try:
            for i, m in enumerate(msgs):
                if m.producer not in s.subjects:
                    await self._producer_state(s, m.producer)
                m.js_seq = expected + 1 + i
                m.position = end
                stamp(m)
                if m.part == m.parts:
                    end += m.count
                headers = self._headers(s, m)
                if i == 0:  # in a batch, only the first may say it (the server's rule)
                    headers["Nats-Expected-Last-Sequence"] = str(expected)
                if m.producer not in seen:  # only the first of each producer: see the header
                    seen.add(m.producer)
                    headers["Nats-Expected-Last-Subject-Sequence"] = str(s.subjects[m.producer])
                if batch:
                    headers["Nats-Batch-Id"] = batch
                    headers["Nats-Batch-Sequence"] = str(i + 1)
                    if i == len(msgs) - 1:
                        headers["Nats-Batch-Commit"] = "1"
                body = b"".join(m.batches)
                subject = batch_subject(s.name, m.producer)
                if i == len(msgs) - 1:  # the round's one answer: the commit's, or the message's
                    future = await self._publish(subject, body, headers)
                else:
                    await self.nats.nc.publish(subject, body, headers=headers)
            assert future is not None
            seq = await asyncio.wait_for(future, ACK_TIMEOUT)
        except TimeoutError:
            return TimeoutError("no PubAck in time")
        except Exception as exc:  # a refusal, or the connection is closing
            return exc
        if seq != msgs[-1].js_seq:  # never so: JetStream checked our expectation
            return Error(f"JetStream stored the round at {seq}, not {msgs[-1].js_seq}")
        for m in msgs:
            s.subjects[m.producer] = m.js_seq
        s.last_seq, s.end = seq, end
        return None

    def _headers(self, s: _Stream, m: Message) -> dict[str, str]:
        epoch, base = s.bases.get(m.producer, (m.epoch, 0))
        return encode_headers(
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

    async def _recover(self, s: _Stream, msgs: list[Message], failure: BaseException) -> None:
        """A round failed: look at the stream for what went in after all, and
        queue again what did not."""
        log.info(
            "JetStream stream %s: a publish failed (%s); looking again",
            s.name,
            say(failure),
        )
        self.retries += 1
        s.last_seq = -1  # read again below: what went in is found out there
        again = await self._recheck(s, msgs)
        s.inflight.clear()
        s.queue.extendleft(reversed(again))
        self._tell(s)
        if again and not isinstance(failure, _Refused):
            await asyncio.sleep(s.pause)  # the cluster is changing: do not hammer it
            s.pause = min(s.pause * 2, RETRY_PAUSE_MAX)

    async def _recheck(self, s: _Stream, msgs: list[Message]) -> list[Message]:
        """After a failure: which of `msgs` are stored after all, fenced, or to send again."""
        while True:
            try:
                await self._tail(s)
                places = [await self._where(s, m.producer) for m in msgs]
                break
            except Exception as exc:
                log.warning("JetStream stream %s: %s; again", s.name, say(exc))
                s.last_seq = -1
                await asyncio.sleep(LOOK_PAUSE)
        again: list[Message] = []
        for m, (epoch, last_seq, base) in zip(msgs, places, strict=True):
            if (epoch == m.epoch and last_seq >= m.last_seq) or (
                epoch > m.epoch and base >= m.last_seq
            ):
                self.messages += 1  # it went in; its acknowledgement did not come back
            elif epoch > m.epoch:
                self.on_fenced(s.name, m.producer, base)
            else:
                again.append(m)
        return again

    def _tell(self, s: _Stream) -> None:
        """Tell the last ticket all of whose messages (and those before) are resolved."""
        s.inflight.clear()
        first = s.queue[0] if s.queue else None
        done = first.ticket - 1 if first is not None else s.enqueued
        if done > s.told:
            s.told = done
            self.on_stored(s.name, done)


class _Refused(Error):
    """JetStream refused a message (its API error code and text)."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"{text} (err_code {code})")
        self.code = code
