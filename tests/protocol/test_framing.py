"""The TCP framing (protocol/framing.py): whole, byte by byte, with trailing junk, fuzzed.

Why it exists: a stream has no boundaries, so the framing decoder is the one
place where a peer's bytes decide how much the listener reads and keeps.
After h11's tests/test_io.py: every way of cutting the same stream must give
the same datagrams, and whatever the input, the decoder returns frames or
raises FrameError -- never anything else, never waits for (or allocates) a
frame above its limit.
"""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from purelink.errors import ProtocolError
from purelink.protocol import wire
from purelink.protocol.framing import (
    DEFAULT_MAX_FRAME,
    HEADER,
    FrameDecoder,
    FrameError,
    encode_frame,
    encode_frames,
    split_frames,
)

DATAGRAMS = [
    wire.encode_hello(wire.Hello(7, "orders", "", (1 << 63) | 5, 1400, b"")),
    wire.encode_data(9, 1, wire.encode_batch((1 << 63) | 5, 1, 1, [b"a", b"", b"c" * 300])),
    b"",  # legal framing; the datagram decoder drops it
    wire.encode_close(9, 1),
    bytes(range(256)) * 40,
]
STREAM = encode_frames(DATAGRAMS)


def feed_all(decoder: FrameDecoder, chunks: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    return out


def test_encode_frame_is_the_length_then_the_datagram() -> None:
    assert encode_frame(b"abc") == b"\x03\x00\x00\x00abc"
    assert encode_frame(b"") == b"\x00\x00\x00\x00"
    assert (
        encode_frames([b"abc", b"", b"z"])
        == encode_frame(b"abc") + encode_frame(b"") + b"\x01\x00\x00\x00z"
    )
    assert encode_frames([]) == b""


def test_whole_stream_in_one_feed() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(STREAM) == DATAGRAMS
    assert decoder.pending == 0


def test_byte_by_byte() -> None:
    decoder = FrameDecoder()
    got: list[bytes] = []
    for i in range(len(STREAM)):
        got.extend(decoder.feed(STREAM[i : i + 1]))
        assert decoder.pending < HEADER + max(map(len, DATAGRAMS))
    assert got == DATAGRAMS
    assert decoder.pending == 0


@pytest.mark.parametrize("seed", range(20))
def test_random_cuts(seed: int) -> None:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(STREAM)), rng.randrange(1, 30)))
    chunks = [STREAM[a:b] for a, b in zip([0, *cuts], [*cuts, len(STREAM)], strict=True)]
    assert feed_all(FrameDecoder(), chunks) == DATAGRAMS


def test_trailing_junk_stays_pending_and_never_becomes_a_frame() -> None:
    decoder = FrameDecoder()
    junk = b"\x10\x00\x00\x00partial"  # says 16 bytes, 7 came
    assert decoder.feed(STREAM + junk) == DATAGRAMS
    assert decoder.pending == len(junk)
    assert decoder.feed(b"") == []
    assert decoder.feed(b"123456789") == [b"partial123456789"]


def test_a_partial_header_is_held() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"\x05\x00") == []
    assert decoder.pending == 2
    assert decoder.feed(b"\x00\x00hel") == []
    assert decoder.feed(b"lo\x01") == [b"hello"]
    assert decoder.pending == 1


def test_a_huge_length_fails_from_its_header_alone() -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameError) as info:
        decoder.feed(encode_frame(b"ok") + struct.pack("<I", 0xFFFF_FFFF))  # "4 GiB"
    assert info.value.reason == "frame_too_large"
    assert isinstance(info.value, ProtocolError)
    assert decoder.pending == 0  # nothing kept
    with pytest.raises(FrameError):  # broken for good: the stream lost its boundaries
        decoder.feed(encode_frame(b"fine"))
    decoder.clear()
    assert decoder.feed(encode_frame(b"fine")) == [b"fine"]


def test_the_limit_is_inclusive() -> None:
    decoder = FrameDecoder(max_frame=10)
    assert decoder.feed(encode_frame(b"x" * 10)) == [b"x" * 10]
    with pytest.raises(FrameError):
        decoder.feed(struct.pack("<I", 11))
    assert DEFAULT_MAX_FRAME >= 65_507  # the largest datagram a Sender makes fits


def test_bad_max_frame() -> None:
    with pytest.raises(ValueError, match="max_frame"):
        FrameDecoder(max_frame=-1)


def test_split_frames_gives_views_into_the_callers_buffer() -> None:
    buf = bytearray(64)
    data = encode_frames([b"one", b"two"]) + b"\x03\x00"
    buf[5 : 5 + len(data)] = data
    frames, rest = split_frames(buf, 5, 5 + len(data))
    assert [bytes(f) for f in frames] == [b"one", b"two"]
    assert rest == 5 + len(data) - 2
    buf[5 + HEADER] = ord("O")  # a view, not a copy
    assert bytes(frames[0]) == b"One"
    assert split_frames(buf, rest, rest + 2) == ([], rest)


def test_split_frames_refuses_an_oversized_header_in_the_middle() -> None:
    data = encode_frame(b"fine") + encode_frame(b"too") + struct.pack("<I", 1 << 20)
    with pytest.raises(FrameError) as caught:
        split_frames(data, 0, len(data), max_frame=1000)
    # the whole frames before the bad length come with the error, to be fed first
    assert [bytes(f) for f in caught.value.frames] == [b"fine", b"too"]
    assert caught.value.at == len(data) - 4
    assert caught.value.reason == "frame_too_large"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(max_size=300), max_size=12),
    st.lists(st.integers(min_value=1, max_value=64), max_size=40),
)
def test_any_datagrams_any_cuts_round_trip(datagrams: list[bytes], sizes: list[int]) -> None:
    stream = encode_frames(datagrams)
    chunks: list[bytes] = []
    at = 0
    for size in sizes:
        chunks.append(stream[at : at + size])
        at += size
    chunks.append(stream[at:])
    assert feed_all(FrameDecoder(max_frame=300), chunks) == datagrams


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(min_value=0, max_value=80))
def test_any_bytes_give_frames_or_frame_error_only(data: bytes, max_frame: int) -> None:
    decoder = FrameDecoder(max_frame=max_frame)
    try:
        frames = decoder.feed(data)
    except FrameError as exc:
        assert exc.reason == "frame_too_large"
        return
    assert all(len(f) <= max_frame for f in frames)
    assert sum(HEADER + len(f) for f in frames) + decoder.pending == len(data)
    assert decoder.pending < HEADER + max_frame + 1
