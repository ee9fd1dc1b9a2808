"""Listing a listener's streams (protocol/tail_list.py): the bytes, both ways.

The request is tail.py's with FLAG_LIST; the reply is STREAM items then END.
The decoder is tested whole, byte by byte and with trailing junk, and
fuzzed: it returns streams or raises ProtocolError, never anything else.
"""

from __future__ import annotations

import contextlib
import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from purelink.errors import ProtocolError
from purelink.protocol.keys import Key, KeyTable
from purelink.protocol.tail import (
    END,
    ERROR,
    FLAG_LIST,
    NO_STREAM,
    NOTICE,
    PREAMBLE,
    STREAM,
    TailDecoder,
    decode_request,
    encode_control,
    encode_list_request,
    request_size,
)
from purelink.protocol.tail_list import ListDecoder, ListedStream, encode_stream
from purelink.protocol.tail_seal import open_sealed_request, seal_request
from purelink.protocol.wire import encode_batch

STREAMS = [
    ListedStream("app-logs", 1, 2, 2, 105),
    ListedStream("orders", 40, 2**40, 2**40 - 39, 7 << 30),
    ListedStream("x" * 200, 0, 0, 0, 0),
]
REPLY = b"".join(encode_stream(s) for s in STREAMS) + encode_control(END)


def test_the_request_is_a_subscription_request_with_the_list_flag() -> None:
    raw = encode_list_request()
    assert raw.startswith(PREAMBLE)
    assert request_size(raw) == len(raw)
    request = decode_request(raw)
    assert request.listing and (request.stream, request.start, request.follow) == ("", 0, False)
    for start, flags, name in ((1, FLAG_LIST, b""), (0, FLAG_LIST | 1, b""), (0, FLAG_LIST, b"s")):
        body = struct.pack("<8sQBB", PREAMBLE, start, flags, len(name)) + name
        with pytest.raises(ProtocolError, match="bad_flags"):
            decode_request(body + struct.pack("<I", crc32c(body)))


def test_a_sealed_listing_is_not_refused_for_the_keys_streams() -> None:
    secret = b"k" * 32
    keys = KeyTable([Key("narrow", secret, write=(), read=("app-*",))])
    raw, _ = seal_request(encode_list_request(), "narrow", secret)
    request, _, _, key = open_sealed_request(raw, keys, 0.0)
    assert request.listing and key.key_id == "narrow"
    with pytest.raises(ProtocolError, match="bad_secret"):
        open_sealed_request(seal_request(encode_list_request(), "narrow", b"w" * 32)[0], keys, 0.0)


def test_reply_whole_byte_by_byte_and_with_trailing_junk() -> None:
    whole = ListDecoder()
    assert whole.feed(REPLY) == STREAMS and whole.ended

    dribble = ListDecoder()
    got = []
    for i in range(len(REPLY)):
        assert not dribble.ended
        got += dribble.feed(REPLY[i : i + 1])
    assert got == STREAMS and dribble.ended

    with pytest.raises(ProtocolError, match="after the END"):
        ListDecoder().feed(REPLY + b"\0" * 20)
    ended = ListDecoder()
    ended.feed(REPLY)
    with pytest.raises(ProtocolError, match="after the END"):
        ended.feed(b"x")


def test_fields_a_later_listener_adds_are_skipped() -> None:
    item = encode_stream(STREAMS[0])
    n = struct.unpack_from("<I", item, 12)[0]
    body = item[16 : 16 + n] + struct.pack("<Q", 1_700_000_000_000)  # e.g. a last stored time
    longer = encode_control(STREAM, body)
    assert ListDecoder().feed(longer + encode_control(END)) == [STREAMS[0]]


def test_refusals_and_what_no_listing_holds() -> None:
    with pytest.raises(ProtocolError, match="refused: wrong secret"):
        ListDecoder().feed(encode_control(ERROR, "wrong secret"))
    for bad, why in [
        (struct.pack("<Q", 1) + encode_batch(1, 1, 1, [b"r"])[8:], "bad_batch"),  # stamped
        (encode_control(NOTICE, "disk_full"), "bad_control"),
        (encode_control(9), "bad_control"),
        (encode_control(STREAM, b"\0" * 10), "bad_control"),  # too short
        (encode_control(STREAM, b"\0" * 32 + b"\x05ab"), "bad_control"),  # name runs past
        (encode_control(STREAM, b"\0" * 32 + b"\x02.a"), "bad_name"),
    ]:
        with pytest.raises(ProtocolError, match=why):
            ListDecoder().feed(bad)
    corrupt = bytearray(encode_stream(STREAMS[0]))
    corrupt[-5] ^= 1
    with pytest.raises(ProtocolError, match="bad_checksum"):
        ListDecoder().feed(bytes(corrupt))


def test_a_subscriber_learns_its_stream_does_not_exist_and_refuses_a_stream_item() -> None:
    decoder = TailDecoder(0)
    assert decoder.feed(encode_control(END, NO_STREAM)) == []
    assert decoder.ended and decoder.unknown_stream
    empty = TailDecoder(0)
    empty.feed(encode_control(END))
    assert empty.ended and not empty.unknown_stream
    with pytest.raises(ProtocolError, match="bad_control"):
        TailDecoder(0).feed(encode_stream(STREAMS[0]))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=0, max_value=len(REPLY)))
def test_fuzz_streams_or_a_protocol_error(junk: bytes, cut: int) -> None:
    decoder = ListDecoder()
    with contextlib.suppress(ProtocolError):
        decoder.feed(REPLY[:cut] + junk)
