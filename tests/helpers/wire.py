"""The wire format's reasons and Hypothesis strategies, shared by the wire,
fuzz and security tests."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from purelink.protocol import wire
from purelink.protocol.wire import (
    Accept,
    Ack,
    Close,
    Data,
    Fragment,
    Hello,
    MtuAck,
    Probe,
    Refuse,
    Retry,
)

# every reason decode_datagram may give (its docstring and docs/wire.md)
DATAGRAM_REASONS = {
    "truncated",
    "bad_magic",
    "bad_version",
    "bad_checksum",
    "unauthenticated",
    "unknown_type",
    "malformed",
}


BATCH_REASONS = {"truncated", "bad_magic", "bad_version", "bad_checksum", "malformed"}


settings.register_profile(
    "wire-fast",
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "wire-long",
    max_examples=20_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

PROFILE = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "wire-fast"))


FAST = settings(PROFILE)


u8 = st.integers(0, 0xFF)


u16 = st.integers(0, 0xFFFF)


u32 = st.integers(0, 0xFFFF_FFFF)


u64 = st.integers(0, 0xFFFF_FFFF_FFFF_FFFF)


# small and edge values are where bugs live; draw from both
small = st.integers(0, 40)


seq64 = st.one_of(st.integers(1, 50), st.integers(1, 0xFFFF_FFFF_FFFF_FFFF))


def _short_utf8(max_bytes: int = 255) -> st.SearchStrategy[str]:
    return st.text(max_size=40).filter(lambda s: len(s.encode("utf-8")) <= max_bytes)


# ----------------------------------------------------------- valid values
records = st.lists(
    st.one_of(st.binary(max_size=64), st.binary(min_size=200, max_size=1500)),
    min_size=1,
    max_size=30,
)


@st.composite
def batches(draw: st.DrawFn) -> bytes:
    """A valid batch: small records, or one FLAG_LARGE record."""
    producer, epoch = draw(u64), draw(u32)
    if draw(st.booleans()):
        recs = draw(records)
        first = draw(st.integers(1, 0xFFFF_FFFF_FFFF_FFFF - len(recs) + 1))
        return wire.encode_batch(producer, epoch, first, recs)
    record = draw(st.binary(max_size=3000))
    return wire.encode_large_batch(producer, epoch, draw(seq64), record)


hellos = st.builds(
    Hello,
    nonce=u64,
    stream=_short_utf8(),
    producer=_short_utf8(),
    producer_id=u64,
    max_datagram=u16,
    cookie=st.binary(max_size=255),
)


retries = st.builds(Retry, nonce=u64, cookie=st.binary(max_size=255))


@st.composite
def accepts(draw: st.DrawFn) -> Accept:
    stored, received = sorted((draw(u64), draw(u64)))
    return Accept(
        draw(u32), draw(u64), draw(u64), draw(u32), stored, received, draw(u32), draw(u32)
    )


@st.composite
def acks(draw: st.DrawFn) -> Ack:
    stored = draw(st.one_of(small, st.integers(0, 2**64 - 100)))
    received = stored + draw(small)
    ranges = []
    at = received + 1  # the first range starts past a gap at received + 1
    for _ in range(draw(st.integers(0, 6))):
        first = at + 1 + draw(small)
        last = first + draw(small)
        if last > 0xFFFF_FFFF_FFFF_FFFF:
            break
        ranges.append((first, last))
        at = last + 1
    fragments = []
    for _ in range(draw(st.integers(0, 4))):
        spans = []
        start = draw(st.integers(0, 5000))
        for _ in range(draw(st.integers(0, 5))):
            end = start + 1 + draw(st.integers(0, 3000))
            if end > 0xFFFF_FFFF:
                break
            spans.append((start, end))
            start = end + draw(st.integers(1, 100))
        fragments.append((draw(u64), tuple(spans)))
    return Ack(
        draw(u32),
        draw(u32),
        stored,
        received,
        draw(u32),
        draw(u64),
        draw(u32),
        tuple(ranges),
        tuple(fragments),
    )


refuses = st.builds(Refuse, conn_id=u32, nonce=u64, epoch=u32, reason=u8)


@st.composite
def datagrams(draw: st.DrawFn) -> tuple[bytes, object]:
    """A valid datagram of any type and what it must decode to."""
    kind = draw(st.sampled_from(["hello", "retry", "accept", "data", "frag", "ack", "misc"]))
    if kind == "hello":
        msg: object = draw(hellos)
        return wire.encode_hello(msg), msg  # type: ignore[arg-type]
    if kind == "retry":
        msg = draw(retries)
        return wire.encode_retry(msg), msg  # type: ignore[arg-type]
    if kind == "accept":
        msg = draw(accepts())
        return wire.encode_accept(msg), msg  # type: ignore[arg-type]
    if kind == "ack":
        msg = draw(acks())
        return wire.encode_ack(msg), msg  # type: ignore[arg-type]
    conn_id, pn = draw(u32), draw(u64)
    if kind == "data":
        batch = draw(batches())
        pad_to = draw(st.one_of(st.just(0), st.integers(0, 5000)))
        return wire.encode_data(conn_id, pn, batch, pad_to), Data(conn_id, pn, memoryview(batch))
    if kind == "frag":
        chunk = draw(st.binary(min_size=1, max_size=1500))
        low = max(len(chunk), wire.BATCH_HEADER)  # a piece of a batch: at least its header
        total = low + draw(st.one_of(small, st.integers(0, 0xFFFF_FFFF - low)))
        offset = draw(st.integers(0, total - len(chunk)))
        epoch, seq = draw(u32), draw(seq64)
        datagram = wire.encode_fragment(conn_id, pn, epoch, seq, total, offset, chunk)
        return datagram, Fragment(conn_id, pn, epoch, seq, total, offset, memoryview(chunk))
    which = draw(st.sampled_from(["probe", "close", "refuse", "mtu_ack"]))
    epoch = draw(u32)
    if which == "probe":
        pad_to = draw(st.one_of(st.just(0), st.integers(0, 1500), st.just(65507)))
        datagram = wire.encode_probe(conn_id, pn, epoch, pad_to)
        padding = len(datagram) - wire.PROBE_SIZE
        return datagram, Probe(conn_id, pn, epoch, padding)
    if which == "mtu_ack":
        msg = MtuAck(conn_id, epoch, pn, draw(u16))
        return wire.encode_mtu_ack(msg), msg
    if which == "close":
        return wire.encode_close(conn_id, epoch), Close(conn_id, epoch)
    msg = draw(refuses)
    return wire.encode_refuse(msg), msg  # type: ignore[arg-type]


# ------------------------------------------- (b) mutations of valid datagrams
@st.composite
def mutated(draw: st.DrawFn) -> tuple[bytes, bytes, str]:
    """(original, mutated, how) -- the mutation is never the identity."""
    original, _ = draw(datagrams())
    how = draw(st.sampled_from(["flip", "flips", "truncate", "extend", "splice", "join"]))
    data = bytearray(original)
    if how == "flip":
        bit = draw(st.integers(0, 8 * len(data) - 1))
        data[bit // 8] ^= 1 << (bit % 8)
    elif how == "flips":
        for _ in range(draw(st.integers(2, 8))):
            bit = draw(st.integers(0, 8 * len(data) - 1))
            data[bit // 8] ^= 1 << (bit % 8)
    elif how == "truncate":
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif how == "extend":
        data += draw(st.binary(min_size=1, max_size=64))
    elif how == "splice":
        at = draw(st.integers(0, len(data)))
        cut = draw(st.integers(0, len(data) - at))
        data[at : at + cut] = draw(st.binary(max_size=32))
    else:  # two datagrams back to back, as a broken GRO split would give
        other, _ = draw(datagrams())
        data += other
    return original, bytes(data), how
