"""The JetStream layout (store/jetstream/layout.py) alone: names, subjects, headers.

Why it exists: readers in other languages rely on these rules (docs/jetstream.md);
they are pure functions, so they are tested without a server.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from purelink.store.jetstream.layout import (
    STREAM_PREFIX,
    BatchHeaders,
    EpochMarker,
    batch_subject,
    decode_headers,
    decode_marker,
    encode_headers,
    encode_marker,
    parse_servers,
    stream_name,
)

NAMES = st.from_regex(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}", fullmatch=True)


@given(NAMES, NAMES)
def test_stream_names_are_injective_and_valid(a: str, b: str) -> None:
    na, nb = stream_name(a), stream_name(b)
    assert (na == nb) == (a == b)
    for n in (na, nb):
        assert n.startswith(STREAM_PREFIX)
        assert not set(n) & set(". *>/\\")
        assert len(n) <= 255


def test_encoding_examples() -> None:
    assert stream_name("orders") == "PURELINK_orders"
    assert stream_name("a.b") == "PURELINK_a_db"
    assert stream_name("a_db") == "PURELINK_a__db"
    assert batch_subject("a.b", 5) == "purelink.a_db.b.0000000000000005"
    long = "x" * 150 + "." * 50
    assert stream_name(long).startswith("PURELINK_H") and len(stream_name(long)) == 10 + 32


@given(
    st.integers(1, 2**63),
    st.integers(1, 2**32),
    st.integers(0, 2**64 - 1),
    st.integers(1, 2**63),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**63),
)
def test_headers_round_trip(
    pos: int, count: int, producer: int, seq: int, epoch: int, base: int
) -> None:
    h = BatchHeaders(pos, count, producer, seq, epoch, base=base)
    assert decode_headers(encode_headers(h)) == h
    cut = BatchHeaders(pos, count, producer, seq, epoch, part=2, parts=3, base=base)
    assert decode_headers(encode_headers(cut)) == cut
    assert decode_marker(encode_headers(h)) is None


def test_markers_round_trip() -> None:
    m = EpochMarker(3, 0xABC, 41)
    assert decode_marker(encode_marker(m)) == m
    with pytest.raises(ValueError):
        decode_headers(encode_marker(m))


@pytest.mark.parametrize(
    "headers",
    [
        None,
        {},
        {"Purelink-Position": "x"},
        {
            "Purelink-Position": "0",
            "Purelink-Count": "1",
            "Purelink-Producer": "1",
            "Purelink-Seq": "1",
            "Purelink-Epoch": "1",
        },
        {
            "Purelink-Position": "1",
            "Purelink-Count": "1",
            "Purelink-Producer": "zz",
            "Purelink-Seq": "1",
            "Purelink-Epoch": "1",
        },
        {
            "Purelink-Position": "1",
            "Purelink-Count": "1",
            "Purelink-Producer": "1",
            "Purelink-Seq": "1",
            "Purelink-Epoch": "1",
            "Purelink-Part": "3/2",
        },
    ],
)
def test_bad_headers_raise_value_error(headers: dict[str, str] | None) -> None:
    with pytest.raises(ValueError, match="not a purelink batch"):
        decode_headers(headers)


def test_bad_marker_raises_value_error() -> None:
    with pytest.raises(ValueError, match="epoch marker"):
        decode_marker({"Purelink-Kind": "epoch", "Purelink-Epoch": "x"})


def test_parse_servers() -> None:
    assert parse_servers("nats://a:4222,b:4223") == ["nats://a:4222", "nats://b:4223"]
    assert parse_servers("nats://a:4222,nats://[::1]:4223") == [
        "nats://a:4222",
        "nats://[::1]:4223",
    ]
    for bad in ["a:4222", "nats://", "nats://a", "nats://a:0", "nats://a:99999", "nats://a:4222,"]:
        with pytest.raises(ValueError):
            parse_servers(bad)
