"""The JetStream writer's messages: batches grouped, merged, cut and stamped.

Why a module of its own: it is the writer's pure part -- no client, no
loop -- so that how batches become messages (layout.py says what a message
may hold) is read and tested apart from how they are published.

* `group` turns one `append` (the batches of one drain, of several
  producers) into messages: one producer's consecutive batches of one epoch
  per message, at most `MAX_BODY` bytes; a batch larger than that alone,
  cut into parts.
* `take` pops the next message to publish and merges into it the messages
  queued behind it that continue it (same producer and epoch, the next seq,
  whole batches) while the body stays within `MAX_BODY`: when the pipeline
  is full, the small messages of many drains leave as one.
* `stamp` writes each batch's stream position into its first 8 bytes (its
  CRC does not cover them: wire.md, section 1).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from purelink.protocol.batch import BatchHeader, position_bytes

from .layout import MAX_BODY

__all__ = ["Message", "group", "stamp", "take"]


@dataclass
class Message:
    """One message to publish: one producer's consecutive batches of one epoch."""

    ticket: int
    """The first ticket with batches in it (tickets grow in queue order)."""
    producer: int
    epoch: int
    seq: int
    """The seq of its first record on its producer."""
    count: int
    batches: list[bytearray]
    size: int = 0
    """Body bytes."""
    position: int = 0
    """Stream position of its first record, once stamped."""
    part: int = 1
    parts: int = 1
    js_seq: int = 0
    """The JetStream sequence it was published to take."""

    @property
    def last_seq(self) -> int:
        return self.seq + self.count - 1


def group(ticket: int, writes: Sequence[tuple[bytes | memoryview, BatchHeader]]) -> list[Message]:
    """The messages of one append, in order (the batches are copied: they may
    point into receive buffers)."""
    out: list[Message] = []
    cur: Message | None = None
    for data, h in writes:
        if h.length > MAX_BODY:
            cur = None
            whole = bytes(data)
            parts = [whole[i : i + MAX_BODY] for i in range(0, len(whole), MAX_BODY)]
            for k, piece in enumerate(parts, 1):
                out.append(
                    Message(
                        ticket,
                        h.producer,
                        h.epoch,
                        h.first_seq,
                        h.count,
                        [bytearray(piece)],
                        len(piece),
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
            or cur.size + h.length > MAX_BODY
        ):
            cur = Message(ticket, h.producer, h.epoch, h.first_seq, 0, [])
            out.append(cur)
        cur.batches.append(bytearray(data))
        cur.count += h.count
        cur.size += h.length
    return out


def take(queue: deque[Message]) -> Message:
    """Pop the first message of `queue`, with the ones behind it that continue it
    merged in (whole batches only, the body within MAX_BODY)."""
    m = queue.popleft()
    if m.parts > 1:
        return m
    while queue:
        n = queue[0]
        if (
            n.parts > 1
            or n.producer != m.producer
            or n.epoch != m.epoch
            or n.seq != m.seq + m.count
            or m.size + n.size > MAX_BODY
        ):
            break
        queue.popleft()
        m.batches.extend(n.batches)
        m.count += n.count
        m.size += n.size
    return m


def stamp(m: Message) -> None:
    """Write the stream position of each batch of `m` into its header."""
    if m.part > 1:  # a later part of a cut batch: its header is in part 1
        return
    position = m.position
    for b in m.batches:
        b[0:8] = position_bytes(position)
        position += int.from_bytes(b[20:24], "little")
